"""Placements that leave the project: a run's placement of one method, per op, for TensorFlow or as JSON.

:func:`load_run` reads a finished experiment, from its run folder (``results.json``) or from MLflow
(the parent run's parameters and its ``results.json`` artifact); :func:`prepare_run_graph` prepares
the same graph again from the recorded source (the parameter ``source``; a benchmark's ``model``,
``size`` and grouper for runs recorded before it); :func:`op_placement` expands the method's
placement (its groups', colocation units' or ops' names -> device) to every op.

Formats (:func:`export_placement`):

* ``json``: ``{"model", "method", "cluster", "step_time_s", "devices": {op name: device}}``, op level
  for every method, group methods included;
* ``tf``: the step's TensorFlow ``GraphDef`` with each placed node's ``device`` field set (the
  other nodes, pruned from the step, keep none), which ``tf.graph_util.import_graph_def`` imports
  and a session runs (TensorFlow graphs only).
* ``torch``: a Python file defining ``PlacedStep``, the captured step's ``torch.fx`` code with every
  op on its device and a copy inserted wherever an op reads a tensor of another device
  (:func:`compgraph.torch_step.placed_module`), and ``INPUTS``, its arguments' names and devices
  (PyTorch steps only). It imports nothing of this project.

Device names are mapped to the target machine's: by default ``/cpu:K`` -> ``/device:CPU:K`` and
``/gpu:K`` -> ``/device:GPU:K`` (``tf``), ``/cpu:K`` -> ``cpu`` and ``/gpu:K`` -> ``cuda:K``
(``torch``), kept as the spec names them (``json``); a ``device_map``
(``--device-map /gpu:0=/device:GPU:2,...``) overrides any of them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

FORMATS = ("json", "tf", "torch")
"""What :func:`export_placement` writes."""


class ExportError(ValueError):
    """A run, method or device map that cannot be exported (the message says which and why)."""


def load_run(run: str, tracking_uri: str | None = None) -> tuple[dict, dict]:
    """``(params, results)`` of a finished experiment: its parameters (``model``, ``size``, ``cluster``,
    ``grouper``, ``source``...) and per method ``{"placement": {name: device}, "step_time_s", "oom"}``.

    Args:
        run: a run folder (holding ``results.json``) or an MLflow run id (the experiment's parent run).
        tracking_uri: the MLflow store of a run id.
    Raises:
        ExportError: neither a run folder nor a run of the store; a run without results.
    """
    path = Path(run)
    if (path / "results.json").is_file():
        data = json.loads((path / "results.json").read_text())
        return dict(data["record"]["params"]), dict(data["record"]["results"])
    if path.exists():
        raise ExportError(f"run {run!r}: a folder without results.json (not an experiment's run folder)")
    if not re.fullmatch(r"[0-9a-f]{32}", run):
        raise ExportError(f"run {run!r}: neither a run folder nor an MLflow run id (32 hex digits)")
    import mlflow
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    try:
        info = client.get_run(run)
    except Exception as exc:  # MlflowException: no such run in this store
        raise ExportError(f"run {run!r}: not in the MLflow store {tracking_uri or mlflow.get_tracking_uri()}: "
                          f"{' '.join(str(exc).split())[:200]}") from None
    try:
        results = mlflow.artifacts.load_dict(f"{info.info.artifact_uri}/results.json")["results"]
    except Exception as exc:
        raise ExportError(f"run {run!r}: no results.json artifact (a parent run of `placement experiment`?): "
                          f"{type(exc).__name__}") from None
    return dict(info.data.params), dict(results)


def prepare_run_graph(params: dict, cache_dir: str | Path | None = None):
    """The run's graph prepared again (:func:`compgraph.frontends.prepare_source`) from its recorded
    source, grouper, target number of groups and seed.

    Raises:
        ExportError: the run recorded no source and is no benchmark's.
    """
    from compgraph.frontends import prepare_source

    source = _source_of(params)
    target = params.get("num_groups_target")
    num_groups = int(target) if target not in (None, "none", "None") else None
    automatic = params.get("grouper") in ("metis", "fluid")
    return prepare_source(source, params.get("grouper"), num_groups if automatic else None,
                          int(params.get("seed", 0)), cache_dir if source.kind == "benchmark" else None)


def _source_of(params: dict):
    """The graph source a run recorded (its parameter ``source``; a benchmark's ``model`` and ``size``
    for runs recorded before it).

    Raises:
        ExportError: a user's graph recorded without its source.
    """
    from pydantic import TypeAdapter

    from compgraph.frontends import BenchmarkSource, GraphSource

    if params.get("source"):
        return TypeAdapter(GraphSource).validate_json(params["source"])
    if params.get("size") != "user":
        return BenchmarkSource(model=params["model"], size=params["size"])
    raise ExportError(f"run of {params.get('model')!r}: a user's graph recorded without its source (an older run); "
                      "run the experiment again to export it")


def op_placement(prepared, placement: dict[str, str], devices: list[str], method: str) -> list[str]:
    """``[num_ops]`` device names of ``placement`` (its groups', colocation units' or ops' names).

    Raises:
        ExportError: the names cover neither the groups, the colocation units nor the ops.
    """
    from tracking.timeline import op_devices

    ops = op_devices(prepared, placement, devices)
    if ops is None:
        raise ExportError(f"method {method!r}: its placement names neither the graph's groups, its colocation units "
                          "nor its ops (prepared again differently?)")
    return [devices[int(d)] for d in ops]


def parse_device_map(text: str | None) -> dict[str, str]:
    """``--device-map`` (``A=B,C=D``) as a dict.

    Raises:
        ExportError: an item without ``=`` or with an empty side.
    """
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        a, sep, b = item.partition("=")
        if not sep or not a.strip() or not b.strip():
            raise ExportError(f"--device-map: {item!r}: expected SPEC_DEVICE=TARGET_DEVICE, e.g. /gpu:0=/device:GPU:1")
        out[a.strip()] = b.strip()
    return out


def target_device(name: str, fmt: str, device_map: dict[str, str]) -> str:
    """The target machine's name of the spec device ``name`` for format ``fmt`` (module docstring)."""
    if name in device_map:
        return device_map[name]
    m = re.fullmatch(r"/(cpu|gpu):(\d+)", name)
    if m and fmt == "tf":
        return f"/device:{m.group(1).upper()}:{m.group(2)}"
    if m and fmt == "torch":
        return "cpu" if m.group(1) == "cpu" else f"cuda:{m.group(2)}"
    return name


def export_placement(run: str, method: str, fmt: str, out: str | Path, device_map: dict[str, str] | None = None,
                     tracking_uri: str | None = None, cache_dir: str | Path | None = None) -> dict:
    """Write ``method``'s placement of ``run`` in format ``fmt`` to ``out``.

    Returns:
        ``{"path", "format", "method", "ops", "devices": {target device: ops placed there}, "fetches"}``
        (``fetches``: the op names one step runs, for ``tf``).
    Raises:
        ExportError: an unknown format or method, a method that found no placement (OOM is exported;
            a failed method has none), a PyTorch step asked for ``tf``, a device map naming a device
            the cluster lacks; those of :func:`load_run` and :func:`prepare_run_graph`.
    """
    if fmt not in FORMATS:
        raise ExportError(f"--format: unknown {fmt!r}; valid: {', '.join(FORMATS)}")
    device_map = dict(device_map or {})
    params, results = load_run(run, tracking_uri)
    if method not in results:
        raise ExportError(f"--method: {method!r} is not in this run; its methods: {', '.join(results)}")
    placement = results[method].get("placement") or {}
    if not placement:
        raise ExportError(f"--method: {method!r} has no placement in this run")
    from cluster.spec import load_cluster

    try:
        spec = load_cluster(params["cluster"])
    except ValueError as exc:
        raise ExportError(f"run's cluster: {exc}") from None
    devices = list(spec.device_names)
    unknown = sorted(set(device_map) - set(devices))
    if unknown:
        raise ExportError(f"--device-map: {', '.join(unknown)} not a device of {spec.name} ({', '.join(devices)})")
    prepared = prepare_run_graph(params, cache_dir)
    names = op_placement(prepared, placement, devices, method)
    placed = {op.name: target_device(d, fmt, device_map) for op, d in zip(prepared.graph.ops, names)}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        out.write_text(json.dumps({"model": prepared.name, "method": method, "cluster": spec.name,
                                   "step_time_s": results[method].get("step_time_s"), "devices": placed}, indent=1) + "\n")
    elif fmt == "torch":
        from compgraph.frontends import tensorflow_source
        from compgraph.torch_step import capture_source, module_source, placed_module

        source = _source_of(params)
        if tensorflow_source(source):
            raise ExportError(f"--format torch: {prepared.name} is a TensorFlow graph; use tf or json")
        module, inputs = placed_module(capture_source(source), placed)
        header = (f"placement export: {prepared.name}, method {method} on {spec.name} "
                  f"(simulated step time {results[method].get('step_time_s')} s)")
        out.write_text(module_source(module, inputs, header))
    else:
        if prepared.graph_def is None:
            raise ExportError(f"--format tf: {prepared.name} is a PyTorch step, with no TensorFlow GraphDef; use json or torch")
        gd = type(prepared.graph_def)()
        gd.CopyFrom(prepared.graph_def)
        for node in gd.node:
            node.device = placed.get(node.name, "")
        out.write_bytes(gd.SerializeToString(deterministic=True))
    counts: dict[str, int] = {}
    for d in placed.values():
        counts[d] = counts.get(d, 0) + 1
    return {"path": str(out), "format": fmt, "method": method, "ops": len(placed), "devices": counts,
            "fetches": list(prepared.fetches)}
