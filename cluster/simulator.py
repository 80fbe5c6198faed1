"""An event-driven simulator of one training step under a placement (the plain reference).

Semantics (those of TensorFlow's executor on a machine like the 2017 paper's,
Mirhoseini et al. 2017 Sec. 4.1; every rule has a hand-computed test in
``tests/test_simulator.py``):

* **Devices.** Each device runs its ready ops one at a time, in the order they became
  ready (FIFO). An op is ready when all its inputs (data and control) are available on its
  device: a local input when its producer finishes, a remote one when its transfer
  arrives. Op ``o`` takes ``t(o, d)`` seconds on device ``d``
  ([`cluster.cost_model.op_time_matrix`][cluster.cost_model.op_time_matrix], or the ``op_times`` given). Ties: ops that
  are ready at ``t = 0`` are queued in op-index order; events at the same time are
  handled in the order they were scheduled (a device or link that starts work earlier,
  in event order, finishes first on equal times); the successors readied by one event
  are queued in op-index order. After an op finishes, devices are offered their next op
  in device-index order.
* **Compute pools.** Devices that name the same ``compute_pool``
  ([`cluster.spec.Device.compute_pool`][cluster.spec.Device.compute_pool]) share one executor: the rule above applies to
  the pool instead of each device. The pool has one FIFO queue for the ready ops of all its
  devices and runs one op at a time, whichever device it is placed on (e.g. logical
  TensorFlow CPU devices of one process, sharing its thread pools and the machine's
  cores); the same tie rules hold, and after an op finishes pools are offered their next op
  in order of their lowest device index. A device with no pool is a pool of its own, so
  with no pools named every device runs in parallel with the others, as above. An op still
  takes ``t(o, d)`` on its own device ``d``, and its seconds, memory and transfers count
  for ``d``: only the queue is shared.
* **Transfers.** A tensor (output ``k`` of op ``o``) consumed on another device is sent
  once per destination device, when its producer finishes, whatever the number of
  consumers there. A control edge across devices is a 0-byte transfer, sent once per
  (producer, destination device). A transfer of ``b`` bytes from ``a`` to ``c`` takes
  ``latency_s + b / bandwidth`` seconds ([`cluster.cost_model.transfer_time`][cluster.cost_model.transfer_time]) with
  the link ``ClusterSpec.link(a, c)``. ``b`` is the edge's ``bytes`` (the first
  consumer's edge, in op-index order).
* **Links and routing.** Every ordered pair of devices ``(a, c)`` is its own channel:
  one transfer at a time per direction (FIFO, in the order transfers were queued); the
  two directions of a pair, and different pairs, run concurrently. The cost of a pair is
  the link the spec lists for it, else ``default_link``: in the presets that is PCIe
  between the host CPU and each GPU, and between two GPUs the link the spec gives (the
  K80 presets list none, so GPU<->GPU copies cost a PCIe transfer, as through the
  host's PCIe fabric). There is no multi-hop routing and no sharing of a link's
  bandwidth between pairs.
* **Memory.** Per device: the resident bytes (``param_bytes``: weights and optimizer
  slots) of the ops placed there, for the whole step, plus the live activations. An op's
  ``alloc_bytes`` are allocated when it starts and freed when its last reader has
  finished: every data consumer on its own device, and every transfer of it (a transfer
  reads the buffer until it arrives). A received copy (``output_bytes[k]`` of the
  producer) is allocated on the destination when it arrives and freed when its last
  consumer there has finished. Aliasing ops (``alloc_bytes = 0``, e.g. ``Identity``)
  take no new memory. Control edges hold no memory. The peak is resident bytes plus
  the highest live total reached; a device whose peak exceeds its ``tensor_capacity_bytes``
  (``memory_bytes / allocator_overhead``, [`cluster.spec.Device`][cluster.spec.Device]) is
  out of memory (OOM); the step time is still reported.
* **Kernels.** An op with no GPU kernel placed on a GPU runs on the first CPU (the
  lowest-index ``cpu`` device), as TensorFlow's soft placement does; with no CPU in the
  spec it stays where placed.
* **Step time** is the time the last op or transfer finishes (seconds).
* **Critical path.** The chain of ops and transfers that determines the step time,
  walked back from the event that finished last: an op's predecessor is the event that
  made it ready (the last input to arrive: the local producer or the transfer) if it
  started as soon as it was ready, else, having waited in its device's (pool's) queue,
  the op that ran on the device (pool) just before it, whichever device of the pool that
  was; a transfer's predecessor is its producer if it left as soon as the producer
  finished, else the transfer ahead of it on the same link direction. Each step starts
  when its predecessor ends, so the chain is contiguous from 0 to the step time, and the
  queueing waits are the device (pool) or link predecessors in it. Ties (ready at the
  same instant the device or pool freed up) go to the data dependency.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from cluster.cost_model import op_time_matrix, transfer_time
from cluster.kernels import cpu_fallback, first_cpu, gpu_mask, op_gpu_ok
from cluster.spec import ClusterSpec
from compgraph.ir import OpGraph


@dataclass(frozen=True)
class PathStep:
    """One step of the critical path: an op run or a transfer.

    Attributes:
        kind: ``"op"`` (op ``op`` ran on ``src_device``) or ``"transfer"`` (output
            ``output`` of op ``op``, ``-1`` for a control dependency, sent from
            ``src_device`` to ``dst_device``).
        op: op index (the op run, or the producer of the tensor sent).
        output: output index sent, ``-1`` for a control transfer or an op step.
        src_device, dst_device: device indices (equal for an op step).
        start_s, end_s: seconds from the start of the step.
        name: the op name, or ``"name:output->device name"`` for a transfer.
    """

    kind: str
    op: int
    output: int
    src_device: int
    dst_device: int
    start_s: float
    end_s: float
    name: str


@dataclass
class SimResult:
    """What one simulated step measured.

    Attributes:
        step_time_s: makespan of the step (seconds).
        oom: True if any device's peak memory exceeds its capacity.
        compute_s: ``[num_devices]`` seconds each device spent running ops.
        transfer_s: ``[num_devices]`` seconds of transfers sent or received by each device
            (a transfer counts at both ends).
        peak_memory_bytes: ``[num_devices]`` resident plus peak live bytes.
        oom_devices: names of the devices that ran out of memory.
        critical_path: the steps that determine the step time, in time order (see the
            module docstring); ``None`` when not asked for (fast simulator batches).
        timeline: every op run and transfer of the step as a [`PathStep`][cluster.simulator.PathStep], by start
            time (ties: ops before transfers, then by op index); ``None`` unless
            ``Simulator.run(..., timeline=True)``.
    """

    step_time_s: float
    oom: bool
    compute_s: list[float]
    transfer_s: list[float]
    peak_memory_bytes: list[int]
    oom_devices: list[str] = field(default_factory=list)
    critical_path: list[PathStep] | None = None
    timeline: list[PathStep] | None = None


def check_placement(op_placement: np.ndarray, num_ops: int, num_devices: int) -> np.ndarray:
    """``op_placement`` as int64 ``[num_ops]`` (or ``[K, num_ops]``), checked.

    Raises:
        ValueError: wrong length, or a device index out of range ``0..num_devices-1``.
    """
    p = np.asarray(op_placement)
    if p.dtype.kind not in "iu":
        if p.size and not np.all(np.mod(p, 1) == 0):
            raise ValueError(f"placement: device indices must be integers, got dtype {p.dtype}")
        p = p.astype(np.int64)
    p = p.astype(np.int64, copy=False)
    if p.ndim == 0 or p.shape[-1] != num_ops:
        raise ValueError(f"placement: length {p.shape}, expected ({num_ops},)")
    if p.size and (p.min() < 0 or p.max() >= num_devices):
        bad = int(p.min()) if p.min() < 0 else int(p.max())
        raise ValueError(f"placement: device index {bad} out of range 0..{num_devices - 1}")
    return p


class Simulator:
    """Simulates ``graph`` on ``spec``; build once, call [`run`][cluster.simulator.Simulator.run] per placement.

    Args:
        graph: the op graph.
        spec: the cluster.
        op_times: optional ``[num_ops, num_devices]`` seconds, replacing the roofline.

    Raises:
        ValueError: ``op_times`` of the wrong shape.
    """

    def __init__(self, graph: OpGraph, spec: ClusterSpec, op_times: np.ndarray | None = None) -> None:
        self.graph = graph
        self.spec = spec
        n, d = graph.num_ops, len(spec.devices)
        times = op_time_matrix(graph, spec) if op_times is None else np.asarray(op_times, dtype=np.float64)
        if times.shape != (n, d):
            raise ValueError(f"op_times: shape {times.shape}, expected {(n, d)}")
        self.op_times: list[list[float]] = times.tolist()
        self.out_edges: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]  # (dst, output, bytes)
        self.in_edges: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # (src, output)
        self.indegree = [0] * n
        for e in graph.edges:
            out = -1 if e.control else e.src_output
            self.out_edges[e.src].append((e.dst, out, e.bytes))
            self.in_edges[e.dst].append((e.src, out))
            self.indegree[e.dst] += 1
        for succs in self.out_edges:
            succs.sort()  # successors made ready by one event enter the queue in op-index order
        self.alloc = [int(op.alloc_bytes) for op in graph.ops]
        self.param = [int(op.param_bytes) for op in graph.ops]
        self.output_bytes = [list(op.output_bytes) for op in graph.ops]
        self.gpu_ok, self.is_gpu, self.fallback = op_gpu_ok(graph), gpu_mask(spec), first_cpu(spec)
        self.links = [
            [(0.0, 0.0) if a == b else (spec.link(a, b).bandwidth, spec.link(a, b).latency_s) for b in range(d)]
            for a in range(d)
        ]
        self.capacity = [dev.tensor_capacity_bytes for dev in spec.devices]
        self.pool = spec.pool_indices  # device index -> compute-pool index
        self.num_pools = max(self.pool) + 1

    def effective_placement(self, op_placement: np.ndarray) -> np.ndarray:
        """Apply soft placement: ops with no GPU kernel placed on a GPU move to the first CPU.

        Args:
            op_placement: ``[num_ops]`` device indices.
        Returns:
            ``[num_ops]`` int64 device indices the ops run on.
        Raises:
            ValueError: wrong length or a device index out of range.
        """
        p = check_placement(op_placement, self.graph.num_ops, len(self.spec.devices))
        if p.ndim != 1:
            raise ValueError(f"placement: length {p.shape}, expected ({self.graph.num_ops},)")
        return cpu_fallback(p, self.gpu_ok, self.spec)

    def run(self, op_placement: np.ndarray, timeline: bool = False) -> SimResult:
        """Simulate one step with ``op_placement[i]`` = device index of op ``i``; with
        ``timeline``, [`SimResult.timeline`][cluster.simulator.SimResult.timeline] lists every op run and transfer.

        Raises:
            ValueError: wrong length or a device index out of range.
            RuntimeError: the simulation stalled (a cycle or a dangling input).
        """
        place = self.effective_placement(op_placement).tolist()
        n, ndev = self.graph.num_ops, len(self.spec.devices)
        times, out_edges, in_edges = self.op_times, self.out_edges, self.in_edges
        alloc, links, pool = self.alloc, self.links, self.pool
        pending = list(self.indegree)
        queues: list[deque[int]] = [deque() for _ in range(self.num_pools)]  # one FIFO of ready ops per compute pool
        busy = [False] * self.num_pools  # one op at a time per pool
        link_q: dict[tuple[int, int], deque] = {}
        link_busy: dict[tuple[int, int], bool] = {}
        sent: dict[tuple[int, int, int], list[int]] = {}  # transfer key (op, output, dst device) -> consumers
        users = [0] * n  # remaining readers of each op's output buffer (local consumers + transfers)
        recv_users: dict[tuple[int, int, int], int] = {}
        recv_bytes: dict[tuple[int, int, int], int] = {}
        resident = [0] * ndev
        for i in range(n):
            resident[place[i]] += self.param[i]
        live = [0] * ndev
        peak = [0] * ndev
        compute = [0.0] * ndev
        xfer = [0.0] * ndev
        events: list = []
        seq = 0
        now = 0.0
        end = 0.0
        # critical-path bookkeeping: an item is ("op", op index) or ("xfer", transfer key)
        ready_time = [0.0] * n
        ready_by: list = [None] * n  # the item whose end made the op ready
        span: dict = {}  # item -> (start, end)
        pred: dict = {}  # item -> predecessor item or None
        last_on_pool: list = [None] * self.num_pools  # the op that ran last on each pool
        last_on_link: dict = {}  # the transfer that went last on each link direction
        queued_at: dict = {}  # transfer key -> time it was queued (its producer's end)
        last_item = None

        def start_ops(pl: int, t: float) -> None:
            nonlocal seq
            if busy[pl] or not queues[pl]:
                return
            op = queues[pl].popleft()
            dev = place[op]
            busy[pl] = True
            dt = times[op][dev]
            compute[dev] += dt
            live[dev] += alloc[op]
            if live[dev] > peak[dev]:
                peak[dev] = live[dev]
            item = ("op", op)
            span[item] = (t, t + dt)
            pred[item] = ready_by[op] if t <= ready_time[op] else last_on_pool[pl]
            last_on_pool[pl] = item
            seq += 1
            heapq.heappush(events, (t + dt, seq, 0, op, None))

        def start_link(key: tuple[int, int], t: float) -> None:
            nonlocal seq
            if link_busy.get(key) or not link_q.get(key):
                return
            tkey, nbytes = link_q[key].popleft()
            link_busy[key] = True
            bw, lat = links[key[0]][key[1]]
            dt = transfer_time(nbytes, bw, lat)
            xfer[key[0]] += dt
            xfer[key[1]] += dt
            item = ("xfer", tkey)
            span[item] = (t, t + dt)
            pred[item] = ("op", tkey[0]) if t <= queued_at[tkey] else last_on_link[key]
            last_on_link[key] = item
            seq += 1
            heapq.heappush(events, (t + dt, seq, 1, tkey, key))

        def make_ready(op: int, t: float, item) -> None:
            ready_time[op] = t
            ready_by[op] = item
            queues[pool[place[op]]].append(op)

        def release_input(op: int, dev: int) -> None:
            for src, out in in_edges[op]:
                if out < 0:
                    continue
                if place[src] == dev:
                    users[src] -= 1
                    if users[src] == 0:
                        live[dev] -= alloc[src]
                else:
                    rkey = (src, out, dev)
                    recv_users[rkey] -= 1
                    if recv_users[rkey] == 0:
                        live[dev] -= recv_bytes[rkey]

        for i in range(n):
            if pending[i] == 0:
                queues[pool[place[i]]].append(i)
        for pl in range(self.num_pools):
            start_ops(pl, 0.0)

        while events:
            now, _, kind, a, b = heapq.heappop(events)
            if kind == 0:  # op a finished
                op, dev = a, place[a]
                last_item = ("op", op)
                busy[pool[dev]] = False
                release_input(op, dev)
                readers = 0
                for dst, out, nbytes in out_edges[op]:
                    ddev = place[dst]
                    if ddev == dev:
                        if out >= 0:
                            readers += 1
                        pending[dst] -= 1
                        if pending[dst] == 0:
                            make_ready(dst, now, last_item)
                    else:
                        tkey = (op, out, ddev)
                        if tkey in sent:
                            sent[tkey].append(dst)
                        else:
                            sent[tkey] = [dst]
                            if out >= 0:
                                readers += 1
                            lkey = (dev, ddev)
                            queued_at[tkey] = now
                            link_q.setdefault(lkey, deque()).append((tkey, nbytes))
                            start_link(lkey, now)
                users[op] += readers
                if users[op] == 0:
                    live[dev] -= alloc[op]
                for pl in range(self.num_pools):
                    start_ops(pl, now)
            else:  # transfer a = (src, out, dst_dev) arrived over link b
                src, out, ddev = a
                last_item = ("xfer", a)
                link_busy[b] = False
                consumers = sent[a]
                if out >= 0:
                    nbytes = self.output_bytes[src][out]
                    recv_bytes[a] = nbytes
                    recv_users[a] = len(consumers)
                    live[ddev] += nbytes
                    if live[ddev] > peak[ddev]:
                        peak[ddev] = live[ddev]
                    users[src] -= 1
                    if users[src] == 0:
                        live[place[src]] -= alloc[src]
                for dst in consumers:
                    pending[dst] -= 1
                    if pending[dst] == 0:
                        make_ready(dst, now, last_item)
                start_link(b, now)
                start_ops(pool[ddev], now)
            end = now

        if any(p > 0 for p in pending):
            raise RuntimeError("simulation stalled: the graph has a cycle or a dangling input")
        peak_total = [resident[i] + peak[i] for i in range(ndev)]
        oom_devices = [self.spec.devices[i].name for i in range(ndev) if peak_total[i] > self.capacity[i]]
        path = []
        item = last_item
        while item is not None:
            path.append(self._path_step(item, span[item], place))
            item = pred[item]
        path.reverse()
        steps = None
        if timeline:
            order = sorted(span, key=lambda it: (span[it][0], it[0] != "op", it[1] if it[0] == "op" else it[1][0]))
            steps = [self._path_step(it, span[it], place) for it in order]
        return SimResult(
            step_time_s=end,
            oom=bool(oom_devices),
            compute_s=compute,
            transfer_s=xfer,
            peak_memory_bytes=peak_total,
            oom_devices=oom_devices,
            critical_path=path,
            timeline=steps,
        )

    def _path_step(self, item, span: tuple[float, float], place: list[int]) -> PathStep:
        kind, key = item
        if kind == "op":
            dev = place[key]
            return PathStep("op", key, -1, dev, dev, span[0], span[1], self.graph.ops[key].name)
        op, out, ddev = key
        name = f"{self.graph.ops[op].name}:{out}->{self.spec.devices[ddev].name}"
        return PathStep("transfer", op, out, place[op], ddev, span[0], span[1], name)
