"""Co-location grouping: the 2017 heuristics and two automatic graph partitioners.

Groupers ([`GROUPERS`][compgraph.grouping.GROUPERS], one entry point [`group`][compgraph.grouping.group]), each recorded in
`Grouping.grouper`:

* ``heuristic``: Mirhoseini et al. 2017, Sec. 3.3, rules 1 and 2 below.
* ``2017``: rules 1, 2 and 3 (the per-model rule of 2017 Sec. 4.1, "each LSTM cell,
  each embedding lookup ... each softmax prediction step as a group"); what
  [`group_ops`][compgraph.grouping.group_ops] does.
* ``metis``: METIS (Karypis and Kumar 1998; the METIS grouper of EAGLE, Lan et al.
  2021, Sec. III-B and Table I) on the cost-weighted graph of TensorFlow colocation units,
  to a target number of groups.
* ``fluid``: networkx asynchronous fluid communities (Parés et al. 2017; the "Networkx"
  grouper of EAGLE Table I) on the same graph, unweighted, to a target number of groups.

The 2017 rules, applied in order, each only ever merging (so no rule splits what an
earlier one joined, and a TensorFlow colocation group is never split):

1. **TensorFlow colocation** ([`colocation_units`][compgraph.grouping.colocation_units]): ops that TensorFlow requires on
   one device (``_class`` colocation attributes, e.g. an op and its gradient ops under
   ``colocate_gradients_with_ops``; ops joined through resource inputs, e.g. a variable,
   its reads and its optimizer update) form one unit.
2. **Single-consumer merge** ([`merge_single_consumer`][compgraph.grouping.merge_single_consumer]): "if the output of an
   operation X is consumed *only* by another operation Y, then X and Y are co-located",
   applied recursively, treating the groups as operations after each pass, until no
   group can be merged.
3. **Model rule** ([`apply_model_rule`][compgraph.grouping.apply_model_rule]): a per-model function maps an op name to a
   key (each LSTM cell, each embedding lookup, each softmax step for RNNLM); groups whose
   keyed ops all carry the same key are merged by key. A group whose ops carry several
   keys (a shared variable read from every step) stays a group of its own.

The automatic groupers partition the **unit graph** ([`unit_graph`][compgraph.grouping.unit_graph]): each colocation
unit of rule 1 contracted to one vertex (so a colocation group is never split), edges
undirected, parallel and opposite edges summed. For METIS a vertex weighs the unit's
estimated compute time on a reference device ([`REFERENCE_DEVICE`][compgraph.grouping.REFERENCE_DEVICE], one K80 GK210,
the 2017 paper's GPU: a roofline plus a launch overhead, as ``cluster.cost_model``), in
integer microseconds (at least 1); an edge weighs the bytes it carries in integer KiB,
rounded up, at least 1 (control edges carry 0 bytes and weigh 1). METIS minimises the
weighted edge cut under a balance constraint on the vertex weights (its default 3 %
imbalance), by recursive bisection (``METIS_PartGraphRecursive``): on the RNNLM graphs it
cut fewer bytes than k-way and left fewer parts empty (small, 256 parts: 705 vs 726 MB
cut, 186 vs 147 groups; paper, 256 parts: 41.8 vs 43.5 GB cut, 179 vs 135 groups). A few
units are far heavier than a part's share (the softmax and embedding units), so METIS
leaves parts empty and a grouping has fewer groups than asked. Fluid communities ignores
all weights (EAGLE Sec. III-B); unconstrained by balance, it cut fewer bytes than METIS
on the paper RNNLM (256 groups: 35.2 vs 41.8 GB) but not on the small one (722 vs 705 MB).

Target number of groups: [`DEFAULT_NUM_GROUPS`][compgraph.grouping.DEFAULT_NUM_GROUPS] = 256, the number the Hierarchical
Planner and EAGLE use for every model (EAGLE Sec. IV-C "The number of groups is set to
256 in our experiments"). A graph with fewer colocation units than the target gets one
group per unit.

Every grouper numbers its groups in the topological order of their first op and names
them by their model key, else by their first variable's name, else by their first op's
name (all unique), so outputs are stable.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import networkx as nx
import numpy as np

from compgraph.ir import Grouping, OpGraph

ModelRule = Callable[[str], "str | None"]
_log = logging.getLogger(__name__)

#: Target number of groups of the automatic groupers when none is given (EAGLE Sec. IV-C;
#: the Hierarchical Planner, Mirhoseini et al. 2018, uses the same).
DEFAULT_NUM_GROUPS = 256

#: The reference device for METIS vertex weights: one GK210 of a Tesla K80 (the 2017
#: paper's GPU; ``cluster/presets/k80x2.yaml``): peak FLOP/s, memory bandwidth (bytes/s),
#: per-op launch overhead (seconds).
REFERENCE_DEVICE = {"peak_flops": 4.365e12, "memory_bandwidth": 240.0e9, "op_overhead_s": 5.0e-6}


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if rb < ra:
            ra, rb = rb, ra
        self.parent[rb] = ra  # the smaller index stays the root: deterministic
        return True

    def labels(self) -> list[int]:
        return [self.find(i) for i in range(len(self.parent))]


def colocation_units(graph: OpGraph) -> _UnionFind:
    """Rule 1: union-find over ops joined by TensorFlow colocation constraints."""
    uf = _UnionFind(graph.num_ops)
    for i, op in enumerate(graph.ops):
        for other in op.colocation:
            uf.union(i, graph.index[other])
    return uf


def merge_single_consumer(graph: OpGraph, uf: _UnionFind) -> None:
    """Rule 2: merge every group whose outputs all go to exactly one other group, until none does."""
    changed = True
    while changed:
        changed = False
        consumers: dict[int, set[int]] = {}
        for e in graph.edges:
            a, b = uf.find(e.src), uf.find(e.dst)
            if a != b:
                consumers.setdefault(a, set()).add(b)
        for a in sorted(consumers):
            targets = consumers[a]
            if len(targets) == 1:
                (b,) = targets
                if uf.union(a, b):
                    changed = True
        # after a pass the merged groups are treated as operations (2017 Sec. 3.3)


def apply_model_rule(graph: OpGraph, uf: _UnionFind, rule: ModelRule) -> dict[int, str]:
    """Rule 3: merge the groups whose keyed ops all carry one key; returns root -> key."""
    keys: dict[int, set[str]] = {}
    for i, op in enumerate(graph.ops):
        k = rule(op.name)
        if k is not None:
            keys.setdefault(uf.find(i), set()).add(k)
    first_of_key: dict[str, int] = {}
    for root in sorted(keys):
        ks = keys[root]
        if len(ks) == 1:
            (k,) = ks
            if k in first_of_key:
                uf.union(first_of_key[k], root)
            else:
                first_of_key[k] = root
    return {uf.find(r): k for k, r in first_of_key.items()}


def _make_grouping(graph: OpGraph, labels: list, grouper: str, label_key: dict | None = None) -> Grouping:
    """Groups from per-op labels (any hashable): numbered by the topological position of
    their first op; named by ``label_key[label]``, else the first variable, else the first op."""
    label_key = label_key or {}
    order = graph.topological_order.tolist()
    group_of_label: dict = {}
    names: list[str] = []
    for op in order:
        lab = labels[op]
        if lab not in group_of_label:
            group_of_label[lab] = len(names)
            names.append(label_key.get(lab, graph.ops[op].name))
    # a group with no model key and a variable in it is named after its first variable
    named_by_variable: set = set()
    for op in order:
        lab = labels[op]
        if lab not in label_key and lab not in named_by_variable and graph.ops[op].param_bytes > 0:
            names[group_of_label[lab]] = graph.ops[op].name
            named_by_variable.add(lab)
    op_group = np.array([group_of_label[labels[i]] for i in range(graph.num_ops)], dtype=np.int64)
    return Grouping(op_group=op_group, names=names, grouper=grouper)


def group_ops(graph: OpGraph, rule: ModelRule | None = None, grouper: str = "2017") -> Grouping:
    """Group ``graph`` with the 2017 rules (see the module docstring).

    Args:
        graph: the op graph.
        rule: the model rule (op name -> key or ``None``); ``None`` skips rule 3.
        grouper: name recorded on the result.
    Returns:
        A [`Grouping`][compgraph.ir.Grouping]; groups are numbered by the topological position of their
        first op and named by their model key, else by their first variable's name, else by
        their first op's name.
    """
    uf = colocation_units(graph)
    merge_single_consumer(graph, uf)
    root_key = apply_model_rule(graph, uf, rule) if rule is not None else {}
    return _make_grouping(graph, uf.labels(), grouper, root_key)


def colocation_grouping(graph: OpGraph) -> Grouping:
    """The finest grouping that never splits a TensorFlow colocation group: one group per
    colocation unit (rule 1 alone, [`colocation_units`][compgraph.grouping.colocation_units]), grouper ``"colocation"``.

    Learners that group ops themselves (Hierarchical Planner, EAGLE) place these units.
    """
    return _make_grouping(graph, colocation_units(graph).labels(), "colocation")


def coarse_of(fine: Grouping, coarse: Grouping) -> Grouping:
    """``fine`` with ``coarse_group`` and ``coarse_names`` set ([`compgraph.ir.Grouping`][compgraph.ir.Grouping]): the group of
    ``coarse`` that holds each of ``fine``'s groups, int64 ``[fine.num_groups]``, and ``coarse``'s names, when every
    fine group lies inside one coarse group (the colocation units inside the 2017 groups); else ``fine`` unchanged
    (``coarse_group`` ``None``: a coarse grouping that splits a fine group, e.g. one group per op).

    Raises:
        ValueError: the two groupings cover different numbers of ops (names both).
    """
    fo, co = np.asarray(fine.op_group, dtype=np.int64), np.asarray(coarse.op_group, dtype=np.int64)
    if fo.shape != co.shape:
        raise ValueError(f"coarse grouping: covers {co.shape[0]} ops, the fine grouping {fo.shape[0]}")
    first = np.full(fine.num_groups, -1, dtype=np.int64)
    first[fo] = co  # the coarse group of one of each fine group's ops (all the same when they nest: checked)
    if len(fo) and not np.array_equal(first[fo], co):
        return fine
    return Grouping(op_group=fine.op_group, names=fine.names, grouper=fine.grouper, coarse_group=first,
                    coarse_names=list(coarse.names))


# --------------------------------------------------------------------------------------
# the unit graph and the automatic groupers
# --------------------------------------------------------------------------------------


@dataclass
class UnitGraph:
    """TensorFlow colocation units contracted to vertices (undirected, weighted).

    Attributes:
        unit_of_op: int64 ``[num_ops]``: the unit of each op; units are numbered in the
            topological order of their first op.
        vertex_weight: int64 ``[num_units]``: estimated compute time of the unit's ops on
            [`REFERENCE_DEVICE`][compgraph.grouping.REFERENCE_DEVICE] (integer microseconds, at least 1).
        edges: ``(a, b) -> bytes`` with ``a < b``: bytes moved between units a and b in
            either direction (summed over the ops' edges).
    """

    unit_of_op: np.ndarray
    vertex_weight: np.ndarray
    edges: dict[tuple[int, int], int]

    @property
    def num_units(self) -> int:
        return int(self.vertex_weight.shape[0])

    def edge_weight_kib(self, a: int, b: int) -> int:
        """METIS weight of edge ``{a, b}``: its bytes in KiB, rounded up, at least 1."""
        return max(1, math.ceil(self.edges[(min(a, b), max(a, b))] / 1024))

    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(xadj [num_units + 1], adjncy [2 * num_edges], eweights [2 * num_edges])``, int64:
        both directions of every edge, neighbours in ascending order, weights in KiB."""
        nbrs: list[list[int]] = [[] for _ in range(self.num_units)]
        for a, b in self.edges:
            nbrs[a].append(b)
            nbrs[b].append(a)
        xadj = np.zeros(self.num_units + 1, dtype=np.int64)
        adjncy: list[int] = []
        ew: list[int] = []
        for u, ns in enumerate(nbrs):
            ns.sort()
            adjncy.extend(ns)
            ew.extend(self.edge_weight_kib(u, v) for v in ns)
            xadj[u + 1] = len(adjncy)
        return xadj, np.array(adjncy, dtype=np.int64), np.array(ew, dtype=np.int64)

    def to_networkx(self) -> nx.Graph:
        """An undirected ``networkx.Graph`` on units ``0..num_units-1`` (attribute ``bytes``)."""
        g = nx.Graph()
        g.add_nodes_from(range(self.num_units))
        for (a, b), nbytes in sorted(self.edges.items()):
            g.add_edge(a, b, bytes=nbytes)
        return g


def reference_time_s(graph: OpGraph) -> np.ndarray:
    """Seconds each op takes on [`REFERENCE_DEVICE`][compgraph.grouping.REFERENCE_DEVICE] (roofline + overhead): float64 ``[num_ops]``."""
    d = REFERENCE_DEVICE
    flops = np.array([op.flops for op in graph.ops], dtype=np.float64)
    nbytes = np.array([op.bytes_accessed for op in graph.ops], dtype=np.float64)
    return np.maximum(flops / d["peak_flops"], nbytes / d["memory_bandwidth"]) + d["op_overhead_s"]


def unit_graph(graph: OpGraph) -> UnitGraph:
    """Contract the TensorFlow colocation units (rule 1) of ``graph``: see [`UnitGraph`][compgraph.grouping.UnitGraph]."""
    labels = colocation_units(graph).labels()
    unit_of_label: dict[int, int] = {}
    for op in graph.topological_order.tolist():
        unit_of_label.setdefault(labels[op], len(unit_of_label))
    unit_of_op = np.array([unit_of_label[labels[i]] for i in range(graph.num_ops)], dtype=np.int64)
    n = len(unit_of_label)
    t_us = np.zeros(n, dtype=np.float64)
    np.add.at(t_us, unit_of_op, reference_time_s(graph) * 1e6)
    vertex_weight = np.maximum(1, np.rint(t_us)).astype(np.int64)
    edges: dict[tuple[int, int], int] = {}
    for e in graph.edges:
        a, b = int(unit_of_op[e.src]), int(unit_of_op[e.dst])
        if a != b:
            key = (min(a, b), max(a, b))
            edges[key] = edges.get(key, 0) + int(e.bytes)
    return UnitGraph(unit_of_op, vertex_weight, edges)


def _check_num_groups(grouper: str, num_groups) -> int:
    if num_groups is None:
        raise ValueError(
            f"grouper {grouper!r} partitions to a target number of groups: give num_groups "
            f"(e.g. {DEFAULT_NUM_GROUPS}, EAGLE Sec. IV-C)"
        )
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)) or num_groups < 1:
        raise ValueError(f"num_groups={num_groups!r}: must be an integer >= 1")
    return int(num_groups)


def metis_unit_parts(units: UnitGraph, num_groups: int, seed: int = 0) -> np.ndarray:
    """METIS k-way partition of the unit graph: int64 ``[num_units]`` part ids in ``0..num_groups-1``.

    Vertex weights: [`UnitGraph.vertex_weight`][compgraph.grouping.UnitGraph.vertex_weight] (microseconds); edge weights: KiB.
    ``num_groups >= num_units`` gives every unit its own part; 1 gives one part.
    Deterministic for a given ``seed`` (METIS' ``seed`` option).
    """
    import pymetis

    n = units.num_units
    if num_groups >= n:
        return np.arange(n, dtype=np.int64)
    if num_groups == 1:
        return np.zeros(n, dtype=np.int64)
    xadj, adjncy, ew = units.csr()
    opts = pymetis.Options(seed=int(seed))
    with _c_stdout_to_log():
        _, parts = pymetis.part_graph(
            num_groups,
            adjacency=pymetis.CSRAdjacency(adj_starts=xadj.tolist(), adjacent=adjncy.tolist()),
            vweights=units.vertex_weight.tolist(),
            eweights=ew.tolist(),
            recursive=True,
            options=opts,
        )
    return np.asarray(parts, dtype=np.int64)


@contextmanager
def _c_stdout_to_log():
    """Send what C code prints to file descriptor 1 (METIS' ``***Cannot bisect...`` notes when
    it leaves parts empty) to this module's logger at DEBUG, so it never mixes with a
    command's own output (e.g. JSON on stdout)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace").strip()
            if text:
                _log.debug("METIS: %s", " ".join(text.split()))


def _apportion(sizes: list[int], k: int) -> list[int]:
    """Communities per component: about ``k * size / total`` each (largest remainder),
    at least 1 and at most ``size``; ``k >= len(sizes)`` and ``k <= sum(sizes)``."""
    total = sum(sizes)
    ideal = [k * s / total for s in sizes]
    q = [min(s, max(1, math.floor(x))) for s, x in zip(sizes, ideal)]
    while sum(q) < k:
        i = max((i for i in range(len(q)) if q[i] < sizes[i]), key=lambda i: (ideal[i] - q[i], -i))
        q[i] += 1
    while sum(q) > k:
        i = max((i for i in range(len(q)) if q[i] > 1), key=lambda i: (q[i] - ideal[i], -i))
        q[i] -= 1
    return q


def fluid_unit_parts(units: UnitGraph, num_groups: int, seed: int = 0) -> np.ndarray:
    """Asynchronous fluid communities (``networkx.algorithms.community.asyn_fluidc``) on the
    unit graph: int64 ``[num_units]`` community ids. Weights are ignored.

    ``asyn_fluidc`` needs a connected graph, so each connected component (ordered by its
    first unit) is partitioned on its own, the ``num_groups`` communities apportioned to
    the components by their number of units (largest remainder, at least one each). With
    fewer communities than components, whole components are packed into ``num_groups``
    bins (largest first, into the bin with the fewest units) and each bin is one group.
    ``num_groups >= num_units`` gives every unit its own group. Seeded with ``seed``.
    """
    from networkx.algorithms.community import asyn_fluidc

    n = units.num_units
    if num_groups >= n:
        return np.arange(n, dtype=np.int64)
    g = units.to_networkx()
    comps = sorted((sorted(c) for c in nx.connected_components(g)), key=lambda c: c[0])
    parts = np.zeros(n, dtype=np.int64)
    if num_groups < len(comps):
        bins = [0] * num_groups
        for c in sorted(comps, key=lambda c: (-len(c), c[0])):
            b = min(range(num_groups), key=lambda i: (bins[i], i))
            bins[b] += len(c)
            parts[c] = b
        return parts
    quotas = _apportion([len(c) for c in comps], num_groups)
    next_id = 0
    for c, q in zip(comps, quotas):
        if q == 1:
            parts[c] = next_id
        elif q == len(c):
            parts[c] = np.arange(next_id, next_id + q)
        else:
            sub = nx.Graph()
            sub.add_nodes_from(c)
            sub.add_edges_from(sorted((a, b) for a, b in g.edges(c)))
            communities = asyn_fluidc(sub, q, seed=int(seed))
            for j, members in enumerate(sorted((sorted(m) for m in communities), key=lambda m: m[0])):
                parts[members] = next_id + j
        next_id += q
    return parts


def _automatic(graph: OpGraph, grouper: str, num_groups: int, seed: int) -> Grouping:
    units = unit_graph(graph)
    fn = metis_unit_parts if grouper == "metis" else fluid_unit_parts
    parts = fn(units, num_groups, seed)
    labels = parts[units.unit_of_op].tolist()
    return _make_grouping(graph, labels, grouper)


@dataclass(frozen=True)
class Grouper:
    """A grouper of the registry [`GROUPERS`][compgraph.grouping.GROUPERS].

    Attributes:
        name: the name users select it by (``--grouper``), recorded in ``Grouping.grouper``.
        description: one line, with the paper and section.
        needs_model_rule: it applies the benchmark's model rule (2017 Sec. 4.1).
        automatic: it partitions to a target ``num_groups`` (METIS, fluid communities).
    """

    name: str
    description: str
    needs_model_rule: bool
    automatic: bool


GROUPERS: dict[str, Grouper] = {
    "heuristic": Grouper(
        "heuristic", "2017 Sec. 3.3 rules 1-2: TensorFlow colocation, recursive single-consumer merge", False, False
    ),
    "2017": Grouper(
        "2017", "2017 Sec. 3.3 rules 1-3: colocation, single-consumer merge, the per-model rule (Sec. 4.1)", True, False
    ),
    "metis": Grouper(
        "metis", "METIS on the cost-weighted graph of colocation units to num_groups groups (EAGLE Table I)", False, True
    ),
    "fluid": Grouper(
        "fluid", "networkx asynchronous fluid communities on colocation units to num_groups groups (EAGLE Table I)",
        False, True,
    ),
}


def default_num_groups(grouper: str) -> int | None:
    """The target number of groups used when none is given: [`DEFAULT_NUM_GROUPS`][compgraph.grouping.DEFAULT_NUM_GROUPS] for an
    automatic grouper, ``None`` for the heuristic ones (they set their own)."""
    if grouper not in GROUPERS:
        raise ValueError(f"unknown grouper {grouper!r}; valid: {', '.join(GROUPERS)}")
    return DEFAULT_NUM_GROUPS if GROUPERS[grouper].automatic else None


def check_grouper(grouper: str, model_rule: ModelRule | None, num_groups: int | None, graph_name: str = "graph") -> int | None:
    """Check [`group`][compgraph.grouping.group]'s arguments before any work; returns ``num_groups`` (``None`` for a
    heuristic grouper).

    Raises:
        ValueError: as [`group`][compgraph.grouping.group].
    """
    if grouper not in GROUPERS:
        raise ValueError(f"unknown grouper {grouper!r}; valid: {', '.join(GROUPERS)}")
    info = GROUPERS[grouper]
    if info.needs_model_rule and model_rule is None:
        raise ValueError(
            f"grouper {grouper!r} needs the model's rule (2017 Sec. 4.1) and graph {graph_name!r} has none; "
            f"use 'heuristic', 'metis' or 'fluid'"
        )
    if not info.automatic:
        if num_groups is not None:
            raise ValueError(
                f"num_groups={num_groups!r}: grouper {grouper!r} sets its own number of groups; "
                f"num_groups is for {', '.join(n for n, g in GROUPERS.items() if g.automatic)}"
            )
        return None
    return _check_num_groups(grouper, num_groups)


def group(
    graph: OpGraph,
    grouper: str,
    model_rule: ModelRule | None = None,
    num_groups: int | None = None,
    seed: int = 0,
) -> Grouping:
    """Group ``graph`` with the grouper named ``grouper`` (see the module docstring).

    Args:
        graph: the op graph.
        grouper: a key of [`GROUPERS`][compgraph.grouping.GROUPERS]: ``heuristic``, ``2017``, ``metis`` or ``fluid``.
        model_rule: op name -> co-location key or ``None`` (needed by ``2017``, ignored by
            the others).
        num_groups: target number of groups, for ``metis`` and ``fluid`` only (they may
            return fewer: empty METIS parts; a graph with fewer colocation units).
        seed: random seed of ``metis`` and ``fluid`` (same seed, same grouping).
    Returns:
        A [`Grouping`][compgraph.ir.Grouping] with ``grouper`` recorded; no TensorFlow colocation group is split.
    Raises:
        ValueError: an unknown grouper (the message lists the valid ones); ``2017`` with no
            model rule; ``metis``/``fluid`` without ``num_groups`` or with ``num_groups < 1``;
            ``num_groups`` given to a heuristic grouper (which sets its own).
    """
    k = check_grouper(grouper, model_rule, num_groups, graph.name)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed={seed!r}: must be an integer")
    if not GROUPERS[grouper].automatic:
        return group_ops(graph, model_rule if GROUPERS[grouper].needs_model_rule else None, grouper=grouper)
    assert k is not None  # an automatic grouper's target group count (check_grouper)
    return _automatic(graph, grouper, int(k), int(seed))


SCOPE_SEPARATORS = "/."
"""What separates name scopes in a group's name: TensorFlow's ``/`` (``rnnlm/layer_1/step_3``) and
PyTorch module paths' ``.`` (``h.11.mlp``)."""


GRADIENT_SCOPE = re.compile(r"^gradients(_[0-9]+)?/")
"""TensorFlow's gradient name scope (``gradients/rnnlm/layer_1/...``): a gradient op's unit is also in
the scope of its forward op, as ``colocate_gradients_with_ops`` would place it."""


def name_scopes(names: list[str]) -> list[tuple[int, np.ndarray]]:
    """The name scopes that hold several groups, with the groups under each: every prefix of a
    group's name at a scope separator ([`SCOPE_SEPARATORS`][compgraph.grouping.SCOPE_SEPARATORS]), and the name itself.

    A group named under TensorFlow's gradient scope ([`GRADIENT_SCOPE`][compgraph.grouping.GRADIENT_SCOPE]) is in the scopes
    of its forward name too, so a layer's scope holds its gradient ops (colocation units of the
    Hierarchical Planner and EAGLE: 722 of rnnlm paper's 2,662 are ``gradients/...``). A scope is
    kept when it holds at least 2 groups and not all of them; scopes with the same groups are kept
    once (the shallowest). A TensorFlow layer (``rnnlm/layer_1``: 81 of paper rnnlm's 253
    groups), a time step, a PyTorch block (``h.11``) are such scopes: what a human expert moves at
    once (Mirhoseini et al. 2017, Sec. 4.2, "each layer on its own GPU").

    Args:
        names: ``[G]`` group names ([`compgraph.ir.Grouping.names`][compgraph.ir.Grouping.names]).
    Returns:
        ``[(depth, int64 [n] group indices)]``, ordered by depth then name (``depth`` 1 for
        ``rnnlm``, 2 for ``rnnlm/layer_1``); empty when no name has a scope.
    """
    members: dict[str, set[int]] = {}
    for g, raw in enumerate(names):
        forward = GRADIENT_SCOPE.sub("", raw)  # gradients/rnnlm/layer_1/... is in rnnlm/layer_1 too
        for name in {raw, forward}:
            for i, ch in enumerate(name + "/"):  # the name itself too: group rnnlm/layer_0/step_3 is in that scope
                if ch in SCOPE_SEPARATORS and i > 0:
                    members.setdefault(name[:i], set()).add(g)
    depth = {scope: 1 + sum(scope.count(c) for c in SCOPE_SEPARATORS) for scope in members}
    out: list[tuple[int, np.ndarray]] = []
    seen: set[tuple[int, ...]] = set()
    for scope in sorted(members, key=lambda s: (depth[s], s)):
        groups = tuple(sorted(members[scope]))
        if 2 <= len(groups) < len(names) and groups not in seen:
            seen.add(groups)
            out.append((depth[scope], np.asarray(groups, dtype=np.int64)))
    return out


def leaf_scopes(names: list[str], depth: int, scopes: list[tuple[int, np.ndarray]] | None = None
                ) -> list[tuple[str, list[int]]]:
    """The scopes of [`name_scopes`][compgraph.grouping.name_scopes] at most ``depth`` deep that hold no other such
    scope: ``[(label, group indices)]``, the label the groups' common name prefix (gradient scopes
    left out, as ``name_scopes`` does), made unique with ``#k`` where two would be the same. On nmt
    paper at depth 3: the encoder's and the decoder's embedding, ``layer_0``, ``layer_1``, the
    attention, the softmax and ``train_step`` (9 scopes); groups in no such scope are in none.
    ``scopes``: ``name_scopes(names)`` when the caller has it already (computed here otherwise)."""
    forward = [GRADIENT_SCOPE.sub("", n) for n in names]
    kept = [set(int(i) for i in g) for d, g in (name_scopes(names) if scopes is None else scopes) if d <= depth]
    out: list[tuple[str, list[int]]] = []
    for k, g in enumerate(g for g in kept if not any(h < g for h in kept)):
        label = os.path.commonprefix([forward[i] for i in sorted(g)]).rstrip("/_") or "(root)"
        out.append((label if label not in {o[0] for o in out} else f"{label}#{k}", sorted(g)))
    return out


LAYER_SCOPES_MAX = 64
"""The most layer scopes [`layer_scopes`][compgraph.grouping.layer_scopes] returns: nmt paper's 9 (depth 3; 163 at
depth 4), rnnlm paper's 5 (depth 2; 81 time steps at depth 3), inception_v3's 13 blocks, the 6.7B
decoder's 34 (its 32 blocks, the input and the rest; 66 at depth 3), GPT-2's 26 (attention and MLP)."""


def layer_scopes(names: list[str], max_scopes: int = LAYER_SCOPES_MAX) -> list[tuple[str, list[int]]]:
    """A graph's layers by name: the [`leaf_scopes`][compgraph.grouping.leaf_scopes] of the deepest depth (1 to 8)
    at which there are at most ``max_scopes`` of them, ``[(label, group indices)]`` (empty when no
    name has a scope). What the 2017 expert puts "on a device" (Mirhoseini et al. 2017, Sec. 4.2):
    an LSTM layer, its embedding and softmax; an Inception block; a transformer block. Disjoint: a
    unit in two of them (a colocation unit under TensorFlow's gradient scope is in its forward
    op's scopes too) is in the first only, and a scope left empty is dropped."""
    best: list[tuple[str, list[int]]] = []
    scopes = name_scopes(names)  # once, for every depth
    for depth in range(1, 9):
        leaves = leaf_scopes(names, depth, scopes)
        if len(leaves) > max_scopes:
            break
        best = leaves
    taken: set[int] = set()
    out: list[tuple[str, list[int]]] = []
    for label, groups in best:
        mine = [g for g in groups if g not in taken]
        taken.update(mine)
        if mine:
            out.append((label, mine))
    return out


def grouping_stats(graph: OpGraph, model_rule: ModelRule | None = None, num_groups: int = DEFAULT_NUM_GROUPS) -> dict:
    """Number of groups each grouper makes of ``graph`` (for ``placement graph-stats``).

    Returns:
        ``{"ops": int, "colocation_units": int, "num_groups_target": num_groups,
        "heuristic": int, "2017": int | None, "metis": int, "fluid": int}``: ``2017`` is
        ``None`` when ``model_rule`` is ``None``; ``metis`` and ``fluid`` use ``num_groups``
        and seed 0.
    Raises:
        ValueError: ``num_groups`` not an integer >= 1.
    """
    k = _check_num_groups("metis", num_groups)
    out: dict = {"ops": graph.num_ops, "colocation_units": unit_graph(graph).num_units, "num_groups_target": k}
    for name, info in GROUPERS.items():
        if info.needs_model_rule and model_rule is None:
            out[name] = None
        else:
            out[name] = group(graph, name, model_rule, k if info.automatic else None).num_groups
    return out
