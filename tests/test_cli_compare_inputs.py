"""``placement compare``'s bad input is one line and exit 2, before any table is printed: a ``--markdown``
path that is a folder or cannot be created (a missing folder is created, as for ``--json``), a ``--by``
field that is not a run parameter, a ``--sweep`` that no finished run belongs to. On a real SQLite
MLflow store filled with ``tracking.record_experiment`` (no experiment runs)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import one_line_exit_2


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A SQLite store with two finished experiment runs (seeds 0 and 1) of rnnlm/small on k80x2; its URI."""
    from tracking import artifact_root, record_experiment

    out = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{out / 'mlflow.db'}"
    for seed, rl_s in ((0, 1.2), (1, 1.4)):
        results = {m: {"step_time_s": t, "oom": False, "placement": {"g0": "/gpu:0"}}
                   for m, t in (("single_gpu", 2.0), ("expert", 1.6), ("rl", rl_s))}
        params = {"model": "rnnlm", "size": "small", "cluster": "k80x2", "env": "sim", "seed": seed, "budget": 200,
                  "methods": "single_gpu,expert,rl", "grouper": "2017", "learner_options": "{}"}
        record_experiment(uri, artifact_root(out), params, results,
                          {"best_baseline": "expert", "speedups": {"rl": 0.2}}, {}, {}, None)
    return uri


def _compare(uri, *args):
    from cli.main import app

    return CliRunner().invoke(app, ["compare", "--tracking-uri", uri, *args], env={"COLUMNS": "200"})


def test_markdown_into_a_missing_folder_creates_it(store, tmp_path):
    md = tmp_path / "nodir" / "deeper" / "x.md"
    r = _compare(store, "--markdown", str(md))
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    assert md.read_text().startswith("| task |") and "rnnlm/small on k80x2" in md.read_text()


def test_markdown_path_that_is_a_folder(store, tmp_path):
    r = one_line_exit_2(["compare", "--tracking-uri", store, "--markdown", str(tmp_path)], "--markdown")
    assert f"{str(tmp_path)!r} is a folder" in r.output
    assert "rnnlm" not in r.output  # refused before the table


def test_markdown_folder_that_cannot_be_created(store, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    path = blocker / "sub" / "x.md"
    r = one_line_exit_2(["compare", "--tracking-uri", store, "--markdown", str(path)], "--markdown")
    assert str(path) in r.output and blocker.read_text() == "not a folder"


def test_by_an_unknown_run_parameter(store):
    """Validity is the parameters the runs carry (and the default --by settings): ``colour`` is none of them,
    ``methods`` (outside the default) is one."""
    r = one_line_exit_2(["compare", "--tracking-uri", store, "--by", "model,colour"],
                        "--by: unknown run parameter 'colour'; valid: ")
    valid = r.output.split("valid: ", 1)[1]
    assert all(p in valid for p in ("model", "size", "cluster", "seed", "budget", "methods"))
    assert "None on None" not in r.output
    r = _compare(store, "--by", "model,size,cluster,methods", "--json", "-")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert {row["methods"] for row in rows} == {"single_gpu,expert,rl"} and all(row["seeds"] == 2 for row in rows)


def test_sweep_no_run_belongs_to(store):
    r = one_line_exit_2(["compare", "--tracking-uri", store, "--sweep", "deadbeef"],
                        "no finished experiment run belongs to sweep 'deadbeef'")
    assert "--sweep" in r.output


def test_by_without_size_or_cluster_names_only_what_it_groups_by(store, tmp_path):
    """``--by model,budget``: the task is ``rnnlm`` (was ``rnnlm/None on None``), and the markdown's settings
    column is the ``--by`` fields beyond the task (``budget=200``), not the default ``--by``'s."""
    md = tmp_path / "by.md"
    r = _compare(store, "--by", "model,budget", "--json", "-", "--markdown", str(md))
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout[r.stdout.index("["):])
    assert {row["task"] for row in rows} == {"rnnlm"}
    text = md.read_text()
    assert "None" not in text and "| rnnlm | budget=200 | rl (learner) | 2 |" in text
    r = _compare(store, "--by", "cluster", "--json", "-")
    assert {row["task"] for row in json.loads(r.stdout[r.stdout.index("["):])} == {"on k80x2"}
