"""Training of every kind of best placement (issue 9): over the prepared groups, over a learner's
own units (the colocation units of hierarchical and eagle) and op-level (Baechi's m_topo / m_etf /
m_sct, :class:`cluster.op_placement.OpPlacement`), for real on the ``cpu4`` preset (2 steps) and
projected from the simulated step time, through ``tasks.measure.train_best`` as the experiment does."""

from __future__ import annotations

import math

import numpy as np
import pytest


@pytest.fixture(scope="module")
def cpu4():
    from cluster.spec import load_cluster

    return load_cluster("cpu4")


@pytest.fixture(scope="module")
def units(rnnlm_small):
    from compgraph.grouping import colocation_grouping

    return colocation_grouping(rnnlm_small.graph)


@pytest.fixture(scope="module")
def prefect_harness():
    from conftest import prefect_harness as harness

    with harness():
        yield


def _unit_and_op_placements(prepared, units):
    """A colocation-unit placement (units round-robin on 2 CPUs) and an op-level placement that splits
    the prepared groups (the same ops, with every unit of the first prepared group that holds several
    units moved to a third CPU) and never a colocation unit."""
    from cluster.op_placement import OpPlacement

    gp = (np.arange(units.num_groups) % 2).astype(np.int64)
    ops = units.expand(gp).copy()
    g = next(g for g, m in enumerate(prepared.grouping.members()) if len(set(units.op_group[m].tolist())) > 1)
    first_unit = units.op_group[prepared.grouping.members()[g][0]]
    ops[units.op_group == first_unit] = 2
    op = OpPlacement(ops)
    assert op.group_placement(prepared.grouping.op_group, prepared.grouping.num_groups) is None  # splits groups
    assert op.group_placement(units.op_group, units.num_groups) is not None  # keeps the colocation units
    return gp, op


@pytest.mark.slow
def test_train_best_trains_unit_and_op_level_placements_for_real(prefect_harness, rnnlm_small, cpu4, units):
    from tasks.measure import train_best

    gp, op = _unit_and_op_placements(rnnlm_small, units)
    summary = {"best_learned": "hierarchical", "best_baseline": "m_topo"}
    out = train_best(rnnlm_small, cpu4, "real", summary, {"hierarchical": gp, "m_topo": op},
                     {"hierarchical": units}, steps=2, seed=0)
    assert set(out) == {"hierarchical", "m_topo"}  # neither skipped any more
    for method, r in out.items():
        assert r["simulated"] is False and r["steps"] == 2 and len(r["losses"]) == 2, method
        assert all(math.isfinite(x) for x in r["losses"]) and all(t > 0 for t in r["step_times_s"]), method
        assert r["seconds"] == pytest.approx(sum(r["step_times_s"]))
    # the same model and synthetic batches: the same losses whichever CPU each op ran on
    assert out["hierarchical"]["losses"] == pytest.approx(out["m_topo"]["losses"], rel=1e-4)
    assert out["m_topo"]["losses"][0] == pytest.approx(math.log(rnnlm_small.config.vocab_size), abs=0.05)
    assert train_best(rnnlm_small, cpu4, "real", summary, {"hierarchical": gp}, {"hierarchical": units}, 0, 0) == {}


def test_simulated_training_projects_the_evaluated_step_time(rnnlm_small, cpu4, units):
    from tasks.measure import train_placement
    from tasks.search import evaluate

    gp, op = _unit_and_op_placements(rnnlm_small, units)
    results, _ = evaluate.fn(rnnlm_small, cpu4, "sim", {"hierarchical": gp, "m_topo": op}, None,
                             {"hierarchical": units})
    for method, placement, grouping in (("hierarchical", gp, units), ("m_topo", op, None)):
        r = train_placement.fn(rnnlm_small, cpu4, "sim", placement, 50, 0, grouping=grouping)
        assert r["simulated"] is True and r["losses"] == [] and r["setup_s"] is None
        assert r["step_time_s"] == pytest.approx(results[method]["step_time_s"]), method
        assert r["seconds"] == pytest.approx(50 * results[method]["step_time_s"]), method


def test_an_op_placement_that_splits_a_colocation_unit_is_refused(rnnlm_small, cpu4):
    from cluster.op_placement import OpPlacement
    from cluster.real import ColocationError
    from cluster.training import train

    ops = np.zeros(rnnlm_small.graph.num_ops, dtype=np.int64)
    names = {o.name: i for i, o in enumerate(rnnlm_small.graph.ops)}
    i = next(i for i, o in enumerate(rnnlm_small.graph.ops) if any(c in names and c != o.name for c in o.colocation))
    ops[i] = 1
    with pytest.raises(ColocationError, match="colocated op pair"):
        train(rnnlm_small, cpu4, OpPlacement(ops), steps=2)
