"""Pictures of an experiment, as PNG files (matplotlib, Agg backend: no display needed).

* [`plot_placement`][tracking.plots.plot_placement]: the grouped graph coloured by device, laid out left to right in
  topological layers, node area proportional to the group's compute (FLOP), like the
  placements drawn in Mirhoseini et al. 2017, Fig. 4-5.
* [`plot_device_bars`][tracking.plots.plot_device_bars]: per-device compute time, transfer time and peak memory of each
  method's placement (2017 Fig. 8-9 show per-device computation and memory).
* [`plot_learning_curves`][tracking.plots.plot_learning_curves]: best step time found against placements sampled, every
  learner on one axis, the best baseline as a dashed line.
* [`plot_comparison`][tracking.plots.plot_comparison]: a sweep's speedups over the best baseline per method and task.
* [`plot_timeline`][tracking.plots.plot_timeline]: a per-device Gantt chart of one simulated step (ops on each device,
  transfers on each link direction), from [`tracking.timeline.simulate_timeline`][tracking.timeline.simulate_timeline].
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402

_DEVICE_COLOURS = plt.get_cmap("tab10")


def _device_colour(devices: list[str]) -> dict[str, tuple]:
    return {d: _DEVICE_COLOURS(i % 10) for i, d in enumerate(devices)}


def _layers(g: nx.DiGraph) -> dict[int, int]:
    """Node -> layer: its topological generation in the condensation (groups may form cycles)."""
    cond = nx.condensation(g)
    layer_of_scc = {}
    for depth, generation in enumerate(nx.topological_generations(cond)):
        for scc in generation:
            layer_of_scc[scc] = depth
    return {n: layer_of_scc[cond.graph["mapping"][n]] for n in g.nodes}


def plot_placement(graph, grouping, placement: dict[str, str], devices: list[str], path: str | Path, title: str = "") -> Path:
    """Draw the group graph of ``graph`` with each group coloured by its device.

    Args:
        graph: the [`compgraph.ir.OpGraph`][compgraph.ir.OpGraph].
        grouping: its [`compgraph.ir.Grouping`][compgraph.ir.Grouping] (``[num_ops]`` group ids, group names).
        placement: group name -> device name (the ``placement`` of an evaluation row).
        devices: every device name of the cluster, in order (fixes the colours).
        path: the PNG to write.
        title: figure title.
    Returns:
        ``path``. Node area is proportional to the group's FLOP (square-root scaled for
        visibility), edge width to the bytes between groups.
    """
    n = grouping.num_groups
    flops = np.zeros(n)
    np.add.at(flops, grouping.op_group, [op.flops for op in graph.ops])
    edges = grouping.group_edges(graph)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    layer = _layers(g)
    n_layers = max(layer.values()) + 1 if layer else 1
    if n_layers >= max(3, int(np.sqrt(n))):  # a DAG-like group graph: left to right in topological layers
        nx.set_node_attributes(g, layer, "layer")
        pos = nx.multipartite_layout(g, subset_key="layer")
    else:  # forward and backward ops share groups, so groups form cycles: a force-directed layout
        und = g.to_undirected()
        pos = nx.kamada_kawai_layout(und) if n <= 400 else nx.spring_layout(und, seed=0)
    colour = _device_colour(devices)
    node_dev = [placement.get(grouping.names[i], "?") for i in range(n)]
    size = 30 + 600 * np.sqrt(flops / flops.max()) if flops.max() > 0 else np.full(n, 80.0)
    width = np.array([edges[e] for e in g.edges], dtype=float)
    width = 0.3 + 2.0 * width / width.max() if len(width) and width.max() > 0 else 0.5
    fig, ax = plt.subplots(figsize=(min(24, max(10, 4 + 0.35 * n_layers)), 8))
    nx.draw_networkx_edges(g, pos, ax=ax, width=width, alpha=0.35, arrows=False, edge_color="grey")
    nx.draw_networkx_nodes(g, pos, ax=ax, node_size=size, node_color=[colour.get(d, (0.6, 0.6, 0.6, 1)) for d in node_dev],
                           edgecolors="black", linewidths=0.4)
    used = [d for d in devices if d in set(node_dev)]
    handles = [plt.Line2D([], [], marker="o", ls="", color=colour[d], markersize=10,
                          label=f"{d} ({node_dev.count(d)} groups)") for d in used]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=10)
    ax.set_title((title + "\n" if title else "") + f"{n} groups; node area ~ FLOP, edge width ~ bytes", fontsize=12)
    ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_device_bars(results: dict[str, dict], devices: list[str], path: str | Path, title: str = "",
                     capacity_bytes: dict[str, float] | None = None) -> Path:
    """Per-device compute (s), transfer (s) and peak memory (GB) of each method's placement.

    Args:
        results: method -> evaluation row with ``compute_s``, ``transfer_s`` and
            ``peak_memory_bytes`` (device -> value), as [`cluster.evaluation.evaluate_placements`][cluster.evaluation.evaluate_placements] returns.
        devices: the cluster's device names, in order.
        path: the PNG to write.
        capacity_bytes: device -> memory a placement may use (bytes); the smallest GPU's and
            the CPU's are drawn as lines on the memory panel.
    Returns:
        ``path``. Methods without per-device figures (no placement) are left out. The transfer
        panel sums each device's transfers (sent and received), overlapping ones included, so
        it can exceed the step time; the timeline plot shows the busy link time.
    """
    methods = [m for m, r in results.items() if r.get("compute_s")]
    colour = _device_colour(devices)
    fig, axes = plt.subplots(3, 1, figsize=(max(7, 1.1 * len(methods) + 3), 9), sharex=True)
    x = np.arange(len(methods))
    width = 0.8 / max(1, len(devices))
    panels = (("compute_s", "compute (s)", 1.0), ("transfer_s", "transfers (s, summed:\nmay overlap)", 1.0),
              ("peak_memory_bytes", "peak memory (GB)", 1e-9))
    for ax, (key, label, scale) in zip(axes, panels):
        for j, d in enumerate(devices):
            vals = [scale * float((results[m].get(key) or {}).get(d, 0.0)) for m in methods]
            ax.bar(x + (j - (len(devices) - 1) / 2) * width, vals, width, color=colour[d], label=d)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    for i, m in enumerate(methods):
        t = results[m].get("step_time_s")
        axes[0].annotate("OOM" if results[m].get("oom") else ("" if t is None else f"step {t:.4g} s"), (i, 0),
                         xytext=(0, -2), textcoords="offset points", ha="center", va="top", fontsize=8, color="dimgrey")
    caps: dict[float, list[str]] = {}
    for d, cap in (capacity_bytes or {}).items():
        if cap and np.isfinite(cap):
            caps.setdefault(float(cap), []).append(d)
    top = max([float(v) for m in methods for v in (results[m].get("peak_memory_bytes") or {}).values()] or [0.0])
    for cap, names in sorted(caps.items()):
        if top and cap <= 3 * top:  # a capacity far above every peak would only squash the panel
            axes[2].axhline(cap * 1e-9, color="firebrick", ls="--", lw=1)
            axes[2].annotate(f"capacity of {', '.join(names)}"[:60], (len(methods) - 0.5, cap * 1e-9), fontsize=7,
                             ha="right", va="bottom", color="firebrick")
    axes[-1].set_xticks(x, methods, rotation=20)
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    axes[0].set_title(title or "per-device compute, transfer and memory of each placement")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_learning_curves(curves: dict[str, list[dict]], path: str | Path, baselines: dict[str, float] | None = None,
                         title: str = "", lower_bound: float | None = None, log_x: bool = False) -> Path:
    """Best step time found (s) against placements sampled, every learner together.

    Args:
        curves: learner -> curve points (``placements``, ``best_step_time_s``, optionally
            ``sample_mean_step_time_s``, drawn thin).
        path: the PNG to write.
        baselines: name -> step time (s); the best is drawn as a dashed line.
        lower_bound: the step time no placement can beat (s), drawn as a dotted line.
        log_x: placements sampled on a log axis.
    Returns:
        ``path``. The best so far is drawn as a step (it changes only when a better placement
        is found), the sample mean as a thin line.
    """
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (method, points) in enumerate(sorted(curves.items())):
        pts = [p for p in points if p.get("best_step_time_s") is not None]
        if not pts:
            continue
        c = _DEVICE_COLOURS(i % 10)
        ax.step([p["placements"] for p in pts], [p["best_step_time_s"] for p in pts], where="post", color=c, lw=2,
                label=f"{method} (best so far)")
        mean = [(p["placements"], p["sample_mean_step_time_s"]) for p in points if p.get("sample_mean_step_time_s") is not None]
        if mean:
            ax.plot(*zip(*mean), color=c, lw=0.8, alpha=0.45, label=f"{method} (sample mean)")
    valid = {k: v for k, v in (baselines or {}).items() if v is not None}
    if valid:
        best = min(valid, key=valid.get)
        ax.axhline(valid[best], color="black", ls="--", lw=1, label=f"best baseline: {best} ({valid[best]:.4g} s)")
    if lower_bound is not None:
        ax.axhline(lower_bound, color="black", ls=":", lw=1, label=f"lower bound ({lower_bound:.4g} s)")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel("placements sampled" + (" (log)" if log_x else ""))
    ax.set_ylabel("step time (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    ax.set_title(title or "learning curves")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_comparison(rows: list[dict], path: str | Path, title: str = "") -> Path:
    """Median step time over the best baseline's (x, below 1 is faster) per method, one bar group per task.

    Args:
        rows: [`tracking.compare.compare_rows`][tracking.compare.compare_rows] output (``task``, ``method``,
            ``x_best_baseline_median``, ``x_best_baseline_min``, ``x_best_baseline_max``).
        path: the PNG to write.
    Returns:
        ``path``. Error bars span the seeds' minimum to maximum.
    """
    tasks = sorted({r["task"] for r in rows})
    methods = sorted({r["method"] for r in rows})
    fig, ax = plt.subplots(figsize=(max(7, 1.6 * len(tasks) + 3), 5))
    width = 0.8 / max(1, len(methods))
    for j, m in enumerate(methods):
        xs, ys, lo, hi = [], [], [], []
        for i, t in enumerate(tasks):
            r = next((r for r in rows if r["task"] == t and r["method"] == m), None)
            if r is None or r.get("x_best_baseline_median") is None:
                continue
            xs.append(i + (j - (len(methods) - 1) / 2) * width)
            ys.append(r["x_best_baseline_median"])
            lo.append(r["x_best_baseline_median"] - r["x_best_baseline_min"])
            hi.append(r["x_best_baseline_max"] - r["x_best_baseline_median"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, color=_DEVICE_COLOURS(j % 10), label=m)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(tasks)), tasks, rotation=15)
    ax.set_ylabel("step time / best baseline's (x, below 1 is faster)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set_title(title or "sweep: median over seeds, bars: min to max")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_timeline(result, graph, devices: list[str], path: str | Path, title: str = "") -> Path:
    """A Gantt chart of one simulated step: a row per device (its op runs, in the device's
    colour) and a row per link direction that carried a tensor (its transfers, busy link time).

    Args:
        result: a [`cluster.simulator.SimResult`][cluster.simulator.SimResult] with a ``timeline``.
        graph: the [`compgraph.ir.OpGraph`][compgraph.ir.OpGraph] (op names for the longest ops' labels).
        devices: the cluster's device names, in order.
        path: the PNG to write.
    Returns:
        ``path``. Time is in milliseconds from the start of the step; the step time is a
        vertical line; each device row says its busy fraction.
    Raises:
        ValueError: ``result`` has no timeline.
    """
    if result.timeline is None:
        raise ValueError("result: has no timeline; run the simulator with timeline=True")
    colour = _device_colour(devices)
    ops: dict[int, list] = {}
    links: dict[tuple[int, int], list] = {}
    for st in result.timeline:
        bar = (st.start_s * 1e3, (st.end_s - st.start_s) * 1e3)
        if st.kind == "op":
            ops.setdefault(st.src_device, []).append(bar)
        else:
            links.setdefault((st.src_device, st.dst_device), []).append(bar)
    rows = [("dev", d) for d in range(len(devices)) if d in ops] + [("link", k) for k in sorted(links)]
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.45 * max(2, len(rows))))
    step_ms = result.step_time_s * 1e3
    labels = []
    for y, (kind, key) in enumerate(rows):
        if kind == "dev":
            bars, c = ops[key], colour[devices[key]]
            busy = sum(b[1] for b in bars) / step_ms if step_ms > 0 else 0.0
            labels.append(f"{devices[key]} ({100 * busy:.0f}% busy)")
        else:
            bars, c = links[key], (0.45, 0.45, 0.45, 1.0)
            labels.append(f"{devices[key[0]]} -> {devices[key[1]]}")
        ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=c, edgecolor="none")
    ax.axvline(step_ms, color="black", lw=1, ls="--")
    ax.set_yticks(range(len(rows)), labels, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, step_ms * 1.02 if step_ms > 0 else 1)
    ax.set_xlabel("time in the step (ms); dashed: step time")
    ax.grid(axis="x", alpha=0.3)
    oom = f"; OOM on {', '.join(result.oom_devices)}" if result.oom else ""
    ax.set_title((title + "\n" if title else "") + f"simulated step {result.step_time_s:.4g} s: ops per device, "
                 f"transfers per link direction (grey){oom}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
