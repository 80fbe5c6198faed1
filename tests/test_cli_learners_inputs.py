"""``placement compare-learners``: bad input is one line naming the flag and the value, exit 2, before
any work (no Prefect flow, no search): its seeds, its learners' options (what its flow accepts, in
``experiment``'s words), its environment."""

from __future__ import annotations

import sys
import types

import pytest
from typer.testing import CliRunner

from conftest import one_line_exit_2


class _Reached(Exception):
    """The command got as far as its pre-flight or its flow: the input was accepted."""


@pytest.fixture(autouse=True)
def no_work(monkeypatch):
    """Whatever gets past the checks stops at the pre-flight (MLflow, the out-dir) with ``_Reached``,
    and the flow is a stub: no Prefect server, no search, whatever the code under test does."""
    import cli.runtime

    def stop(*args, **kwargs):
        raise _Reached(kwargs)

    monkeypatch.setattr(cli.runtime, "preflight", stop)
    monkeypatch.setitem(sys.modules, "flows.compare", types.SimpleNamespace(compare_learners=stop))


def _compare(*args: str) -> list[str]:
    return ["compare-learners", "--budget", "2", *args]


# 1. a negative seed: the flow's `seeds: list[NonNegative]` refused it inside Prefect
@pytest.mark.parametrize("seeds", ["-1", "0,-3"])
def test_negative_seed_is_refused(seeds):
    bad = seeds.split(",")[-1]
    one_line_exit_2(_compare("--seeds", seeds), f"--seeds must be at least 0, got {bad}")


# 2. a seed given twice (its median over copies of one run), an empty item read as nothing
@pytest.mark.parametrize("seeds, needle", [
    ("1,1", "--seeds '1,1': seed 1 is given twice"),
    ("0,2,0", "--seeds '0,2,0': seed 0 is given twice"),
    ("0,,1", "--seeds '0,,1': an empty item"),
    (",0", "--seeds ',0': an empty item"),
    ("0,x", "--seeds '0,x': 'x' is not an integer"),
])
def test_malformed_seed_list_is_refused(seeds, needle):
    one_line_exit_2(_compare("--seeds", seeds), needle)


# 3. fields the flow sets itself (budget, seed) or fills in (a warm start's init_ops, init_source)
@pytest.mark.parametrize("field", ["budget", "seed", "init_ops", "init_source"])
def test_learner_option_the_flow_sets_itself_is_refused(field):
    out = one_line_exit_2(_compare("--learners", "local_search", "--learner-option", f"local_search.{field}=3"),
                          f"--learner-option local_search.{field}: unknown setting '{field}'; valid: ").output
    valid = out.split("valid: ", 1)[1].strip().split(", ")
    assert "moves_per_sample" in valid and not {"budget", "seed", "init_ops", "init_source"} & set(valid), out


# 4. a bad value: experiment's message, not pydantic's text
@pytest.mark.parametrize("option, needle", [
    ("rl.hidden_size=-64", "--learner-option rl.hidden_size must be at least 1, got -64"),
    ("rl.k=0", "--learner-option rl.k must be at least 1, got 0"),
])
def test_bad_learner_option_value_is_experiments_message(option, needle):
    out = one_line_exit_2(_compare("--learners", "rl", "--learner-option", option), needle).output
    assert "validation error" not in out and "input_value" not in out, out


# 5. --env: the help lists what the flow takes (EnvName: sim, real, grappler), the check refuses the rest
def test_env_help_lists_every_environment_the_flow_takes():
    import typer.main

    from cli.main import app
    from cluster.environment import ENVIRONMENTS

    command = typer.main.get_command(app).commands["compare-learners"]  # type: ignore[attr-defined]
    help_text = next(p.help for p in command.params if p.name == "env")
    assert all(e in help_text for e in ENVIRONMENTS), help_text


def test_unknown_env_is_refused_naming_the_flag():
    one_line_exit_2(_compare("--env", "bogus"), "unknown --env value 'bogus'; valid: sim, real, grappler")


def test_good_input_reaches_the_preflight_with_grappler():
    from cli.main import app

    r = CliRunner().invoke(app, _compare("--learners", "rl", "--seeds", "2,0", "--env", "grappler",
                                         "--learner-option", "rl.hidden_size=32"))
    assert isinstance(r.exception, _Reached), (r.output, r.exception)


# 6. the flag of this command is --learners; an unknown field is one statement listing the valid ones
def test_option_for_a_learner_not_chosen_names_learners():
    out = one_line_exit_2(_compare("--learners", "post", "--learner-option", "rl.k=4"),
                          "--learner-option rl: options for learner 'rl', which is not in --learners (post)").output
    assert "--methods" not in out


def test_unknown_learner_option_is_one_statement():
    out = one_line_exit_2(_compare("--learners", "local_search", "--learner-option", "local_search.foo=4"),
                          "error: --learner-option local_search.foo: unknown setting 'foo'; valid: moves_per_sample, ").output
    assert out.count("local_search.foo") == 1 and "for local_search" not in out, out
