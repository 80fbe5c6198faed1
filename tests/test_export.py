"""``placement export`` (tracking/export.py): a run's placement, per op, as JSON or as a GraphDef that
TensorFlow imports and runs where it was placed; from a run folder or from a real SQLite MLflow store."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from baselines import BASELINES, BaselineContext
from cluster.spec import load_cluster
from compgraph.frontends import BenchmarkSource
from tracking.export import FORMATS, ExportError, export_placement, parse_device_map, write_export_record

DEVICE_MAP = {"/cpu:0": "/device:CPU:0", "/gpu:0": "/device:CPU:1", "/gpu:1": "/device:CPU:2"}


def _write_run(run, prepared, spec, results, params):
    """A run folder as `placement experiment` writes it: results.json, and export.json by the experiment's
    own writer (:func:`tracking.export.write_export_record`)."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "results.json").write_text(json.dumps({"record": {"params": params, "results": results}, "result": {}}))
    write_export_record(run, prepared, spec, results)
    return run


def _run_folder(tmp_path, rnnlm_small, params_extra=None):
    """A run folder with expert's group placement of rnnlm small on k80x2."""
    spec = load_cluster("k80x2")
    groups = np.asarray(BASELINES["expert"](BaselineContext(rnnlm_small.graph, rnnlm_small.grouping, spec,
                                                            rnnlm_small.benchmark, rnnlm_small.config)))
    placement = {name: spec.device_names[int(d)] for name, d in zip(rnnlm_small.grouping.names, groups)}
    params = {"model": "rnnlm", "size": "small", "cluster": "k80x2", "grouper": "2017", "num_groups_target": "none",
              "seed": 0, "source": json.dumps({"kind": "benchmark", "model": "rnnlm", "size": "small"}),
              **(params_extra or {})}
    results = {"expert": {"placement": placement, "step_time_s": 0.079, "oom": False}}
    run = _write_run(tmp_path / "runs" / "r1", rnnlm_small, spec, results, params)
    return run, params, results, groups


def test_json_is_the_op_level_placement_of_a_group_method(tmp_path, rnnlm_small):
    run, _, _, groups = _run_folder(tmp_path, rnnlm_small)
    done = export_placement(str(run), "expert", "json", tmp_path / "expert.json")
    data = json.loads((tmp_path / "expert.json").read_text())
    assert data["method"] == "expert" and data["cluster"] == "k80x2" and done["ops"] == rnnlm_small.graph.num_ops
    names = ["/cpu:0", "/gpu:0", "/gpu:1"]
    expected = {op.name: names[int(groups[g])] for op, g in zip(rnnlm_small.graph.ops, rnnlm_small.grouping.op_group)}
    assert data["devices"] == expected  # every op where its group was placed


def test_tf_graph_def_runs_where_it_was_placed(tmp_path, rnnlm_small):
    from cluster.real import PlacedSession, trace_devices
    from compgraph.tf_env import import_tensorflow

    tf = import_tensorflow()
    run, _, _, _ = _run_folder(tmp_path, rnnlm_small)
    done = export_placement(str(run), "expert", "tf", tmp_path / "expert.pb", DEVICE_MAP,
                            source=BenchmarkSource(model="rnnlm", size="small"))
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString((tmp_path / "expert.pb").read_bytes())
    devices = {n.name: n.device for n in gd.node if n.device}
    assert set(devices.values()) == {"/device:CPU:1", "/device:CPU:2"} and len(devices) == rnnlm_small.graph.num_ops
    with PlacedSession(gd, done["fetches"], devices) as session:  # imported as it is, on 3 logical CPUs
        step = session.run_step(trace=True)
    assert np.isfinite(step.loss)
    ran = trace_devices(step.run_metadata)
    placed = [n for n in devices if n in ran]
    assert len(placed) > 100 and all(ran[n] == devices[n] for n in placed)


@pytest.mark.slow  # over 5 s here
def test_export_from_a_real_mlflow_store(tmp_path, rnnlm_small, monkeypatch):
    """The record goes to MLflow as the experiment's writer logs it (record_experiment: export.json from
    the run folder); export by run id reads it, and never imports the recorded source."""
    from tracking import record_experiment

    _plant_marker_module(tmp_path, monkeypatch)
    run, params, results, _ = _run_folder(tmp_path, rnnlm_small, HOSTILE_PARAMS)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = record_experiment(tracking_uri=uri, artifact_location=str(tmp_path / "artifacts"), params=params,
                               results=results, summary={}, method_params={}, curves={}, prefect_flow_run_id=None,
                               run_dir=str(run))
    for fmt in FORMATS:
        out = tmp_path / f"from-mlflow.{fmt}"
        if fmt == "json":
            done = export_placement(run_id, "expert", fmt, out, tracking_uri=uri)
            assert done["ops"] == rnnlm_small.graph.num_ops and sum(done["devices"].values()) == done["ops"]
        else:
            with pytest.raises(ExportError, match="give the graph's source on the command line"):
                export_placement(run_id, "expert", fmt, out, tracking_uri=uri)
    _assert_never_imported(tmp_path)
    with pytest.raises(ExportError, match="not in the MLflow store"):
        export_placement("0" * 32, "expert", "json", tmp_path / "x.json", tracking_uri=uri)


def test_export_errors_name_what_is_wrong(tmp_path, rnnlm_small):
    run, _, _, _ = _run_folder(tmp_path, rnnlm_small)
    with pytest.raises(ExportError, match="'post' is not in this run; its methods: expert"):
        export_placement(str(run), "post", "json", tmp_path / "x.json")
    with pytest.raises(ExportError, match="unknown 'onnx'"):
        export_placement(str(run), "expert", "onnx", tmp_path / "x.json")
    with pytest.raises(ExportError, match="/gpu:7 not a device of k80x2"):
        export_placement(str(run), "expert", "json", tmp_path / "x.json", {"/gpu:7": "cuda:0"})
    with pytest.raises(ExportError, match="expected SPEC_DEVICE=TARGET_DEVICE"):
        parse_device_map("/gpu:0")
    with pytest.raises(ExportError, match="without results.json"):
        export_placement(str(tmp_path / "runs"), "expert", "json", tmp_path / "x.json")
    with pytest.raises(ExportError, match="a graph source is for tf and torch"):
        export_placement(str(run), "expert", "json", tmp_path / "x.json", source=BenchmarkSource())
    assert parse_device_map("/gpu:0=cuda:1, /cpu:0=cpu") == {"/gpu:0": "cuda:1", "/cpu:0": "cpu"}
    assert not (tmp_path / "x.json").exists()


# --- a run is a record, not a program (issue 35) ---

MARKER_MODULE = "export_marker_on_import"
HOSTILE_PARAMS = {"source": json.dumps({"kind": "torch", "spec": f"{MARKER_MODULE}:build", "optimizer": "adam"}),
                  "model": MARKER_MODULE, "size": "user", "cluster": "mycluster"}
"""A run record naming a module that leaves a marker when imported (and a cluster no preset has)."""


def _plant_marker_module(tmp_path, monkeypatch):
    """A module, importable from the current folder and from sys.path, whose import or call writes a marker."""
    marker = tmp_path / "IMPORTED"
    code = (f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
            f"def build():\n    Path({str(marker)!r}).write_text('called')\n    return None\n")
    (tmp_path / f"{MARKER_MODULE}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop(MARKER_MODULE, None)


def _assert_never_imported(tmp_path):
    assert not (tmp_path / "IMPORTED").exists() and MARKER_MODULE not in sys.modules


def _cli(args):
    """``placement export ARGS`` in this process: ``(exit code, non-empty output lines)``."""
    from typer.testing import CliRunner

    from cli.main import app

    r = CliRunner().invoke(app, ["export", *map(str, args)])
    return r.exit_code, [line for line in r.output.splitlines() if line.strip()]


def test_the_default_output_stays_in_the_current_folder_whatever_the_record_names(tmp_path, rnnlm_small, monkeypatch):
    """Without --output the file is named after the method, which comes from the run's record (data):
    a method named ``../../esc`` in export.json writes ``esc-placement.json`` here, not two folders up."""
    run, params, results, _ = _run_folder(tmp_path, rnnlm_small)
    hostile = _write_run(tmp_path / "runs" / "r2", rnnlm_small, load_cluster("k80x2"), {"../../esc": results["expert"]}, params)
    here = tmp_path / "a" / "b"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    rc, lines = _cli([hostile, "--method", "../../esc", "--format", "json"])
    assert rc == 0 and lines[-1].startswith("esc-placement.json: "), lines
    assert (here / "esc-placement.json").is_file()
    assert not (tmp_path / "esc-placement.json").exists() and not (tmp_path / "a" / "esc-placement.json").exists()


def test_no_format_imports_a_module_the_run_record_names(tmp_path, rnnlm_small, monkeypatch):
    """results.json names a torch source (and a model) whose module writes a marker when imported or
    called: json exports from the record alone, tf and torch are refused without a source of the user's,
    and the module never runs."""
    _plant_marker_module(tmp_path, monkeypatch)
    run, _, _, _ = _run_folder(tmp_path, rnnlm_small, HOSTILE_PARAMS)
    rc, lines = _cli([run, "--method", "expert", "--format", "json", "--output", tmp_path / "p.json"])
    assert rc == 0 and "1616 ops" in lines[-1], lines
    for fmt in ("tf", "torch"):
        rc, lines = _cli([run, "--method", "expert", "--format", fmt, "--output", tmp_path / f"p.{fmt}"])
        assert rc == 2 and len(lines) == 1 and "give the graph's source on the command line" in lines[0], lines
        assert not (tmp_path / f"p.{fmt}").exists()
    _assert_never_imported(tmp_path)


def test_a_run_on_a_yaml_cluster_exports_from_another_folder(tmp_path, rnnlm_small, monkeypatch):
    """The spec itself is recorded: the YAML may be gone and the export run from anywhere."""
    import yaml

    spec = load_cluster("k80x2").model_copy(update={"name": "mycluster"})
    (tmp_path / "a").mkdir()
    yaml_path = tmp_path / "a" / "mycluster.yaml"
    yaml_path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    spec = load_cluster(str(yaml_path))
    placement = {name: "/gpu:1" for name in rnnlm_small.grouping.names}
    run = _write_run(tmp_path / "a" / "runs" / "r1", rnnlm_small, spec,
                     {"single_gpu": {"placement": placement, "step_time_s": 0.1, "oom": False}},
                     {"model": "rnnlm", "size": "small", "cluster": "mycluster"})
    yaml_path.unlink()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")
    rc, lines = _cli([run, "--method", "single_gpu", "--device-map", "/gpu:1=cuda:0"])
    assert rc == 0, lines
    data = json.loads((tmp_path / "b" / "single_gpu-placement.json").read_text())
    assert data["cluster"] == "mycluster" and set(data["devices"].values()) == {"cuda:0"}
    assert len(data["devices"]) == rnnlm_small.graph.num_ops


def test_tf_needs_the_source_the_run_placed(tmp_path, rnnlm_small):
    """tf prepares the graph from --model/--size and checks it against the recorded hash."""
    run, _, _, _ = _run_folder(tmp_path, rnnlm_small)
    record = json.loads((run / "export.json").read_text())
    base = [run, "--method", "expert", "--format", "tf", "--out-dir", tmp_path]
    rc, lines = _cli([*base, "--output", tmp_path / "a.pb"])
    assert rc == 2 and len(lines) == 1 and "give the graph's source on the command line" in lines[0], lines
    rc, lines = _cli([*base, "--output", tmp_path / "a.pb", "--model", "rnnlm",
                      "--device-map", "/gpu:0=/device:CPU:1,/gpu:1=/device:CPU:2"])
    assert rc == 0 and "fetches" in lines[-1], lines
    record["graph_sha256"] = "0" * 64  # another graph was placed
    (run / "export.json").write_text(json.dumps(record))
    rc, lines = _cli([*base, "--output", tmp_path / "b.pb", "--model", "rnnlm"])
    assert rc == 2 and len(lines) == 1 and "is not the graph this run placed" in lines[0], lines
    rc, lines = _cli([*base, "--output", tmp_path / "b.pb", "--model", "rnn"])
    assert rc == 2 and len(lines) == 1 and "unknown model 'rnn'" in lines[0], lines
    assert not (tmp_path / "b.pb").exists()


TINY = '''import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4))

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.body(x), y)


def step():
    return Net(16), (torch.randn(4, 8), torch.randint(0, 4, (4,)))


def wide():
    return Net(32), (torch.randn(4, 8), torch.randint(0, 4, (4,)))
'''
"""A user's PyTorch step (``step``) and another one (``wide``: other shapes)."""


def test_torch_needs_the_source_the_run_placed(tmp_path, monkeypatch):
    """torch captures the step from --torch (the user's own module, in the current folder) and checks it
    against the recorded hash: the same step exports, another one (wider) is refused, and without
    --torch it is refused."""
    pytest.importorskip("torch")
    from compgraph.frontends import TorchSource, prepare_source

    (tmp_path / "export_tiny_step.py").write_text(TINY)
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("export_tiny_step", None)
    prepared = prepare_source(TorchSource(spec="export_tiny_step:step"))
    half = prepared.graph.num_ops // 2
    placement = {op.name: ("/gpu:0" if i < half else "/gpu:1") for i, op in enumerate(prepared.graph.ops)}
    run = _write_run(tmp_path / "runs" / "r1", prepared, load_cluster("k80x2"),
                     {"split": {"placement": placement, "step_time_s": 0.001, "oom": False}},
                     {"model": "export_tiny_step:step", "size": "user", "cluster": "k80x2"})
    args = [run, "--method", "split", "--format", "torch"]
    rc, lines = _cli([*args, "--output", tmp_path / "none.py"])
    assert rc == 2 and len(lines) == 1 and "give the graph's source on the command line" in lines[0], lines
    rc, lines = _cli([*args, "--output", tmp_path / "wide.py", "--torch", "export_tiny_step:wide"])
    assert rc == 2 and len(lines) == 1 and "is not the graph this run placed" in lines[0], lines
    rc, lines = _cli([*args, "--output", tmp_path / "tf.py", "--model", "rnnlm"])
    assert rc == 2 and len(lines) == 1 and "the source given is a TensorFlow graph" in lines[0], lines
    rc, lines = _cli([run, "--method", "split", "--format", "tf", "--output", tmp_path / "x.pb", "--torch",
                      "export_tiny_step:step"])
    assert rc == 2 and len(lines) == 1 and "is a PyTorch step, with no TensorFlow GraphDef" in lines[0], lines
    assert not any((tmp_path / f).exists() for f in ("none.py", "wide.py", "tf.py", "x.pb"))
    rc, lines = _cli([*args, "--output", tmp_path / "placed.py", "--torch", "export_tiny_step:step"])
    assert rc == 0, lines
    text = (tmp_path / "placed.py").read_text()
    compile(text, "placed.py", "exec")
    assert "aten._to_copy.default(" in text and "index=1" in text
    sys.modules.pop("export_tiny_step", None)


def test_output_is_checked_before_any_work(tmp_path, rnnlm_small):
    """--output inside a run folder, the out-dir's runs/, an existing file without --force, a missing or
    unwritable folder, a symlink out of its folder: one line, exit 2, nothing written, the run intact."""
    import os

    run, _, _, _ = _run_folder(tmp_path, rnnlm_small)
    before = (run / "results.json").read_bytes()
    base = [run, "--method", "expert", "--out-dir", tmp_path]
    (tmp_path / "exists.json").write_text("mine\n")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link.json").symlink_to(tmp_path / "elsewhere" / "target.json")
    cases = [(run / "results.json", "inside the run folder"), (run / "plots" / "x.json", "does not exist"),
             (run / "x.json", "inside the run folder"), (tmp_path / "runs" / "x.json", "where the experiments' records are"),
             (tmp_path / "exists.json", "the file exists; give --force"), (tmp_path / "out" / "link.json", "outside its folder"),
             (tmp_path / "missing" / "x.json", "does not exist"), (tmp_path / "out", "a folder")]
    if os.geteuid() != 0:  # root writes anywhere
        cases.append((tmp_path / "ro" / "x.json", "is not writable"))
    try:
        for out, needle in cases:
            for force in ([], ["--force"]) if needle != "the file exists; give --force" else ([],):
                rc, lines = _cli([*base, "--output", out, *force])
                assert rc == 2 and len(lines) == 1 and needle in lines[0], (out, force, lines)
        assert list((tmp_path / "ro").iterdir()) == []
    finally:
        (tmp_path / "ro").chmod(0o755)
    assert (run / "results.json").read_bytes() == before and (tmp_path / "exists.json").read_text() == "mine\n"
    assert not (tmp_path / "elsewhere" / "target.json").exists() and not (tmp_path / "missing").exists()
    rc, lines = _cli([*base, "--output", tmp_path / "exists.json", "--force"])
    assert rc == 0 and json.loads((tmp_path / "exists.json").read_text())["method"] == "expert", lines


def test_a_run_id_against_a_missing_store_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, lines = _cli(["0" * 32, "--method", "expert", "--output", tmp_path / "x.json"])
    assert rc == 2 and len(lines) == 1 and "no MLflow store at" in lines[0] and "nothing created" in lines[0], lines
    rc, lines = _cli(["0" * 32, "--method", "expert", "--output", tmp_path / "x.json", "--tracking-uri",
                      f"sqlite:///{tmp_path / 'other' / 'mlflow.db'}"])
    assert rc == 2 and len(lines) == 1 and "no MLflow store at" in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_old_large_or_malformed_records_are_refused_in_one_line(tmp_path, rnnlm_small):
    """A run folder written before export.json is refused (nothing prepared instead); a record past
    64 MiB is refused before it is read; malformed or tampered ones are named."""
    run, _, _, _ = _run_folder(tmp_path, rnnlm_small)
    record = json.loads((run / "export.json").read_text())
    n = len(record["ops"])
    checks = [(b"", "not JSON"), (b"[" * 100_000, "not JSON"), (b"[]", "not a valid export record"),
              (json.dumps({**record, "version": 9}).encode(), "reads version 1"),
              (json.dumps({**record, "source": "x:y"}).encode(), "source: Extra inputs are not permitted"),
              (json.dumps({**record, "cluster": {**record["cluster"], "sha256": "0"}}).encode(),
               "does not match cluster.sha256"),
              (json.dumps({**record, "methods": {"expert": {"devices": [7] * n}}}).encode(), "device index outside 0..2"),
              (json.dumps({**record, "methods": {"expert": {"devices": [0]}}}).encode(), f"1 devices for {n} ops")]
    for data, needle in checks:
        (run / "export.json").write_bytes(data)
        rc, lines = _cli([run, "--method", "expert", "--output", tmp_path / "x.json"])
        assert rc == 2 and len(lines) == 1 and needle in lines[0], (needle, lines)
    with open(run / "export.json", "wb") as f:
        f.truncate(65 * 2**20)  # sparse: 65 MiB on paper
    rc, lines = _cli([run, "--method", "expert", "--output", tmp_path / "x.json"])
    assert rc == 2 and len(lines) == 1 and "64 MiB" in lines[0], lines
    (run / "export.json").unlink()
    rc, lines = _cli([run, "--method", "expert", "--output", tmp_path / "x.json"])
    assert rc == 2 and len(lines) == 1 and "predates the recorded placements" in lines[0], lines
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow  # over 5 s here
def test_a_pytorch_step_exports_as_json_not_as_a_graph_def(tmp_path):
    pytest.importorskip("torch")
    from compgraph.frontends import prepare_source

    prepared = prepare_source(BenchmarkSource(model="gpt", size="small"))
    placement = {name: "/gpu:0" for name in prepared.grouping.names}
    run = _gpt_run(tmp_path, prepared, {"single_gpu": {"placement": placement, "step_time_s": 0.03, "oom": False}})
    done = export_placement(str(run), "single_gpu", "json", tmp_path / "p.json", {"/gpu:0": "cuda:0"})
    assert done["devices"] == {"cuda:0": prepared.graph.num_ops}
    with pytest.raises(ExportError, match="a PyTorch step, with no TensorFlow GraphDef"):
        export_placement(str(run), "single_gpu", "tf", tmp_path / "p.pb", source=BenchmarkSource(model="gpt"))


def _gpt_run(tmp_path, prepared, results):
    params = {"model": "gpt", "size": "small", "cluster": "k80x2", "grouper": "2017", "num_groups_target": "none",
              "seed": 0, "source": BenchmarkSource(model="gpt", size="small").model_dump_json()}
    return _write_run(tmp_path / "gpt-run", prepared, load_cluster("k80x2"), results, params)


@pytest.mark.slow  # about 13 s here
def test_a_pytorch_step_exports_as_placed_torch_fx_code_that_trains_as_torch_optim_does(tmp_path, monkeypatch):
    """The exported step, run on this machine's CPU, equals one eager step of torch.optim.Adam on the
    same model, weights and batch: the same loss, the same updated parameters and moments."""
    torch = pytest.importorskip("torch")
    import copy
    import importlib

    from compgraph.frontends import prepare_source
    from compgraph.torch_models import GPT_SIZES, _modules

    gpt = BenchmarkSource(model="gpt", size="small")
    prepared = prepare_source(gpt)
    # half the ops on each GPU, by position: a split with many transfers
    half = prepared.graph.num_ops // 2
    placement = {op.name: ("/gpu:0" if i < half else "/gpu:1") for i, op in enumerate(prepared.graph.ops)}
    run = _gpt_run(tmp_path, prepared, {"split": {"placement": placement, "step_time_s": 0.03, "oom": False}})
    # on two GPUs: the transfers are there, every op reads tensors of its own device
    done = export_placement(str(run), "split", "torch", tmp_path / "on_gpus.py", source=gpt)
    text = (tmp_path / "on_gpus.py").read_text()
    assert done["devices"] == {"cuda:0": half, "cuda:1": prepared.graph.num_ops - half}
    assert text.count("aten._to_copy.default(") > 10 and "import compgraph" not in text
    compile(text, "on_gpus.py", "exec")
    # on this machine's CPU: it runs, and trains exactly as torch.optim.Adam
    export_placement(str(run), "split", "torch", tmp_path / "placed_gpt.py", {"/gpu:0": "cpu", "/gpu:1": "cpu"},
                     source=gpt)
    monkeypatch.syspath_prepend(str(tmp_path))
    placed = importlib.import_module("placed_gpt")
    cfg = GPT_SIZES["small"]
    torch.manual_seed(0)
    model = _modules()[1](cfg)
    tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq))
    targets = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq))
    reference = copy.deepcopy(model)
    opt = torch.optim.Adam(reference.parameters())
    loss = reference(tokens, targets)
    loss.backward()
    opt.step()
    tensors = {n: p.detach().clone() for n, p in model.named_parameters()}
    tensors.update({n: b.clone() for n, b in model.named_buffers()})
    tensors.update({f"{n}/Adam{s}": torch.zeros_like(p) for n, p in model.named_parameters() for s in ("", "_1")})
    tensors.update({"input/0": tokens, "input/1": targets})
    assert all(dev == "cpu" for _, dev in placed.INPUTS)
    out = placed.PlacedStep()(*[tensors[name] for name, _ in placed.INPUTS])
    assert float(out[0].detach()) == pytest.approx(float(loss.detach()), rel=1e-6)
    for n, p in reference.named_parameters():
        assert torch.allclose(tensors[n], p.detach(), atol=1e-6), n
        assert torch.allclose(tensors[f"{n}/Adam"], opt.state[p]["exp_avg"], atol=1e-7), n
        # the first moment after one step is 0.1 * the gradient: the placed step's gradients are the model's
        torch.testing.assert_close(tensors[f"{n}/Adam"] / 0.1, p.grad, rtol=1e-6, atol=1e-7)
    with pytest.raises(ExportError, match="is a TensorFlow graph; use tf or json"):
        run_tf, _, _, _ = _run_folder(tmp_path, prepare_source(BenchmarkSource(model="rnnlm", size="small")))
        export_placement(str(run_tf), "expert", "torch", tmp_path / "x.py", source=gpt)
    sys.modules.pop("placed_gpt", None)
