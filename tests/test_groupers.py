"""Tests of the groupers (heuristic, 2017, METIS, fluid communities), the unit graph's weights,
``grouping_stats``, and ``prepare``'s on-disk cache."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compgraph import cache
from compgraph import prepare as prepare_mod
from compgraph.grouping import (
    DEFAULT_NUM_GROUPS,
    GROUPERS,
    group,
    group_ops,
    grouping_stats,
    unit_graph,
)
from compgraph.ir import Edge, Grouping, Op, OpGraph
from compgraph.models.rnnlm import model_rule

AUTOMATIC = [n for n, g in GROUPERS.items() if g.automatic]


def _mk(names, edges=(), coloc=None, flops=None, nbytes=4):
    """Ops of type Add with given colocation/FLOPs; edges ``(a, b)`` or ``(a, b, bytes)``."""
    coloc = coloc or {}
    flops = flops or {}
    ops = [Op(n, "Add", [(1,)], [4], flops=flops.get(n, 0.0), colocation=list(coloc.get(n, []))) for n in names]
    idx = {n: i for i, n in enumerate(names)}
    es = [Edge(idx[e[0]], idx[e[1]], e[2] if len(e) > 2 else nbytes) for e in edges]
    return OpGraph("t", ops, es)


def _same(graph, grouping, *names) -> bool:
    return len({int(grouping.op_group[graph.index[n]]) for n in names}) == 1


def _two_clusters():
    """Two 4-op clusters joined by one 1 KiB edge; 1 MiB edges inside each cluster."""
    a = [f"a{i}" for i in range(4)]
    b = [f"b{i}" for i in range(4)]
    heavy = 1 << 20
    edges = [(a[i], a[j], heavy) for i in range(4) for j in range(i + 1, 4)]
    edges += [(b[i], b[j], heavy) for i in range(4) for j in range(i + 1, 4)]
    edges.append(("a3", "b0", 1024))
    return _mk(a + b, edges, flops={n: 1e9 for n in a + b}), a, b


# --------------------------------------------------------------------------------------
# entry point and its errors
# --------------------------------------------------------------------------------------


def test_registry_names():
    assert list(GROUPERS) == ["heuristic", "2017", "metis", "fluid"]
    assert AUTOMATIC == ["metis", "fluid"]
    assert DEFAULT_NUM_GROUPS == 256


def test_unknown_grouper_lists_valid():
    g = _mk(["a"])
    with pytest.raises(ValueError) as e:
        group(g, "kmeans")
    msg = str(e.value)
    assert "'kmeans'" in msg
    for name in GROUPERS:
        assert name in msg


def test_model_grouper_needs_rule():
    with pytest.raises(ValueError, match="'2017' needs the model's rule"):
        group(_mk(["a"]), "2017")


@pytest.mark.parametrize("grouper", AUTOMATIC)
def test_automatic_grouper_needs_num_groups(grouper):
    g = _mk(["a", "b"], [("a", "b")])
    with pytest.raises(ValueError, match="give num_groups"):
        group(g, grouper)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="num_groups="):
            group(g, grouper, num_groups=bad)


def test_heuristic_rejects_num_groups():
    with pytest.raises(ValueError, match="sets its own number of groups"):
        group(_mk(["a"]), "heuristic", num_groups=4)


def test_heuristic_and_2017_are_the_2017_rules():
    keys = {"a1": "A", "a2": "A"}
    g = _mk(["u", "a1", "a2", "n"], edges=[("u", "a1")])
    h = group(g, "heuristic", model_rule=keys.get)  # the rule is ignored by 'heuristic'
    assert h.grouper == "heuristic"
    assert np.array_equal(h.op_group, group_ops(g).op_group)
    assert not _same(g, h, "a1", "a2")
    m = group(g, "2017", model_rule=keys.get)
    assert m.grouper == "2017"
    assert np.array_equal(m.op_group, group_ops(g, keys.get).op_group)
    assert _same(g, m, "u", "a1", "a2")


# --------------------------------------------------------------------------------------
# unit graph: contraction and weights
# --------------------------------------------------------------------------------------


def test_unit_graph_contracts_colocation_and_weighs():
    # p, q colocated; p -> r (2049 bytes), q -> r control edge (0 bytes), r -> s (4 bytes)
    ops = [
        Op("p", "MatMul", [(1,)], [4], flops=4.365e9),  # 1 ms on the reference GPU
        Op("q", "Add", [(1,)], [4], colocation=["p"]),
        Op("r", "Add", [(1,)], [4], bytes_accessed=240e3),  # 1 us of memory traffic
        Op("s", "Add", [(1,)], [4]),
    ]
    edges = [Edge(0, 2, 2049), Edge(1, 2, 0, -1, control=True), Edge(2, 3, 4)]
    u = unit_graph(OpGraph("t", ops, edges))
    assert u.unit_of_op.tolist() == [0, 0, 1, 2]
    # p: 1000 us + 5 us overhead, q: 5 us; r: max(0, 1 us) + 5 us; s: 5 us
    assert u.vertex_weight.tolist() == [1010, 6, 5]
    assert u.edges == {(0, 1): 2049, (1, 2): 4}
    assert u.edge_weight_kib(1, 0) == 3  # ceil(2049 / 1024)
    assert u.edge_weight_kib(1, 2) == 1  # at least 1
    xadj, adjncy, ew = u.csr()
    assert xadj.tolist() == [0, 1, 3, 4]
    assert adjncy.tolist() == [1, 0, 2, 1]
    assert ew.tolist() == [3, 3, 1, 1]


# --------------------------------------------------------------------------------------
# METIS and fluid communities on hand-made graphs
# --------------------------------------------------------------------------------------


def test_metis_cuts_the_light_edge():
    g, a, b = _two_clusters()
    gr = group(g, "metis", num_groups=2)
    assert gr.grouper == "metis" and gr.num_groups == 2
    assert _same(g, gr, *a) and _same(g, gr, *b) and not _same(g, gr, "a0", "b0")
    # numbered in topological order of the first op, named after it
    assert gr.op_group[g.index["a0"]] == 0
    assert gr.names == ["a0", "b0"]


def test_fluid_two_clusters():
    g, a, b = _two_clusters()
    gr = group(g, "fluid", num_groups=2, seed=0)
    assert gr.grouper == "fluid" and gr.num_groups == 2
    assert _same(g, gr, *a) and _same(g, gr, *b)


@pytest.mark.parametrize("grouper", AUTOMATIC)
def test_automatic_never_splits_colocation_hand(grouper):
    g, a, b = _two_clusters()
    # colocate a1 with b2 across the clusters: they must share a group whatever the cut
    ops = [Op(op.name, op.type, op.output_shapes, op.output_bytes, flops=op.flops,
              colocation=["a1"] if op.name == "b2" else []) for op in g.ops]
    g2 = OpGraph("t", ops, g.edges)
    for k in (2, 3, 5):
        gr = group(g2, grouper, num_groups=k)
        assert _same(g2, gr, "a1", "b2"), (grouper, k)


@pytest.mark.parametrize("grouper", AUTOMATIC)
def test_more_groups_than_units_gives_one_group_per_unit(grouper):
    g = _mk(["a", "b", "c"], [("a", "b"), ("b", "c")], coloc={"c": ["b"]})
    gr = group(g, grouper, num_groups=10)
    assert gr.num_groups == 2
    assert _same(g, gr, "b", "c") and not _same(g, gr, "a", "b")
    one = group(g, grouper, num_groups=1)
    assert one.num_groups == 1


def test_fluid_disconnected_components_apportioned():
    # component A: 6-op chain; component B: 2-op chain
    a = [f"a{i}" for i in range(6)]
    g = _mk(a + ["b0", "b1"], [(a[i], a[i + 1]) for i in range(5)] + [("b0", "b1")])
    gr = group(g, "fluid", num_groups=4, seed=0)
    assert gr.num_groups == 4
    ga = {int(gr.op_group[g.index[n]]) for n in a}
    gb = {int(gr.op_group[g.index[n]]) for n in ("b0", "b1")}
    assert not (ga & gb)  # no group spans two components
    assert len(ga) == 3 and len(gb) == 1  # 4 * 6/8 = 3 and 4 * 2/8 = 1
    # fewer groups than components: whole components packed into bins
    gr1 = group(g, "fluid", num_groups=1, seed=0)
    assert gr1.num_groups == 1
    three = _mk(["x", "y", "z"])  # three isolated ops, 2 groups
    gr2 = group(three, "fluid", num_groups=2)
    assert gr2.num_groups == 2


# --------------------------------------------------------------------------------------
# every grouper on the real small RNNLM training step
# --------------------------------------------------------------------------------------


def _grouping_of(prep, grouper):
    return group(prep.graph, grouper, model_rule, 64 if GROUPERS[grouper].automatic else None)


@pytest.mark.parametrize("grouper", list(GROUPERS))
def test_never_splits_colocation_rnnlm(rnnlm_small, grouper):
    g = rnnlm_small.graph
    gr = _grouping_of(rnnlm_small, grouper)
    assert gr.grouper == grouper
    pairs = [(i, g.index[c]) for i, op in enumerate(g.ops) for c in op.colocation]
    assert len(pairs) > 500
    split = [(g.ops[a].name, g.ops[b].name) for a, b in pairs if gr.op_group[a] != gr.op_group[b]]
    assert split == []
    # valid, contiguous group ids; unique names; numbered by the topological order of first ops
    assert sorted(set(gr.op_group.tolist())) == list(range(gr.num_groups))
    assert len(set(gr.names)) == gr.num_groups
    pos = {int(op): k for k, op in enumerate(g.topological_order.tolist())}
    first = [min(pos[i] for i in m) for m in gr.members()]
    assert first == sorted(first)


def test_2017_grouper_matches_prepare(rnnlm_small):
    gr = _grouping_of(rnnlm_small, "2017")
    assert np.array_equal(gr.op_group, rnnlm_small.grouping.op_group)
    assert gr.names == rnnlm_small.grouping.names


@pytest.mark.parametrize("grouper", AUTOMATIC)
def test_automatic_deterministic_by_seed(rnnlm_small, grouper):
    g = rnnlm_small.graph
    a = group(g, grouper, num_groups=64, seed=0)
    b = group(g, grouper, num_groups=64, seed=0)
    assert np.array_equal(a.op_group, b.op_group) and a.names == b.names
    assert 2 <= a.num_groups <= 64


def test_fluid_seed_changes_grouping(rnnlm_small):
    g = rnnlm_small.graph
    a = group(g, "fluid", num_groups=64, seed=0)
    b = group(g, "fluid", num_groups=64, seed=1)
    assert not np.array_equal(a.op_group, b.op_group)


def test_grouping_stats_rnnlm(rnnlm_small):
    g = rnnlm_small.graph
    s = grouping_stats(g, model_rule, 64)
    assert s["ops"] == g.num_ops
    assert s["num_groups_target"] == 64
    assert s["2017"] == rnnlm_small.grouping.num_groups == 61
    assert s["heuristic"] == group(g, "heuristic").num_groups
    assert s["heuristic"] > s["2017"]  # the model rule merges
    assert s["fluid"] == 64
    assert 2 <= s["metis"] <= 64
    assert s["colocation_units"] == unit_graph(g).num_units > s["heuristic"]
    assert grouping_stats(g, None, 64)["2017"] is None
    json.dumps(s)  # plain JSON for the CLI


# --------------------------------------------------------------------------------------
# prepare's grouper arguments and the cache
# --------------------------------------------------------------------------------------


def test_prepare_rejects_bad_grouper_before_building(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("built")

    monkeypatch.setattr(prepare_mod, "build_benchmark_graph", boom)
    with pytest.raises(ValueError, match="unknown grouper 'nope'"):
        prepare_mod.prepare("rnnlm", "small", grouper="nope")
    with pytest.raises(ValueError, match="sets its own number of groups"):
        prepare_mod.prepare("rnnlm", "small", grouper="2017", num_groups=8)


def _odd_graph():
    ops = [
        Op("in", "Placeholder", [(4, -1)], [16], flops=0.1, bytes_accessed=1e300, alloc_bytes=16),
        Op("v", "VarHandleOp", [()], [0], param_bytes=24, gpu_kernel=False),
        Op("m", "MatMul", [(4, 2), ()], [32, 0], flops=48.0, colocation=["v"]),
    ]
    edges = [Edge(0, 2, 16), Edge(1, 2, 0, 0), Edge(0, 1, 0, -1, control=True)]
    return OpGraph("odd", ops, edges, fetches=["m"])


def test_to_dict_round_trip_exact(rnnlm_small):
    for g in (_odd_graph(), rnnlm_small.graph):
        d = json.loads(json.dumps(cache.graph_to_dict(g)))
        back = cache.graph_from_dict(d)
        assert back == g
        assert [op.output_shapes for op in back.ops] == [op.output_shapes for op in g.ops]
        assert all(isinstance(s, tuple) for op in back.ops for s in op.output_shapes)
    gr = rnnlm_small.grouping
    back = cache.grouping_from_dict(json.loads(json.dumps(cache.grouping_to_dict(gr))))
    assert isinstance(back, Grouping)
    assert back.op_group.dtype == np.int64 and np.array_equal(back.op_group, gr.op_group)
    assert back.names == gr.names and back.grouper == gr.grouper


def test_code_version_tracks_sources():
    v = cache.code_version()
    assert len(v) == 16 and v == cache.code_version()
    k = cache.cache_key("rnnlm", "small", "metis", 64, 0)
    assert k["code_version"] == v and k["num_groups"] == 64
    assert cache.entry_dir("/c", k) != cache.entry_dir("/c", cache.cache_key("rnnlm", "small", "metis", 32, 0))


def test_prepare_cache_hit_and_miss(tmp_path, monkeypatch):
    calls = []
    real = prepare_mod.build_benchmark_graph

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(prepare_mod, "build_benchmark_graph", counting)
    first = prepare_mod.prepare("rnnlm", "small", grouper="metis", num_groups=32, cache_dir=tmp_path)
    assert calls == [1]
    (entry,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert sorted(p.name for p in entry.iterdir()) == ["graph.json", "graph_def.pb", "meta.json"]

    def boom(*a, **k):
        raise RuntimeError("cache miss: builder called")

    monkeypatch.setattr(prepare_mod, "build_benchmark_graph", boom)
    hit = prepare_mod.prepare("rnnlm", "small", grouper="metis", num_groups=32, cache_dir=tmp_path)
    assert isinstance(hit.__dict__["_graph_def"], bytes)  # parsed on first access only
    assert type(hit.graph_def) is type(first.graph_def)
    assert hit.graph == first.graph
    assert np.array_equal(hit.grouping.op_group, first.grouping.op_group)
    assert hit.grouping.names == first.grouping.names and hit.grouping.grouper == "metis"
    assert hit.graph_def == first.graph_def
    assert hit.fetches == first.fetches
    assert hit.benchmark is first.benchmark and hit.config == first.config
    assert hit.stats() == first.stats()

    # a changed key misses: another num_groups, grouper, seed or code version
    for kwargs in ({"num_groups": 16}, {"grouper": "fluid", "num_groups": 32}, {"num_groups": 32, "seed": 1}):
        kw = {"grouper": "metis", **kwargs}
        with pytest.raises(RuntimeError, match="cache miss"):
            prepare_mod.prepare("rnnlm", "small", cache_dir=tmp_path, **kw)
    monkeypatch.setattr(cache, "code_version", lambda: "0" * 16)
    with pytest.raises(RuntimeError, match="cache miss"):
        prepare_mod.prepare("rnnlm", "small", grouper="metis", num_groups=32, cache_dir=tmp_path)


def test_damaged_entry_is_a_miss(tmp_path):
    g = _odd_graph()
    gr = Grouping(np.array([0, 0, 0]), ["in"], "heuristic")
    key = cache.cache_key("odd", "small", "heuristic", None, 0)
    folder = cache.save_entry(tmp_path, key, g, gr, None, ["m"])
    entry = cache.load_entry(tmp_path, key)
    assert entry.graph == g and entry.graph_def_bytes is None and entry.fetches == ("m",)
    (folder / "graph.json").write_text("{not json")
    assert cache.load_entry(tmp_path, key) is None
    # a stored key that differs (e.g. hand-edited) is a miss too
    cache.save_entry(tmp_path, key, g, gr, None, ["m"])
    meta = json.loads((folder / "meta.json").read_text())
    meta["key"]["seed"] = 7
    (folder / "meta.json").write_text(json.dumps(meta))
    assert cache.load_entry(tmp_path, key) is None


def test_name_scopes_are_the_prefixes_that_hold_several_groups():
    """TensorFlow ``/`` and PyTorch ``.`` scopes; a group named as a scope is in it; single-group
    scopes, the scope of every group and scopes with the same groups as a shallower one are dropped."""
    from compgraph.grouping import name_scopes

    names = ["a/x", "a/y", "a/y/mul", "b", "h.1.attn", "h.1.mlp", "h.2", "z/only/one"]
    scopes = [(d, [names[g] for g in groups]) for d, groups in name_scopes(names)]
    assert scopes == [(1, ["a/x", "a/y", "a/y/mul"]), (1, ["h.1.attn", "h.1.mlp", "h.2"]),
                      (2, ["a/y", "a/y/mul"]), (2, ["h.1.attn", "h.1.mlp"])]
    assert name_scopes(["x", "y"]) == []
    assert name_scopes(["s/a", "s/b"]) == []  # one scope holding every group: no move
    grads = ["m/l1/x", "gradients/m/l1/x_grad", "m/l2/y", "gradients_1/m/l2/y_grad"]
    scopes = {tuple(grads[g] for g in groups) for _, groups in name_scopes(grads)}
    assert ("m/l1/x", "gradients/m/l1/x_grad") in scopes  # a layer's scope holds its gradient ops
    assert ("m/l2/y", "gradients_1/m/l2/y_grad") in scopes


def test_rnnlm_layers_are_name_scopes(rnnlm_small):
    """The expert's unit on RNNLM (2017 Sec. 4.2: each layer on its own GPU) is a name scope:
    ``rnnlm/layer_1`` holds both LSTM groups of every step of the second layer and its variables."""
    from compgraph.grouping import name_scopes

    names = list(rnnlm_small.grouping.names)
    layer_1 = {g for g, n in enumerate(names) if n.startswith("rnnlm/layer_1/")}
    assert any(set(groups.tolist()) == layer_1 for _, groups in name_scopes(names))
