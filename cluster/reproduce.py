"""The papers' tables reproduced: the baselines of every row measured beside the paper, and the
fit of the K80 presets to 2017 Table 2.

**Tables** ([`cluster.tables`][cluster.tables]): 2017 Table 2, Post Table 1 and EAGLE Table IV, each row with
its model at that table's settings and its machine's preset ([`cluster.machines`][cluster.machines]).
[`reproduce_tables`][cluster.reproduce.reproduce_tables] measures every row's baselines (the table's own expert: one GPU where
the table says so) under the shipped presets and, for 2017 Table 2, under the presets fitted
without the row's model (leave one model out); it reports per cell ours beside the paper's,
the ratio and OOM, per row the fastest baseline and Kendall tau against the paper's order, per
table the share of cells within 1.5x, and the fitted parameters with their bounds.

**The fit** ([`fit`][cluster.reproduce.fit]): [`cluster.fitting`][cluster.fitting]'s bounded least squares on 2017 Table 2's
cells ([`paper_cells`][cluster.reproduce.paper_cells]: one single-CPU and one single-GPU time per model, shared by its 2-
and 4-GPU rows, and a Scotch, MinCut and expert time per row: 24 cells, 23 numbers and one OOM),
in two stages: the chips on the single-device cells, then the transfers on the split cells.
Baseline placements are computed by a placer the caller injects ([`TableData.place`][cluster.reproduce.TableData.place], so
that ``cluster`` does not import ``baselines``; ``tasks.reproduce`` passes
[`baselines.place_baselines`][baselines.place_baselines]): Scotch and MinCut map the op graph with the cost model's op
times and link costs, so they depend on the parameters; a fit round holds them fixed and the
next recomputes them. Post Table 1 and EAGLE Table IV are never fitted on.

**Named software terms** (not fitted, each with its source): the CPU's usable share of its peak
under the table's TensorFlow wheel ([`cluster.fitting.SOFTWARE_TERMS`][cluster.fitting.SOFTWARE_TERMS]), and for 2017's rows
the per-op executor overhead scaled by the paper's op count over ours (2017 Table 1:
[`cluster.tables.op_count_factor`][cluster.tables.op_count_factor]; e.g. 31,180 ops for Inception-V3 against our 5,527, whose
batch norm is fused), since TensorFlow pays that overhead per op of the graph it runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

import numpy as np

from cluster import fitting
from cluster.cost_model import op_features, op_times_from_features
from cluster.fitting import FIT_PARAMS, SOFTWARE_TERMS, apply_params, spec_values, start_values
from cluster.spec import ClusterSpec, load_cluster
from cluster.tables import ROWS, PaperRow, op_count_factor, table_rows

def _table2() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in table_rows("2017-table2"):
        t = out.setdefault(r.model, {"rows": {}})
        if "single_cpu" in r.cells:
            t["single_cpu"], t["single_gpu"] = r.cells["single_cpu"], r.cells["single_gpu"]
        t["rows"][r.gpus] = {k: r.cells[k] for k in ("scotch", "mincut", "expert", "rl")}
    return out


#: 2017 Table 2, seconds per step (``None`` = OOM), from [`cluster.tables`][cluster.tables]: per model the
#: single-CPU and single-GPU cells and, per number of GPUs, Scotch, MinCut, expert and RL.
PAPER_TABLE2: dict[str, dict] = _table2()
MODELS = tuple(PAPER_TABLE2)
CLUSTERS = {2: "k80x2", 4: "k80x4"}
BASELINE_METHODS = ("single_cpu", "single_gpu", "scotch", "mincut", "expert")
ROW_METHODS = ("scotch", "mincut", "expert")
FIT_ROUNDS = 3
#: the software terms of 2017 Table 2's machine ([`cluster.fitting.SOFTWARE_TERMS`][cluster.fitting.SOFTWARE_TERMS]).
SOFTWARE = {k: v["2017-table2"][0] for k, v in SOFTWARE_TERMS.items()}
START = start_values()


def paper_cells(models=MODELS) -> list[tuple[str, int, str, float | None]]:
    """``(model, gpus, method, paper seconds or None for OOM)``: single-device cells once per
    model (listed under ``gpus = 2``), then Scotch, MinCut, expert per row."""
    cells = []
    for m in models:
        t = PAPER_TABLE2[m]
        cells.append((m, 2, "single_cpu", t["single_cpu"]))
        cells.append((m, 2, "single_gpu", t["single_gpu"]))
        for gpus in (2, 4):
            for method in ROW_METHODS:
                cells.append((m, gpus, method, t["rows"][gpus][method]))
    return cells


@dataclass
class ModelData:
    """One model's paper-size graph, groups and op features (FLOP, bytes, op class)."""

    prepared: Any  # a compgraph.prepare.PreparedGraph
    features: tuple[np.ndarray, np.ndarray, np.ndarray]
    overhead_factor: float = 1.0  # per-op overhead factor: the paper's op count over ours (cluster.tables.op_count_factor)


def scaled_overhead(spec: ClusterSpec, factor: float) -> ClusterSpec:
    """``spec`` with every device's ``op_overhead_s`` times ``factor`` (``spec`` itself for 1.0):
    the executor overhead of a graph with ``factor`` times as many ops as ours."""
    if factor == 1.0:
        return spec
    data = spec.model_dump()
    for dev in data["devices"]:
        dev["op_overhead_s"] *= factor
    return ClusterSpec.model_validate(data)


Placer = Callable[[Any, ClusterSpec], dict]
"""``place(prepared, spec) -> {method: [num_groups] device indices}``: the baselines of the table
([`BASELINE_METHODS`][cluster.reproduce.BASELINE_METHODS]) on one prepared graph under one spec (e.g.
``functools.partial(baselines.place_baselines, BASELINE_METHODS)``), for the fit."""

RowPlacer = Callable[[Any, ClusterSpec, list[str]], dict]
"""``place(prepared, spec, methods) -> {method: placement}``: the baselines ``methods`` of a table row
(e.g. ``tasks.reproduce.table_placer``), for [`reproduce_rows`][cluster.reproduce.reproduce_rows]."""


@dataclass
class TableData:
    """The paper-size graphs of the table's models, the two base presets, and the baseline placer
    ([`Placer`][cluster.reproduce.Placer], injected by the caller; ``None``: nothing can be placed)."""

    models: dict[str, ModelData]
    base: dict[int, ClusterSpec] = field(default_factory=dict)
    place: Placer | None = None

    def baseline_placements(self, model: str, spec: ClusterSpec) -> dict[str, np.ndarray]:
        """Group placements of the 2017 baselines of ``model`` under ``spec`` ([`place`][cluster.reproduce.TableData.place]).

        Raises:
            ValueError: no placer was given ([`load_table_data`][cluster.reproduce.load_table_data]'s ``place``).
        """
        if self.place is None:
            raise ValueError("TableData.place: no baseline placer given (load_table_data(..., place=...))")
        return self.place(self.models[model].prepared, spec)


def load_table_data(models=MODELS, cache_dir: str | Path = "placement-runs/graph-cache", size: str = "paper",
                    presets: dict[int, str] | None = None, place: Placer | None = None) -> TableData:
    """Prepare (or read from the cache) each model at ``size`` and load the presets; ``place``:
    the baseline placer ([`Placer`][cluster.reproduce.Placer]) the table's baselines are computed with."""
    from compgraph.prepare import prepare

    data = {}
    for m in models:
        p = prepare(m, size, cache_dir=str(cache_dir))
        factor = op_count_factor("2017-table2", m, p.graph.num_ops) if size == "paper" else 1.0
        data[m] = ModelData(p, op_features(p.graph), factor)
    base = {g: load_cluster(name) for g, name in (presets or CLUSTERS).items()}
    return TableData(data, base, place)


def simulate(md: ModelData, spec: ClusterSpec, placements: dict) -> dict[str, dict]:
    """Step time, OOM and the highest device peak of each placement (fast simulator, exact engine):
    a group placement ``[num_groups]`` or an [`cluster.op_placement.OpPlacement`][cluster.op_placement.OpPlacement] ``[num_ops]``."""
    from cluster.fast_simulator import FastSimulator
    from cluster.op_placement import is_op_placement

    spec = scaled_overhead(spec, md.overhead_factor)
    times = op_times_from_features(*md.features, spec)
    sim = FastSimulator(md.prepared.graph, spec, op_times=times)
    names = list(placements)
    op_group = np.asarray(md.prepared.grouping.op_group)
    ops = np.stack([placements[n].ops if is_op_placement(placements[n]) else np.asarray(placements[n])[op_group]
                    for n in names])
    res = sim.run_arrays(ops)
    cap = np.array([d.memory_bytes for d in spec.devices])
    return {n: {"step_time_s": float(res.step_time_s[i]), "oom": bool(res.oom[i]),
                # every transfer's seconds once (the simulator books each at both ends): step + this is
                # the step if no transfer overlapped anything, a bound on any channel-sharing model
                "transfer_total_s": float(res.transfer_s[i].sum() / 2),
                "peak_memory_bytes": res.peak_memory_bytes[i].tolist(),
                # allocator overhead at which this placement would just fit: min over devices of capacity / peak
                "fits_below_overhead": float(np.min(np.where(res.peak_memory_bytes[i] > 0,
                                                             cap / np.maximum(res.peak_memory_bytes[i], 1), np.inf)))}
            for i, n in enumerate(names)}


def specs_for(data: TableData, values: dict[str, float], allocator_overhead: float | None = None) -> dict[int, ClusterSpec]:
    """The base presets with ``values`` and the table's software terms set."""
    return {g: apply_params(s, values, allocator_overhead, gpu_peer_access=False, software=SOFTWARE)
            for g, s in data.base.items()}


def all_placements(data: TableData, specs: dict[int, ClusterSpec], models) -> dict[tuple[str, int], dict]:
    """The baselines' placements of every model on every spec (each model's overhead factor applied)."""
    return {(m, g): data.baseline_placements(m, scaled_overhead(specs[g], data.models[m].overhead_factor))
            for m in models for g in specs}


def predict(data: TableData, values: dict[str, float], models, allocator_overhead: float | None = None,
            placements: dict | None = None) -> dict[tuple[str, int], dict[str, dict]]:
    """Simulated baseline cells of ``models`` under ``values``: ``(model, gpus) -> method -> result``.
    Placements are recomputed with ``values`` unless given."""
    specs = specs_for(data, values, allocator_overhead)
    placements = placements or all_placements(data, specs, models)
    return {(m, g): simulate(data.models[m], specs[g], placements[(m, g)]) for m in models for g in specs}


SINGLE_DEVICE = ("single_cpu", "single_gpu")
CHIP_PARAMS = tuple(p for p in FIT_PARAMS if p.kind in ("cpu", "gpu"))
TRANSFER_PARAMS = tuple(p for p in FIT_PARAMS if p.kind == "transfer")


def model_predictor(data: TableData, models) -> fitting.Predict:
    """[`cluster.fitting.Predict`][cluster.fitting.Predict] over the baseline cells of ``models`` (row key ``(model, gpus)``)."""

    def model_predict(values, placements):
        specs = specs_for(data, values)
        placements = placements or all_placements(data, specs, models)
        out = {"placements": placements}
        for (m, g), placed in placements.items():
            for meth, r in simulate(data.models[m], specs[g], placed).items():
                out[((m, g), meth)] = r
        return out

    return model_predict


def fit(data: TableData, models, start: dict[str, float] | None = None, rounds: int = FIT_ROUNDS,
        max_nfev: int = 200, prior_weight: float = 0.05, log=print) -> dict:
    """Fit [`cluster.fitting.FIT_PARAMS`][cluster.fitting.FIT_PARAMS] inside their bounds on the numeric cells of ``models``,
    in two stages ([`cluster.fitting.fit`][cluster.fitting.fit] each):

    1. the chips (CPU and GPU parameters) on the single-device cells, where no transfer happens;
    2. the transfers (Send/Recv overhead, achieved link bandwidth) on the cells that split the
       graph (Scotch, MinCut, expert), the chips held at stage 1's values.

    So a split the bounds cannot make slow enough stays too fast rather than bending the chips
    away from their own cells. Then the whole set's residuals, ``allocator_overhead`` and, for each
    split cell that is still more than 1.5x off, the Send/Recv overhead that would reach it
    (``required_send_recv_s``, [`cluster.fitting.required_value`][cluster.fitting.required_value]).

    Returns:
        ``{"models", "values", "allocator_overhead", "rms_log_ratio", "on_bound", "stages",
        "required_send_recv_s", "prior_weight", "params"}``.
    """
    cells = [((m, g), meth, paper) for m, g, meth, paper in paper_cells(models)]
    predict_cells = model_predictor(data, models)
    say = lambda s: log(f"{'+'.join(models)}: {s}")  # noqa: E731
    chips = fitting.fit(predict_cells, [c for c in cells if c[1] in SINGLE_DEVICE], CHIP_PARAMS, start=start,
                        rounds=1, max_nfev=max_nfev, prior_weight=prior_weight,
                        fixed={k: v for k, v in {**fitting.start_values(TRANSFER_PARAMS), **(start or {})}.items()
                               if k.startswith("transfer.")}, log=lambda s: say(f"chips {s}"))
    chip_values = {k: v for k, v in chips["values"].items() if not k.startswith("transfer.")}
    links = fitting.fit(predict_cells, [c for c in cells if c[1] not in SINGLE_DEVICE], TRANSFER_PARAMS, start=start,
                        rounds=rounds, max_nfev=max_nfev, prior_weight=prior_weight, fixed=chip_values,
                        log=lambda s: say(f"transfers {s}"))
    values = links["values"]
    pred = predict_cells(values, None)
    numeric = [c for c in cells if c[2] is not None]
    ratios = {c: pred[(c[0], c[1])]["step_time_s"] / c[2] for c in numeric}
    required = {}
    for c, r in ratios.items():
        if c[1] not in SINGLE_DEVICE and not 1 / 1.5 <= r <= 1.5:
            (m, g), meth = c[0], c[1]
            one = {(m, g): {meth: pred["placements"][(m, g)][meth]}}  # this cell alone: a cheap bisection
            need = fitting.required_value(model_predictor(data, [m]), values, "transfer.send_recv_overhead_s", c, one,
                                          iters=30)
            required[f"{m}/{g}/{meth}"] = need
    return {"models": list(models), "values": values,
            "allocator_overhead": fitting.fit_allocator_overhead(pred, cells),
            "rms_log_ratio": float(np.sqrt(np.mean(np.square(np.log(list(ratios.values())))))),
            "on_bound": fitting.on_bound(values), "prior_weight": prior_weight,
            "stages": {"chips": {k: chips[k] for k in ("rms_log_ratio", "nfev", "on_bound")},
                       "transfers": {k: links[k] for k in ("rms_log_ratio", "nfev", "on_bound")}},
            "required_send_recv_s": required, "params": fitting.param_table()}


def kendall_tau(ours: list[float | None], paper: list[float | None]) -> float:
    """Kendall's tau-b between two orders of the same methods (OOM / ``None`` = slowest)."""
    from scipy.stats import kendalltau

    big = 1e9
    a = [big if v is None else v for v in ours]
    b = [big if v is None else v for v in paper]
    tau = kendalltau(a, b).statistic
    return float(tau) if tau == tau else 1.0


PRESET_DIR = Path(__file__).parent / "presets"
#: every fit of ``scripts/fit_presets.py --write`` (leave-one-model-out and all rows).
FIT_JSON = PRESET_DIR / "k80_fit.json"


MAX_FIT_BYTES = 10_000_000
"""Largest fit file read (bytes); the shipped one is about 20 kB."""


def load_fit(path: str | Path = FIT_JSON, required: bool = False) -> dict | None:
    """The stored fits (``scripts/fit_presets.py --write``), or ``None`` if the default file is absent.

    Raises:
        ValueError: ``required`` (a path the user gave) and the file is missing; or the file is larger
            than [`MAX_FIT_BYTES`][cluster.reproduce.MAX_FIT_BYTES], not JSON, or not a JSON object (one line naming the file).
    """
    path = Path(path)
    if not path.is_file():
        if required:
            raise ValueError(f"--fit {path}: no such file")
        return None
    if path.stat().st_size > MAX_FIT_BYTES:
        raise ValueError(f"--fit {path}: {path.stat().st_size:,} bytes, more than the {MAX_FIT_BYTES:,} allowed")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"--fit {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"--fit {path}: expected a JSON object of fits, got {type(data).__name__}")
    return data


def write_presets(fits: dict) -> None:
    """Write every machine's preset ([`cluster.machines.write_presets`][cluster.machines.write_presets]) from ``fits["all_rows"]``
    and every fit to [`FIT_JSON`][cluster.reproduce.FIT_JSON]."""
    from cluster.machines import write_presets as write

    res = fits["all_rows"]
    record = {"script": "scripts/fit_presets.py", "table": "2017-table2", "cells": "all 23 numeric cells, two stages",
              "rms_log_ratio": round(res["rms_log_ratio"], 4), "record": "cluster/presets/k80_fit.json"}
    write(res["values"], res["allocator_overhead"], {**record, "on_bound": res["on_bound"]})
    FIT_JSON.write_text(json.dumps(fits, indent=1, default=str) + "\n")


#: baseline methods each table compares (its columns), under our names.
TABLE_BASELINES = {"2017-table2": BASELINE_METHODS, "post-table1": ("single_gpu", "expert", "metis"),
                   "eagle-table4": ("single_gpu", "expert")}


def _ours(row: PaperRow, method: str) -> str:
    """The baseline that computes ``row``'s ``method`` column (the table's own expert, e.g. one GPU)."""
    return row.aliases.get(method, method)


def _row_paper(row: PaperRow) -> dict[str, float | None]:
    """The row's baseline cells; a 2017 4-GPU row takes the single-device cells of its 2-GPU line."""
    cells = dict(row.baselines())
    if row.table == "2017-table2" and "single_cpu" not in cells:
        two = next(r for r in ROWS if r.table == row.table and r.model == row.model and r.gpus == 2)
        cells = {"single_cpu": two.cells["single_cpu"], "single_gpu": two.cells["single_gpu"], **cells}
    return {m: cells[m] for m in TABLE_BASELINES[row.table] if m in cells}


def experiment_command(row: PaperRow, method: str, size: str | None = None) -> str:
    """The ``placement experiment`` command line that measures one cell."""
    return (f"placement experiment --model {row.model} --size {size or row.size} --cluster {row.cluster} "
            f"--methods {_ours(row, method)} --train-steps 0")


def _winner(values: dict[str, float | None]) -> str | None:
    ok = {m: v for m, v in values.items() if v is not None}
    return min(ok, key=lambda m: ok[m]) if ok else None


def row_specs(row: PaperRow, fits: dict | None) -> tuple[ClusterSpec, ClusterSpec | None, str]:
    """``(shipped spec, held-out spec or None, held-out kind)`` of a row.

    2017 Table 2 (fitted): held out = the preset with the parameters fitted without the row's model
    (``fits["leave_one_out"]``). Post Table 1: never fitted, so every cell is out of sample: held out =
    shipped. EAGLE Table IV: never fitted; no held-out column (its cells are the out-of-sample test).
    """
    spec = load_cluster(row.cluster)
    if row.table == "2017-table2":
        loo = (fits or {}).get("leave_one_out", {}).get(row.model)
        if loo is None:
            return spec, None, "none"
        return (spec, apply_params(spec, loo["values"], loo["allocator_overhead"]["value"], gpu_peer_access=False,
                                   software=SOFTWARE), "leave-one-model-out")
    if row.table == "post-table1":
        return spec, spec, "never fitted (the shipped presets are fitted on 2017 Table 2 only)"
    return spec, None, "never fitted (out-of-sample table)"


def _measure(prepared, spec: ClusterSpec, placements: dict) -> dict[str, dict]:
    return simulate(ModelData(prepared, op_features(prepared.graph)), spec, placements)


def reproduce_rows(rows: list[PaperRow], prepare_fn: Callable, place: RowPlacer, fits: dict | None = None,
                   learned: dict | None = None, size: str | None = None, log=lambda s: None) -> list[dict]:
    """Every row measured beside the paper.

    Args:
        rows: the table rows ([`cluster.tables.ROWS`][cluster.tables.ROWS]).
        prepare_fn: ``(model, size) -> PreparedGraph`` (e.g. [`compgraph.prepare.prepare`][compgraph.prepare.prepare] with a cache).
        place: the baseline placer ([`RowPlacer`][cluster.reproduce.RowPlacer]).
        fits: the stored fits ([`load_fit`][cluster.reproduce.load_fit]) for 2017's held-out column.
        learned: ``(table, model, gpus) -> learner -> placement`` found by searches (measured beside).
        size: a size that replaces every row's (e.g. ``small`` for a quick check; not comparable).
    Returns:
        One dict per row: ``table, model, size, gpus, cluster, label, source, heldout_kind``, ``cells``
        (method -> ``paper_s, ours_s, oom, ratio, held_out_s, held_out_oom, held_out_ratio, counted,
        command``, ``splits``: the method is not a single-device placement, and ``serial_upper_s``:
        ours plus every transfer's seconds in series, the step time if no transfer overlapped
        anything, i.e. an upper bound for any model that only makes the transfers share channels),
        ``tau``, ``tau_heldout``, ``winner``, ``winner_heldout``, ``paper_winner``, ``learners``.
    """
    out = []
    for row in rows:
        log(f"{row.table}: {row.model} ({size or row.size}) on {row.cluster}")
        prepared = prepare_fn(row.model, size or row.size)
        spec, held_spec, held_kind = row_specs(row, fits)
        factor = op_count_factor(row.table, row.model, prepared.graph.num_ops) if size in (None, row.size) else 1.0
        spec = scaled_overhead(spec, factor)
        held_spec = held_spec if held_spec is None else scaled_overhead(held_spec, factor)
        paper = _row_paper(row)
        ours_methods = sorted({_ours(row, m) for m in paper})
        res = _measure(prepared, spec, place(prepared, spec, ours_methods))
        held = None
        if held_spec is not None:
            held = res if held_spec is spec else _measure(prepared, held_spec, place(prepared, held_spec, ours_methods))
        cells = {}
        for m, pv in paper.items():
            method = _ours(row, m)
            r = res[method]
            ours = None if r["oom"] else r["step_time_s"]
            h = None if held is None else held[method]
            hv = None if h is None or h["oom"] else h["step_time_s"]
            cells[m] = {"paper_s": pv, "ours_s": ours, "ours_time_s": r["step_time_s"], "oom": r["oom"],
                        "serial_upper_s": None if ours is None else ours + r["transfer_total_s"],
                        "splits": method not in SINGLE_DEVICE,
                        "ratio": (ours / pv) if ours is not None and pv is not None else None,
                        "held_out_s": hv, "held_out_oom": None if h is None else h["oom"],
                        "held_out_ratio": (hv / pv) if hv is not None and pv is not None else None,
                        "counted": m in row.cells, "command": experiment_command(row, m, size)}
        order = list(paper)
        rec: dict[str, Any] = {"table": row.table, "model": row.model, "size": size or row.size, "gpus": row.gpus,
               "cluster": row.cluster, "label": row.label, "source": row.source, "heldout_kind": held_kind,
               "op_overhead_factor": factor,
               "cells": cells,
               "tau": kendall_tau([cells[k]["ours_s"] for k in order], [paper[k] for k in order]),
               "tau_heldout": (kendall_tau([cells[k]["held_out_s"] for k in order], [paper[k] for k in order])
                               if held is not None else None),
               "winner": _winner({k: c["ours_s"] for k, c in cells.items()}),
               "winner_heldout": _winner({k: c["held_out_s"] for k, c in cells.items()}) if held is not None else None,
               "paper_winner": _winner(paper), "learners": {}}
        best_ours = min((c["ours_s"] for c in cells.values() if c["ours_s"] is not None), default=None)
        best_paper = min((v for v in paper.values() if v is not None), default=None)
        found = (learned or {}).get((row.table, row.model, row.gpus)) or {}
        if found:
            lres = _measure(prepared, spec, found)
            for lname, lr in lres.items():
                ls = None if lr["oom"] else lr["step_time_s"]
                pl = row.cells.get(lname)
                rec["learners"][lname] = {
                    "ours_s": ls, "paper_s": pl,
                    "speedup_pct": (100 * (best_ours - ls) / best_ours) if ls and best_ours else None,
                    "paper_speedup_pct": (100 * (best_paper - pl) / best_paper) if pl and best_paper else None}
        out.append(rec)
    return out


def within(rows: list[dict], key: str = "ratio", factor: float = 1.5) -> dict:
    """Share of the counted cells within ``factor`` of the paper (an OOM cell counts as within if
    both are OOM; ``key`` ``ratio`` or ``held_out_ratio``); rows without that column are skipped."""
    hit = total = 0
    oom_key = "oom" if key == "ratio" else "held_out_oom"
    for row in rows:
        for c in row["cells"].values():
            if not c["counted"] or c[oom_key] is None:
                continue
            total += 1
            if c["paper_s"] is None:
                hit += bool(c[oom_key])
            elif c[key] is not None and 1 / factor <= c[key] <= factor:
                hit += 1
    return {"within": hit, "cells": total, "share": hit / total if total else None}


def winners_matched(rows: list[dict], key: str = "winner") -> dict:
    """Rows whose fastest baseline (ours, or held out with ``key="winner_heldout"``) is the paper's."""
    have = [r for r in rows if r.get(key) is not None]
    hit = sum(r[key] == r["paper_winner"] for r in have)
    return {"matched": hit, "rows": len(have), "share": hit / len(have) if have else None}


def oom_right(rows: list[dict]) -> dict:
    """OOM cells (ours or the paper's) where the two agree."""
    cells = [c for r in rows for c in r["cells"].values() if c["counted"] and (c["paper_s"] is None or c["oom"])]
    hit = sum((c["paper_s"] is None) == bool(c["oom"]) for c in cells)
    return {"right": hit, "cells": len(cells)}


def beyond_serial(rows: list[dict], factor: float = 1.5) -> dict:
    """Counted cells that split the graph (``splits``: not a single-device placement) whose paper seconds exceed ``factor`` times
    ``serial_upper_s``: slower than our model could make them even with every transfer in series."""
    cells = [c for r in rows for c in r["cells"].values()
             if c["counted"] and c["splits"] and c["paper_s"] is not None and c["serial_upper_s"] is not None]
    hit = sum(c["paper_s"] > factor * c["serial_upper_s"] for c in cells)
    return {"cells": hit, "of": len(cells)}


def parameters(spec: ClusterSpec) -> list[dict]:
    """``[{name, value, lower, upper, source}]``: the fitted parameters of a shipped preset with their bounds."""
    values = spec_values(spec)
    return [{"name": p.key, "value": values[p.key], "lower": p.lo, "upper": p.hi, "source": p.source}
            for p in FIT_PARAMS]


def reproduce_tables(rows: list[PaperRow], prepare_fn: Callable, place: RowPlacer, fits: dict | None = None,
                     learned: dict | None = None, size: str | None = None, log=lambda s: None) -> dict:
    """The whole comparison with the papers (what ``placement reproduce`` prints and writes as JSON).

    Returns:
        ``{"rows": reproduce_rows(...), "summary": {table: {"shipped", "heldout", "winners",
        "winners_heldout", "oom"}}, "cells": [{table, model, gpus, method, paper_s, ours_s,
        held_out_s, command}], "parameters": parameters(k80x2), "on_bound", "fit"}``; ``held_out_s`` is
        absent for EAGLE's cells; ``paper_s``/``ours_s``/``held_out_s`` are ``None`` for OOM.
    """
    out_rows = reproduce_rows(rows, prepare_fn, place, fits, learned, size, log)
    summary = {}
    for t in dict.fromkeys(r["table"] for r in out_rows):
        tr = [r for r in out_rows if r["table"] == t]
        has_held = any(r["tau_heldout"] is not None for r in tr)
        summary[t] = {"shipped": within(tr), "heldout": within(tr, "held_out_ratio") if has_held else None,
                      "winners": winners_matched(tr), "winners_heldout": winners_matched(tr, "winner_heldout") if has_held else None,
                      "oom": oom_right(tr), "beyond_serial": beyond_serial(tr)}
    cells = []
    for r in out_rows:
        for m, c in r["cells"].items():
            if not c["counted"]:
                continue
            cell = {"table": r["table"], "model": r["model"], "size": r["size"], "gpus": r["gpus"], "method": m,
                    "paper_s": c["paper_s"], "ours_s": c["ours_s"], "command": c["command"]}
            if r["table"] != "eagle-table4":
                cell["held_out_s"] = c["held_out_s"]
            cells.append(cell)
    shipped = load_cluster("k80x2")
    return {"rows": out_rows, "summary": summary, "cells": cells, "parameters": parameters(shipped),
            "on_bound": fitting.on_bound(spec_values(shipped)),
            "fit": None if fits is None else {
                "all_rows": {k: fits["all_rows"].get(k) for k in ("values", "allocator_overhead", "rms_log_ratio",
                                                                   "on_bound", "required_send_recv_s")},
                "leave_one_out": {m: {k: f.get(k) for k in ("values", "allocator_overhead", "rms_log_ratio")}
                                  for m, f in fits.get("leave_one_out", {}).items()}}}
