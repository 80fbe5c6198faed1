"""``placement export`` (tracking/export.py): a run's placement, per op, as JSON or as a GraphDef that
TensorFlow imports and runs where it was placed; from a run folder or from a real SQLite MLflow store."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baselines import BASELINES, BaselineContext
from cluster.spec import load_cluster
from tracking.export import ExportError, export_placement, parse_device_map

DEVICE_MAP = {"/cpu:0": "/device:CPU:0", "/gpu:0": "/device:CPU:1", "/gpu:1": "/device:CPU:2"}


def _run_folder(tmp_path, rnnlm_small):
    """A run folder as `placement experiment` writes it (results.json), with expert's group placement."""
    spec = load_cluster("k80x2")
    groups = np.asarray(BASELINES["expert"](BaselineContext(rnnlm_small.graph, rnnlm_small.grouping, spec,
                                                            rnnlm_small.benchmark, rnnlm_small.config)))
    placement = {name: spec.device_names[int(d)] for name, d in zip(rnnlm_small.grouping.names, groups)}
    params = {"model": "rnnlm", "size": "small", "cluster": "k80x2", "grouper": "2017", "num_groups_target": "none",
              "seed": 0, "source": json.dumps({"kind": "benchmark", "model": "rnnlm", "size": "small"})}
    results = {"expert": {"placement": placement, "step_time_s": 0.079, "oom": False}}
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"record": {"params": params, "results": results}, "result": {}}))
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
    done = export_placement(str(run), "expert", "tf", tmp_path / "expert.pb", DEVICE_MAP)
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
def test_export_from_a_real_mlflow_store(tmp_path, rnnlm_small):
    from mlflow.tracking import MlflowClient

    _, params, results, _ = _run_folder(tmp_path, rnnlm_small)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("placement-experiment", artifact_location=str(tmp_path / "artifacts"))
    run_id = client.create_run(exp).info.run_id
    for k, v in params.items():
        client.log_param(run_id, k, v)
    client.log_dict(run_id, {"results": results, "summary": {}}, "results.json")
    client.set_terminated(run_id)
    done = export_placement(run_id, "expert", "json", tmp_path / "from-mlflow.json", tracking_uri=uri)
    assert done["ops"] == rnnlm_small.graph.num_ops and sum(done["devices"].values()) == done["ops"]
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
        export_placement(str(tmp_path), "expert", "json", tmp_path / "x.json")
    assert parse_device_map("/gpu:0=cuda:1, /cpu:0=cpu") == {"/gpu:0": "cuda:1", "/cpu:0": "cpu"}


@pytest.mark.slow  # over 5 s here
def test_a_pytorch_step_exports_as_json_not_as_a_graph_def(tmp_path):
    pytest.importorskip("torch")
    from compgraph.frontends import BenchmarkSource, prepare_source

    prepared = prepare_source(BenchmarkSource(model="gpt", size="small"))
    placement = {name: "/gpu:0" for name in prepared.grouping.names}
    params = {"model": "gpt", "size": "small", "cluster": "k80x2", "grouper": "2017", "num_groups_target": "none",
              "seed": 0, "source": BenchmarkSource(model="gpt", size="small").model_dump_json()}
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"record": {"params": params, "results": {
        "single_gpu": {"placement": placement, "step_time_s": 0.03, "oom": False}}}}))
    done = export_placement(str(run), "single_gpu", "json", tmp_path / "p.json", {"/gpu:0": "cuda:0"})
    assert done["devices"] == {"cuda:0": prepared.graph.num_ops}
    with pytest.raises(ExportError, match="a PyTorch step, with no TensorFlow GraphDef"):
        export_placement(str(run), "single_gpu", "tf", tmp_path / "p.pb")


def _gpt_run(tmp_path, method_placement):
    from compgraph.frontends import BenchmarkSource

    params = {"model": "gpt", "size": "small", "cluster": "k80x2", "grouper": "2017", "num_groups_target": "none",
              "seed": 0, "source": BenchmarkSource(model="gpt", size="small").model_dump_json()}
    run = tmp_path / "gpt-run"
    run.mkdir(exist_ok=True)
    (run / "results.json").write_text(json.dumps({"record": {"params": params, "results": {
        "split": {"placement": method_placement, "step_time_s": 0.03, "oom": False}}}}))
    return run


@pytest.mark.slow  # about 13 s here
def test_a_pytorch_step_exports_as_placed_torch_fx_code_that_trains_as_torch_optim_does(tmp_path, monkeypatch):
    """The exported step, run on this machine's CPU, equals one eager step of torch.optim.Adam on the
    same model, weights and batch: the same loss, the same updated parameters and moments."""
    torch = pytest.importorskip("torch")
    import copy
    import importlib

    from compgraph.frontends import BenchmarkSource, prepare_source
    from compgraph.torch_models import GPT_SIZES, _modules

    prepared = prepare_source(BenchmarkSource(model="gpt", size="small"))
    # half the ops on each GPU, by position: a split with many transfers
    half = prepared.graph.num_ops // 2
    placement = {op.name: ("/gpu:0" if i < half else "/gpu:1") for i, op in enumerate(prepared.graph.ops)}
    run = _gpt_run(tmp_path, placement)
    # on two GPUs: the transfers are there, every op reads tensors of its own device
    done = export_placement(str(run), "split", "torch", tmp_path / "on_gpus.py")
    text = (tmp_path / "on_gpus.py").read_text()
    assert done["devices"] == {"cuda:0": half, "cuda:1": prepared.graph.num_ops - half}
    assert text.count("aten._to_copy.default(") > 10 and "import compgraph" not in text
    compile(text, "on_gpus.py", "exec")
    # on this machine's CPU: it runs, and trains exactly as torch.optim.Adam
    export_placement(str(run), "split", "torch", tmp_path / "placed_gpt.py", {"/gpu:0": "cpu", "/gpu:1": "cpu"})
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
        export_placement(str(run_tf), "expert", "torch", tmp_path / "x.py")
    sys_modules = __import__("sys").modules
    sys_modules.pop("placed_gpt", None)
