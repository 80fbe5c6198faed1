"""One given placement measured: what ``placement evaluate`` computes.

A placement comes from outside the project's runs: an op -> device JSON file as ``placement export
--format json`` writes it ([`tracking.export`][tracking.export]: ``{"model", "method", "cluster", "step_time_s",
"devices": {op name: device}}``; only ``devices`` is read), or ``single:DEVICE`` (every op on one
device). [`op_devices`][tracking.evaluate.op_devices] checks it against the prepared graph and the cluster (every op placed,
no unknown op, no unknown device), [`unit_placement`][tracking.evaluate.unit_placement] turns it into a placement of the
TensorFlow colocation units ([`compgraph.grouping.colocation_grouping`][compgraph.grouping.colocation_grouping]; a placement that splits
a unit is refused: TensorFlow would not run it) and [`evaluate_placement`][tracking.evaluate.evaluate_placement] measures that in one
environment ([`cluster.factory.make_environment`][cluster.factory.make_environment]). Every environment simulates or runs the
op graph with each op on its unit's device, so the step time equals the one an experiment reports
for the same op placement.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

MAX_PLACEMENT_BYTES = 200_000_000
"""Largest placement file read (bytes). ``placement export --format json`` writes about 60-120 bytes
per op (a 1,616-op rnnlm small: about 100 kB), so this holds graphs of over a million ops."""

SINGLE_PREFIX = "single:"
"""``--placement single:DEVICE``: every op on ``DEVICE``."""

PER_DEVICE_FIELDS = ("compute_s", "transfer_s", "peak_memory_bytes", "peak_memory_measured", "devices")
"""Measurement fields that are one value per cluster device, written as ``{device name: value}``."""

QUOTE = 120
"""Characters of a name quoted in a message at most."""


class EvaluateError(ValueError):
    """A placement that cannot be evaluated (the one-line message names the file, op or device and why)."""


def _q(name: object) -> str:
    text = str(name)
    return repr(text if len(text) <= QUOTE else text[:QUOTE] + "...")


def _more(n: int, what: str) -> str:
    return f" ({n} more {what})" if n > 0 else ""


def load_placement_file(path: str | Path, max_bytes: int = MAX_PLACEMENT_BYTES) -> dict[str, str]:
    """The op -> device map of a placement file (``{"devices": {op name: device name}}``, the JSON of
    ``placement export --format json``; its other keys are ignored), read only if it is at most
    ``max_bytes`` bytes.

    Raises:
        EvaluateError: missing, unreadable, too large, not JSON, or not of that shape (one line naming the file).
    """
    return load_placement_record(path, max_bytes)[0]


def load_placement_record(path: str | Path, max_bytes: int = MAX_PLACEMENT_BYTES) -> tuple[dict[str, str], dict[str, str]]:
    """[`load_placement_file`][tracking.evaluate.load_placement_file]'s op -> device map, and the file's own
    ``model`` and ``cluster`` where it names them as strings (``placement export --format json`` does).

    Raises:
        EvaluateError: as [`load_placement_file`][tracking.evaluate.load_placement_file].
    """
    path = Path(path)
    where = f"--placement {path}"
    try:
        if not path.is_file():
            raise EvaluateError(f"{where}: {'a folder, not a file' if path.is_dir() else 'no such file'} "
                                f"(give an op -> device JSON file of `placement export --format json`, or single:DEVICE)")
        size = path.stat().st_size
        if size > max_bytes:
            raise EvaluateError(f"{where}: {size:,} bytes, more than the {max_bytes:,} allowed")
        with path.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise EvaluateError(f"{where}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > max_bytes:
        raise EvaluateError(f"{where}: more than the {max_bytes:,} bytes allowed")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EvaluateError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("devices"), dict):
        got = type(data).__name__ if not isinstance(data, dict) else f"an object with keys {', '.join(map(_q, list(data)[:5]))}"
        raise EvaluateError(f'{where}: expected {{"devices": {{op name: device name}}}} (`placement export '
                            f"--format json`), got {got}")
    devices = data["devices"]
    bad = [(k, v) for k, v in devices.items() if not isinstance(v, str)]
    if bad:
        op, value = bad[0]
        raise EvaluateError(f"{where}: op {_q(op)}: device {json.dumps(value)[:QUOTE]} is not a device name (a string)"
                            + _more(len(bad) - 1, "ops likewise"))
    if not devices:
        raise EvaluateError(f'{where}: "devices" is empty; it must place every op of the graph')
    return dict(devices), {k: data[k] for k in ("model", "cluster") if isinstance(data.get(k), str)}


def origin_note(path: str, origin: dict[str, str], model: str, cluster: str) -> str | None:
    """A note when a placement file says it was exported for another model or cluster than the one it is
    evaluated on (allowed: the same op names may run on another cluster), else ``None``."""
    other = [f"{key} {origin[key]!r}" for key, here in (("model", model), ("cluster", cluster))
             if key in origin and origin[key] != here]
    if not other:
        return None
    return f"note: {path} was exported for {' and '.join(other)}; evaluated here on model {model!r}, cluster {cluster!r}"


def read_placement(placement: str) -> tuple[dict[str, str] | str, dict[str, str]]:
    """``--placement``: the op -> device map of a file and the ``model``/``cluster`` it names
    ([`load_placement_record`][tracking.evaluate.load_placement_record]), or the device name of ``single:DEVICE`` and ``{}``.

    Raises:
        EvaluateError: ``single:`` without a device; those of [`load_placement_file`][tracking.evaluate.load_placement_file].
    """
    if placement.startswith(SINGLE_PREFIX):
        device = placement[len(SINGLE_PREFIX):].strip()
        if not device:
            raise EvaluateError("--placement single:DEVICE: no device given, e.g. single:/gpu:0")
        return device, {}
    return load_placement_record(placement)


def check_device(device: str, device_names: list[str], cluster: str = "the cluster") -> None:
    """Check the device of ``single:DEVICE`` (before the graph is prepared).

    Raises:
        EvaluateError: ``device`` is not one of ``device_names`` (lists them).
    """
    if device not in device_names:
        raise EvaluateError(f"--placement single:{device}: {_q(device)} is not a device of {cluster}; "
                            f"valid: {', '.join(device_names)}")


def op_devices(graph, device_names: list[str], placement: dict[str, str] | str, cluster: str = "the cluster") -> np.ndarray:
    """``[num_ops]`` device indices (into ``device_names``) of an op -> device map, or of every op on one
    device (``placement`` a device name).

    Raises:
        EvaluateError: an op the graph lacks, an op the map leaves out, a device the cluster lacks (the
            first one named, with how many more).
    """
    index = {d: k for k, d in enumerate(device_names)}
    valid = ", ".join(device_names)
    if isinstance(placement, str):
        check_device(placement, device_names, cluster)
        return np.full(graph.num_ops, index[placement], dtype=np.int64)
    unknown = [name for name in placement if name not in graph.index]
    if unknown:
        raise EvaluateError(f"--placement: op {_q(unknown[0])} is not in the graph ({graph.num_ops} ops)"
                            + _more(len(unknown) - 1, "unknown ops") + "; was it exported for another model or size?")
    missing = [op.name for op in graph.ops if op.name not in placement]
    if missing:
        raise EvaluateError(f"--placement: op {_q(missing[0])} of the graph has no device"
                            + _more(len(missing) - 1, "ops without one") + "; the file must place every op")
    bad = [(op.name, placement[op.name]) for op in graph.ops if placement[op.name] not in index]
    if bad:
        names = sorted({d for _, d in bad})
        raise EvaluateError(f"--placement: op {_q(bad[0][0])} is on {_q(bad[0][1])}, not a device of {cluster}"
                            + _more(len(bad) - 1, f"ops on unknown devices ({', '.join(map(_q, names[:5]))})")
                            + f"; valid: {valid}")
    return np.array([index[placement[op.name]] for op in graph.ops], dtype=np.int64)


def unit_placement(graph, units, ops: np.ndarray, device_names: list[str]) -> np.ndarray:
    """``[num_units]`` device indices of the op placement ``ops`` (``[num_ops]``) over the grouping ``units``
    (the TensorFlow colocation units).

    Raises:
        EvaluateError: an op on another device than its unit's first op (named, with the number of
            units split so).
    """
    og = np.asarray(units.op_group, dtype=np.int64)
    out = np.full(units.num_groups, -1, dtype=np.int64)
    first = np.full(units.num_groups, -1, dtype=np.int64)
    split: dict[int, tuple[int, int]] = {}
    for i, (g, d) in enumerate(zip(og.tolist(), np.asarray(ops).tolist())):
        if out[g] < 0:
            out[g], first[g] = d, i
        elif out[g] != d and g not in split:
            split[g] = (int(first[g]), i)
    if split:
        a, b = next(iter(split.values()))
        raise EvaluateError(
            f"--placement: op {_q(graph.ops[b].name)} is on {device_names[int(ops[b])]} but op {_q(graph.ops[a].name)} "
            f"of its colocation unit is on {device_names[int(ops[a])]}; TensorFlow runs a colocation unit on one device"
            + _more(len(split) - 1, "units split"))
    return out


def _plain(value):
    """``value`` with numpy scalars and arrays as Python numbers and lists (JSON-ready)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def measurement_fields(measurement, device_names: list[str]) -> dict:
    """Every field of a [`cluster.environment.Measurement`][cluster.environment.Measurement] (or a subclass: a real environment's step
    times and spread) as JSON-ready values; [`PER_DEVICE_FIELDS`][tracking.evaluate.PER_DEVICE_FIELDS] as ``{device name: value}``."""
    if dataclasses.is_dataclass(measurement) and not isinstance(measurement, type):
        fields = dataclasses.asdict(measurement)
    else:
        fields = dict(vars(measurement))
    out = {}
    for key, value in fields.items():
        value = _plain(value)
        if key in PER_DEVICE_FIELDS and isinstance(value, list) and len(value) in (0, len(device_names)):
            value = dict(zip(device_names, value))  # {} when the environment does not report it
        out[key] = value
    return out


def evaluate_placement(prepared, spec, env_kind: str, placement: dict[str, str] | str,
                       options: dict | None = None) -> dict:
    """Measure one op placement of ``prepared`` on ``spec`` in the environment ``env_kind``.

    Args:
        prepared: a [`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph].
        spec: the cluster ([`cluster.spec.ClusterSpec`][cluster.spec.ClusterSpec]).
        env_kind: ``sim``, ``real`` or ``grappler`` ([`cluster.environment.ENVIRONMENTS`][cluster.environment.ENVIRONMENTS]).
        placement: op name -> device name (every op of the graph), or one device name for every op.
        options: [`cluster.environment.EnvOptions`][cluster.environment.EnvOptions] fields, passed as given (``None``: the defaults).
    Returns:
        the measurement's fields ([`measurement_fields`][tracking.evaluate.measurement_fields]: ``step_time_s`` in seconds or ``None`` on
        OOM, ``oom``, ``peak_memory_bytes``, ``compute_s`` and ``transfer_s`` per device name, and a
        real environment's step times and spread), then ``ops``, ``units`` (colocation units),
        ``devices_used`` (how many devices hold an op), ``ops_per_device`` and ``measure_seconds``
        (wall-clock seconds the measurement took).
    Raises:
        EvaluateError: see [`op_devices`][tracking.evaluate.op_devices] and [`unit_placement`][tracking.evaluate.unit_placement].
        ValueError: the environment refuses its options, the graph or the placement (one line).
    """
    from cluster.factory import make_environment
    from compgraph.grouping import colocation_grouping

    names = list(spec.device_names)
    ops = op_devices(prepared.graph, names, placement, repr(spec.name))
    units = colocation_grouping(prepared.graph)
    per_unit = unit_placement(prepared.graph, units, ops, names)
    env = make_environment(env_kind, prepared, spec, options, grouping=units)
    start = time.perf_counter()
    measurement = env.measure(per_unit)
    seconds = time.perf_counter() - start
    counts = np.bincount(ops, minlength=len(names))
    return {**measurement_fields(measurement, names), "ops": int(prepared.graph.num_ops), "units": units.num_groups,
            "devices_used": int((counts > 0).sum()),
            "ops_per_device": {d: int(n) for d, n in zip(names, counts) if n},
            "measure_seconds": seconds}


def _bytes(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def summary_line(result: dict) -> str:
    """One line: the graph, cluster, environment, placement, step time (with the real steps' spread) and
    the devices used with their peak memory."""
    if result.get("failure"):
        step = f"failed: {' '.join(str(result['failure']).split())[:200]}"
    elif result.get("oom"):
        sim = result.get("simulated_step_time_s")
        step = "OOM" + (f" (simulated step {sim:.5f} s)" if sim is not None else "")
    elif result.get("step_time_s") is None:
        step = "no step time"
    else:
        step = f"step time {result['step_time_s']:.5f} s"
    times = result.get("step_times_s")
    if times:
        spread = next((f", {label} {result[k]:.5f} s" for k, label in (("iqr_s", "IQR"), ("std_s", "std"))
                       if result.get(k) is not None), "")
        step += f" ({len(times)} timed steps{spread})"
    peak = result.get("peak_memory_bytes") or {}
    read = result.get("peak_memory_measured") or {}  # a PyTorch step on CPUs reads no peak memory
    used = "; ".join(f"{d}: {n} ops" + (f", peak {_bytes(peak[d])}" if isinstance(peak, dict) and d in peak
                                       and (not isinstance(read, dict) or read.get(d, True)) else "")
                     for d, n in result.get("ops_per_device", {}).items())
    n = result["devices_used"]
    graph = f"{result.get('model')}" + (f" ({result['size']})" if result.get("size") else "")
    return (f"{graph}, {result['ops']} ops, {result['units']} units on {result['cluster']} [{result['env']}], "
            f"placement {result['placement']}: {step}; {n} device{'s' if n != 1 else ''} used ({used})")
