"""A compiled simulator with the reference's semantics and results, for many placements.

[`FastSimulator`][cluster.fast_simulator.FastSimulator] simulates exactly what [`cluster.simulator.Simulator`][cluster.simulator.Simulator] does
(the rules are in that module's docstring): the same event order, the same
floating-point operations in the same order, so step times, per-device compute and
transfer seconds, peak memory bytes, OOM flags and critical paths are identical (``==``).
The graph is flattened once into numpy arrays (CSR successor and predecessor lists,
the ``[num_ops, num_devices]`` op-time matrix, edge bytes, allocation and parameter
bytes, link bandwidths and latencies); the event loop is compiled with numba
(``numba.njit``, no fastmath, so IEEE arithmetic is kept). Data structures of the loop:

* per-compute-pool ready queues (``ClusterSpec.pool_indices``: a device with no
  ``compute_pool`` is its own pool) and per-link-direction transfer queues as linked
  lists (FIFO);
* in-flight events, at most one per compute pool and one per link direction, in a small
  array scanned for the smallest ``(time, sequence number)``: the reference's heap order;
* a transfer per ``(producer, output, destination device)``, created when the producer
  finishes, with its consumers in a linked list in the reference's order.

[`FastSimulator.run_arrays`][cluster.fast_simulator.FastSimulator.run_arrays] (op placements) and [`FastSimulator.run_group_arrays`][cluster.fast_simulator.FastSimulator.run_group_arrays]
(group placements, expanded inside the compiled loop: an exact simulation of the op graph)
evaluate ``K`` placements in one compiled call of the kernel: int32 indices, work arrays
allocated once per call and reused by the ``K`` placements, soft placement applied in the loop
(from a per-device table of [`cluster.kernels.fallback_device`][cluster.kernels.fallback_device] made once per call: the rule
called per op took an atomic reference-count increment and decrement of an array each time,
about a sixth of the kernel on nmt paper), data-only predecessor lists, the in-flight events packed in three small arrays, and after an
op finishes only its own pool offered a new op (every idle pool has an empty queue after each
event, and the event readied ops on that pool alone, so the reference's loop over pools starts
no other). Cost per placement about ``O(ops + edges)``, no Python work per op.
[`FastSimulator.run`][cluster.fast_simulator.FastSimulator.run] (one placement, with its critical path) runs the same kernel with its
critical-path bookkeeping switched on: one source (`_simulate`), whose bookkeeping numba
compiles away when it is off.

[`cluster.contracted.contract_groups`][cluster.contracted.contract_groups] builds the *group graph* (a documented approximation for
speed, not the op-level semantics): see its docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from cluster.cost_model import op_time_matrix
from cluster.kernels import cpu_fallback, fallback_device, first_cpu, gpu_mask, op_gpu_ok
from cluster.simulator import PathStep, SimResult, check_placement
from cluster.spec import ClusterSpec
from compgraph.ir import OpGraph


def link_matrices(spec: ClusterSpec) -> tuple[np.ndarray, np.ndarray]:
    """``(bandwidth [D, D] bytes/s, latency [D, D] s)`` of every ordered device pair's effective link
    ([`cluster.spec.ClusterSpec.link`][cluster.spec.ClusterSpec.link]); the diagonal is 1 and 0 (no transfer)."""
    d = len(spec.devices)
    bw, lat = np.ones((d, d), np.float64), np.zeros((d, d), np.float64)
    for a in range(d):
        for b in range(d):
            if a != b:
                link = spec.link(a, b)
                bw[a, b], lat[a, b] = link.bandwidth, link.latency_s
    return bw, lat


@njit(cache=True, nogil=True)
def _simulate(gplaces, op_unit, gpu_ok, is_gpu, fallback, times,
              succ_ptr, succ_dst, succ_out, succ_bytes, succ_dpos,
              dp_ptr, dp_src, indegree, alloc, param, ob_ptr, ob_val,
              link_bw, link_lat, pool, max_out,
              step, stalled, compute_out, xfer_out, peak_out, trace):
    """The one event loop: ``K`` placements, ``gplaces[k, op_unit[i]]`` op i's device (before soft
    placement); ``pool[d]`` device d's compute pool, which indexes the ready queues, busy flags
    and op event slots. int32 indices.

    ``trace``: ``None``, or the critical-path bookkeeping of `_trace_arrays` (one
    placement). Every use of it sits under ``if trace is not None``, which numba prunes at
    compile time when it is ``None``: the batch path (no critical path) and the traced path
    ([`FastSimulator.run`][cluster.fast_simulator.FastSimulator.run]) are two compilations of this one source. Items of a path: op
    i -> i, transfer t -> n + t."""
    K = gplaces.shape[0]
    n = op_unit.shape[0]
    D = times.shape[1]
    P = 0
    for d in range(D):
        if pool[d] + 1 > P:
            P = pool[d] + 1
    E = succ_dst.shape[0]
    ND = dp_src.shape[0]
    place = np.empty(n, np.int32)
    pending = np.empty(n, np.int32)
    users = np.empty(n, np.int32)
    q_next = np.empty(n, np.int32)
    q_head = np.empty(D, np.int32)
    q_tail = np.empty(D, np.int32)
    busy = np.empty(D, np.bool_)
    l_head = np.empty(D * D, np.int32)
    l_tail = np.empty(D * D, np.int32)
    l_busy = np.empty(D * D, np.bool_)
    x_src = np.empty(E, np.int32)
    x_out = np.empty(E, np.int32)
    x_ddev = np.empty(E, np.int32)
    x_next = np.empty(E, np.int32)
    x_chead = np.empty(E, np.int32)
    x_ctail = np.empty(E, np.int32)
    x_ccount = np.empty(E, np.int32)
    x_bytes = np.empty(E, np.int64)
    e_cnext = np.empty(E, np.int32)
    recv_users = np.empty(E, np.int32)
    recv_bytes = np.empty(E, np.int64)
    edge_xfer = np.empty(max(ND, 1), np.int32)
    slot = np.full((max_out + 2) * D, -1, np.int32)
    NS = D + D * D
    a_time = np.empty(NS, np.float64)  # in-flight events, packed: end time, sequence number, slot
    a_seq = np.empty(NS, np.int64)
    ev_item = np.empty(NS, np.int32)
    act = np.empty(NS, np.int32)
    live = np.empty(D, np.int64)
    peak = np.empty(D, np.int64)
    resident = np.empty(D, np.int64)
    compute = np.empty(D, np.float64)
    xfer = np.empty(D, np.float64)
    # soft placement (fallback_device) of an op with and without a GPU kernel on each device, looked up per op:
    # calling it per op costs a reference count increment and decrement of is_gpu each time
    dev_ok = np.empty(D, np.int32)
    dev_no_gpu_kernel = np.empty(D, np.int32)
    for d in range(D):
        dev_ok[d] = fallback_device(d, True, is_gpu, fallback)
        dev_no_gpu_kernel[d] = fallback_device(d, False, is_gpu, fallback)
    for kk in range(K):
        for d in range(D):
            compute[d] = 0.0
            xfer[d] = 0.0
            busy[d] = False
            q_head[d] = -1
            q_tail[d] = -1
            live[d] = 0
            peak[d] = 0
            resident[d] = 0
        for s in range(D * D):
            l_head[s] = -1
            l_tail[s] = -1
            l_busy[s] = False
        for i in range(n):
            d = gplaces[kk, op_unit[i]]
            d = dev_ok[d] if gpu_ok[i] else dev_no_gpu_kernel[d]
            place[i] = d
            pending[i] = indegree[i]
            users[i] = 0
            resident[d] += param[i]
        for i in range(slot.shape[0]):
            slot[i] = -1
        last_item = -1
        if trace is not None:
            for i in range(n):
                trace[3][i] = 0.0  # ready_time
                trace[4][i] = -1  # ready_by
            for d in range(D):
                trace[5][d] = -1  # last_dev (by pool)
            for s in range(D * D):
                trace[10][s] = -1  # last_link
        nx = 0
        nact = 0
        seq = 0
        end = 0.0
        for i in range(n):
            if pending[i] == 0:
                d = pool[place[i]]
                q_next[i] = -1
                if q_tail[d] < 0:
                    q_head[d] = i
                else:
                    q_next[q_tail[d]] = i
                q_tail[d] = i
        now = 0.0
        for d in range(P):
            if (not busy[d]) and q_head[d] >= 0:
                op = q_head[d]
                q_head[d] = q_next[op]
                if q_head[d] < 0:
                    q_tail[d] = -1
                busy[d] = True
                v = place[op]
                dt = times[op, v]
                compute[v] += dt
                live[v] += alloc[op]
                if live[v] > peak[v]:
                    peak[v] = live[v]
                if trace is not None:
                    _trace_op_start(trace, op, d, now, dt)
                seq += 1
                a_time[nact] = now + dt
                a_seq[nact] = seq
                ev_item[d] = op
                act[nact] = d
                nact += 1
        while nact > 0:
            # pop the smallest (time, seq): the reference's heap order
            best = 0
            bt = a_time[0]
            bs = a_seq[0]
            for j in range(1, nact):
                tj = a_time[j]
                sj = a_seq[j]
                better = (tj < bt) | ((tj == bt) & (sj < bs))
                best = j if better else best
                bt = tj if better else bt
                bs = sj if better else bs
            s = act[best]
            nact -= 1
            act[best] = act[nact]
            a_time[best] = a_time[nact]
            a_seq[best] = a_seq[nact]
            now = bt
            if s < D:  # an op finished on pool s
                op = ev_item[s]
                dev = place[op]
                last_item = op
                busy[s] = False
                # release_input (data inputs only: control inputs hold no memory)
                for k in range(dp_ptr[op], dp_ptr[op + 1]):
                    src = dp_src[k]
                    if place[src] == dev:
                        users[src] -= 1
                        if users[src] == 0:
                            live[dev] -= alloc[src]
                    else:
                        t = edge_xfer[k]
                        recv_users[t] -= 1
                        if recv_users[t] == 0:
                            live[dev] -= recv_bytes[t]
                readers = 0
                for k in range(succ_ptr[op], succ_ptr[op + 1]):
                    dst = succ_dst[k]
                    out = succ_out[k]
                    ddev = place[dst]
                    if ddev == dev:
                        if out >= 0:
                            readers += 1
                        pending[dst] -= 1
                        if pending[dst] == 0:
                            if trace is not None:
                                trace[3][dst] = now
                                trace[4][dst] = op
                            q_next[dst] = -1
                            if q_tail[s] < 0:
                                q_head[s] = dst
                            else:
                                q_next[q_tail[s]] = dst
                            q_tail[s] = dst
                    else:
                        sk = (out + 1) * D + ddev
                        t = slot[sk]
                        e_cnext[k] = -1
                        if t >= 0 and x_src[t] == op:
                            # already sent to ddev (the slot of another producer fails this check): one more consumer
                            x_ccount[t] += 1
                            e_cnext[x_ctail[t]] = k
                            x_ctail[t] = k
                        else:
                            t = nx
                            nx += 1
                            slot[sk] = t
                            x_src[t] = op
                            x_out[t] = out
                            x_ddev[t] = ddev
                            x_bytes[t] = succ_bytes[k]
                            x_chead[t] = k
                            x_ctail[t] = k
                            x_ccount[t] = 1
                            if trace is not None:
                                trace[9][t] = now  # x_queued
                            if out >= 0:
                                readers += 1
                            lk = dev * D + ddev
                            x_next[t] = -1
                            if l_tail[lk] < 0:
                                l_head[lk] = t
                            else:
                                x_next[l_tail[lk]] = t
                            l_tail[lk] = t
                            if not l_busy[lk]:  # start_link(lk, now)
                                u = l_head[lk]
                                l_head[lk] = x_next[u]
                                if l_head[lk] < 0:
                                    l_tail[lk] = -1
                                l_busy[lk] = True
                                dt = link_lat[dev, ddev] + x_bytes[u] / link_bw[dev, ddev]
                                xfer[dev] += dt
                                xfer[ddev] += dt
                                if trace is not None:
                                    _trace_link_start(trace, u, x_src[u], lk, n, now, dt)
                                seq += 1
                                es = D + lk
                                a_time[nact] = now + dt
                                a_seq[nact] = seq
                                ev_item[es] = u
                                act[nact] = es
                                nact += 1
                users[op] += readers
                if users[op] == 0:
                    live[dev] -= alloc[op]
                # only pool s can start an op: an idle pool has an empty queue after every
                # event, and this event queued ops on dev's pool s alone (remote consumers
                # wait for transfers), so the reference's loop over pools starts at most s
                d = s
                if q_head[d] >= 0:
                    o = q_head[d]
                    q_head[d] = q_next[o]
                    if q_head[d] < 0:
                        q_tail[d] = -1
                    busy[d] = True
                    v = place[o]
                    dt = times[o, v]
                    compute[v] += dt
                    live[v] += alloc[o]
                    if live[v] > peak[v]:
                        peak[v] = live[v]
                    if trace is not None:
                        _trace_op_start(trace, o, d, now, dt)
                    seq += 1
                    a_time[nact] = now + dt
                    a_seq[nact] = seq
                    ev_item[d] = o
                    act[nact] = d
                    nact += 1
            else:  # a transfer arrived over link direction lk
                lk = s - D
                t = ev_item[s]
                src = x_src[t]
                out = x_out[t]
                ddev = x_ddev[t]
                pd = pool[ddev]
                last_item = n + t
                l_busy[lk] = False
                if out >= 0:
                    nb = ob_val[ob_ptr[src] + out]
                    recv_bytes[t] = nb
                    recv_users[t] = x_ccount[t]
                    live[ddev] += nb
                    if live[ddev] > peak[ddev]:
                        peak[ddev] = live[ddev]
                    users[src] -= 1
                    if users[src] == 0:
                        live[place[src]] -= alloc[src]
                    k = x_chead[t]
                    while k >= 0:  # a data transfer: its consumers read it (release_input finds it by edge)
                        edge_xfer[succ_dpos[k]] = t
                        dst = succ_dst[k]
                        pending[dst] -= 1
                        if pending[dst] == 0:
                            if trace is not None:
                                trace[3][dst] = now
                                trace[4][dst] = n + t
                            q_next[dst] = -1
                            if q_tail[pd] < 0:
                                q_head[pd] = dst
                            else:
                                q_next[q_tail[pd]] = dst
                            q_tail[pd] = dst
                        k = e_cnext[k]
                else:
                    k = x_chead[t]
                    while k >= 0:  # a control dependency: nothing to read
                        dst = succ_dst[k]
                        pending[dst] -= 1
                        if pending[dst] == 0:
                            if trace is not None:
                                trace[3][dst] = now
                                trace[4][dst] = n + t
                            q_next[dst] = -1
                            if q_tail[pd] < 0:
                                q_head[pd] = dst
                            else:
                                q_next[q_tail[pd]] = dst
                            q_tail[pd] = dst
                        k = e_cnext[k]
                if l_head[lk] >= 0:  # start_link(lk, now)
                    a = lk // D
                    c = lk - a * D
                    u = l_head[lk]
                    l_head[lk] = x_next[u]
                    if l_head[lk] < 0:
                        l_tail[lk] = -1
                    l_busy[lk] = True
                    dt = link_lat[a, c] + x_bytes[u] / link_bw[a, c]
                    xfer[a] += dt
                    xfer[c] += dt
                    if trace is not None:
                        _trace_link_start(trace, u, x_src[u], lk, n, now, dt)
                    seq += 1
                    a_time[nact] = now + dt
                    a_seq[nact] = seq
                    ev_item[s] = u
                    act[nact] = s
                    nact += 1
                d = pd  # start_ops(pool[ddev], now)
                if (not busy[d]) and q_head[d] >= 0:
                    o = q_head[d]
                    q_head[d] = q_next[o]
                    if q_head[d] < 0:
                        q_tail[d] = -1
                    busy[d] = True
                    v = place[o]
                    dt = times[o, v]
                    compute[v] += dt
                    live[v] += alloc[o]
                    if live[v] > peak[v]:
                        peak[v] = live[v]
                    if trace is not None:
                        _trace_op_start(trace, o, d, now, dt)
                    seq += 1
                    a_time[nact] = now + dt
                    a_seq[nact] = seq
                    ev_item[d] = o
                    act[nact] = d
                    nact += 1
            end = now
        st = False
        for i in range(n):
            if pending[i] > 0:
                st = True
        step[kk] = end
        stalled[kk] = st
        for d in range(D):
            compute_out[kk, d] = compute[d]
            xfer_out[kk, d] = xfer[d]
            peak_out[kk, d] = resident[d] + peak[d]
        if trace is not None:
            _trace_path(trace, last_item, n, nx, x_src, x_out, x_ddev, st)


def _trace_arrays(n: int, num_edges: int, num_devices: int) -> tuple:
    """The critical-path bookkeeping `_simulate` fills for one placement: ``(o_start,
    o_end, o_pred, ready_time, ready_by, last_dev, x_start, x_end, x_pred, x_queued, last_link,
    x_src, x_out, x_ddev, path, path_len)``: per op its start and end (seconds) and the item that
    made it wait last; per transfer the same and its producer, output and destination device;
    the path's items (last first) and its length."""
    E, D = num_edges, num_devices
    f, i = np.float64, np.int64
    return (np.empty(n, f), np.empty(n, f), np.empty(n, i), np.empty(n, f), np.empty(n, i), np.empty(D, i),
            np.empty(E, f), np.empty(E, f), np.empty(E, i), np.empty(E, f), np.empty(D * D, i),
            np.empty(E, i), np.empty(E, i), np.empty(E, i), np.empty(n + E, i), np.zeros(1, i))


@njit(inline="always")
def _trace_op_start(trace, op, d, now, dt):
    """An op starts on pool ``d``: its times, and what it waited for last (the item that readied
    it, if it started as soon as ready, else the pool's previous op)."""
    trace[0][op] = now
    trace[1][op] = now + dt
    trace[2][op] = trace[4][op] if now <= trace[3][op] else trace[5][d]
    trace[5][d] = op


@njit(inline="always")
def _trace_link_start(trace, u, src, lk, n, now, dt):
    """Transfer ``u`` starts on link direction ``lk``: its times, and what it waited for last (its
    producer, if sent as soon as queued, else the link's previous transfer)."""
    trace[6][u] = now
    trace[7][u] = now + dt
    trace[8][u] = src if now <= trace[9][u] else trace[10][lk]
    trace[10][lk] = n + u


@njit(inline="always")
def _trace_path(trace, last_item, n, nx, x_src, x_out, x_ddev, stalled):
    """The transfers' producers, outputs and destinations, and the critical path from the last
    event back through each item's ``pred`` (empty if the simulation stalled)."""
    for t in range(nx):
        trace[11][t] = x_src[t]
        trace[12][t] = x_out[t]
        trace[13][t] = x_ddev[t]
    plen = 0
    if not stalled:
        item = last_item
        while item >= 0:
            trace[14][plen] = item
            plen += 1
            item = trace[2][item] if item < n else trace[8][item - n]
    trace[15][0] = plen


@dataclass
class BatchResult:
    """Results of ``K`` placements as arrays ([`FastSimulator.run_arrays`][cluster.fast_simulator.FastSimulator.run_arrays]).

    Attributes:
        step_time_s: ``[K]`` float64 seconds.
        oom: ``[K]`` bool.
        compute_s, transfer_s: ``[K, num_devices]`` float64 seconds.
        peak_memory_bytes: ``[K, num_devices]`` int64 bytes (resident plus peak live).
        oom_devices: ``[K, num_devices]`` bool, peak above capacity.
    """

    step_time_s: np.ndarray
    oom: np.ndarray
    compute_s: np.ndarray
    transfer_s: np.ndarray
    peak_memory_bytes: np.ndarray
    oom_devices: np.ndarray


class FastSimulator:
    """Same interface and results as [`cluster.simulator.Simulator`][cluster.simulator.Simulator], compiled.

    Args:
        graph: the op graph.
        spec: the cluster.
        op_times: optional ``[num_ops, num_devices]`` seconds, replacing the roofline.

    Raises:
        ValueError: ``op_times`` of the wrong shape.

    The first call in a fresh environment compiles the loop (a few seconds; numba caches it in
    ``cluster/__pycache__``, so later processes load it).
    """

    def __init__(self, graph: OpGraph, spec: ClusterSpec, op_times: np.ndarray | None = None) -> None:
        self.graph = graph
        self.spec = spec
        n, d = graph.num_ops, len(spec.devices)
        times = op_time_matrix(graph, spec) if op_times is None else np.asarray(op_times, dtype=np.float64)
        if times.shape != (n, d):
            raise ValueError(f"op_times: shape {times.shape}, expected {(n, d)}")
        self.times = np.ascontiguousarray(times, dtype=np.float64)
        E = len(graph.edges)
        src = np.fromiter((e.src for e in graph.edges), np.int64, E)
        dst = np.fromiter((e.dst for e in graph.edges), np.int64, E)
        out = np.fromiter((-1 if e.control else e.src_output for e in graph.edges), np.int64, E)
        nbytes = np.fromiter((e.bytes for e in graph.edges), np.int64, E)
        # successors sorted by (src, dst, output, bytes): the reference's out_edges order
        so = np.lexsort((nbytes, out, dst, src))
        # predecessors in edge-list order (stable sort by dst)
        po = np.argsort(dst, kind="stable")
        self.succ_ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).astype(np.int64)
        self.succ_dst = dst[so]
        self.succ_out = out[so]
        self.succ_bytes = nbytes[so]
        self.indegree = np.bincount(dst, minlength=n).astype(np.int64)
        self.alloc = np.array([int(op.alloc_bytes) for op in graph.ops], dtype=np.int64)
        self.param = np.array([int(op.param_bytes) for op in graph.ops], dtype=np.int64)
        counts = np.array([len(op.output_bytes) for op in graph.ops], dtype=np.int64)
        self.ob_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.ob_val = np.array([int(b) for op in graph.ops for b in op.output_bytes], dtype=np.int64)
        self.max_out = int(max([counts.max() if n else 0, out.max() + 1 if E else 0]))
        self.gpu_ok, self.is_gpu, self.fallback = op_gpu_ok(graph), gpu_mask(spec), first_cpu(spec)
        self.link_bw, self.link_lat = link_matrices(spec)
        self.capacity = np.array([dev.tensor_capacity_bytes for dev in spec.devices], dtype=np.float64)
        self.pool = np.array(spec.pool_indices, dtype=np.int64)  # device -> compute pool
        # int32 copies for the kernel; data-only predecessor lists (control inputs
        # hold no memory, so release_input skips them) and each successor edge's position there
        if n >= 2**31 - 1 or E >= 2**31 - 1:
            raise ValueError(f"graph: {n} ops and {E} edges, at most 2**31 - 2 each")
        data = out >= 0
        dpo = po[data[po]]  # data edges in predecessor order
        dpos_of_edge = np.full(E, -1, np.int64)
        dpos_of_edge[dpo] = np.arange(len(dpo))
        self._k_succ_ptr = self.succ_ptr.astype(np.int32)
        self._k_succ_dst = self.succ_dst.astype(np.int32)
        self._k_succ_out = self.succ_out.astype(np.int32)
        self._k_succ_dpos = dpos_of_edge[so].astype(np.int32)
        self._k_dp_ptr = np.concatenate([[0], np.cumsum(np.bincount(dst[data], minlength=n))]).astype(np.int32)
        self._k_dp_src = src[dpo].astype(np.int32)
        self._k_indegree = self.indegree.astype(np.int32)
        self._k_ob_ptr = self.ob_ptr.astype(np.int32)
        self._k_identity = np.arange(n, dtype=np.int32)
        self._k_pool = self.pool.astype(np.int32)

    @property
    def op_times(self) -> np.ndarray:
        """``[num_ops, num_devices]`` seconds each op takes on each device."""
        return self.times

    def effective_placement(self, op_placement: np.ndarray) -> np.ndarray:
        """Soft placement (see [`cluster.simulator.Simulator.effective_placement`][cluster.simulator.Simulator.effective_placement]).

        Args:
            op_placement: ``[num_ops]`` or ``[K, num_ops]`` device indices.
        Returns:
            int64 array of the same shape: the devices the ops run on.
        Raises:
            ValueError: wrong length or a device index out of range.
        """
        p = check_placement(op_placement, self.graph.num_ops, len(self.spec.devices))
        if p.ndim > 2:
            raise ValueError(f"placement: shape {p.shape}, expected ({self.graph.num_ops},) or (K, {self.graph.num_ops})")
        return cpu_fallback(p, self.gpu_ok, self.spec)

    def _fast(self, unit_places: np.ndarray, op_unit: np.ndarray, trace: tuple | None = None) -> BatchResult:
        """The kernel: op ``i`` of placement ``k`` on ``unit_places[k, op_unit[i]]`` (checked);
        ``trace`` (`_trace_arrays`, one placement): also its critical path."""
        K = unit_places.shape[0]
        D = len(self.spec.devices)
        step = np.empty(K, np.float64)
        stalled = np.empty(K, np.bool_)
        compute = np.empty((K, D), np.float64)
        xfer = np.empty((K, D), np.float64)
        peak = np.empty((K, D), np.int64)
        if K:
            _simulate(
                np.ascontiguousarray(unit_places, dtype=np.int32), op_unit, self.gpu_ok, self.is_gpu,
                self.fallback, self.times, self._k_succ_ptr, self._k_succ_dst, self._k_succ_out,
                self.succ_bytes, self._k_succ_dpos, self._k_dp_ptr, self._k_dp_src, self._k_indegree,
                self.alloc, self.param, self._k_ob_ptr, self.ob_val, self.link_bw, self.link_lat,
                self._k_pool, self.max_out, step, stalled, compute, xfer, peak, trace)
        if stalled.any():
            raise RuntimeError("simulation stalled: the graph has a cycle or a dangling input")
        over = peak > self.capacity[None, :]
        return BatchResult(step, np.asarray(over.any(axis=1)), compute, xfer, peak, over)

    def run_arrays(self, op_placements: np.ndarray) -> BatchResult:
        """Simulate ``K`` placements, results as arrays (the fastest form).

        One compiled call for the batch, no critical paths; work arrays (int32 indices) are
        allocated once per call and reused by its ``K`` placements.

        Args:
            op_placements: ``[K, num_ops]`` device indices.
        Raises:
            ValueError: wrong shape or a device index out of range.
            RuntimeError: the simulation stalled.
        """
        p = check_placement(op_placements, self.graph.num_ops, len(self.spec.devices))
        if p.ndim != 2:
            raise ValueError(f"placements: shape {p.shape}, expected (K, {self.graph.num_ops})")
        return self._fast(p, self._k_identity)

    def run_group_arrays(self, group_placements: np.ndarray, op_group: np.ndarray) -> BatchResult:
        """Simulate ``K`` group placements on the op graph, exactly, results as arrays.

        The same results as ``run_arrays(group_placements[:, op_group])`` (op ``i`` on the
        device of its group ``op_group[i]``, then soft placement), without building the
        ``[K, num_ops]`` array: the kernel expands each placement itself.

        Args:
            group_placements: ``[K, num_groups]`` device indices.
            op_group: ``[num_ops]`` group index of each op (``Grouping.op_group``).
        Raises:
            ValueError: ``op_group`` not ``[num_ops]`` or with an index outside
                ``0..num_groups-1``; wrong shape or a device index out of range.
            RuntimeError: the simulation stalled.
        """
        og = np.asarray(op_group)
        n = self.graph.num_ops
        if og.shape != (n,) or og.dtype.kind not in "iu":
            raise ValueError(f"op_group: shape {og.shape} dtype {og.dtype}, expected integer ({n},)")
        gp = np.asarray(group_placements)
        if gp.ndim != 2:
            raise ValueError(f"group_placements: shape {gp.shape}, expected (K, num_groups)")
        g = gp.shape[1]
        if n and (og.min() < 0 or og.max() >= g):
            bad = int(og.min()) if og.min() < 0 else int(og.max())
            raise ValueError(f"op_group: group index {bad} out of range 0..{g - 1}")
        p = check_placement(gp, g, len(self.spec.devices))
        return self._fast(p, og.astype(np.int32))

    def run_batch(self, op_placements: np.ndarray, critical_path: bool = False) -> list[SimResult]:
        """Simulate ``K`` placements (``[K, num_ops]`` device indices) -> ``K`` [`SimResult`][cluster.simulator.SimResult].

        ``critical_path=True`` also returns each placement's critical path (slower: one
        compiled call per placement and Python objects per step).

        Raises:
            ValueError: wrong shape or a device index out of range.
            RuntimeError: the simulation stalled.
        """
        if critical_path:
            p = check_placement(op_placements, self.graph.num_ops, len(self.spec.devices))
            if p.ndim != 2:
                raise ValueError(f"placements: shape {p.shape}, expected (K, {self.graph.num_ops})")
            return [self.run(row) for row in p]
        b = self.run_arrays(op_placements)
        names = self.spec.device_names
        out = []
        for k in range(len(b.step_time_s)):
            devs = [names[i] for i in np.flatnonzero(b.oom_devices[k])]
            out.append(SimResult(
                step_time_s=float(b.step_time_s[k]),
                oom=bool(devs),
                compute_s=b.compute_s[k].tolist(),
                transfer_s=b.transfer_s[k].tolist(),
                peak_memory_bytes=b.peak_memory_bytes[k].tolist(),
                oom_devices=devs,
            ))
        return out

    def run(self, op_placement: np.ndarray) -> SimResult:
        """Simulate one step with ``op_placement[i]`` = device index of op ``i``, with its critical path.

        Raises:
            ValueError: wrong length or a device index out of range.
            RuntimeError: the simulation stalled.
        """
        p = self.effective_placement(op_placement)
        if p.ndim != 1:
            raise ValueError(f"placement: length {p.shape}, expected ({self.graph.num_ops},)")
        trace = _trace_arrays(self.graph.num_ops, len(self.succ_dst), len(self.spec.devices))
        b = self._fast(p[None, :], self._k_identity, trace)
        o_start, o_end, x_start, x_end, x_src, x_out, x_ddev = (trace[i] for i in (0, 1, 6, 7, 11, 12, 13))
        items = trace[14][: trace[15][0]]
        step, compute, xfer, peak = b.step_time_s, b.compute_s, b.transfer_s, b.peak_memory_bytes
        n = self.graph.num_ops
        names = self.spec.device_names
        path = []
        for item in items[::-1].tolist():
            if item < n:
                d = int(p[item])
                path.append(PathStep("op", item, -1, d, d, float(o_start[item]), float(o_end[item]),
                                     self.graph.ops[item].name))
            else:
                t = item - n
                op, out, dd = int(x_src[t]), int(x_out[t]), int(x_ddev[t])
                path.append(PathStep("transfer", op, out, int(p[op]), dd, float(x_start[t]), float(x_end[t]),
                                     f"{self.graph.ops[op].name}:{out}->{names[dd]}"))
        over = peak[0] > self.capacity
        devs = [names[i] for i in np.flatnonzero(over)]
        return SimResult(
            step_time_s=float(step[0]),
            oom=bool(devs),
            compute_s=compute[0].tolist(),
            transfer_s=xfer[0].tolist(),
            peak_memory_bytes=peak[0].tolist(),
            oom_devices=devs,
            critical_path=path,
        )


def load_kernel(spec: ClusterSpec) -> float:
    """Load the batch kernel of [`FastSimulator`][cluster.fast_simulator.FastSimulator] into this process (numba's on-disk
    cache; compiled there the first time) by simulating a two-op graph on ``spec``: the same
    argument types as any graph's, so the next simulation of a real graph starts at once.

    A search's placements per CPU-second (``placement experiment``, ``benchmarks/learners.py``)
    are measured after this call, so the first search does not carry the load (about 1 CPU-second
    here) that the searches after it do not.

    Returns:
        The CPU-seconds the call took.
    """
    import time

    from compgraph.ir import Edge, Op

    cpu = time.process_time()
    ops = [Op(name=f"load_kernel/{i}", type="NoOp", output_shapes=[(1,)], output_bytes=[4]) for i in range(2)]
    sim = FastSimulator(OpGraph(name="load_kernel", ops=ops, edges=[Edge(src=0, dst=1, bytes=4)]), spec)
    sim.run_group_arrays(np.zeros((1, 2), np.int64), np.arange(2))
    return time.process_time() - cpu
