"""Baechi's memory-constrained list-scheduling placers: m-TOPO, m-ETF and m-SCT.

Jeon, Cai, Srivastava, Jiang, Ke, Lin, Lu, Tian, Gupta, "Baechi: Fast Device Placement of
Machine Learning Graphs", SoCC 2020 (Sec. 3: m-TOPO, m-ETF, m-SCT; Sec. 4: colocation and
memory), and its reference implementation github.com/beomyeol/baechi (``placer/m_topo.py``,
``placer/m_etf.py``, ``placer/m_sct.py``, ``placer/placer_utils.py``), which this module
follows; deviations are listed per function.

All three place the **op graph** (not the 2017 groups), one TensorFlow colocation unit
(:func:`compgraph.grouping.colocation_units`) at a time: the first op of a unit to be placed
takes its whole unit with it (Baechi's ``TopoWithColocation`` / ``ETF._run_schedule_step``
"place all ops in the same group"). They return ``[num_ops]`` device indices.

Devices: like Baechi's experiments, the GPUs (every device when the cluster has none); a
unit holding an op with no GPU kernel goes to the first CPU. Costs are this project's: op
``o`` takes ``t(o, d)`` (:func:`cluster.cost_model.op_time_matrix`), a tensor of ``b``
bytes takes ``latency + b / bandwidth`` on the link ``(a, c)``, each ordered device pair is
one FIFO channel, a tensor is sent once per destination device, and devices of one
``compute_pool`` share one executor (:mod:`cluster.simulator`'s semantics).

Memory (Baechi Sec. 4, ``ETFDevice``): a unit may go to a device only if the device's
used memory plus the unit's resident bytes (``param_bytes``) plus its largest op output
(``alloc_bytes``, Baechi's reservation of the largest temporary/output) fits the device's
``memory_bytes``; used memory is the resident bytes of the units placed there plus the
outputs (and received copies) live in the schedule being built, freed when every consumer
of the tensor has been scheduled. If no device can take a unit, it goes to the device with
the most free memory (the simulator then reports the OOM).
"""

from __future__ import annotations

import heapq

import numpy as np

from cluster.cost_model import op_time_matrix
from cluster.spec import ClusterSpec
from compgraph.grouping import colocation_units
from compgraph.ir import OpGraph


class _Problem:
    """The op graph, its colocation units and the devices, as plain arrays for the placers."""

    def __init__(self, graph: OpGraph, spec: ClusterSpec, op_times: np.ndarray | None = None) -> None:
        self.graph, self.spec = graph, spec
        n, D = graph.num_ops, len(spec.devices)
        self.n, self.D = n, D
        self.times = op_time_matrix(graph, spec) if op_times is None else np.asarray(op_times, dtype=np.float64)
        labels = colocation_units(graph).labels()
        unit_of: dict[int, int] = {}
        for op in graph.topological_order.tolist():
            unit_of.setdefault(labels[op], len(unit_of))
        self.unit = np.array([unit_of[labels[i]] for i in range(n)], dtype=np.int64)
        self.num_units = len(unit_of)
        self.unit_ops: list[list[int]] = [[] for _ in range(self.num_units)]
        for i, u in enumerate(self.unit.tolist()):
            self.unit_ops[u].append(i)
        self.alloc = np.array([int(op.alloc_bytes) for op in graph.ops], dtype=np.int64)
        self.param = np.array([int(op.param_bytes) for op in graph.ops], dtype=np.int64)
        self.unit_param = np.zeros(self.num_units, dtype=np.int64)
        np.add.at(self.unit_param, self.unit, self.param)
        self.unit_alloc_max = np.zeros(self.num_units, dtype=np.int64)
        np.maximum.at(self.unit_alloc_max, self.unit, self.alloc)
        gpu_ok = np.ones(self.num_units, dtype=bool)
        for i, op in enumerate(graph.ops):
            if not op.gpu_kernel:
                gpu_ok[self.unit[i]] = False
        gpus, cpus = spec.gpu_indices, spec.cpu_indices
        self.devices = list(gpus) if gpus else list(range(D))
        self.unit_devices = [self.devices if (ok or not cpus) else [cpus[0]] for ok in gpu_ok.tolist()]
        self.capacity = np.array([d.memory_bytes for d in spec.devices], dtype=np.float64)
        self.pool = spec.pool_indices
        self.bw = np.ones((D, D))
        self.lat = np.zeros((D, D))
        for a in range(D):
            for b in range(D):
                if a != b:
                    link = spec.link(a, b)
                    self.bw[a, b], self.lat[a, b] = link.bandwidth, link.latency_s
        # predecessors (src, output or -1 for control, bytes) and successors of each op
        self.preds: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        self.data_consumers = np.zeros(n, dtype=np.int64)
        for e in graph.edges:
            out = -1 if e.control else e.src_output
            self.preds[e.dst].append((e.src, out, int(e.bytes)))
            self.succs[e.src].append(e.dst)
            if out >= 0:
                self.data_consumers[e.src] += 1
        self.rank = np.empty(n, dtype=np.int64)
        self.rank[graph.topological_order] = np.arange(n)


def m_topo(graph: OpGraph, spec: ClusterSpec, op_times: np.ndarray | None = None) -> np.ndarray:
    """m-TOPO (Baechi Sec. 3.1, ``TopoUniformWithColocation``): walk the ops in topological order
    and fill the devices one after the other, each up to an equal share of the memory.

    Each device takes units until its used memory plus the next unit's memory would reach
    ``total / num_devices + largest op`` (Baechi's ``_calculate_max_memory_per_device``;
    an op's memory is its ``alloc_bytes + param_bytes``, a unit's the sum of its resident
    bytes plus its largest ``alloc_bytes``), or its ``memory_bytes``. Deviation: units left
    over after the last device (Baechi raises) go to the last device.

    Returns:
        int64 ``[num_ops]`` device indices.
    """
    p = _Problem(graph, spec, op_times)
    op_mem = p.alloc + p.param
    share = float(op_mem.sum()) / len(p.devices) + float(op_mem.max(initial=0))
    place = np.full(p.n, -1, dtype=np.int64)
    order = graph.topological_order.tolist()
    di, used = 0, 0.0
    for op in order:
        u = int(p.unit[op])
        if place[op] >= 0:
            continue
        allowed = p.unit_devices[u]
        if allowed is not p.devices:  # a CPU-only unit
            place[p.unit_ops[u]] = allowed[0]
            continue
        need = float(p.unit_param[u] + p.unit_alloc_max[u])
        while di < len(p.devices) - 1 and used + need >= min(share, p.capacity[p.devices[di]]) and used > 0:
            di, used = di + 1, 0.0
        place[p.unit_ops[u]] = p.devices[di]
        used += need
    return place


class _ListScheduler:
    """ETF list scheduling with memory constraints (Baechi Sec. 3.2 m-ETF; Hwang, Chow, Anger,
    Lee, "Scheduling precedence graphs in systems with interprocessor communication times",
    SIAM J. Comput. 1989): repeatedly start the (ready op, device) pair that can start earliest.

    Implementation: per device, heaps of the ready ops by data-ready time (see
    :meth:`proposal`); each step takes the device whose next op starts first (ties: the
    topologically first op), with lazy re-evaluation (Baechi recomputes every ready op's
    start on every event instead; the choices are the same up to channel-contention
    estimates).
    """

    def __init__(self, p: _Problem, favorite: np.ndarray | None = None) -> None:
        self.p = p
        self.favorite = favorite  # m-SCT: favorite child of each op, -1 for none
        n, D = p.n, p.D
        self.place = np.full(n, -1, dtype=np.int64)
        self.unit_dev = np.full(p.num_units, -1, dtype=np.int64)
        self.end = np.zeros(n)
        self.done = np.zeros(n, dtype=bool)
        self.pool_free = [0.0] * (max(p.pool) + 1)
        self.chan_free = np.zeros((D, D))
        self.sent: dict[tuple[int, int, int], float] = {}
        self.used = np.zeros(D)
        self.consumers_left = p.data_consumers.copy()
        self.copies: dict[int, list[tuple[int, int]]] = {}  # producer -> (device, bytes) of received copies
        self.reserved = [-1] * len(self.pool_free)  # m-SCT: favorite child a pool waits for

    # -- costs ---------------------------------------------------------------------------
    def data_ready(self, op: int, d: int, commit: bool = False) -> float:
        p, place = self.p, self.place
        t = 0.0
        chan: dict[int, float] = {}
        for src, out, nbytes in sorted(p.preds[op], key=lambda x: self.end[x[0]]):
            a = int(place[src])
            if a == d:
                t = max(t, self.end[src])
                continue
            key = (src, out, d)
            arr = self.sent.get(key)
            if arr is None:
                c = max(chan.get(a, self.chan_free[a, d]), self.end[src])
                arr = c + p.lat[a, d] + nbytes / p.bw[a, d]
                chan[a] = arr
                if commit:
                    self.sent[key] = arr
                    self.chan_free[a, d] = arr
                    if out >= 0:
                        ob = p.graph.ops[src].output_bytes
                        size = ob[out] if out < len(ob) else nbytes
                        self.copies.setdefault(src, []).append((d, size))
                        self.used[d] += size
            t = max(t, arr)
        return t

    def start_time(self, op: int, d: int) -> float:
        return max(self.data_ready(op, d), self.pool_free[self.p.pool[d]])

    def unit_fits(self, u: int, d: int) -> bool:
        p = self.p
        return self.used[d] + p.unit_param[u] + p.unit_alloc_max[u] <= p.capacity[d]

    def candidates(self, op: int) -> list[int]:
        u = int(self.p.unit[op])
        if self.unit_dev[u] >= 0:
            return [int(self.unit_dev[u])]
        fits = [d for d in self.p.unit_devices[u] if self.unit_fits(u, d)]
        if fits:
            return fits
        allowed = self.p.unit_devices[u]
        return [max(allowed, key=lambda d: (self.p.capacity[d] - self.used[d], -d))]

    # -- schedule ------------------------------------------------------------------------
    def commit(self, op: int, d: int) -> None:
        p = self.p
        u = int(p.unit[op])
        if self.unit_dev[u] < 0:
            self.unit_dev[u] = d
            self.place[p.unit_ops[u]] = d
            self.used[d] += p.unit_param[u]
        start = max(self.data_ready(op, d, commit=True), self.pool_free[p.pool[d]])
        self.end[op] = start + p.times[op, d]
        self.pool_free[p.pool[d]] = self.end[op]
        self.done[op] = True
        self.used[d] += p.alloc[op]
        if self.consumers_left[op] == 0:
            self.used[d] -= p.alloc[op]
        for src, out, _ in p.preds[op]:
            if out < 0:
                continue
            self.consumers_left[src] -= 1
            if self.consumers_left[src] == 0:
                self.used[self.place[src]] -= p.alloc[src]
                for c, size in self.copies.pop(src, []):
                    self.used[c] -= size
        if self.favorite is not None and self.favorite[op] >= 0:
            self.reserved[p.pool[d]] = int(self.favorite[op])

    def favorite_waiting(self, d: int) -> int:
        """m-SCT: the favorite child device ``d``'s pool waits for (Baechi's AWAKE state), else -1:
        the last op run there has a favorite child that is ready, not yet run, and starts
        earliest on ``d``."""
        f = self.reserved[self.p.pool[d]]
        if f < 0 or self.done[f] or not self.is_ready[f]:
            return -1
        cands = self.candidates(f)
        if d not in cands:
            return -1
        tf = {c: self.start_time(f, c) for c in cands}
        return f if tf[d] <= min(tf.values()) else -1

    def proposal(self, d: int):
        """Device ``d``'s next op: ``(start, rank, op)`` or ``None``.

        Per device, ready ops wait in ``waiting[d]`` keyed by (data-ready time, rank) until the
        device's pool is free at their data-ready time, then in ``avail[d]`` keyed by rank:
        the op starting first on ``d``, ties to the topologically first (Baechi's
        ``TimestampOpTuple`` order). Entries are validated lazily (unit placed elsewhere, no
        room, data-ready time grown by channel contention)."""
        p = self.p
        waiting, avail = self.waiting[d], self.avail[d]
        pf = self.pool_free[p.pool[d]]
        while True:
            while waiting and waiting[0][0] <= pf:
                _, r, op = heapq.heappop(waiting)
                heapq.heappush(avail, (r, op))
            top = None
            if avail:
                r, op = avail[0]
                if not self.valid(op, d):
                    heapq.heappop(avail)
                    self.drop(op)
                    continue
                dr = self.data_ready(op, d)
                if dr > pf:
                    heapq.heappop(avail)
                    heapq.heappush(waiting, (dr, r, op))
                    continue
                top = (pf, r, op)
            elif waiting:
                dr0, r, op = waiting[0]
                if not self.valid(op, d):
                    heapq.heappop(waiting)
                    self.drop(op)
                    continue
                dr = self.data_ready(op, d)
                if dr > dr0:
                    heapq.heapreplace(waiting, (dr, r, op))
                    continue
                top = (dr, r, op)
            break
        if self.favorite is not None:
            f = self.favorite_waiting(d)
            if f >= 0 and (top is None or top[2] != f):
                if top is not None:  # an urgent op may still run: no device would start it later
                    urgent = max(self.start_time(top[2], c) for c in self.candidates(top[2]))
                    if urgent <= top[0]:
                        return top
                return (self.start_time(f, d), int(p.rank[f]), f)
        return top

    def valid(self, op: int, d: int) -> bool:
        if self.done[op]:
            return False
        u = int(self.p.unit[op])
        if self.unit_dev[u] >= 0:
            return self.unit_dev[u] == d
        return d in self.candidates(op)

    def drop(self, op: int) -> None:
        """An entry of ``op`` was dropped; if it was its last, queue it again where it may go now."""
        self.live[op] -= 1
        if self.live[op] <= 0 and not self.done[op]:
            self.push(op)

    def push(self, op: int) -> None:
        cands = self.candidates(op)
        self.live[op] = len(cands)
        for d in cands:
            heapq.heappush(self.waiting[d], (self.data_ready(op, d), int(self.p.rank[op]), op))

    def run(self) -> np.ndarray:
        p = self.p
        pending = np.array([len(x) for x in p.preds], dtype=np.int64)
        self.is_ready = pending == 0
        self.live = np.zeros(p.n, dtype=np.int64)
        self.waiting: list[list] = [[] for _ in range(p.D)]
        self.avail: list[list] = [[] for _ in range(p.D)]
        for op in np.flatnonzero(pending == 0).tolist():
            self.push(op)
        scheduled = 0
        while scheduled < p.n:
            best, best_d = None, -1
            for d in range(p.D):
                prop = self.proposal(d)
                if prop is not None and (best is None or prop[:2] < best[:2]):
                    best, best_d = prop, d
            if best is None:
                if any(self.waiting[d] or self.avail[d] for d in range(p.D)):
                    continue  # a dropped entry was queued again on a device polled before
                break
            op = best[2]
            self.commit(op, best_d)
            scheduled += 1
            for s in p.succs[op]:
                pending[s] -= 1
                if pending[s] == 0:
                    self.is_ready[s] = True
                    self.push(s)
        if scheduled != p.n:
            raise RuntimeError(f"list scheduling stalled: {scheduled} of {p.n} ops scheduled")
        self.makespan = float(self.end.max(initial=0.0))
        return self.place


def _memory_checked(p: _Problem, favorite: np.ndarray | None, rounds: int = 6) -> np.ndarray:
    """Run the list scheduler; if the simulator finds a device over its memory (its FIFO order
    keeps other activations alive than the schedule did), run again with that device's
    budget lowered by the excess plus 1% of its capacity, up to ``rounds`` times.

    Not in Baechi (whose memory accounting is its own schedule's): it makes m-ETF / m-SCT
    placements fit in the memory the simulator measures, whenever a few rounds find one."""
    from cluster.fast_simulator import FastSimulator

    capacity = p.capacity.copy()
    sim = FastSimulator(p.graph, p.spec, op_times=p.times)
    place = np.zeros(0, dtype=np.int64)
    for _ in range(max(rounds, 1)):
        place = _ListScheduler(p, favorite).run()
        r = sim.run_arrays(place[None, :])
        if not r.oom[0]:
            break
        over = r.peak_memory_bytes[0] - capacity
        p.capacity = np.where(over > 0, p.capacity - over - 0.01 * capacity, p.capacity)
    p.capacity = capacity
    return place


def m_etf(graph: OpGraph, spec: ClusterSpec, op_times: np.ndarray | None = None) -> np.ndarray:
    """m-ETF (Baechi Sec. 3.2, ``placer/m_etf.py`` with colocation and memory): earliest task
    first list scheduling in which a unit may only go to a device with room for it (checked
    against the simulator, :func:`_memory_checked`).

    Returns:
        int64 ``[num_ops]`` device indices.
    """
    return _memory_checked(_Problem(graph, spec, op_times), None)


def favorite_children(p: _Problem, threshold: float = 0.5) -> np.ndarray:
    """Baechi's favorite-child LP (Sec. 3.3; ``FavoriteChildLPSolver``), solved with HiGHS.

    Variables: ``x_e`` in [0, 1] per edge (0: the child is its parent's favorite, no
    communication), start times ``s_i >= 0``, makespan ``w``. Minimise ``w`` subject to
    ``s_i + p_i + c_e x_e <= s_j`` per edge ``e = (i, j)``, ``sum_j x_ij >= outdeg(i) - 1``
    (at most one favorite child), ``sum_i x_ij >= indeg(j) - 1`` (at most one favorite
    parent), ``s_i + p_i <= w``. ``p_i``: the op's time on its fastest allowed device;
    ``c_e``: the transfer time of the edge's bytes over the mean link between the placer's
    devices. Rounding as Baechi: ``x_e < threshold`` marks a favorite; where rounding gives a
    node two favorites (Baechi's TODO), the smallest ``x_e`` wins.

    Returns:
        int64 ``[num_ops]``: each op's favorite child, ``-1`` for none.
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    n = p.n
    pairs: dict[tuple[int, int], int] = {}
    for dst, preds in enumerate(p.preds):
        for src, _, nbytes in preds:
            pairs[(src, dst)] = pairs.get((src, dst), 0) + nbytes
    fav = np.full(n, -1, dtype=np.int64)
    if not pairs:
        return fav
    edges = list(pairs.items())
    E = len(edges)
    devs = p.devices
    if len(devs) > 1:
        lat = np.mean([p.lat[a, b] for a in devs for b in devs if a != b])
        inv_bw = np.mean([1.0 / p.bw[a, b] for a in devs for b in devs if a != b])
    else:
        lat, inv_bw = 0.0, 0.0
    w_op = np.array([p.times[i, p.unit_devices[int(p.unit[i])]].min() for i in range(n)])
    rows, cols, vals, rhs = [], [], [], []
    r = 0
    for k, ((a, b), nbytes) in enumerate(edges):  # s_a - s_b + c x_e <= -p_a
        rows += [r, r, r]
        cols += [E + a, E + b, k]
        vals += [1.0, -1.0, lat + nbytes * inv_bw]
        rhs.append(-w_op[a])
        r += 1
    out_e: dict[int, list[int]] = {}
    in_e: dict[int, list[int]] = {}
    for k, ((a, b), _) in enumerate(edges):
        out_e.setdefault(a, []).append(k)
        in_e.setdefault(b, []).append(k)
    for group in (out_e, in_e):
        for ks in group.values():  # -sum x <= 1 - deg
            rows += [r] * len(ks)
            cols += ks
            vals += [-1.0] * len(ks)
            rhs.append(1.0 - len(ks))
            r += 1
    for i in range(n):  # s_i - w <= -p_i
        rows += [r, r]
        cols += [E + i, E + n]
        vals += [1.0, -1.0]
        rhs.append(-w_op[i])
        r += 1
    A = coo_matrix((vals, (rows, cols)), shape=(r, E + n + 1)).tocsr()
    c = np.zeros(E + n + 1)
    c[-1] = 1.0
    bounds = [(0.0, 1.0)] * E + [(0.0, None)] * (n + 1)
    res = linprog(c, A_ub=A, b_ub=np.array(rhs), bounds=bounds, method="highs")
    if res.status != 0:
        return fav
    x = res.x[:E]
    best_x = np.full(n, np.inf)
    parent_x = np.full(n, np.inf)
    for k in np.argsort(x, kind="stable").tolist():
        if x[k] >= threshold:
            break
        (a, b), _ = edges[k]
        if fav[a] < 0 and parent_x[b] == np.inf:
            fav[a] = b
            best_x[a] = x[k]
            parent_x[b] = x[k]
    return fav


def m_sct(graph: OpGraph, spec: ClusterSpec, op_times: np.ndarray | None = None, threshold: float = 0.5) -> np.ndarray:
    """m-SCT (Baechi Sec. 3.3, ``placer/m_sct.py``): m-ETF in which a device that ran an op
    whose favorite child (:func:`favorite_children`) is ready and starts earliest there waits
    for that child, running meanwhile only urgent ops (ops whose start time is no earlier
    on any device, Baechi's ``urgent_ts``).

    Returns:
        int64 ``[num_ops]`` device indices.
    """
    p = _Problem(graph, spec, op_times)
    return _memory_checked(p, favorite_children(p, threshold))
