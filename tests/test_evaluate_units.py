"""An environment that measures group placements only (grappler here; real execution alike) measures
the op-level Scotch, MinCut and METIS as placements of the TensorFlow colocation units."""

from __future__ import annotations

import numpy as np

from baselines import place_baselines
from cluster.op_placement import OpPlacement
from cluster.spec import load_cluster
from tasks.search import unit_placements


def test_op_level_partitions_become_colocation_unit_placements(rnnlm_small):
    spec = load_cluster("k80x2")
    placed = place_baselines(["single_gpu", "scotch", "metis"], rnnlm_small, spec)
    assert isinstance(placed["scotch"], OpPlacement)
    sim, sim_groupings = unit_placements(rnnlm_small, "sim", placed, None)
    assert sim is placed and sim_groupings == {}  # the simulator measures op placements itself
    out, groupings = unit_placements(rnnlm_small, "grappler", placed, None)
    assert set(groupings) == {"scotch", "metis"} and out["single_gpu"] is placed["single_gpu"]
    for m in ("scotch", "metis"):
        units = groupings[m]
        assert units.grouper == "colocation" and out[m].shape == (units.num_groups,)
        assert np.array_equal(units.expand(out[m]), placed[m].ops)  # the same device for every op
