"""Placements that leave the project: a run's placement of one method, per op, for TensorFlow or as JSON.

A run is a record, not a program: export never imports or calls anything a run record names.

* An experiment writes, beside ``results.json`` in its run folder and as its MLflow parent run's
  artifact, ``export.json`` ([`export_record`][tracking.export.export_record], [`ExportRecord`][tracking.export.ExportRecord]): the op names, a hash of
  the captured graph ([`graph_hash`][tracking.export.graph_hash]: op names and output shapes), the cluster spec itself
  (``spec.model_dump(mode="json")`` and its sha256) and every method's op-level placement.
* [`load_record`][tracking.export.load_record] reads it, from a run folder or by MLflow run id (an existing store only), at
  most [`MAX_RECORD_BYTES`][tracking.export.MAX_RECORD_BYTES], and checks it (lengths, device indices, the spec and its hash).
* ``json`` export reads that record only, and prepares no graph. ``tf`` and ``torch`` need the graph
  again: its source is the user's own (``source``: ``--model/--size``, ``--graph-def``, ``--torch``...
  on the command line), prepared and checked against the recorded graph hash; without one, or with
  another graph, they are refused. Run folders written before ``export.json`` are refused.
* [`check_output`][tracking.export.check_output] is done before any work: the output is not inside a run folder (a folder
  holding a ``results.json``) nor the out-dir's ``runs/``, ``mlartifacts/`` or store; not an existing
  file unless ``force``; its folder exists and is writable; not a symlink leading out of its folder.
  The file is written next to it and renamed over it (a symlink is replaced, never followed).

Formats ([`export_placement`][tracking.export.export_placement]):

* ``json``: ``{"model", "method", "cluster", "step_time_s", "devices": {op name: device}}``, op level
  for every method, group methods included;
* ``tf``: the step's TensorFlow ``GraphDef`` with each placed node's ``device`` field set (the
  other nodes, pruned from the step, keep none), which ``tf.graph_util.import_graph_def`` imports
  and a session runs (TensorFlow graphs only).
* ``torch``: a Python file defining ``PlacedStep``, the captured step's ``torch.fx`` code with every
  op on its device and a copy inserted wherever an op reads a tensor of another device
  ([`compgraph.torch_step.placed_module`][compgraph.torch_step.placed_module]), and ``INPUTS``, its arguments' names and devices
  (PyTorch steps only). It imports nothing of this project.

Device names are mapped to the target machine's: by default ``/cpu:K`` -> ``/device:CPU:K`` and
``/gpu:K`` -> ``/device:GPU:K`` (``tf``), ``/cpu:K`` -> ``cpu`` and ``/gpu:K`` -> ``cuda:K``
(``torch``), kept as the spec names them (``json``); a ``device_map``
(``--device-map /gpu:0=/device:GPU:2,...``) overrides any of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, model_validator

def export_formats() -> tuple[str, ...]:
    """What [`export_placement`][tracking.export.export_placement] writes: ``json`` (every graph's) and each registered front
    end's formats ([`compgraph.frontends.Frontend`][compgraph.frontends.Frontend]'s ``exports``: ``tf``, ``torch``, a plugin's)."""
    from compgraph.frontends import FRONTENDS

    found: dict[str, None] = {"json": None}
    for fe in FRONTENDS.values():
        exports = fe.exports
        if callable(exports):  # depends on the source (the benchmarks): the formats of every framework
            continue
        found.update(dict.fromkeys(exports))
    return tuple(found)


FORMATS = export_formats()
"""What [`export_placement`][tracking.export.export_placement] writes (the front ends registered when this module was imported)."""

EXPORT_FILE = "export.json"
"""The record of what export needs, in a run folder and as the MLflow parent run's artifact."""

RESULTS_FILE = "results.json"
"""What makes a folder a run folder ([`tracking.live`][tracking.live])."""

MAX_RECORD_BYTES = 64 * 1024 * 1024
"""The largest record export reads (bytes; 64 MiB)."""

RECORD_VERSION = 1


class ExportError(ValueError):
    """A run, method, source, output or device map that cannot be exported (the message says which and why)."""


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def graph_hash(graph) -> str:
    """sha256 (hex) of a canonical JSON of ``[[op name, [output shape, ...]], ...]`` in the graph's op
    order (a shape as a list of ints, ``null`` when unknown): the same captured graph gives the same hash."""
    ops = [[op.name, [None if s is None else [int(d) for d in s] for s in op.output_shapes]] for op in graph.ops]
    return hashlib.sha256(_canonical(ops)).hexdigest()


def spec_hash(spec_json: dict) -> str:
    """sha256 (hex) of a canonical JSON (sorted keys) of a cluster spec's ``model_dump(mode="json")``."""
    return hashlib.sha256(_canonical(spec_json)).hexdigest()


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecordedCluster(_Record):
    """The cluster a run placed on: its name, its spec (``ClusterSpec.model_dump(mode="json")``) and
    the spec's sha256 ([`spec_hash`][tracking.export.spec_hash])."""

    name: str
    spec: dict
    sha256: str


class RecordedMethod(_Record):
    """One method's outcome: ``devices``, ``[num_ops]`` indices into the spec's devices (``None``: its
    placement names neither the groups, the colocation units nor the ops, or it found none);
    ``step_time_s`` (s, ``None`` when it failed) and ``oom``."""

    devices: list[int] | None = None
    step_time_s: float | None = None
    oom: bool = False


class ExportRecord(_Record):
    """``export.json``: everything ``placement export --format json`` needs, as data.

    Attributes:
        version: [`RECORD_VERSION`][tracking.export.RECORD_VERSION].
        model, size: the graph's name and size (``user`` for a user's graph), for the output only.
        framework: the front end's framework: ``tf`` (the step has a TensorFlow GraphDef), ``torch`` (a
            PyTorch step) or a plugin's ([`compgraph.frontends.framework_of`][compgraph.frontends.framework_of]).
        ops: the op names, in the graph's order.
        graph_sha256: [`graph_hash`][tracking.export.graph_hash] of the graph the run placed.
        cluster: [`RecordedCluster`][tracking.export.RecordedCluster].
        methods: method -> [`RecordedMethod`][tracking.export.RecordedMethod].
    Raises:
        pydantic.ValidationError: a placement of another length than ``ops``, a device index out of
            range, a spec that is not a valid cluster spec or does not match its hash.
    """

    version: int
    model: str
    size: str
    framework: str
    ops: list[str]
    graph_sha256: str
    cluster: RecordedCluster
    methods: dict[str, RecordedMethod]
    _spec: object = PrivateAttr(None)

    @model_validator(mode="after")
    def _check(self) -> "ExportRecord":
        from cluster.spec import ClusterSpec

        if self.version != RECORD_VERSION:
            raise ValueError(f"version {self.version}: this placement export reads version {RECORD_VERSION}")
        if spec_hash(self.cluster.spec) != self.cluster.sha256:
            raise ValueError("cluster.spec does not match cluster.sha256")
        try:
            self._spec = ClusterSpec.model_validate(self.cluster.spec)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ValueError(f"cluster.spec.{'.'.join(str(x) for x in err['loc'])}: {err['msg']}") from None
        num_devices = len(self.device_names)
        for method, row in self.methods.items():
            if row.devices is None:
                continue
            if len(row.devices) != len(self.ops):
                raise ValueError(f"methods.{method}: {len(row.devices)} devices for {len(self.ops)} ops")
            if row.devices and not 0 <= min(row.devices) <= max(row.devices) < num_devices:
                raise ValueError(f"methods.{method}: a device index outside 0..{num_devices - 1}")
        return self

    @property
    def spec(self):
        """The recorded [`cluster.spec.ClusterSpec`][cluster.spec.ClusterSpec] (validated with the record)."""
        return self._spec

    @property
    def device_names(self) -> list[str]:
        """The recorded spec's device names, which the placements index."""
        return list(self._spec.device_names)  # type: ignore[attr-defined]


def _framework(prepared) -> str:
    if getattr(prepared, "framework", None):  # set by its front end (compgraph.frontends.prepare_source)
        return prepared.framework
    bench = prepared.benchmark
    if getattr(prepared, "torch_source", None) is not None or (bench is not None and bench.framework == "torch"):
        return "torch"
    return "tf"


def export_record(prepared, spec, results: dict[str, dict]) -> dict:
    """The [`ExportRecord`][tracking.export.ExportRecord] of an experiment, as JSON-able data.

    Args:
        prepared: the experiment's [`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph].
        spec: its [`cluster.spec.ClusterSpec`][cluster.spec.ClusterSpec].
        results: method -> its row (``placement``: names -> device names, ``step_time_s`` in s, ``oom``).
    """
    from tracking.timeline import op_devices

    devices = list(spec.device_names)
    spec_json = spec.model_dump(mode="json")
    methods = {}
    for method, row in results.items():
        ops = op_devices(prepared, row.get("placement") or {}, devices)
        step = row.get("step_time_s")
        methods[method] = {"devices": None if ops is None else [int(d) for d in ops],
                           "step_time_s": None if step is None else float(step), "oom": bool(row.get("oom"))}
    return {"version": RECORD_VERSION, "model": prepared.name, "size": prepared.size, "framework": _framework(prepared),
            "ops": [op.name for op in prepared.graph.ops], "graph_sha256": graph_hash(prepared.graph),
            "cluster": {"name": spec.name, "spec": spec_json, "sha256": spec_hash(spec_json)}, "methods": methods}


def write_export_record(run_dir: str | Path, prepared, spec, results: dict[str, dict]) -> Path:
    """Write [`export_record`][tracking.export.export_record] as ``<run_dir>/export.json``; returns its path."""
    path = Path(run_dir) / EXPORT_FILE
    path.write_text(json.dumps(export_record(prepared, spec, results), separators=(",", ":")) + "\n")
    return path


def read_limited(path: str | Path, what: str, limit: int = MAX_RECORD_BYTES) -> bytes:
    """The bytes of the regular file ``path``, refused past ``limit`` bytes (checked before and while reading).

    Raises:
        ExportError: not a regular file, unreadable, or larger than ``limit``.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ExportError(f"{what} {path}: not a regular file")
            if st.st_size > limit:
                raise ExportError(f"{what} {path}: {st.st_size:,} bytes, more than the {limit:,} "
                                  f"({limit / 2**20:.0f} MiB) export reads")
            data = f.read(limit + 1)
    except OSError as exc:
        raise ExportError(f"{what} {path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if len(data) > limit:
        raise ExportError(f"{what} {path}: more than the {limit:,} bytes ({limit / 2**20:.0f} MiB) export reads")
    return data


def parse_record(data: bytes, where: str) -> ExportRecord:
    """An [`ExportRecord`][tracking.export.ExportRecord] from ``export.json``'s bytes.

    Raises:
        ExportError: not JSON, or not a valid record (the first bad field named).
    """
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ExportError(f"{where}: not JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
    try:
        return ExportRecord.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise ExportError(f"{where}: not a valid export record: {loc}: {err['msg'][:200]}") from None
    except (ValueError, RecursionError) as exc:  # the recorded spec, validated in the record's check
        raise ExportError(f"{where}: not a valid export record: {str(exc)[:200]}") from None


_PREDATES = "predates the recorded placements (it has no export.json): run the experiment again to export it"


def load_record(run: str, tracking_uri: str | None = None) -> ExportRecord:
    """The [`ExportRecord`][tracking.export.ExportRecord] of a finished experiment: ``<run>/export.json`` of a run folder, or the
    ``export.json`` artifact of the MLflow parent run ``run`` (a 32-hex-digit id) in ``tracking_uri``,
    an existing store only (a SQLite file that is not there is refused, never created).

    Raises:
        ExportError: neither a run folder nor a run of the store; a run recorded before ``export.json``;
            a record too large ([`MAX_RECORD_BYTES`][tracking.export.MAX_RECORD_BYTES]), malformed or invalid.
    """
    path = Path(run)
    if path.is_dir():
        if not (path / RESULTS_FILE).is_file():
            raise ExportError(f"run {run!r}: a folder without {RESULTS_FILE} (not an experiment's run folder)")
        if not (path / EXPORT_FILE).exists():
            raise ExportError(f"run {run!r} {_PREDATES}")
        return parse_record(read_limited(path / EXPORT_FILE, "run record"), f"run record {path / EXPORT_FILE}")
    if path.exists():
        raise ExportError(f"run {run!r}: a file, not a run folder nor an MLflow run id")
    if not re.fullmatch(r"[0-9a-f]{32}", run):
        raise ExportError(f"run {run!r}: neither a run folder nor an MLflow run id (32 hex digits)")
    return _load_mlflow_record(run, tracking_uri)


def _load_mlflow_record(run: str, tracking_uri: str | None) -> ExportRecord:
    if not tracking_uri:
        raise ExportError(f"run {run!r}: an MLflow run id needs a store (--out-dir or --tracking-uri)")
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri[len("sqlite:///"):])
        if not db.is_file():
            raise ExportError(f"run {run!r}: no MLflow store at {db} (nothing created; give --out-dir or --tracking-uri "
                              "of the experiment's store)")
    else:
        from tracking.store import TrackingUnavailable, check_tracking

        try:
            check_tracking(tracking_uri)
        except TrackingUnavailable as exc:
            raise ExportError(str(exc)) from None
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    try:
        client.get_run(run)
    except Exception as exc:  # MlflowException: no such run in this store
        raise ExportError(f"run {run!r}: not in the MLflow store {tracking_uri}: {' '.join(str(exc).split())[:200]}") from None
    where = f"run {run!r}'s {EXPORT_FILE} artifact"
    try:
        files = {f.path: f for f in client.list_artifacts(run)}
    except Exception as exc:
        raise ExportError(f"run {run!r}: its artifacts cannot be listed: {type(exc).__name__}") from None
    info = files.get(EXPORT_FILE)
    if info is None or info.is_dir:
        raise ExportError(f"run {run!r} {_PREDATES}")
    if info.file_size is not None and info.file_size > MAX_RECORD_BYTES:
        raise ExportError(f"{where}: {info.file_size:,} bytes, more than the {MAX_RECORD_BYTES:,} "
                          f"({MAX_RECORD_BYTES / 2**20:.0f} MiB) export reads")
    with tempfile.TemporaryDirectory(prefix="placement-export-") as tmp:
        try:
            local = client.download_artifacts(run, EXPORT_FILE, tmp)
        except Exception as exc:
            raise ExportError(f"{where}: cannot be downloaded: {type(exc).__name__}") from None
        return parse_record(read_limited(local, "run record"), where)


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


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_output(out: str | Path, force: bool = False, run: str | None = None,
                 out_dir: str | Path | None = None) -> Path:
    """Refuse an output export may not write, before any work (module docstring).

    Args:
        out: the file to write.
        force: an existing file (or a symlink within its folder) may be replaced.
        run: the run being exported (a folder: nothing is written inside it).
        out_dir: the experiments' out-dir, whose ``runs/``, ``mlartifacts/`` and ``mlflow.db`` are off limits.
    Returns:
        ``out`` as a path.
    Raises:
        ExportError: one line naming ``--output`` and why.
    """
    out = Path(out)
    name = f"--output {str(out)!r}"
    if out.name in ("", ".", ".."):
        raise ExportError(f"{name}: not a file name")
    parent = out.parent
    if not parent.is_dir():
        raise ExportError(f"{name}: its folder {str(parent)!r} " + ("is not a folder" if parent.exists() else "does not exist"))
    folder = parent.resolve()
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ExportError(f"{name}: its folder {str(parent)!r} is not writable")
    if out.is_symlink():
        target = Path(os.path.realpath(out))
        if target.parent != folder:
            raise ExportError(f"{name}: a symlink to {str(target)!r}, outside its folder {str(parent)!r}; refused")
    if out.is_dir():
        raise ExportError(f"{name}: a folder; give a file path")
    for d in (folder, *folder.parents):
        if (d / RESULTS_FILE).is_file():
            raise ExportError(f"{name}: inside the run folder {str(d)!r}; write it elsewhere")
    if run is not None and Path(run).is_dir() and _within(folder, Path(run).resolve()):
        raise ExportError(f"{name}: inside the run being exported; write it elsewhere")
    if out_dir is not None:
        root = Path(out_dir).resolve()
        for sub in ("runs", "mlartifacts"):
            if _within(folder, root / sub):
                raise ExportError(f"{name}: inside {str(root / sub)!r}, where the experiments' records are; "
                                  "write it elsewhere")
        if folder / out.name == root / "mlflow.db":
            raise ExportError(f"{name}: the MLflow store; write it elsewhere")
    if (out.exists() or out.is_symlink()) and not force:
        raise ExportError(f"{name}: the file exists; give --force to replace it")
    return out


def _write(out: Path, data: bytes) -> None:
    """Write ``data`` next to ``out`` and rename it over ``out`` (a symlink there is replaced, not followed)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_WORDS = {"tf": "a TensorFlow graph", "torch": "a PyTorch step"}


def _words(framework: str) -> str:
    return _WORDS.get(framework, f"a {framework} graph")


def _exported(record: ExportRecord, fmt: str, source, cache_dir, placed: dict[str, str], header: str):
    """``fmt``'s file of the user's ``source`` placed as ``placed`` (op -> device), written by the source's front
    end ([`compgraph.frontends.export_formats`][compgraph.frontends.export_formats]) and checked against the record.

    Raises:
        ExportError: no source; a front end without ``fmt``; a source of another framework; a graph other than
            the recorded one.
    """
    if source is None:
        raise ExportError(f"--format {fmt}: give the graph's source on the command line (--model/--size, --graph-def, "
                          "--saved-model, --keras or --torch): export prepares nothing a run record names")
    from compgraph.frontends import export_formats as source_formats
    from compgraph.frontends import framework_of

    from compgraph.frontends import FRONTENDS

    recorded = [f for fe in FRONTENDS.values() if not callable(fe.exports) and fe.framework == record.framework
                for f in fe.exports]  # the formats of the recorded graph's framework
    formats, framework = source_formats(source), framework_of(source)
    if fmt not in recorded:
        no_tf = ", with no TensorFlow GraphDef" if fmt == "tf" else ""
        raise ExportError(f"--format {fmt}: {record.model} is {_words(record.framework)}{no_tf}; use "
                          f"{' or '.join([*dict.fromkeys(recorded), 'json'])}")
    if framework != record.framework or fmt not in formats:
        raise ExportError(f"--format {fmt}: the source given is {_words(framework)}, but {record.model} is "
                          f"{_words(record.framework)}")
    try:
        made = formats[fmt](source, placed, header, cache_dir)
    except ValueError as exc:  # UserGraphError, TorchStepError, an unknown model or size
        raise ExportError(f"the source given: {exc}") from None
    given = graph_hash(made.graph)
    if given != record.graph_sha256:
        raise ExportError(f"the source given is not the graph this run placed (graph hash {given[:12]} "
                          f"!= recorded {record.graph_sha256[:12]}: other ops or shapes)")
    return made


def export_placement(run: str, method: str, fmt: str, out: str | Path, device_map: dict[str, str] | None = None,
                     tracking_uri: str | None = None, cache_dir: str | Path | None = None, source=None,
                     force: bool = False, out_dir: str | Path | None = None) -> dict:
    """Write ``method``'s placement of ``run`` in format ``fmt`` to ``out``.

    Args:
        run: a run folder or the experiment's MLflow run id ([`load_record`][tracking.export.load_record]).
        source: the graph source the user gave (a [`compgraph.frontends.GraphSource`][compgraph.frontends.GraphSource]), for ``tf``
            and ``torch`` only; checked against the recorded graph hash.
        force: replace an existing ``out``.
        out_dir: the experiments' out-dir, whose records ``out`` may not touch ([`check_output`][tracking.export.check_output]).
    Returns:
        ``{"path", "format", "method", "ops", "devices": {target device: ops placed there}, "fetches"}``
        (``fetches``: the op names one step runs, for ``tf``).
    Raises:
        ExportError: an output refused ([`check_output`][tracking.export.check_output], before anything is read); an unknown format
            or method, a method that found no placement (OOM is exported; a failed method has none), a
            device map naming a device the cluster lacks; a source for ``json``, none or another graph
            for ``tf``/``torch``, a PyTorch step asked for ``tf``; those of [`load_record`][tracking.export.load_record].
    """
    if fmt not in export_formats():
        raise ExportError(f"--format: unknown {fmt!r}; valid: {', '.join(export_formats())}")
    out = check_output(out, force, run, out_dir)
    if fmt == "json" and source is not None:
        raise ExportError(f"--format json reads the run's record only; a graph source is for "
                          f"{' and '.join(export_formats()[1:])}")
    device_map = dict(device_map or {})
    record = load_record(run, tracking_uri)
    if method not in record.methods:
        raise ExportError(f"--method: {method!r} is not in this run; its methods: {', '.join(record.methods)}")
    row = record.methods[method]
    if row.devices is None:
        raise ExportError(f"--method: {method!r} has no op-level placement in this run")
    devices = record.device_names
    unknown = sorted(set(device_map) - set(devices))
    if unknown:
        raise ExportError(f"--device-map: {', '.join(unknown)} not a device of {record.cluster.name} ({', '.join(devices)})")
    placed = {op: target_device(devices[d], fmt, device_map) for op, d in zip(record.ops, row.devices)}
    fetches: list[str] = []
    if fmt == "json":
        _write(out, (json.dumps({"model": record.model, "method": method, "cluster": record.cluster.name,
                                 "step_time_s": row.step_time_s, "devices": placed}, indent=1) + "\n").encode())
    else:
        header = (f"placement export: {record.model}, method {method} on {record.cluster.name} "
                  f"(simulated step time {row.step_time_s} s)")
        made = _exported(record, fmt, source, cache_dir, placed, header)
        _write(out, made.data)
        fetches = list(made.fetches)
    counts: dict[str, int] = {}
    for d in placed.values():
        counts[d] = counts.get(d, 0) + 1
    return {"path": str(out), "format": fmt, "method": method, "ops": len(placed), "devices": counts,
            "fetches": fetches}
