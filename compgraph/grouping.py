"""Co-location grouping, as Mirhoseini et al. 2017 Sec. 3.3.

Three rules, applied in order, each only ever merging (so no rule splits what an earlier
one joined, and a TensorFlow colocation group is never split):

1. **TensorFlow colocation** (:func:`colocation_units`): ops that TensorFlow requires on
   one device (``_class`` colocation attributes, e.g. an op and its gradient ops under
   ``colocate_gradients_with_ops``; ops joined through resource inputs, e.g. a variable,
   its reads and its optimizer update) form one unit.
2. **Single-consumer merge** (:func:`merge_single_consumer`): "if the output of an
   operation X is consumed *only* by another operation Y, then X and Y are co-located",
   applied recursively, treating the groups as operations after each pass, until no
   group can be merged.
3. **Model rule** (:func:`apply_model_rule`): a per-model function maps an op name to a
   key (each LSTM cell, each embedding lookup, each softmax step for RNNLM); groups whose
   keyed ops all carry the same key are merged by key. A group whose ops carry several
   keys (a shared variable read from every step) stays a group of its own.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from compgraph.ir import Grouping, OpGraph

ModelRule = Callable[[str], "str | None"]


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


def group_ops(graph: OpGraph, rule: ModelRule | None = None, grouper: str = "2017") -> Grouping:
    """Group ``graph`` with the 2017 rules (see the module docstring).

    Args:
        graph: the op graph.
        rule: the model rule (op name -> key or ``None``); ``None`` skips rule 3.
        grouper: name recorded on the result.
    Returns:
        A :class:`Grouping`; groups are numbered by the topological position of their
        first op and named by their model key, else by their first variable's name, else by
        their first op's name.
    """
    uf = colocation_units(graph)
    merge_single_consumer(graph, uf)
    root_key = apply_model_rule(graph, uf, rule) if rule is not None else {}
    labels = uf.labels()
    order = graph.topological_order.tolist()
    group_of_root: dict[int, int] = {}
    names: list[str] = []
    for op in order:
        root = labels[op]
        if root not in group_of_root:
            group_of_root[root] = len(names)
            names.append(root_key.get(root, graph.ops[op].name))
    # a group with no model key and a variable in it is named after its first variable
    named_by_variable: set[int] = set()
    for op in order:
        root = labels[op]
        if root not in root_key and root not in named_by_variable and graph.ops[op].param_bytes > 0:
            names[group_of_root[root]] = graph.ops[op].name
            named_by_variable.add(root)
    op_group = np.array([group_of_root[labels[i]] for i in range(graph.num_ops)], dtype=np.int64)
    return Grouping(op_group=op_group, names=names, grouper=grouper)
