"""Baechi's memory-constrained list-scheduling placers: m-TOPO, m-ETF and m-SCT.

Jeon, Cai, Srivastava, Jiang, Ke, Lin, Lu, Tian, Gupta, "Baechi: Fast Device Placement of
Machine Learning Graphs", SoCC 2020 (Sec. 3: m-TOPO, m-ETF, m-SCT; Sec. 4: colocation and
memory), and its reference implementation github.com/beomyeol/baechi (``placer/m_topo.py``,
``placer/m_etf.py``, ``placer/m_sct.py``, ``placer/placer_utils.py``), which this module
follows; deviations are listed per function.

All three place the **op graph** (not the 2017 groups), one TensorFlow colocation unit
([`compgraph.grouping.colocation_units`][compgraph.grouping.colocation_units]) at a time: the first op of a unit to be placed
takes its whole unit with it (Baechi's ``TopoWithColocation`` / ``ETF._run_schedule_step``
"place all ops in the same group"). They return ``[num_ops]`` device indices.

Devices: like Baechi's experiments, the GPUs (every device when the cluster has none); a
unit holding an op with no GPU kernel goes to the first CPU. Costs are this project's: op
``o`` takes ``t(o, d)`` ([`cluster.cost_model.op_time_matrix`][cluster.cost_model.op_time_matrix]), a tensor of ``b``
bytes takes ``latency + b / bandwidth`` on the link ``(a, c)`` (a control edge is a 4-byte
tensor, as Baechi's ``placer_lib.PlacementGraphGenerator._add_edges``), a tensor is sent once
per destination device, and devices of one ``compute_pool`` share one executor. The schedule
the placers build models the links as Baechi does (``placer/device.py``,
``DeviceWrapper.send_tensor`` / ``recv_tensor``): each device has **one** channel that its
sends and its receives share, a transfer holds the sender's channel from when it starts and
the receiver's from ``max(send start, receiver's channel free)``, each for the transfer's
time (``channels="device"``, the default). ``channels="pair"`` is this project's option (not
Baechi's): each ordered device pair is one FIFO channel, as [`cluster.simulator`][cluster.simulator] runs it.
Ties between ops that may start at the same time go to the op first in Baechi's
``topo_order`` ([`baechi_topo_order`][baselines.baechi.baechi_topo_order]).

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
from collections import deque

import numpy as np

from cluster.cost_model import op_time_matrix
from cluster.spec import ClusterSpec
from compgraph.grouping import colocation_units
from compgraph.ir import OpGraph


def baechi_topo_order(graph: OpGraph) -> np.ndarray:
    """Each op's position in Baechi's ``topo_order`` (``placer/placer_utils.py``,
    ``assign_topo_order``): Kahn's algorithm with a FIFO queue, started with the ops without
    inputs in op order, each op's consumers visited in op order (the order in which
    ``placer_lib`` adds the edges of a TensorFlow graph). Baechi breaks every tie of its
    schedulers with it (``TimestampOpTuple``); the lexicographic order of
    [`compgraph.ir.OpGraph.topological_order`][compgraph.ir.OpGraph.topological_order] is another order, and the schedules differ
    from the first tie on.

    Returns:
        int64 ``[num_ops]``: the rank of each op.
    """
    n = graph.num_ops
    succ: list[set[int]] = [set() for _ in range(n)]
    for e in graph.edges:
        succ[e.src].add(e.dst)
    indeg = np.zeros(n, dtype=np.int64)
    for s in succ:
        for v in s:
            indeg[v] += 1
    queue = deque(i for i in range(n) if indeg[i] == 0)
    rank = np.full(n, -1, dtype=np.int64)
    k = 0
    while queue:
        u = queue.popleft()
        rank[u] = k
        k += 1
        for v in sorted(succ[u]):
            indeg[v] -= 1
            if indeg[v] == 0:
                queue.append(v)
    if k != n:
        raise ValueError(f"{graph.name}: the graph has a cycle")
    return rank


US = 1e6  # seconds -> microseconds: Baechi's costs and clock (placer_lib.get_comm_cost, op durations)
CONTROL_BYTES = 4  # a control edge's tensor (Baechi's placer_lib._add_edges: comm_cost_fn(4))


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
        # predecessors (src, output or -1 for control, bytes) and successors of each op: data
        # inputs before control inputs, a control edge a 4-byte tensor (Baechi's _add_edges)
        self.preds: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        self.data_consumers = np.zeros(n, dtype=np.int64)
        for e in sorted(graph.edges, key=lambda e: e.control):
            out = -1 if e.control else e.src_output
            self.preds[e.dst].append((e.src, out, CONTROL_BYTES if e.control else int(e.bytes)))
            self.succs[e.src].append(e.dst)
            if out >= 0:
                self.data_consumers[e.src] += 1
        self.rank = baechi_topo_order(graph)


def m_topo(graph: OpGraph, spec: ClusterSpec, op_times: np.ndarray | None = None) -> np.ndarray:
    """m-TOPO (Baechi Sec. 3.1, ``TopoUniformWithColocation``): walk the ops in topological order
    and fill the devices one after the other, each up to an equal share of the memory.

    Each device takes units until its used memory plus the next unit's memory would reach
    ``total / num_devices + largest op`` (Baechi's ``_calculate_max_memory_per_device``;
    an op's memory is its ``alloc_bytes + param_bytes``, a unit's the sum of its resident
    bytes plus its largest ``alloc_bytes``), or its ``memory_bytes``. Deviation: units left
    over after the last device (Baechi raises) go to the last device. Deviation, measured
    (``benchmarks/baechi_reference.py``): Baechi checks a unit by that memory but then counts
    the memory of every op of the unit (``DeviceWrapper.place_op``), so its devices fill
    sooner and it spreads the ops over every GPU; counting a unit once, as here, leaves more
    on the first devices (on small inception_v3, k80x2: 4230 / 1297 ops against Baechi's
    3020 / 2507), fewer transfers, and a step 0.47x to 0.94x Baechi's on the small graphs.

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
    `proposal`); each step takes the device whose next op starts first (ties: the op
    first in Baechi's ``topo_order``), with lazy re-evaluation (Baechi's ``ETF`` recomputes
    every ready op's start on every event instead; the choices are the same up to
    channel-contention estimates). ``channels``: ``"device"`` (Baechi's links, module
    docstring) or ``"pair"`` (the simulator's).
    """

    def __init__(self, p: _Problem, favorite: np.ndarray | None = None, channels: str = "device") -> None:
        if channels not in ("device", "pair"):
            raise ValueError(f"channels: {channels!r}; valid: device, pair")
        self.p = p
        self.favorite = favorite  # m-SCT: favorite child of each op, -1 for none
        self.channels = channels
        n, D = p.n, p.D
        self.place = np.full(n, -1, dtype=np.int64)
        self.unit_dev = np.full(p.num_units, -1, dtype=np.int64)
        self.end = np.zeros(n)
        self.done = np.zeros(n, dtype=bool)
        self.pool_free = [0.0] * (max(p.pool) + 1)
        self.chan_free = np.zeros((D, D))  # channels="pair": per ordered pair
        self.dev_chan = np.zeros(D)  # channels="device": per device, sends and receives
        self.sent: dict[tuple[int, int, int], float] = {}
        self.used = np.zeros(D)
        self.consumers_left = p.data_consumers.copy()
        self.copies: dict[int, list[tuple[int, int]]] = {}  # producer -> (device, bytes) of received copies
        self.reserved = [-1] * len(self.pool_free)  # m-SCT: favorite child of the last op a pool ran
        self.ready_ops: set[int] = set()  # ready, not yet scheduled
        self.op_us = p.times * US  # the schedule's clock runs in microseconds, Baechi's unit

    # -- costs ---------------------------------------------------------------------------
    def _received(self, src: int, out: int, nbytes: int, d: int) -> None:
        if out >= 0:
            ob = self.p.graph.ops[src].output_bytes
            size = ob[out] if out < len(ob) else nbytes
            self.copies.setdefault(src, []).append((d, size))
            self.used[d] += size

    def data_ready(self, op: int, d: int, commit: bool = False) -> float:
        if self.channels == "pair":
            return self._data_ready_pair(op, d, commit)
        return self._data_ready_device(op, d, commit)

    def _data_ready_device(self, op: int, d: int, commit: bool) -> float:
        """Baechi's ``ReadyOpManager.get_ready_ts``: per producer, in op order (the order of
        the in-edges after ``prune_dangling_ops`` rebuilds the graph), the tensors not yet on
        ``d`` go over the producer's device channel and then ``d``'s; an estimate
        (``dry_run``) sends them as one merged tensor against the channels as they are, a
        commit one by one, holding the channels (so a commit may start later than estimated)."""
        p, place = self.p, self.place
        t = 0.0
        by_src: dict[int, list[tuple[int, int]]] = {}
        for src, out, nbytes in p.preds[op]:
            by_src.setdefault(src, []).append((out, nbytes))
        for src, tensors in sorted(by_src.items()):
            a = int(place[src])
            if a == d:
                t = max(t, self.end[src])
                continue
            todo = []
            for out, nbytes in tensors:
                arr = self.sent.get((src, out, d))
                if arr is None:
                    todo.append((out, nbytes))
                else:
                    t = max(t, arr)
            if not todo:
                continue
            lat, bw = p.lat[a, d], p.bw[a, d]
            if not commit:
                send = max(self.end[src], self.dev_chan[a])
                t = max(t, max(send, self.dev_chan[d]) + sum(US * (lat + nb / bw) for _, nb in todo))
                continue
            for out, nbytes in todo:
                cost = US * (lat + nbytes / bw)
                send = max(self.end[src], self.dev_chan[a])
                self.dev_chan[a] = send + cost
                arr = max(send, self.dev_chan[d]) + cost
                self.dev_chan[d] = arr
                self.sent[(src, out, d)] = arr
                self._received(src, out, nbytes, d)
                t = max(t, arr)
        return t

    def _data_ready_pair(self, op: int, d: int, commit: bool) -> float:
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
                arr = c + US * (p.lat[a, d] + nbytes / p.bw[a, d])
                chan[a] = arr
                if commit:
                    self.sent[key] = arr
                    self.chan_free[a, d] = arr
                    self._received(src, out, nbytes, d)
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
    def commit(self, op: int, d: int, not_before: float = 0.0) -> None:
        p = self.p
        u = int(p.unit[op])
        if self.unit_dev[u] < 0:
            self.unit_dev[u] = d
            self.place[p.unit_ops[u]] = d
            self.used[d] += p.unit_param[u]
        start = max(self.data_ready(op, d, commit=True), self.pool_free[p.pool[d]], not_before)
        self.end[op] = start + self.op_us[op, d]
        self.pool_free[p.pool[d]] = self.end[op]
        self.done[op] = True
        self.ready_ops.discard(op)
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
        if self.favorite is not None:  # Baechi's SCTDevice looks at the last op it ran, favorite or not
            self.reserved[p.pool[d]] = int(self.favorite[op])

    def favorite_waiting(self, d: int) -> int:
        """m-SCT: the favorite child device ``d``'s pool waits for (Baechi's AWAKE state,
        ``SCTDevice.get_op_to_schedule``), else -1: the last op run there has a favorite child
        that is ready, whose unit is not placed yet, and that starts earliest on ``d``."""
        f = self.reserved[self.p.pool[d]]
        if f < 0 or self.done[f] or not self.is_ready[f] or self.unit_dev[self.p.unit[f]] >= 0:
            return -1
        cands = self.candidates(f)
        if d not in cands:
            return -1
        tf = {c: self.start_time(f, c) for c in cands}
        return f if tf[d] <= min(tf.values()) else -1

    def most_urgent(self, d: int) -> tuple[int, float]:
        """m-SCT: the ready op device ``d`` may run whose latest start over its devices
        (Baechi's ``urgent_ts``, ``ReadyOpManager._populate_schedule_tss``) is earliest, ties
        to the first in ``topo_order`` (``SCTDevice._get_earliest_urgent_op``); ``(-1, inf)`` if none."""
        best: tuple[float, int, int] = (np.inf, -1, -1)
        for op in self.ready_ops:
            u = int(self.p.unit[op])
            if self.unit_dev[u] >= 0 and self.unit_dev[u] != d:
                continue
            cands = self.candidates(op)
            if d not in cands:
                continue
            key = (max(self.start_time(op, c) for c in cands), int(self.p.rank[op]), op)
            if key < best:
                best = key
        return best[2], best[0]

    def proposal(self, d: int):
        """Device ``d``'s next op: ``(start, rank, op, not_before)`` or ``None``.

        Per device, ready ops wait in ``waiting[d]`` keyed by (data-ready time, rank) until the
        device's pool is free at their data-ready time, then in ``avail[d]`` keyed by rank:
        the op starting first on ``d``, ties to the first in ``topo_order`` (Baechi's
        ``TimestampOpTuple`` order). Entries are validated lazily (unit placed elsewhere, no
        room, data-ready time grown by channel contention).

        m-SCT (Baechi's ``SCTDevice``): a device whose last op's favorite child waits for it
        (`favorite_waiting`) runs the most urgent ready op (`most_urgent`) once
        that op cannot start later anywhere, if that comes no later than the favorite child's
        start, else the favorite child; it runs nothing else meanwhile."""
        p = self.p
        if self.favorite is not None:
            f = self.favorite_waiting(d)
            if f >= 0:
                sf = self.start_time(f, d)
                u, tu = self.most_urgent(d)
                if u >= 0 and tu <= sf:
                    t = max(tu, self.pool_free[p.pool[d]])
                    return (t, int(p.rank[u]), u, t)
                return (sf, int(p.rank[f]), f, 0.0)
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
                top = (pf, r, op, 0.0)
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
                top = (dr, r, op, 0.0)
            break
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
        self.ready_ops.add(op)
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
            self.commit(op, best_d, best[3])
            scheduled += 1
            for s in p.succs[op]:
                pending[s] -= 1
                if pending[s] == 0:
                    self.is_ready[s] = True
                    self.push(s)
        if scheduled != p.n:
            raise RuntimeError(f"list scheduling stalled: {scheduled} of {p.n} ops scheduled")
        self.makespan = float(self.end.max(initial=0.0)) / US  # seconds
        return self.place


def _memory_checked(p: _Problem, favorite: np.ndarray | None, rounds: int = 6, channels: str = "device") -> np.ndarray:
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
        place = _ListScheduler(p, favorite, channels).run()
        r = sim.run_arrays(place[None, :])
        if not r.oom[0]:
            break
        over = r.peak_memory_bytes[0] - capacity
        p.capacity = np.where(over > 0, p.capacity - over - 0.01 * capacity, p.capacity)
    p.capacity = capacity
    return place


def m_etf(graph: OpGraph, spec: ClusterSpec, op_times: np.ndarray | None = None, channels: str = "device") -> np.ndarray:
    """m-ETF (Baechi Sec. 3.2, ``placer/m_etf.py`` with colocation and memory): earliest task
    first list scheduling in which a unit may only go to a device with room for it (checked
    against the simulator, `_memory_checked`). ``channels``: the link model of the
    schedule (module docstring; ``"device"`` is Baechi's).

    Returns:
        int64 ``[num_ops]`` device indices.
    """
    return _memory_checked(_Problem(graph, spec, op_times), None, channels=channels)


SCT_THRESHOLD = 0.1  # Baechi's placer_lib flag --sct_threshold (the m_sct function's own default is 0.5)


def _lp_edges(p: _Problem) -> list[tuple[int, int, float]]:
    """Baechi's placement-graph edges ``(src, dst, weight)`` in their id order (ids as
    ``placer_utils.prune_dangling_ops`` renumbers them: by producer, then consumer), one edge
    per (producer, consumer) pair (``placer_lib._add_edges``), weighted by
    the transfer time of each distinct tensor it carries (a control edge a 4-byte tensor) over
    the mean link between the placer's devices (Baechi's one ``comm_cost_fn``), in
    microseconds (Baechi's unit, as the op times in the LP)."""
    devs = p.devices
    if len(devs) > 1:
        lat = float(np.mean([p.lat[a, b] for a in devs for b in devs if a != b]))
        inv_bw = float(np.mean([1.0 / p.bw[a, b] for a in devs for b in devs if a != b]))
    else:
        lat, inv_bw = 0.0, 0.0
    edges: dict[tuple[int, int], list] = {}
    for dst in range(p.n):
        for src, out, nbytes in p.preds[dst]:
            e = edges.setdefault((src, dst), [0.0, set()])
            if out not in e[1]:
                e[1].add(out)
                e[0] += lat + nbytes * inv_bw
    return [(a, b, w * 1e6) for (a, b), (w, _) in sorted(edges.items())]


def favorite_children(p: _Problem, threshold: float = SCT_THRESHOLD) -> np.ndarray:
    """Baechi's favorite-child LP (Sec. 3.3; ``placer/m_sct.py``, ``FavoriteChildLPSolver`` and
    ``SCT._assign_favorite_child``), solved with HiGHS (Baechi calls MOSEK through cvxopt).

    Variables, in Baechi's order: ``x_e`` per edge (0: the child is its parent's favorite, no
    communication), start times ``s_i``, makespan ``w``. Minimise ``w`` subject to, in
    Baechi's row order, ``0 <= x_e <= 1``, ``s_i >= 0``, ``s_i + p_i + c_e x_e <= s_j`` per
    edge ``e = (i, j)`` (`_lp_edges`), ``sum_j x_ij >= outdeg(i) - 1`` (at most one
    favorite child), ``sum_i x_ij >= indeg(j) - 1`` (at most one favorite parent),
    ``s_i + p_i <= w``; ``p_i`` the op's time on its fastest allowed device. Rounding as
    Baechi's ``refine_favorite_child_edges``: ``x_e`` is a favorite edge when
    ``round(x_e - threshold + 0.5)`` is 0 (default threshold: Baechi's flag, 0.1). Then, in
    edge order, a favorite edge ``(i, j)`` makes ``j`` the favorite child of ``i`` (replacing
    an earlier one) and takes ``j`` from its earlier favorite parent, which is left with none.

    Returns:
        int64 ``[num_ops]``: each op's favorite child, ``-1`` for none.
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    n = p.n
    fav = np.full(n, -1, dtype=np.int64)
    edges = _lp_edges(p)
    if not edges:
        return fav
    E = len(edges)
    w_op = 1e6 * np.array([p.times[i, p.unit_devices[int(p.unit[i])]].min() for i in range(n)])
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    rhs: list[float] = []

    def row(terms: list[tuple[int, float]], value: float) -> None:
        r = len(rhs)
        for col, coef in terms:
            rows.append(r)
            cols.append(col)
            vals.append(coef)
        rhs.append(value)

    for k in range(E):
        row([(k, 1.0)], 1.0)
        row([(k, -1.0)], 0.0)
    for i in range(n):
        row([(E + i, -1.0)], 0.0)
    for k, (a, b, cost) in enumerate(edges):
        row([(E + a, 1.0), (E + b, -1.0), (k, cost)], -w_op[a])
    out_e: list[list[int]] = [[] for _ in range(n)]
    in_e: list[list[int]] = [[] for _ in range(n)]
    for k, (a, b, _) in enumerate(edges):
        out_e[a].append(k)
        in_e[b].append(k)
    for group in (out_e, in_e):
        for ks in group:
            if ks:
                row([(k, -1.0) for k in ks], 1.0 - len(ks))
    for i in range(n):
        row([(E + i, 1.0), (E + n, -1.0)], -w_op[i])
    A = coo_matrix((vals, (rows, cols)), shape=(len(rhs), E + n + 1)).tocsr()
    c = np.zeros(E + n + 1)
    c[-1] = 1.0
    res = linprog(c, A_ub=A, b_ub=np.array(rhs), bounds=(None, None), method="highs")
    if res.status != 0:
        return fav
    parent = np.full(n, -1, dtype=np.int64)
    for k, (a, b, _) in enumerate(edges):
        if round(float(res.x[k]) - threshold + 0.5) != 0:
            continue
        fav[a] = b
        if parent[b] >= 0:
            fav[parent[b]] = -1
        parent[b] = a
    return fav


def m_sct(graph: OpGraph, spec: ClusterSpec, op_times: np.ndarray | None = None, threshold: float = SCT_THRESHOLD,
          channels: str = "device") -> np.ndarray:
    """m-SCT (Baechi Sec. 3.3, ``placer/m_sct.py``): m-ETF in which a device whose last op's
    favorite child ([`favorite_children`][baselines.baechi.favorite_children]) is ready and starts earliest there waits for
    that child, running meanwhile only an urgent op (one that can start no later on any
    device, Baechi's ``urgent_ts``; `_ListScheduler.proposal`).

    Returns:
        int64 ``[num_ops]`` device indices.
    """
    p = _Problem(graph, spec, op_times)
    return _memory_checked(p, favorite_children(p, threshold), channels=channels)
