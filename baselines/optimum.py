"""The best group placement: exact by enumeration when small, else a work-limited MILP.

What is optimised: the **group placements** of the given grouping (``[num_groups]`` device
indices, every group on any device; the search space of the group learners), measured
by the fast simulator ([`cluster.fast_simulator.FastSimulator`][cluster.fast_simulator.FastSimulator], the semantics of
[`cluster.simulator`][cluster.simulator]), among placements that fit in memory. Op-level placers (Baechi)
search a larger space and may beat it.

* **Enumeration** (``num_devices ** num_groups <= max_enumerate``, default 3^10): every
  group placement is simulated in batches; the fastest that fits in memory is the exact
  optimum (``proven=True``, ``bound_s = step_time_s``).
* **MILP** (larger): HiGHS (``scipy.optimize.milp``) on a *relaxation* of the simulator:
  binaries ``x[g, d]`` (group ``g`` on device ``d``), op finish times ``f_o`` and makespan
  ``C``, minimising ``C`` subject to

  - ``C >= load(P)`` for every compute pool ``P``: the seconds of the ops that effectively
    run on its devices (soft placement applied: an op with no GPU kernel placed on a GPU
    counts on the first CPU);
  - ``f_o >= f_p + t_o(x) + c_e * y_gh`` for every edge ``e = p -> o`` (``t_o(x)`` the op's
    time on its group's device; ``y_gh >= x[g, d] - x[h, d]`` is 1 when the two groups are
    apart; ``c_e`` the cheapest link's ``latency + bytes / bandwidth``, 0 when an end has no
    GPU kernel, since soft placement may bring both ends together), ``f_o >= t_o(x)``,
    ``C >= f_o``;
  - resident memory: ``sum_g x[g, d] * param_bytes(ops of g effectively on d) <= memory_bytes(d)``;
  - on small graphs (``disjunctive``), two ops not ordered by the DAG that run in the same
    compute pool do not overlap (a binary order per pair, big-M), in some order the model
    chooses -- the simulator's FIFO order is one of them.

  Every constraint holds for the simulated schedule of any placement that fits in memory
  (queues, channel contention and the rest only delay), so the MILP's optimum -- and its
  proven dual bound at the time limit -- is a **lower bound on the simulated optimum**;
  it is *not* the simulated step time of its own placement. The MILP's incumbent and the
  ``candidates`` given (e.g. the other baselines) are simulated and polished by local search,
  the fastest first, moving one group (or, when ``(groups * devices)^2 <= 20000``, two groups)
  to other devices while the simulated time improves, then the next start, within
  ``polish_evaluations`` simulated placements in all; the reported placement is the fastest
  seen, **as simulated**. ``bound_s`` is the larger of the MILP's dual bound and
  [`baselines.bounds.lower_bound`][baselines.bounds.lower_bound]; ``proven`` is True when the simulated time of the
  reported placement is within ``1e-9`` (relative) of ``bound_s``.

**Deterministic.** The work is limited by counts, not by the clock: HiGHS' branch-and-bound
stops after ``node_limit`` nodes (HiGHS solves a MILP deterministically on one thread), and
the polish after ``polish_evaluations`` simulated placements. So the same inputs give the same
placement, step time and bound on a quiet and on a loaded machine; only the seconds differ.

**The default work limit** ([`default_polish_evaluations`][baselines.optimum.default_polish_evaluations], [`MAX_MILP_OPS`][baselines.optimum.MAX_MILP_OPS]): the
MILP is built only for graphs of at most [`MAX_MILP_OPS`][baselines.optimum.MAX_MILP_OPS] ops, and the polish simulates at
most ``min(20,000, 400 million // num_ops)`` placements (a fixed number of simulated op
executions, the fast simulator's cost, which grows with the ops of one placement). Measured on
the paper graphs, 2-core machine: the MILP's root node alone takes 17 s on rnnlm paper (7,632
ops, 253 groups, ``k80x4``), its heuristics another 75 s, and 50 nodes did not end within 25
minutes (issue 36), while its dual bound stayed at [`baselines.bounds.lower_bound`][baselines.bounds.lower_bound]'s
(0.38301 s). Above the MILP limit the candidates are polished and the bound is
[`baselines.bounds.lower_bound`][baselines.bounds.lower_bound]'s. With these limits the optimum took 3-36 s on each of the
nine paper graphs on ``k80x2`` and ``k80x4`` (2-core machine, load 2-3.5; rnnlm paper 10 and 15 s,
nmt 22 and 25 s, gnmt 32 and 36 s). ``time_limit_s`` is an optional wall-clock cap for
those who prefer a deadline to a reproducible value: when it cuts the work short the result
says so (``deterministic=False``).

**The gap** ([`OptimumResult.gap`][baselines.optimum.OptimumResult.gap]): ``step_time_s / bound_s - 1``, how far the placement
found may be from the best one (0 when proven). On the paper graphs it is 0.54 to 1.75, 3.6 on
bert_base ``k80x2`` and 0.07 on resnet50_torch (the bound ignores most transfers), so read
``step_time_s`` there as the best placement known, not as the optimum.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cluster.cost_model import op_time_matrix
from cluster.fast_simulator import FastSimulator
from cluster.simulated import EXECUTIONS
from cluster.spec import ClusterSpec
from compgraph.ir import Grouping, OpGraph

MAX_ENUMERATE = 3**10  #: group placements enumerated at most
DEFAULT_NODE_LIMIT = 50  #: HiGHS branch-and-bound nodes at most
DEFAULT_POLISH_EVALUATIONS = 20_000  #: simulated placements the polish may try, at most (small graphs)
POLISH_OP_WORK = 400_000_000
"""Simulated op executions (placements x ops) the default polish may spend: 400 million, about
30 CPU-seconds of the fast simulator on this 2-core machine (0.07-0.08 us an op, measured on nmt
and gnmt paper). It binds above 20,000 ops only: gnmt paper (39,432 ops) gets 10,144 placements."""
MAX_MILP_OPS = 2_000
"""Ops above which the MILP is not built by default (candidates and polish only). 8,000 until
issue 36. Measured at 50 nodes on this 2-core machine (loaded, load average 3-6): rnnlm small
(1,616 ops) 34-46 CPU-s, its bound 2.5% (``k80x2``) and 23% (``k80x4``) higher than
[`baselines.bounds.lower_bound`][baselines.bounds.lower_bound]'s; resnet50_torch paper (944 ops) 6-9 s, +0.2%; nmt small
(2,810 ops) 143 CPU-s, +7%; inception_v3 paper (5,527 ops) 22 and 76 s, +0%; rnnlm paper (7,632
ops) 9 minutes on ``k80x2`` (+9%), more than 25 on ``k80x4``. HiGHS' time is not a function of the
size (the LSTMs' cross-group edges make them hard), and scipy's interface bounds its nodes, not its
root (cuts and heuristics: 92 s on rnnlm paper before the first node), so the rule is by size, with
room: every TensorFlow paper graph (5,527 ops and up) skips the MILP."""
DEFAULT_TIME_LIMIT_S = None  #: no wall-clock cap by default (a cap makes the value depend on load)


def default_polish_evaluations(num_ops: int) -> int:
    """The default polish budget of a graph of ``num_ops`` ops: ``min(DEFAULT_POLISH_EVALUATIONS,
    POLISH_OP_WORK // num_ops)`` simulated placements (20,000 up to 20,000 ops, nmt paper's 17,396
    included; 10,144 on gnmt paper), at least 1. It depends on the graph only, so the result stays
    reproducible."""
    return max(1, min(DEFAULT_POLISH_EVALUATIONS, POLISH_OP_WORK // max(1, int(num_ops))))


@dataclass
class OptimumResult:
    """The best group placement found.

    Attributes:
        placement: int64 ``[num_groups]`` device indices, or ``None`` if none fits in memory.
        step_time_s: its simulated step time (seconds), ``None`` if none.
        bound_s: a proven lower bound on the best step time of any group placement that fits
            in memory (seconds); equal to ``step_time_s`` when enumerated.
        proven: ``step_time_s`` is the optimum (enumerated, or the bound closed the gap).
        method: ``"enumeration"``, ``"milp"`` or ``"polish"`` (graph too big for the MILP).
        evaluated: placements simulated.
        seconds: time taken.
        milp_status: HiGHS' message (MILP only).
        deterministic: False when the optional wall-clock cap cut the work short.
        work: the work limits and what was spent: ``max_milp_ops``, ``milp_built``,
            ``node_limit``, ``milp_nodes`` (HiGHS' branch-and-bound nodes), ``polish_evaluations``
            (the limit, simulated placements) and ``polish_spent`` (moves simulated); empty when
            enumerated.
    """

    placement: np.ndarray | None
    step_time_s: float | None
    bound_s: float | None
    proven: bool
    method: str
    evaluated: int
    seconds: float
    milp_status: str = ""
    deterministic: bool = True
    work: dict = field(default_factory=dict)

    @property
    def gap(self) -> float | None:
        """``step_time_s / bound_s - 1``: at most how much slower than the best group placement
        the one found is (a fraction; 0 when proven); ``None`` without a placement or a bound."""
        if self.step_time_s is None or not self.bound_s:
            return None
        return max(0.0, self.step_time_s / self.bound_s - 1.0)


class _GroupTimes:
    """Step times of group placements as the environment measures them: the fast simulator's memory
    check (OOM) and its dataflow step time, or with ``execution="eager"`` (a PyTorch step in program
    order, [`cluster.eager`][cluster.eager], as [`cluster.simulated.SimulatedEnvironment`][cluster.simulated.SimulatedEnvironment] measures it)
    the eager step time. ``__call__``: ``[K, G]`` group placements -> ``[K]`` seconds, ``inf`` for OOM.

    Raises:
        ValueError: an unknown ``execution`` (names the valid ones).
    """

    def __init__(self, graph: OpGraph, grouping: Grouping, spec: ClusterSpec, op_times, execution: str) -> None:
        if execution not in EXECUTIONS:
            raise ValueError(f"execution: unknown {execution!r}; valid: {', '.join(EXECUTIONS)}")
        self.sim = FastSimulator(graph, spec, op_times=op_times)
        self.og = np.asarray(grouping.op_group, dtype=np.int64)
        self.eager = None
        if execution == "eager":
            from cluster.eager import EagerExecution

            self.eager = EagerExecution(graph, spec, op_times=op_times)

    def __call__(self, places: np.ndarray) -> np.ndarray:
        r = self.sim.run_group_arrays(places, self.og)
        steps = r.step_time_s if self.eager is None else self.eager.step_times(np.asarray(places)[:, self.og])
        return np.where(r.oom, np.inf, np.asarray(steps, dtype=np.float64))


def enumerate_optimum(graph: OpGraph, grouping: Grouping, spec: ClusterSpec, op_times: np.ndarray | None = None,
                      batch: int = 4096, execution: str = "dataflow") -> OptimumResult:
    """Exact optimum by simulating all ``num_devices ** num_groups`` group placements.

    Ties go to the placement that comes first in mixed-radix order (group 0 the most
    significant digit). Raises ValueError above [`MAX_ENUMERATE`][baselines.optimum.MAX_ENUMERATE] placements.
    """
    start = time.perf_counter()
    G, D = grouping.num_groups, len(spec.devices)
    total = D**G
    if total > MAX_ENUMERATE:
        raise ValueError(f"enumeration: {D}^{G} = {total} group placements, more than {MAX_ENUMERATE}")
    step_times = _GroupTimes(graph, grouping, spec, op_times, execution)
    best_t, best_p = np.inf, None
    radix = D ** np.arange(G - 1, -1, -1, dtype=np.int64)
    for lo in range(0, total, batch):
        idx = np.arange(lo, min(lo + batch, total), dtype=np.int64)
        places = (idx[:, None] // radix[None, :]) % D
        t = step_times(places)
        k = int(np.argmin(t))
        if t[k] < best_t:
            best_t, best_p = float(t[k]), places[k].copy()
    ok = best_p is not None
    return OptimumResult(best_p, best_t if ok else None, best_t if ok else None, ok, "enumeration", total,
                         time.perf_counter() - start)


def _neighbours(p: np.ndarray, D: int, pairs: bool) -> np.ndarray:
    """Every placement that moves one group of ``p`` to another device (and, with ``pairs``, two groups)."""
    G = len(p)
    one = np.repeat(p[None, :], G * D, axis=0)
    one[np.arange(G * D), np.repeat(np.arange(G), D)] = np.tile(np.arange(D), G)
    if not pairs:
        return one
    gi, gj = np.triu_indices(G, 1)
    k = len(gi)
    two = np.repeat(p[None, :], k * D * D, axis=0)
    di = np.tile(np.repeat(np.arange(D), D), k)
    dj = np.tile(np.arange(D), k * D)
    rows = np.arange(k * D * D)
    two[rows, np.repeat(gi, D * D)] = di
    two[rows, np.repeat(gj, D * D)] = dj
    return np.concatenate([one, two])


def milp_optimum(graph: OpGraph, grouping: Grouping, spec: ClusterSpec, op_times: np.ndarray | None = None,
                 time_limit_s: float | None = DEFAULT_TIME_LIMIT_S, candidates: list[np.ndarray] | None = None,
                 lower_bound_s: float | None = None, disjunctive: bool | None = None,
                 node_limit: int = DEFAULT_NODE_LIMIT, polish_evaluations: int | None = None,
                 max_milp_ops: int = MAX_MILP_OPS, on_progress: Callable[[dict], None] | None = None,
                 execution: str = "dataflow") -> OptimumResult:
    """The work-limited MILP of the module docstring; see there for what is proven.

    Args:
        graph, grouping, spec: what is placed where.
        op_times: optional ``[num_ops, num_devices]`` seconds replacing the roofline.
        time_limit_s: an optional wall-clock cap (seconds) on the MILP and the polish;
            ``None`` (default): none, the result depends on the inputs only.
        node_limit: HiGHS' branch-and-bound nodes at most.
        polish_evaluations: simulated placements the polish may try at most; ``None`` (default):
            [`default_polish_evaluations`][baselines.optimum.default_polish_evaluations] of the graph's ops.
        max_milp_ops: graphs with more ops skip the MILP (method ``"polish"``).
        on_progress: called with ``{"phase": "milp" | "polish", "evaluated", "budget",
            "best_step_time_s", "bound_s"}`` (placements the polish simulated, its limit, seconds;
            the ``"milp"`` point also has ``"ops"`` and ``"node_limit"``) before the MILP and after
            each batch of the polish (at most 512 placements).
        candidates: group placements (``[num_groups]``) to compare the MILP's incumbent with.
        lower_bound_s: a bound already computed ([`baselines.bounds.lower_bound`][baselines.bounds.lower_bound]), else computed.
        disjunctive: add the pairwise no-overlap constraints per compute pool (default: for
            graphs of at most 60 ops; ``O(num_ops^2)`` binaries).
        execution: how the polish measures a placement: ``dataflow`` (the fast simulator) or
            ``eager`` (a PyTorch step in program order, as the environment measures it:
            [`cluster.factory.sim_execution`][cluster.factory.sim_execution]). The bounds hold for both: a program-order
            schedule obeys the same precedence, one-op-at-a-time and transfer constraints.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    if polish_evaluations is None:
        polish_evaluations = default_polish_evaluations(graph.num_ops)
    if node_limit < 1 or polish_evaluations < 0:
        raise ValueError(f"node_limit={node_limit!r} must be >= 1 and polish_evaluations={polish_evaluations!r} >= 0")
    start = time.perf_counter()
    deadline = None if time_limit_s is None else start + time_limit_s
    n, G, D = graph.num_ops, grouping.num_groups, len(spec.devices)
    work: dict[str, Any] = {"max_milp_ops": int(max_milp_ops), "milp_built": n <= max_milp_ops, "node_limit": int(node_limit),
                            "milp_nodes": None, "polish_evaluations": int(polish_evaluations), "polish_spent": 0}
    if n > max_milp_ops:
        return _polish_only(graph, grouping, spec, op_times, candidates, lower_bound_s, polish_evaluations, deadline, start,
                            max_milp_ops, work, on_progress, execution)
    if on_progress is not None:
        on_progress({"phase": "milp", "evaluated": 0, "budget": polish_evaluations, "best_step_time_s": None,
                     "bound_s": lower_bound_s, "ops": n, "node_limit": node_limit})
    times = op_time_matrix(graph, spec) if op_times is None else np.asarray(op_times, dtype=np.float64)
    og = np.asarray(grouping.op_group, dtype=np.int64)
    is_gpu = np.array([d.kind == "gpu" for d in spec.devices])
    gpu_ok = np.array([op.gpu_kernel for op in graph.ops], dtype=bool)
    fallback = spec.cpu_indices[0] if spec.cpu_indices else -1
    eff = np.tile(np.arange(D), (n, 1))  # effective device of op o when its group is on d
    if fallback >= 0:
        eff[np.ix_(~gpu_ok, is_gpu)] = fallback
    t_eff = np.take_along_axis(times, eff, axis=1)  # [n, D] seconds of op o when its group is on d
    param = np.array([op.param_bytes for op in graph.ops], dtype=np.float64)
    pools = np.asarray(spec.pool_indices)
    P = int(pools.max()) + 1
    # cross-group edges (group pair) for the y variables
    pair_index: dict[tuple[int, int], int] = {}
    edges = []
    min_lat = min((spec.link(a, b).latency_s for a in range(D) for b in range(D) if a != b), default=0.0)
    max_bw = max((spec.link(a, b).bandwidth for a in range(D) for b in range(D) if a != b), default=1.0)
    for e in graph.edges:
        g, h = int(og[e.src]), int(og[e.dst])
        c = 0.0
        if g != h and gpu_ok[e.src] and gpu_ok[e.dst] and D > 1:
            key = (min(g, h), max(g, h))
            pair_index.setdefault(key, len(pair_index))
            c = min_lat + e.bytes / max_bw
        edges.append((e.src, e.dst, pair_index.get((min(g, h), max(g, h)), -1) if c > 0 else -1, c))
    Y = len(pair_index)
    # variable layout: x [G*D] | y [Y] | f [n] | C
    nx_, oy, of, oc = G * D, G * D, G * D + Y, G * D + Y + n
    V = oc + 1
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def add(cs, vs, lb, ub):
        nonlocal r
        rows.extend([r] * len(cs))
        cols.extend(cs)
        vals.extend(vs)
        lo.append(lb)
        hi.append(ub)
        r += 1

    for g in range(G):  # each group on one device
        add([g * D + d for d in range(D)], [1.0] * D, 1.0, 1.0)
    for (g, h), k in pair_index.items():  # y >= x[g,d] - x[h,d] and y >= x[h,d] - x[g,d]
        for d in range(D):
            add([oy + k, g * D + d, h * D + d], [1.0, -1.0, 1.0], 0.0, np.inf)
            add([oy + k, h * D + d, g * D + d], [1.0, -1.0, 1.0], 0.0, np.inf)
    # pool loads: sum over ops, for each placement device d of the op's group, the time on eff device
    load = np.zeros((P, G, D))
    for d in range(D):
        np.add.at(load, (pools[eff[:, d]], og, d), t_eff[:, d])  # type: ignore[arg-type]  # numpy's stubs
    for p in range(P):
        nz = np.nonzero(load[p])
        add([int(g) * D + int(d) for g, d in zip(*nz)] + [oc], list(load[p][nz]) + [-1.0], -np.inf, 0.0)
    # memory: resident bytes on device m
    cap = np.array([dev.memory_bytes for dev in spec.devices], dtype=np.float64)
    mem = np.zeros((D, G, D))
    for d in range(D):
        np.add.at(mem, (eff[:, d], og, d), param)  # type: ignore[arg-type]  # numpy's stubs
    for m in range(D):
        nz = np.nonzero(mem[m])
        if len(nz[0]):
            add([int(g) * D + int(d) for g, d in zip(*nz)], list(mem[m][nz] / cap[m]), -np.inf, 1.0)
    # op finish times: f_o - sum_d t_eff[o,d] x[g(o),d] >= 0 ; f_o - f_p - t_o(x) - c y >= 0 ; C - f_o >= 0
    for o in range(n):
        g = int(og[o])
        add([of + o] + [g * D + d for d in range(D)], [1.0] + list(-t_eff[o]), 0.0, np.inf)
        add([oc, of + o], [1.0, -1.0], 0.0, np.inf)
    for src, dst, k, c in edges:
        g = int(og[dst])
        cs = [of + dst, of + src] + [g * D + d for d in range(D)]
        vs = [1.0, -1.0] + list(-t_eff[dst])
        if k >= 0:
            cs.append(oy + k)
            vs.append(-c)
        add(cs, vs, 0.0, np.inf)
    # disjunctive constraints (small graphs): two ops that share a compute pool do not overlap.
    # b_ij = 1: i before j. With z_iP = sum of x[g(i), d] over the d that put i in pool P:
    #   f_i - s_j <= M (1 - b_ij) + M (2 - z_iP - z_jP),  f_j - s_i <= M b_ij + M (2 - z_iP - z_jP)
    pairs = []
    if disjunctive is None:
        disjunctive = n <= 60
    if disjunctive and n > 1:
        import networkx as nx

        closure = nx.transitive_closure_dag(graph.to_networkx())
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)
                 if not closure.has_edge(i, j) and not closure.has_edge(j, i)]
    B = len(pairs)
    if B:
        big = float(t_eff.max(axis=1).sum() + sum(c for *_, c in edges)) + 1.0
        for k, (i, j) in enumerate(pairs):
            gi, gj = int(og[i]), int(og[j])
            for p_ in range(P):
                zi = [gi * D + d for d in range(D) if pools[eff[i, d]] == p_]
                zj = [gj * D + d for d in range(D) if pools[eff[j, d]] == p_]
                if not zi or not zj:
                    continue
                # f_i - f_j + t_j(x) + M b + M z_iP + M z_jP <= 3M
                cs = [of + i, of + j] + [gj * D + d for d in range(D)] + [V + k] + zi + zj
                vs = [1.0, -1.0] + list(t_eff[j]) + [big] + [big] * len(zi) + [big] * len(zj)
                add(cs, vs, -np.inf, 3 * big)
                # f_j - f_i + t_i(x) - M b + M z_iP + M z_jP <= 2M
                cs = [of + j, of + i] + [gi * D + d for d in range(D)] + [V + k] + zi + zj
                vs = [1.0, -1.0] + list(t_eff[i]) + [-big] + [big] * len(zi) + [big] * len(zj)
                add(cs, vs, -np.inf, 2 * big)
        V += B
    A = coo_matrix((vals, (rows, cols)), shape=(r, V)).tocsr()
    cost = np.zeros(V)
    cost[oc] = 1.0
    integrality = np.zeros(V)
    integrality[:nx_] = 1
    integrality[oc + 1:] = 1
    ub = np.full(V, np.inf)
    ub[: nx_ + Y] = 1.0
    ub[oc + 1:] = 1.0
    options: dict[str, Any] = {"node_limit": int(node_limit), "disp": False}
    if time_limit_s is not None:
        options["time_limit"] = max(0.75 * time_limit_s - (time.perf_counter() - start), 1.0)  # the rest for the polish
    res = milp(cost, constraints=LinearConstraint(A, np.array(lo), np.array(hi)), integrality=integrality,
               bounds=Bounds(np.zeros(V), ub), options=options)
    status = str(res.message)
    if "Status 16" in status:  # scipy does not name HiGHS' kSolutionLimit, which a node limit ends with
        status = f"node limit ({node_limit}) reached"
    cut = "time limit" in status.lower()
    dual = getattr(res, "mip_dual_bound", None)
    dual = float(dual) * (1 - 1e-9) if dual is not None and np.isfinite(dual) else None
    work["milp_nodes"] = None if getattr(res, "mip_node_count", None) is None else int(res.mip_node_count)
    pool_of = list(candidates or [])
    if res.x is not None:
        pool_of.append(np.argmax(res.x[:nx_].reshape(G, D), axis=1))
    bound = _bound(graph, spec, op_times, dual, lower_bound_s)
    best_p, best_t, evaluated, cut_polish, spent = _polish(graph, grouping, spec, op_times, pool_of, polish_evaluations,
                                                           deadline, on_progress, bound, execution)
    work["polish_spent"] = spent
    proven = best_t is not None and bound is not None and best_t <= bound * (1 + 1e-9)
    return OptimumResult(best_p, best_t, bound, proven, "milp", evaluated, time.perf_counter() - start, status,
                         deterministic=not (cut or cut_polish), work=work)


def _bound(graph: OpGraph, spec: ClusterSpec, op_times, dual: float | None, lower_bound_s: float | None) -> float | None:
    """The larger of the MILP's dual bound and [`baselines.bounds.lower_bound`][baselines.bounds.lower_bound] (seconds)."""
    if lower_bound_s is None:
        from baselines.bounds import lower_bound

        lower_bound_s = lower_bound(graph, spec, op_times).value_s
    return max([b for b in (dual, lower_bound_s) if b is not None and np.isfinite(b)], default=None)


def _pair_moves(p: np.ndarray, D: int, gi: np.ndarray, gj: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Rows ``lo:hi`` of the two-group moves of ``p`` (the pairs ``gi < gj`` of ``np.triu_indices``,
    each with every ``D x D`` pair of devices, in `_neighbours`' order), made only when asked:
    all of them would take ``G^2 D^2 / 2`` rows (1.6 GB on rnnlm paper, 253 groups, ``k80x4``)."""
    r = np.arange(lo, hi)
    k = r // (D * D)
    out = np.repeat(p[None, :], len(r), axis=0)
    rows = np.arange(len(r))
    out[rows, gi[k]] = (r // D) % D
    out[rows, gj[k]] = r % D
    return out


def _polish(graph: OpGraph, grouping: Grouping, spec: ClusterSpec, op_times, pool_of: list, budget: int,
            deadline: float | None, on_progress: Callable[[dict], None] | None = None, bound_s: float | None = None,
            execution: str = "dataflow") -> tuple[np.ndarray | None, float | None, int, bool, int]:
    """Local search from each placement of ``pool_of`` that fits, fastest (as simulated) first, within
    ``budget`` simulated moves in all (and the optional ``deadline``); the best placement seen wins.

    * Each start descends: the best improving move of the first batch of 512 moves that has one,
      until none improves. A move puts one group on another device (and, when ``(groups *
      devices)^2 <= 20000``, also two groups at once). The first start is searched exactly as
      before issue 36, so the result is never slower than that search's at the same budget.
    * Then the next start, on what the first left (a MILP incumbent that simulates fastest can end
      in a slower local optimum than a baseline's start: resnet50_torch paper, 2.0190 s against
      2.0147 s).
    * Then, if budget is left and the graph is too big for pair moves in every step, the best
      placement descends once more with the two-group moves after the one-group ones (resnet101
      paper ``k80x4``: 4.1997 s to 4.1426 s; bert_base paper ``k80x4``: 4.3653 s to 4.3612 s).

    ``on_progress`` (see [`milp_optimum`][baselines.optimum.milp_optimum]) at the start and after each batch.

    Returns:
        ``(placement [G] or None, step time s or None, placements simulated, cut by the deadline,
        moves simulated)``.
    """
    if not pool_of:
        return None, None, 0, False, 0
    G, D = grouping.num_groups, len(spec.devices)
    step_times = _GroupTimes(graph, grouping, spec, op_times, execution)
    places = np.array([np.asarray(c, dtype=np.int64) for c in pool_of])
    evaluated = len(places)
    t0 = step_times(places)
    starts: list[int] = []
    seen: set[bytes] = set()
    for i in np.argsort(t0, kind="stable"):  # distinct starts that fit, fastest first (ties: pool order)
        if np.isfinite(t0[i]) and places[i].tobytes() not in seen:
            seen.add(places[i].tobytes())
            starts.append(int(i))
    if not starts:
        return None, None, evaluated, False, 0
    best_p, best_t = places[starts[0]].copy(), float(t0[starts[0]])
    spent, cut = 0, False
    small = (G * D) ** 2 <= 20000  # pair moves in every step

    def report() -> None:
        if on_progress is not None:
            on_progress({"phase": "polish", "evaluated": spent, "budget": budget, "best_step_time_s": best_t,
                         "bound_s": bound_s})

    def descend(p: np.ndarray, pt: float, pairs_after: bool) -> None:
        nonlocal best_p, best_t, spent, evaluated, cut
        gi, gj = np.triu_indices(G, 1) if pairs_after else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        improved = True
        while improved and spent < budget and not cut:
            improved = False
            ones = _neighbours(p, D, pairs=small)
            total = len(ones) + len(gi) * D * D
            for lo_ in range(0, total, 512):  # chunks: take the best improving move of the first chunk that has one
                if spent >= budget:
                    break
                if deadline is not None and time.perf_counter() >= deadline:
                    cut = True
                    break
                hi_ = min(lo_ + 512, total, lo_ + budget - spent)
                chunk = (ones[lo_:hi_] if hi_ <= len(ones) else
                         np.concatenate([ones[lo_:], _pair_moves(p, D, gi, gj, max(lo_, len(ones)) - len(ones),
                                                                 hi_ - len(ones))]))
                t = step_times(chunk)
                evaluated += len(chunk)
                spent += len(chunk)
                k = int(np.argmin(t))
                if t[k] < pt:
                    p, pt, improved = chunk[k].copy(), float(t[k]), True
                    if pt < best_t:
                        best_p, best_t = p.copy(), pt
                report()
                if improved:
                    break

    report()  # the fastest start
    for i in starts:
        if spent >= budget or cut:
            break
        descend(places[i].copy(), float(t0[i]), pairs_after=False)
    if not small and spent < budget and not cut:
        descend(best_p.copy(), best_t, pairs_after=True)
    return best_p, best_t, evaluated, cut, spent


def _polish_only(graph, grouping, spec, op_times, candidates, lower_bound_s, budget, deadline, start,
                 max_milp_ops, work: dict, on_progress=None, execution: str = "dataflow") -> OptimumResult:
    """A graph too big for the MILP: the candidates polished, the bound from [`baselines.bounds.lower_bound`][baselines.bounds.lower_bound]."""
    bound = _bound(graph, spec, op_times, None, lower_bound_s)
    best_p, best_t, evaluated, cut, spent = _polish(graph, grouping, spec, op_times, list(candidates or []), budget,
                                                    deadline, on_progress, bound, execution)
    work["polish_spent"] = spent
    proven = best_t is not None and bound is not None and best_t <= bound * (1 + 1e-9)
    return OptimumResult(best_p, best_t, bound, proven, "polish", evaluated, time.perf_counter() - start,
                         f"MILP not built: {graph.num_ops} ops > {max_milp_ops}", deterministic=not cut, work=work)


def optimum(graph: OpGraph, grouping: Grouping, spec: ClusterSpec, op_times: np.ndarray | None = None,
            time_limit_s: float | None = DEFAULT_TIME_LIMIT_S, candidates: list[np.ndarray] | None = None,
            max_enumerate: int = MAX_ENUMERATE, lower_bound_s: float | None = None,
            node_limit: int = DEFAULT_NODE_LIMIT, polish_evaluations: int | None = None,
            max_milp_ops: int = MAX_MILP_OPS, on_progress: Callable[[dict], None] | None = None,
            execution: str = "dataflow") -> OptimumResult:
    """Enumeration when ``num_devices ** num_groups <= max_enumerate``, else [`milp_optimum`][baselines.optimum.milp_optimum]
    (``node_limit``, ``max_milp_ops``, ``polish_evaluations`` -- ``None``: [`default_polish_evaluations`][baselines.optimum.default_polish_evaluations]
    --, ``on_progress`` and the optional wall-clock cap ``time_limit_s``), each measuring placements
    with ``execution`` (``dataflow`` or ``eager``: [`milp_optimum`][baselines.optimum.milp_optimum]), so ``step_time_s`` is the
    step time the environment measures for the placement found."""
    if len(spec.devices) ** grouping.num_groups <= min(max_enumerate, MAX_ENUMERATE):
        return enumerate_optimum(graph, grouping, spec, op_times, execution=execution)
    return milp_optimum(graph, grouping, spec, op_times, time_limit_s, candidates, lower_bound_s,
                        node_limit=node_limit, polish_evaluations=polish_evaluations, max_milp_ops=max_milp_ops,
                        on_progress=on_progress, execution=execution)
