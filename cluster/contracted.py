"""The contracted engine's graph: co-located ops merged into an acyclic graph of clusters (an approximation).

[`cluster.simulated.SimulatedEnvironment`][cluster.simulated.SimulatedEnvironment] with ``engine="contracted"`` runs
[`cluster.fast_simulator.FastSimulator`][cluster.fast_simulator.FastSimulator] on it; [`contract_groups`][cluster.contracted.contract_groups]' docstring says what differs
from the op-level simulation, and ``benchmarks/simulator.py`` measures by how much.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compgraph.ir import Edge, Grouping, Op, OpGraph


@dataclass
class ContractedGraph:
    """The group graph of [`contract_groups`][cluster.contracted.contract_groups].

    Attributes:
        graph: one op per cluster (``[num_clusters]`` ops), edges between clusters.
        op_times: ``[num_clusters, num_devices]`` seconds: the sum of the member ops' times.
        cluster_group: ``[num_clusters]`` int64: the group each cluster belongs to, so a
            group placement ``gp`` gives the cluster placement ``gp[cluster_group]``.
        op_cluster: ``[num_ops]`` int64: the cluster of each op.
    """

    graph: OpGraph
    op_times: np.ndarray
    cluster_group: np.ndarray
    op_cluster: np.ndarray


def contract_groups(graph: OpGraph, grouping: Grouping, op_times: np.ndarray) -> ContractedGraph:
    """Contract the op graph into an acyclic graph of clusters of co-located ops (approximation).

    The 2017 groups themselves cannot be contracted as they are: a group holds forward
    ops and their colocated gradients, so the graph of groups has cycles (forward
    ``A -> B``, backward ``B -> A``). Each group is therefore split by its *level*: with
    ``key(o) = (group(o), gpu_kernel(o))``, ``level(o) = max over inputs p of level(p) +
    [key(p) != key(o)]``, and a cluster is the ops of one ``(key, level)``. Every edge
    between clusters goes to a strictly higher level, so the cluster graph is a DAG, and
    every cluster lies in one group (it is placed with its group).

    Semantics of simulating the cluster graph (what differs from the op graph):

    * a cluster runs as one op whose time is the sum of its ops' times on the device: its
      ops run back to back, none of them starts before all of the cluster's inputs from
      other clusters have arrived, and none of its outputs leaves before the whole cluster
      has finished (the op graph lets them overlap with other ops and transfers);
    * each tensor crossing clusters is an output of its cluster, sent once per
      destination device as in the op graph; control edges between clusters become one
      control edge per cluster pair (dropped when a data edge already joins them);
    * memory: the cluster's ``alloc_bytes`` is the sum of its ops' (all its activations
      live from its start until the last reader of any of its outputs has finished, an
      upper bound of the op-level figure); parameters are the same sum as in the op graph;
    * soft placement moves a whole cluster of ops without a GPU kernel to the CPU (they
      are never mixed with GPU-kernel ops in a cluster), as at op level.

    Args:
        graph: the op graph.
        grouping: its groups.
        op_times: ``[num_ops, num_devices]`` seconds.
    Returns:
        the [`ContractedGraph`][cluster.contracted.ContractedGraph].
    Raises:
        ValueError: ``op_times`` or ``grouping.op_group`` of the wrong shape.
    """
    n = graph.num_ops
    times = np.asarray(op_times, dtype=np.float64)
    if times.ndim != 2 or times.shape[0] != n:
        raise ValueError(f"op_times: shape {times.shape}, expected ({n}, num_devices)")
    og = np.asarray(grouping.op_group, dtype=np.int64)
    if og.shape != (n,):
        raise ValueError(f"grouping.op_group: shape {og.shape}, expected ({n},)")
    gpu = [bool(op.gpu_kernel) for op in graph.ops]
    key = [(int(og[i]), gpu[i]) for i in range(n)]
    preds: list[list[int]] = [[] for _ in range(n)]
    for e in graph.edges:
        preds[e.dst].append(e.src)
    level = [0] * n
    for o in graph.topological_order.tolist():
        for p in preds[o]:
            level[o] = max(level[o], level[p] + (key[p] != key[o]))
    ids: dict[tuple, int] = {}
    op_cluster = np.empty(n, np.int64)
    for o in graph.topological_order.tolist():
        op_cluster[o] = ids.setdefault((key[o], level[o]), len(ids))
    c = len(ids)
    members: list[list[int]] = [[] for _ in range(c)]
    for o in range(n):
        members[op_cluster[o]].append(o)
    ctimes = np.zeros((c, times.shape[1]), np.float64)
    for ci, ms in enumerate(members):
        for o in ms:
            ctimes[ci] += times[o]
    outputs: list[dict[tuple[int, int], int]] = [{} for _ in range(c)]  # (src op, output) -> cluster output index
    data_pairs, edges, seen = set(), [], set()
    for e in graph.edges:
        cs, cd = int(op_cluster[e.src]), int(op_cluster[e.dst])
        if cs == cd or e.control:
            continue
        k = outputs[cs].setdefault((e.src, e.src_output), len(outputs[cs]))
        if (cs, cd, k) not in seen:
            seen.add((cs, cd, k))
            edges.append(Edge(cs, cd, e.bytes, src_output=k))
        data_pairs.add((cs, cd))
    for e in graph.edges:
        cs, cd = int(op_cluster[e.src]), int(op_cluster[e.dst])
        if cs != cd and e.control and (cs, cd) not in data_pairs:
            data_pairs.add((cs, cd))
            edges.append(Edge(cs, cd, 0, control=True))
    ops = []
    for ci, ms in enumerate(members):
        outs = sorted(outputs[ci].items(), key=lambda kv: kv[1])
        ops.append(Op(
            name=f"{grouping.names[og[ms[0]]]}#{ci}",
            type="Cluster",
            output_shapes=[graph.ops[s].output_shapes[o] for (s, o), _ in outs],
            output_bytes=[int(graph.ops[s].output_bytes[o]) for (s, o), _ in outs],
            flops=float(sum(graph.ops[o].flops for o in ms)),
            bytes_accessed=float(sum(graph.ops[o].bytes_accessed for o in ms)),
            alloc_bytes=int(sum(graph.ops[o].alloc_bytes for o in ms)),
            param_bytes=int(sum(graph.ops[o].param_bytes for o in ms)),
            gpu_kernel=gpu[ms[0]],
        ))
    cluster_group = np.array([og[ms[0]] for ms in members], dtype=np.int64)
    return ContractedGraph(OpGraph(f"{graph.name}/clusters", ops, edges), ctimes, cluster_group, op_cluster)
