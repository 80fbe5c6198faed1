"""A lower bound on the simulated step time of every placement of a graph on a cluster.

The simulator ([`cluster.simulator`][cluster.simulator]) runs each op ``o`` on its *effective* device
``d`` (an op with no GPU kernel placed on a GPU runs on the first CPU) for ``t(o, d)``
seconds; a compute pool (a device alone, or the devices naming one ``compute_pool``) runs
one op at a time; an op starts no earlier than all its inputs are on its device (a local
producer's end, or a transfer's arrival, which is at least the producer's end); transfers
only add time; the step time is when the last op or transfer ends. Hence, for **every**
placement:

* (a) **path** -- the step time is at least the longest path of the op DAG with every op
  weighted by ``tmin(o)``, its time on the fastest device it can effectively run on (the
  CPUs for an op with no GPU kernel when the cluster has a CPU, else any device), transfers
  free: each op starts after its predecessors end and lasts at least ``tmin(o)``.
* (b) **load** -- the optimum ``C`` of the load-balance LP: ``x[o, d] >= 0`` over the
  devices ``d`` op ``o`` may effectively run on, ``sum_d x[o, d] = 1``, and for every
  compute pool ``P``: ``sum_o sum_{d in P} t(o, d) x[o, d] <= C`` (solved with HiGHS).
  A placement is an integral ``x``, and the busy time of each pool is at most the step
  time, so its step time is a feasible ``C``.
* (c) **head/tail window** -- an op whose head (longest ``tmin`` path *before* it) is
  ``>= t1`` cannot start before ``t1``, and one whose tail (longest ``tmin`` path *after*
  it) is ``>= t2`` must end by ``step - t2``, or the ops after it could not finish. So the
  ops with head ``>= t1`` and tail ``>= t2`` all run inside ``[t1, step - t2]``, and, when
  there is at least one, the step time is at least ``t1 + t2`` plus the load-balance LP of those ops alone. The
  largest such value over a grid of thresholds (0 and ``thresholds`` quantiles of the
  heads, times those of the tails) is a bound.

And for every placement that fits in memory (the ones the environment gives a step time;
an OOM placement has none):

* (d) **memory** -- (b) with ``sum_o param_bytes(o) x[o, d] <= memory_bytes(d)`` per
  device: the simulator keeps every op's ``param_bytes`` resident on its effective device
  for the whole step, so a placement that fits satisfies these constraints; when memory
  forces work off the fastest devices the LP's ``C`` rises.

[`lower_bound`][baselines.bounds.lower_bound] returns all of them; ``value_s`` (the bound reported as
``lower_bound_s``) is the largest, valid for placements that fit in memory;
``any_placement_s`` omits (d) and is valid for every placement, OOM or not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from cluster.cost_model import op_time_matrix
from cluster.spec import ClusterSpec
from compgraph.ir import OpGraph


@dataclass
class LowerBound:
    """Lower bounds on the step time (seconds); see the module docstring for why each holds.

    Attributes:
        value_s: the bound: max of all below, valid for every placement that fits in memory.
        any_placement_s: max of path, load and head/tail: valid for every placement.
        path_s: (a) longest path at the fastest allowed devices, free transfers.
        load_s: (b) the load-balance LP.
        head_tail_s: (c) the head/tail bound.
        memory_load_s: (d) the load-balance LP with resident-memory constraints; ``inf`` if
            no fractional placement fits (then every placement runs out of memory).
        seconds: time taken to compute them.
    """

    value_s: float
    any_placement_s: float
    path_s: float
    load_s: float
    head_tail_s: float
    memory_load_s: float
    seconds: float

    def as_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in self.__dict__.items()}


def allowed_devices(graph: OpGraph, spec: ClusterSpec) -> np.ndarray:
    """bool ``[num_ops, num_devices]``: the devices each op can *effectively* run on in the
    simulator (an op with no GPU kernel runs on a CPU whenever the cluster has one)."""
    n, D = graph.num_ops, len(spec.devices)
    ok = np.ones((n, D), dtype=bool)
    if spec.cpu_indices:
        is_cpu = np.array([d.kind == "cpu" for d in spec.devices])
        no_gpu = np.array([not op.gpu_kernel for op in graph.ops], dtype=bool)
        ok[no_gpu] = is_cpu[None, :]
    return ok


def _path_heads_tails(graph: OpGraph, tmin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Longest ``tmin`` path ending just before each op (head) and starting just after it (tail)."""
    n = graph.num_ops
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for e in graph.edges:
        preds[e.dst].append(e.src)
        succs[e.src].append(e.dst)
    order = graph.topological_order.tolist()
    head = np.zeros(n)
    for o in order:
        if preds[o]:
            head[o] = max(head[p] + tmin[p] for p in preds[o])
    tail = np.zeros(n)
    for o in reversed(order):
        if succs[o]:
            tail[o] = max(tail[s] + tmin[s] for s in succs[o])
    return head, tail


def load_lp(times: np.ndarray, allowed: np.ndarray, pools: list[int], ops: np.ndarray | None = None,
            param_bytes: np.ndarray | None = None, capacity: np.ndarray | None = None) -> float:
    """The load-balance LP bound (seconds) over ``ops`` (default: all), see (b) and (d).

    Args:
        times: ``[num_ops, num_devices]`` seconds.
        allowed: bool ``[num_ops, num_devices]``, the devices each op may run on.
        pools: ``[num_devices]`` compute-pool index of each device.
        ops: op indices to include.
        param_bytes, capacity: with both, the resident-memory constraints of (d).
    Returns:
        the LP optimum ``C``; ``inf`` if infeasible.
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    if ops is None:
        ops = np.arange(times.shape[0])
    if len(ops) == 0:
        return 0.0
    # Ops with identical rows (times, allowed devices and, with memory, resident bytes) are
    # merged into one variable weighted by their count: the LP is symmetric in them and
    # convex, so some optimum splits them identically -- the merged LP has the same optimum.
    key = np.where(allowed[ops], times[ops], -1.0)
    if param_bytes is not None and capacity is not None:
        key = np.concatenate([key, np.asarray(param_bytes, dtype=np.float64)[ops][:, None]], axis=1)
    _, first, counts = np.unique(key, axis=0, return_index=True, return_counts=True)
    weight = counts.astype(np.float64)
    ops = np.asarray(ops)[first]
    sub_ok = allowed[ops]
    oi, di = np.nonzero(sub_ok)
    V = len(oi)
    t = times[ops][oi, di] * weight[oi]
    pool = np.asarray(pools)[di]
    P = int(np.max(pools)) + 1
    # equality: sum_d x[o, d] = 1
    A_eq = coo_matrix((np.ones(V), (oi, np.arange(V))), shape=(len(ops), V + 1)).tocsr()
    rows = [pool]
    cols = [np.arange(V)]
    vals = [t]
    rows.append(np.arange(P))
    cols.append(np.full(P, V))
    vals.append(-np.ones(P))
    b_ub = [np.zeros(P)]
    nrows = P
    if param_bytes is not None and capacity is not None:
        pb = np.asarray(param_bytes, dtype=np.float64)[ops][oi] * weight[oi]
        D = times.shape[1]
        scale = max(float(np.max(capacity)), 1.0)
        rows.append(P + di)
        cols.append(np.arange(V))
        vals.append(pb / scale)
        b_ub.append(np.asarray(capacity, dtype=np.float64) / scale)
        nrows += D
    A_ub = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(nrows, V + 1)).tocsr()
    c = np.zeros(V + 1)
    c[-1] = 1.0
    res = linprog(c, A_ub=A_ub, b_ub=np.concatenate(b_ub), A_eq=A_eq, b_eq=np.ones(len(ops)),
                  bounds=(0, None), method="highs")
    if res.status == 2:
        return float("inf")
    if res.status != 0:
        raise RuntimeError(f"load-balance LP: HiGHS status {res.status}: {res.message}")
    # HiGHS' primal value up to its feasibility tolerance; shave a relative 1e-9 so the bound stays below
    return float(res.fun) * (1 - 1e-9)


def lower_bound(graph: OpGraph, spec: ClusterSpec, op_times: np.ndarray | None = None, thresholds: int = 4,
                memory: bool = True) -> LowerBound:
    """Lower bounds on the step time of every placement of ``graph`` on ``spec`` (module docstring).

    Args:
        graph: the op graph.
        spec: the cluster.
        op_times: optional ``[num_ops, num_devices]`` seconds replacing the roofline (use the
            same as the environment's).
        thresholds: number of thresholds ``tau`` tried by the head/tail bound (c); 0 skips it.
        memory: compute the memory-constrained LP (d).
    Returns:
        a [`LowerBound`][baselines.bounds.LowerBound] (seconds).
    """
    start = time.perf_counter()
    times = op_time_matrix(graph, spec) if op_times is None else np.asarray(op_times, dtype=np.float64)
    ok = allowed_devices(graph, spec)
    tmin = np.where(ok, times, np.inf).min(axis=1)
    pools = spec.pool_indices
    head, tail = _path_heads_tails(graph, tmin)
    path = float((head + tmin).max(initial=0.0)) * (1 - 1e-12)  # float sums in another order than the simulator's
    load = load_lp(times, ok, pools)
    head_tail = 0.0
    if thresholds > 0 and graph.num_ops:
        def grid(arr):
            pos = arr[arr > 0]
            return [0.0, *np.unique(np.quantile(pos, np.linspace(0.1, 0.9, thresholds)))] if len(pos) else [0.0]

        for t1 in grid(head):  # window: ops with head >= t1 and tail >= t2 run inside [t1, step - t2]
            for t2 in grid(tail):
                if t1 == 0.0 and t2 == 0.0:
                    continue
                sel = np.flatnonzero((head >= t1) & (tail >= t2))
                if len(sel) == 0:  # no op in the window: nothing to bound
                    continue
                head_tail = max(head_tail, float(t1) + float(t2) + load_lp(times, ok, pools, sel))
    mem = 0.0
    if memory:
        param = np.array([op.param_bytes for op in graph.ops], dtype=np.float64)
        cap = np.array([d.memory_bytes for d in spec.devices], dtype=np.float64)
        mem = load_lp(times, ok, pools, param_bytes=param, capacity=cap)
    anyp = max(path, load, head_tail)
    return LowerBound(value_s=max(anyp, mem), any_placement_s=anyp, path_s=path, load_s=load, head_tail_s=head_tail,
                      memory_load_s=mem, seconds=time.perf_counter() - start)
