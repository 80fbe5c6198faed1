"""``placement evaluate``: one given placement's step time equals the one the baselines report for the
same op placement in the simulator; ``single:DEVICE``; the real path; bad input is one line, exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

CLUSTER = "k80x2"


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """``(prepared rnnlm small, cache folder)``: prepared as the CLI prepares it and cached, so each
    ``evaluate`` below reads the same graph from the cache instead of importing it again."""
    from compgraph.frontends import graph_source, prepare_source

    cache = tmp_path_factory.mktemp("graph-cache")
    return prepare_source(graph_source("rnnlm", "small", None, None, None, None), None, None, 0, str(cache)), str(cache)


@pytest.fixture(scope="module")
def baselines(graph):
    """``placement baselines``' rows (step time, placement) of a group, an op-level and a single-device method."""
    from baselines.report import run_baselines
    from cluster.spec import load_cluster

    return run_baselines(graph[0], load_cluster(CLUSTER), ["single_gpu", "expert", "metis", "m_etf"])["methods"]


def _invoke(args, cache=None):
    from cli.main import app

    extra = ["--cache-dir", cache] if cache else []
    return CliRunner().invoke(app, ["evaluate", "--cluster", CLUSTER, *args, *extra])


def _op_file(path, graph, row, method):
    """Write ``row``'s placement (a baseline row of :func:`baselines.report.run_baselines`) per op, as
    ``placement export --format json`` writes it; return the op -> device map."""
    from cluster.spec import load_cluster
    from tracking.export import op_placement

    prepared = graph[0]
    names = op_placement(prepared, row["placement"], load_cluster(CLUSTER).device_names, method)
    devices = {op.name: d for op, d in zip(prepared.graph.ops, names)}
    path.write_text(json.dumps({"model": "rnnlm", "method": method, "cluster": CLUSTER,
                                "step_time_s": row["step_time_s"], "devices": devices}, indent=1))
    return devices


@pytest.mark.slow  # the graph and the baselines: about 7 s here
@pytest.mark.parametrize("method", ["expert", "metis", "m_etf"])
def test_evaluate_equals_the_baselines_step_time(method, graph, baselines, tmp_path):
    row = baselines[method]
    _op_file(tmp_path / "p.json", graph, row, method)
    out = tmp_path / "e.json"
    r = _invoke(["--placement", str(tmp_path / "p.json"), "--json", str(out)], graph[1])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert result["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)
    assert result["oom"] is False and result["env"] == "sim" and result["cluster"] == CLUSTER
    assert result["placement"] == str(tmp_path / "p.json") and result["ops"] == graph[0].graph.num_ops
    assert result["devices_used"] == row["devices_used"]
    assert set(result["peak_memory_bytes"]) == {"/cpu:0", "/gpu:0", "/gpu:1"}
    assert all(isinstance(v, int) for v in result["peak_memory_bytes"].values())
    assert f"step time {row['step_time_s']:.5f} s" in r.output and len(r.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_single_device_equals_the_single_gpu_baseline_and_json_to_stdout(graph, baselines):
    r = _invoke(["--placement", "single:/gpu:0", "--json", "-"], graph[1])
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)  # the summary line went to stderr
    assert result["step_time_s"] == pytest.approx(baselines["single_gpu"]["step_time_s"], rel=1e-9)
    assert result["placement"] == "single:/gpu:0" and result["devices_used"] == 1
    assert result["ops_per_device"] == {"/gpu:0": graph[0].graph.num_ops}
    assert "placement single:/gpu:0: step time" in r.stderr


@pytest.mark.slow  # real TensorFlow steps
def test_real_measurement_has_its_step_times_and_spread(graph, tmp_path):
    out = tmp_path / "real.json"
    from cli.main import app

    r = CliRunner().invoke(app, ["evaluate", "--cluster", "cpu4", "--env", "real", "--placement", "single:/gpu:0",
                                 "--repeats", "2", "--warmup", "1", "--seed", "3", "--cache-dir", graph[1],
                                 "--json", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert result["env"] == "real" and result["cluster"] == "cpu4" and result["oom"] is False
    assert len(result["step_times_s"]) == 2 and result["step_time_s"] > 0
    assert result["step_time_s"] == pytest.approx(sum(result["step_times_s"]) / 2)
    assert result["options"]["seed"] == 3 and result["options"]["warmup"] == 1
    assert result["options"]["steps"] == 3  # TensorFlow's real environment: warm-up + repeats steps
    assert result["devices"] == {"/cpu:0": "/device:CPU:0", "/gpu:0": "/device:CPU:1", "/gpu:1": "/device:CPU:2",
                                 "/gpu:2": "/device:CPU:3"}
    assert "(2 timed steps, std " in r.output


# cases that fail before the graph is prepared: fast
@pytest.mark.parametrize("args, needle", [
    (["--placement", "MISSING"], "no such file"),
    (["--placement", "NOTJSON"], "not JSON"),
    (["--placement", "NOSHAPE"], 'expected {"devices": {op name: device name}}'),
    (["--placement", "single:"], "no device given"),
    (["--placement", "single:/tpu:0"], "'/tpu:0' is not a device of 'k80x2'; valid: /cpu:0, /gpu:0, /gpu:1"),
    (["--placement", "single:/gpu:0", "--repeats", "3"], "--repeats: only with --env real"),
    (["--placement", "single:/gpu:0", "--env", "real", "--warmup", "-1"], "--warmup must be at least 0, got -1"),
    (["--placement", "single:/gpu:0", "--env", "nope"], "unknown --env value 'nope'"),
    (["--placement", "single:/gpu:0", "--cluster", "nope"], "unknown cluster 'nope'"),
    (["--placement", "single:/gpu:0", "--env", "real", "--threads", "0"], "--threads must be at least 1, got 0"),
    (["--placement", "single:/gpu:0", "--isolate"], "--isolate: only with --env real"),
    (["--placement", "single:/gpu:0", "--env", "real", "--host-memory", "keep"],
     "unknown --host-memory value 'keep'; valid: 'default' or 'reuse'"),
])
def test_bad_input_before_the_graph_is_one_line(args, needle, tmp_path):
    (tmp_path / "notjson.json").write_text("{devices")
    (tmp_path / "noshape.json").write_text(json.dumps({"/gpu:0": ["a"]}))
    subs = {"MISSING": str(tmp_path / "missing.json"), "NOTJSON": str(tmp_path / "notjson.json"),
            "NOSHAPE": str(tmp_path / "noshape.json")}
    r = _invoke([subs.get(a, a) for a in args])
    assert r.exit_code == 2, r.output
    assert needle in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


def _unit_to_split(prepared):
    """``(op a, op b)``: two ops of one TensorFlow colocation unit."""
    from compgraph.grouping import colocation_grouping

    members = next(m for m in colocation_grouping(prepared.graph).members() if len(m) >= 2)
    return prepared.graph.ops[members[0]].name, prepared.graph.ops[members[1]].name


@pytest.mark.slow  # the graph (cached after the first)
@pytest.mark.parametrize("case", ["unknown-op", "missing-op", "unknown-device", "split-unit"])
def test_bad_placement_is_one_line_naming_the_op_or_device(case, graph, tmp_path):
    prepared = graph[0]
    devices = {op.name: "/gpu:0" for op in prepared.graph.ops}
    first, second = prepared.graph.ops[0].name, prepared.graph.ops[1].name
    placement = str(tmp_path / "p.json")
    if case == "unknown-op":
        devices.update({"no/such/op": "/gpu:0", "no/such/op2": "/gpu:1"})
        needle = "op 'no/such/op' is not in the graph (1616 ops) (1 more unknown ops)"
    elif case == "missing-op":
        del devices[first], devices[second]
        needle = f"op {first!r} of the graph has no device (1 more ops without one)"
    elif case == "unknown-device":
        devices[second] = "/gpu:7"
        needle = f"op {second!r} is on '/gpu:7', not a device of 'k80x2'"
    else:
        a, b = _unit_to_split(prepared)
        devices[b] = "/gpu:1"
        needle = f"op {b!r} is on /gpu:1 but op {a!r} of its colocation unit is on /gpu:0"
    (tmp_path / "p.json").write_text(json.dumps({"devices": devices}))
    r = _invoke(["--placement", placement], graph[1])
    assert r.exit_code == 2, r.output
    assert needle in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.slow  # the graph: about 5 s here
def test_a_file_exported_for_another_cluster_is_evaluated_with_a_note(graph, tmp_path):
    """The same op names may run on another cluster (allowed), but the user is told; a file without
    ``model``/``cluster``, or with this run's, gets no note."""
    devices = {op.name: "/gpu:0" for op in graph[0].graph.ops}
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"model": "rnnlm", "cluster": "k80x4", "devices": devices}))
    r = _invoke(["--placement", str(path)], graph[1])
    assert r.exit_code == 0, r.output
    assert f"note: {path} was exported for cluster 'k80x4'; evaluated here on model 'rnnlm', cluster 'k80x2'" in r.stderr
    single = _invoke(["--placement", "single:/gpu:0"], graph[1])
    assert r.stdout.split("step time", 1)[1] == single.stdout.split("step time", 1)[1]  # the same step time
    for meta in ({}, {"model": "rnnlm", "cluster": CLUSTER}):
        path.write_text(json.dumps({**meta, "devices": devices}))
        r = _invoke(["--placement", str(path)], graph[1])
        assert r.exit_code == 0 and "note:" not in r.output, r.output
