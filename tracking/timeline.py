"""The per-device timeline of one placement: which op ran where and when, and which tensor was
on which link, in one simulated step ([`cluster.simulator.Simulator.run`][cluster.simulator.Simulator.run] with
``timeline=True``).

* [`simulate_timeline`][tracking.timeline.simulate_timeline]: a named placement (an evaluation row's ``placement``: group,
  colocation-unit or op name -> device name) run through the reference simulator.
* [`chrome_trace`][tracking.timeline.chrome_trace]: the timeline in Chrome's Trace Event Format (``"ph": "X"`` complete
  events, microseconds), which ``chrome://tracing`` and https://ui.perfetto.dev open: one
  process for the devices (a thread per device) and one for the links (a thread per direction).
* [`tracking.plots.plot_timeline`][tracking.plots.plot_timeline] draws it as a Gantt chart.
"""

from __future__ import annotations

import numpy as np

from cluster.simulator import SimResult, Simulator


def op_devices(prepared, placement: dict[str, str], devices: list[str]) -> np.ndarray | None:
    """``[num_ops]`` device indices of a named placement, or ``None`` if its names are not all
    known: the prepared groups', the colocation units' (a learner that places its own units) or
    the ops' own (an op-level placer such as m_etf)."""
    index = {d: k for k, d in enumerate(devices)}
    if not placement or any(d not in index for d in placement.values()):
        return None
    graph = prepared.graph
    if len(placement) == graph.num_ops and all(op.name in placement for op in graph.ops):
        # an op-level placement first: a unit's or group's name is often its first op's name
        return np.array([index[placement[op.name]] for op in graph.ops], dtype=np.int64)
    candidates = [prepared.grouping]
    try:
        from compgraph.grouping import colocation_grouping

        candidates.append(colocation_grouping(graph))
    except Exception:  # noqa: BLE001 (no colocation units: only the other namings apply)
        pass
    for grouping in candidates:
        if all(name in placement for name in grouping.names):
            per_group = np.array([index[placement[name]] for name in grouping.names], dtype=np.int64)
            return per_group[np.asarray(grouping.op_group)]
    if all(op.name in placement for op in graph.ops):
        return np.array([index[placement[op.name]] for op in graph.ops], dtype=np.int64)
    return None


def simulate_timeline(prepared, spec, placement: dict[str, str]) -> SimResult | None:
    """One simulated step of ``placement`` (names -> device names, [`op_devices`][tracking.timeline.op_devices]) on ``spec``
    with its timeline (roofline op times); ``None`` when the names do not cover the graph."""
    ops = op_devices(prepared, placement, list(spec.device_names))
    if ops is None:
        return None
    return Simulator(prepared.graph, spec).run(ops, timeline=True)


def chrome_trace(result: SimResult, graph, spec, label: str = "") -> dict:
    """The timeline of ``result`` as a Chrome trace (Trace Event Format, JSON-able).

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``: a complete
        event (``ph`` ``X``, ``ts`` and ``dur`` in microseconds) per op run (process 1, thread =
        device index; ``cat`` the op type) and per transfer (process 2, one thread per link
        direction; ``args.bytes``), with metadata events naming processes and threads.
        ``otherData`` has the step time (s), the peak memory per device (bytes) and ``label``.
    Raises:
        ValueError: ``result`` has no timeline.
    """
    if result.timeline is None:
        raise ValueError("result: has no timeline; run the simulator with timeline=True")
    devices = list(spec.device_names)
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "devices"}},
                          {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "links"}}]
    events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": k, "args": {"name": d}} for k, d in enumerate(devices)]
    links: dict[tuple[int, int], int] = {}
    for step in result.timeline:
        ts, dur = step.start_s * 1e6, (step.end_s - step.start_s) * 1e6
        op = graph.ops[step.op]
        if step.kind == "op":
            events.append({"name": op.name, "cat": op.type, "ph": "X", "ts": ts, "dur": dur, "pid": 1,
                           "tid": step.src_device, "args": {"flops": op.flops}})
            continue
        key = (step.src_device, step.dst_device)
        if key not in links:
            links[key] = len(links)
            events.append({"name": "thread_name", "ph": "M", "pid": 2, "tid": links[key],
                           "args": {"name": f"{devices[key[0]]} -> {devices[key[1]]}"}})
        nbytes = op.output_bytes[step.output] if step.output >= 0 else 0
        events.append({"name": step.name, "cat": "transfer", "ph": "X", "ts": ts, "dur": dur, "pid": 2,
                       "tid": links[key], "args": {"bytes": int(nbytes)}})
    other = {"label": label, "step_time_s": result.step_time_s, "oom": result.oom,
             "peak_memory_bytes": dict(zip(devices, map(int, result.peak_memory_bytes)))}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}
