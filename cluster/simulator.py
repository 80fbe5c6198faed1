"""An event-driven simulator of one training step under a placement.

Semantics (those of TensorFlow's executor on a machine like the 2017 paper's):

* **Devices.** Each device runs its ready ops one at a time, in the order they became
  ready (FIFO; ties in time broken by event order, then op index). An op is ready when
  all its inputs (data and control) are available on its device. Op ``o`` takes
  ``t(o, d)`` seconds on device ``d`` (:func:`cluster.cost_model.op_time_matrix`).
* **Transfers.** A tensor consumed on another device is sent once per destination
  device, when its producer finishes, over the link between the two devices; a transfer
  of ``b`` bytes takes ``latency_s + b / bandwidth``. Each link direction carries one
  transfer at a time (FIFO). A control edge across devices is a 0-byte transfer.
* **Memory.** Per device: the resident bytes of the variables placed there (weights and
  optimizer slots, for the whole step) plus the live activations: an op's outputs are
  allocated when it starts and freed when its last consumer on that device has finished
  and every transfer of them has arrived; a received copy is allocated on arrival and
  freed when its last consumer on the destination has finished. Outputs of aliasing ops
  (``Identity``, ``ReadVariableOp``, ...) take no new memory. A device whose peak
  exceeds its capacity is out of memory (OOM); the step time is still reported.
* **Kernels.** An op with no GPU kernel placed on a GPU runs on the first CPU, as
  TensorFlow's soft placement does.

The step time is the time the last op or transfer finishes (seconds).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from cluster.cost_model import op_time_matrix, transfer_time
from cluster.spec import ClusterSpec
from compgraph.ir import OpGraph


@dataclass
class SimResult:
    """What one simulated step measured.

    Attributes:
        step_time_s: makespan of the step (seconds).
        oom: True if any device's peak memory exceeds its capacity.
        compute_s: ``[num_devices]`` seconds each device spent running ops.
        transfer_s: ``[num_devices]`` seconds of transfers sent or received by each device.
        peak_memory_bytes: ``[num_devices]`` resident plus peak live bytes.
        oom_devices: names of the devices that ran out of memory.
    """

    step_time_s: float
    oom: bool
    compute_s: list[float]
    transfer_s: list[float]
    peak_memory_bytes: list[int]
    oom_devices: list[str] = field(default_factory=list)


class Simulator:
    """Simulates ``graph`` on ``spec``; build once, call :meth:`run` per placement.

    Args:
        graph: the op graph.
        spec: the cluster.
        op_times: optional ``[num_ops, num_devices]`` seconds, replacing the roofline.
    """

    _OP_DONE = 0
    _XFER_DONE = 1

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
        for out in self.out_edges:
            out.sort()  # successors made ready by one event enter the queue in op-index order
        self.alloc = [int(op.alloc_bytes) for op in graph.ops]
        self.param = [int(op.param_bytes) for op in graph.ops]
        self.output_bytes = [list(op.output_bytes) for op in graph.ops]
        self.gpu_ok = np.array([op.gpu_kernel for op in graph.ops], dtype=bool)
        self.is_gpu = np.array([dev.kind == "gpu" for dev in spec.devices], dtype=bool)
        self.fallback = spec.cpu_indices[0] if spec.cpu_indices else -1
        self.links = [
            [(0.0, 0.0) if a == b else (spec.link(a, b).bandwidth, spec.link(a, b).latency_s) for b in range(d)]
            for a in range(d)
        ]
        self.capacity = [dev.memory_bytes for dev in spec.devices]

    def effective_placement(self, op_placement: np.ndarray) -> np.ndarray:
        """Apply soft placement: ops with no GPU kernel placed on a GPU move to the first CPU.

        Raises:
            ValueError: wrong length or a device index out of range.
        """
        p = np.asarray(op_placement, dtype=np.int64)
        n, d = self.graph.num_ops, len(self.spec.devices)
        if p.shape != (n,):
            raise ValueError(f"placement: length {p.shape}, expected ({n},)")
        if n and (p.min() < 0 or p.max() >= d):
            raise ValueError(f"placement: device index out of range 0..{d - 1}")
        bad = self.is_gpu[p] & ~self.gpu_ok
        if bad.any() and self.fallback >= 0:
            p = p.copy()
            p[bad] = self.fallback
        return p

    def run(self, op_placement: np.ndarray) -> SimResult:
        """Simulate one step with ``op_placement[i]`` = device index of op ``i``."""
        place = self.effective_placement(op_placement).tolist()
        n, ndev = self.graph.num_ops, len(self.spec.devices)
        times, out_edges, in_edges = self.op_times, self.out_edges, self.in_edges
        alloc, links = self.alloc, self.links
        pending = list(self.indegree)
        queues = [deque() for _ in range(ndev)]
        busy = [False] * ndev
        link_q: dict[tuple[int, int], deque] = {}
        link_busy: dict[tuple[int, int], bool] = {}
        sent: dict[tuple[int, int, int], list[int]] = {}
        users = [0] * n  # remaining readers of each op's output buffer on its own device
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

        def start_ops(dev: int, t: float) -> None:
            nonlocal seq
            if busy[dev] or not queues[dev]:
                return
            op = queues[dev].popleft()
            busy[dev] = True
            dt = times[op][dev]
            compute[dev] += dt
            live[dev] += alloc[op]
            if live[dev] > peak[dev]:
                peak[dev] = live[dev]
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
            seq += 1
            heapq.heappush(events, (t + dt, seq, 1, tkey, key))

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
                queues[place[i]].append(i)
        for dev in range(ndev):
            start_ops(dev, 0.0)

        while events:
            now, _, kind, a, b = heapq.heappop(events)
            if kind == 0:  # op a finished
                op, dev = a, place[a]
                busy[dev] = False
                release_input(op, dev)
                readers = 0
                for dst, out, nbytes in out_edges[op]:
                    ddev = place[dst]
                    if ddev == dev:
                        if out >= 0:
                            readers += 1
                        pending[dst] -= 1
                        if pending[dst] == 0:
                            queues[dev].append(dst)
                    else:
                        tkey = (op, out, ddev)
                        if tkey in sent:
                            sent[tkey].append(dst)
                        else:
                            sent[tkey] = [dst]
                            if out >= 0:
                                readers += 1
                            lkey = (dev, ddev)
                            link_q.setdefault(lkey, deque()).append((tkey, nbytes))
                            start_link(lkey, now)
                users[op] += readers
                if users[op] == 0:
                    live[dev] -= alloc[op]
                for ddev in range(ndev):
                    start_ops(ddev, now)
            else:  # transfer a = (src, out, dst_dev) arrived over link b
                src, out, ddev = a
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
                        queues[ddev].append(dst)
                start_link(b, now)
                start_ops(ddev, now)
            end = now

        if any(p > 0 for p in pending):
            raise RuntimeError("simulation stalled: the graph has a cycle or a dangling input")
        peak_total = [resident[i] + peak[i] for i in range(ndev)]
        oom_devices = [self.spec.devices[i].name for i in range(ndev) if peak_total[i] > self.capacity[i]]
        return SimResult(
            step_time_s=end,
            oom=bool(oom_devices),
            compute_s=compute,
            transfer_s=xfer,
            peak_memory_bytes=peak_total,
            oom_devices=oom_devices,
        )
