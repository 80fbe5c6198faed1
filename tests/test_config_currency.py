"""The config is the currency below the flow (issue 38 item 1): one ``ExperimentConfig`` goes from
``placement experiment`` down to the MLflow record; the cluster's YAML is read once per command, a
config handed to the flow is not validated again, and ``mlflow_params()`` flattens it in one call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cluster.spec


@pytest.fixture(scope="module")
def prefect_harness():
    from conftest import prefect_harness as harness

    with harness():
        yield


@pytest.fixture
def spec_file(tmp_path) -> Path:
    """A YAML cluster spec outside the presets (the k80x2 preset under another name)."""
    path = tmp_path / "my-k80.yaml"
    path.write_text((cluster.spec.PRESET_DIR / "k80x2.yaml").read_text())
    return path


@pytest.fixture
def yaml_reads(monkeypatch, spec_file) -> list[Path]:
    """Every read of ``spec_file`` through :func:`cluster.spec.load_yaml_file`."""
    reads: list[Path] = []
    real = cluster.spec.load_yaml_file

    def counting(path, *args, **kwargs):
        if Path(path).resolve() == spec_file.resolve():
            reads.append(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(cluster.spec, "load_yaml_file", counting)
    return reads


@pytest.mark.slow
def test_the_experiment_command_reads_the_cluster_yaml_once(prefect_harness, tmp_path, spec_file, yaml_reads):
    """``placement experiment --cluster FILE.yaml`` reads FILE once (it was read 5 times): the config
    loads it while validating, the flow takes that config back, and the spec goes down from it."""
    from cli.main import app

    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["experiment", "--cluster", str(spec_file), "--methods", "single_gpu,expert,post",
                                 "--budget", "4", "--train-steps", "2", "--out-dir", str(out), "--json",
                                 str(tmp_path / "r.json")])
    assert r.exit_code == 0, (r.output[-3000:], r.exception)
    result = json.loads((tmp_path / "r.json").read_text())
    assert set(result["methods"]) == {"single_gpu", "expert", "post"} and result["cluster"] == "k80x2"
    assert len(yaml_reads) == 1, yaml_reads


def test_a_config_handed_to_the_flow_is_taken_back_not_validated_again(spec_file, yaml_reads, tmp_path):
    from tasks.config import ExperimentConfig

    config = ExperimentConfig(cluster=str(spec_file), methods=["single_gpu", "post"], budget=4,
                              tracking={"out_dir": str(tmp_path)})
    assert len(yaml_reads) == 1
    params = config.flow_parameters()
    assert ExperimentConfig.from_flow(**params) is config  # the same object: no validator ran
    assert len(yaml_reads) == 1
    # other values (a form's, a deployment's) are validated: a new config, its file read
    other = ExperimentConfig.from_flow(**{**params, "budget": 5})
    assert other is not config and other.budget == 5 and len(yaml_reads) == 2
    with pytest.raises(ValueError, match="budget"):
        ExperimentConfig.from_flow(**{**params, "budget": 0})


def test_mlflow_params_flatten_the_config_in_one_call(tmp_path):
    from tasks.config import ExperimentConfig

    config = ExperimentConfig(methods=["single_gpu", "rl", "post"], budget=12, seed=3,
                              learners={"rl": {"k": 4}}, tracking={"out_dir": str(tmp_path)})
    params = config.mlflow_params()
    assert params == {"methods": "single_gpu,rl,post", "budget": 12, "k": 4, "seed": 3, "env": "sim",
                      "cluster": "k80x2", "learner_options": '{"rl":{"k":4}}',
                      "source": '{"kind":"benchmark","model":"rnnlm","size":"small"}'}
    default = ExperimentConfig(methods=["post"], tracking={"out_dir": str(tmp_path)}).mlflow_params()
    assert default["k"] == 8 and default["learner_options"] == "{}"  # rl's paper K (2017 Eq. 3), no overrides


def test_a_bad_cluster_names_the_field_once_read(tmp_path):
    from pydantic import ValidationError

    from tasks.config import ExperimentConfig

    with pytest.raises(ValidationError, match="cluster: unknown cluster 'k80x3'"):
        ExperimentConfig(cluster="k80x3")
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: 3\n")
    with pytest.raises(ValidationError, match="cluster: .*bad.yaml"):
        ExperimentConfig(cluster=str(bad))


def test_no_stage_below_the_flow_takes_more_than_six_of_the_configs_fields():
    """Following the config from the flow to the record: each stage takes the config (or a section)
    and at most 6 positional parameters besides (it took 13 to 16)."""
    import inspect

    from tasks.experiment import experiment_outcome, graph_params, open_recorder, save_and_record
    from tasks.search import learner_searches

    for fn in (learner_searches, experiment_outcome, save_and_record, open_recorder, graph_params):
        names = list(inspect.signature(fn).parameters)
        assert "config" in names, fn.__name__
        assert not {"methods", "budget", "seed", "learner_options", "resume", "spool", "env_options"} & set(names)
