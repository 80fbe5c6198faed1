"""One experiment config (tasks.config.ExperimentConfig) for the CLI, the flow's form and the sweep:
they list the same fields, and each check of the settings is the config's, worded in flags on the CLI."""

from __future__ import annotations

import inspect

import pytest
from pydantic import ValidationError

from tasks.config import ExperimentConfig, experiment_fields


def _cli_flags() -> dict[str, str]:
    """``placement experiment``'s option flags -> their parameter names (typer's own command)."""
    import typer.main

    from cli.main import app

    command = typer.main.get_command(app).commands["experiment"]
    return {opt: p.name for p in command.params for opt in p.opts if opt.startswith("--")}


def test_the_cli_the_flow_form_and_the_sweep_list_the_same_fields():
    from cli.main import EXPERIMENT_FLAGS, NOT_EXPERIMENT_FLAGS
    from flows.experiment import placement_experiment
    from flows.sweep import placement_sweep

    fields = set(experiment_fields())
    # the CLI: every flag sets one config field (or is about the process: output, read limit), and every
    # field has a flag or a reason
    flags = set(_cli_flags())
    assert flags - set(EXPERIMENT_FLAGS) == {"--json", "--max-graph-mb"}
    assert set(EXPERIMENT_FLAGS) <= flags
    covered = {"learners.*" if path.startswith("learners.") else path for path in EXPERIMENT_FLAGS.values()}
    assert covered | set(NOT_EXPERIMENT_FLAGS) == fields and not covered & set(NOT_EXPERIMENT_FLAGS)
    # the flow's form: the config's top-level fields, with their types and defaults
    params = inspect.signature(placement_experiment.fn).parameters
    assert list(params) == list(ExperimentConfig.model_fields)
    schema = placement_experiment.parameters.model_dump()["properties"]
    config_schema = ExperimentConfig.model_json_schema(ref_template="#/definitions/{model}")["properties"]
    for name, prop in config_schema.items():
        for key in ("type", "$ref", "enum", "minimum", "items", "anyOf", "oneOf"):
            assert schema[name].get(key) == prop.get(key), (name, key)
        default = ExperimentConfig.model_fields[name].get_default(call_default_factory=True)
        if default is None:  # "unset": the form's plain input starts empty, and the flow turns empty into None
            from tasks.choices import unset

            assert unset(schema[name]["default"]) is None and "anyOf" not in schema[name], name
            continue
        assert schema[name]["default"] == (default.model_dump(mode="json") if hasattr(default, "model_dump") else default), name
    # the sweep: one config as its base, and grid lists over three of its fields
    sweep = inspect.signature(placement_sweep.fn).parameters
    assert sweep["base"].annotation in (ExperimentConfig, "ExperimentConfig")
    assert set(sweep) == {"base", "models", "clusters", "seeds"}
    assert {"source.model", "cluster", "seed"} <= fields


def test_defaults_resolve_to_the_applicable_baselines_rl_and_post():
    config = ExperimentConfig()  # rl and post as their papers run them, then both started from the best baseline
    assert config.methods is None and config.resolved_methods[-4:] == ["rl", "post", "rl_warm", "post_warm"]
    assert "expert" in config.resolved_methods and "optimum" not in config.resolved_methods
    keras = ExperimentConfig(source={"kind": "keras", "spec": "m:f"})
    assert "expert" not in keras.resolved_methods  # a user's graph has no layer rules


def test_learner_options_are_typed_and_only_overrides_are_kept():
    config = ExperimentConfig(methods=["rl", "post"], learners={"rl": {"k": 4}, "post": {"k": 12}})
    assert config.learner_options == {"rl": {"k": 4}}  # post's 12 is its paper default: no override
    assert config.learners.post.k == 12 and config.learners.eagle.k == 10  # every learner's defaults, typed
    with pytest.raises(ValidationError, match="hidden_size"):
        ExperimentConfig(methods=["rl"], learners={"rl": {"hidden_size": -3}})
    with pytest.raises(ValidationError, match="nope"):
        ExperimentConfig(methods=["rl"], learners={"rl": {"nope": 1}})
    with pytest.raises(ValidationError, match="budget"):  # budget and seed are the experiment's, not a learner's
        ExperimentConfig(methods=["rl"], learners={"rl": {"budget": 3}})


@pytest.mark.parametrize("settings, message", [
    ({"budget": 0}, "greater than or equal to 1"),
    ({"env": "cloud"}, "'sim', 'real' or 'grappler'"),
    ({"cluster": "k80x3"}, "unknown cluster 'k80x3'"),
    ({"methods": []}, "empty"),
    ({"methods": ["magic"]}, "magic"),
    ({"source": {"kind": "benchmark", "model": "rnn"}}, "source.model: unknown model 'rnn'"),
    ({"source": {"kind": "benchmark", "model": "rnnlm", "size": "huge"}}, "source.size: unknown size 'huge'"),
    ({"ray": {"workers": 2}}, "ray.workers needs ray.controllers"),
    ({"ray": {"address": "auto"}}, "ray.address needs ray.controllers"),
    ({"ray": {"controllers": 1, "policy_device": "cuda"}}, "ray.policy_device 'cuda': learner 'post'"),
    ({"real": {"int_bounds": {"x": 3}}}, "real.int_bounds is for a user's graph"),
    ({"learners": {"eagle": {"k": 3}}}, "learners.eagle: options for learner 'eagle', which is not in methods"),
    ({"source": {"kind": "keras", "spec": "m:f"}, "methods": ["expert"]}, "method 'expert' needs a benchmark's layer rules"),
    ({"tracking": {"outdir": "x"}}, "outdir"),
])
def test_each_bad_setting_is_refused_naming_the_field_and_value(settings, message):
    with pytest.raises(ValidationError) as info:
        ExperimentConfig.model_validate(settings)
    assert message in str(info.value)


@pytest.mark.parametrize("args, line", [
    (["--budget", "0"], "error: --budget must be at least 1, got 0"),
    (["--workers", "2"], "error: --workers needs --controllers 1 or more (the distributed search)"),
    (["--learner-option", "eagle.k=3"], "error: --learner-option eagle: options for learner 'eagle', which is not in methods"),
    (["--methods", "rl", "--learner-option", "rl.nope=1"], "error: --learner-option rl.nope: unknown setting 'nope'"),
    (["--model", "rnn"], "error: --model: unknown model 'rnn'; valid: rnnlm"),
    (["--keras", "m:f", "--methods", "expert"], "error: --methods: method 'expert' needs a benchmark's layer rules"),
])
def test_the_cli_words_the_configs_error_in_flags(tmp_path, args, line):
    from typer.testing import CliRunner

    from cli.main import app

    r = CliRunner().invoke(app, ["experiment", *args, "--out-dir", str(tmp_path)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert r.output.startswith(line), r.output


def test_the_sweep_refuses_a_base_that_is_not_a_benchmark():
    from flows.sweep import placement_sweep

    with pytest.raises(ValueError, match="base.source: the sweep runs benchmarks"):
        placement_sweep.fn(base=ExperimentConfig(source={"kind": "keras", "spec": "m:f"}))
