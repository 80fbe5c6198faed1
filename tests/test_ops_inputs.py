"""Bad input is one line and exit 2, before any work: a non-integer option, a malformed cluster
YAML, an unwritable --out-dir, a tracking server that does not answer, a folder that is not a run folder."""

from __future__ import annotations

import socket

import pytest

from conftest import one_line_exit_2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_seed_not_an_integer():
    one_line_exit_2(["experiment", "--seed", "abc"], "(got 'abc')")


def test_unknown_option_is_one_line():
    one_line_exit_2(["experiment", "--no-such-option"], "No such option: --no-such-option")


def test_malformed_cluster_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: [unclosed\n  - name: gpu0: x\n")
    one_line_exit_2(["experiment", "--cluster", str(bad)], f"cluster spec {bad}")


def test_unwritable_out_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    # a path under a regular file cannot be created, even by root
    one_line_exit_2(["experiment", "--out-dir", str(blocker / "runs")], f"--out-dir {blocker / 'runs'} is not writable")


def test_tracking_server_down_fails_before_any_work(tmp_path):
    """A tracking server that does not answer ends the command in one line before any stage runs (its
    wall time is a benchmark's business, not a test's: a loaded 2-core machine stretches it)."""
    uri = f"http://127.0.0.1:{_free_port()}"
    one_line_exit_2(["experiment", "--tracking-uri", uri, "--out-dir", str(tmp_path / "o")],
                    f"MLflow tracking server {uri} does not answer")
    assert not (tmp_path / "o" / "graph-cache").exists() and not (tmp_path / "o" / "runs").exists()


def test_log_run_of_a_folder_that_is_not_a_run(tmp_path):
    one_line_exit_2(["log-run", str(tmp_path)], "is not a run folder: no readable results.json")


@pytest.mark.parametrize("record, needle", [
    ({"extra_artifacts": {"placement-logs/post": "/etc/hostname"}}, "extra_artifacts['placement-logs/post']: '/etc/hostname' is not a file inside"),
    ({"extra_artifacts": {"../../x": "OUT/placement-logs/post.jsonl"}}, "extra_artifacts: name '../../x', expected placement-logs/<method>"),
    ({"params": {}, "tracking_uri": "http://example.com"}, "record: unknown field(s) 'tracking_uri'"),
    ({"extra_artifacts": ["OUT/placement-logs/post.jsonl"]}, "extra_artifacts: list, expected an object"),
])
def test_log_run_uploads_nothing_the_record_names_outside_its_out_dir(tmp_path, record, needle):
    """results.json is data: its record names what log-run uploads, so only the run's own placement logs
    (files inside the out-dir, named placement-logs/<method>) and record_experiment's fields pass; checked
    before any store is opened."""
    import json

    out = tmp_path / "o"
    (out / "placement-logs").mkdir(parents=True)
    (out / "placement-logs" / "post.jsonl").write_text("{}\n")
    run = out / "runs" / "r1"
    run.mkdir(parents=True)
    record = json.loads(json.dumps(record).replace("OUT", str(out)))
    (run / "results.json").write_text(json.dumps({"record": record, "result": {}}))
    one_line_exit_2(["log-run", str(run)], needle)
    assert not (out / "mlflow.db").exists() and not (out / "mlartifacts").exists()


def test_compare_without_a_store(tmp_path):
    one_line_exit_2(["compare", "--out-dir", str(tmp_path)], "no MLflow store at sqlite:///")


@pytest.mark.parametrize("sub", ["calibrate", "train"])
def test_measure_commands_also_one_line(sub):
    one_line_exit_2([sub, "--model", "rnnlm", "--cluster", "k80x2", "--seed", "x"], "Invalid value for '--seed'")
