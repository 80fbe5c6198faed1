"""Pinned searches: a speed change to the search loop, the simulator or a learner must not change a result.

Each case is a short seeded search on rnnlm small (k80x2, the simulator) whose placement log (every
placement sampled and its step time, in order) and best step time were recorded before the search
loop's, the environment's and the compiled simulator's speed changes of issue 36 item 3; the same
search must give them again, to the bit. A change that is meant to change results (a new default,
another update rule) updates the fingerprint here and says so.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from cluster.simulated import SimulatedEnvironment
from compgraph.grouping import colocation_grouping
from placer import LEARNERS
from placer.search import run_search

EAGLE_SMALL = {"hidden_size": 16, "attention": "after", "grouping_hidden_size": 16}
PINNED = [  # learner, budget, options, sha256 of the log's [placement, step time] pairs (16 hex digits), best step time
    ("post", 240, {}, "6dda78e6d12af2af", 0.13608076266565872),
    ("ppo", 120, {}, "2cab8e8ccf22a0c7", 0.18436428821628756),
    ("ce", 240, {}, "2e736037475c29bb", 0.15080695515393752),
    ("pg", 120, {}, "04a6afb95eeba88d", 0.18553045401714818),
    ("eagle_ce", 20, EAGLE_SMALL, "9c10a58551cb8282", 0.441162127781934),
]


def fingerprint(log_path) -> str:
    """16 hex digits of SHA-256 over the log's ``[placement, step_time_s]`` pairs, in order."""
    records = [json.loads(line) for line in open(log_path)][1:]
    pairs = [[r["placement"], r["step_time_s"]] for r in records]
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:16]


@pytest.mark.parametrize("name,budget,options,digest,best", PINNED, ids=[p[0] for p in PINNED])
def test_seeded_search_gives_its_pinned_placements_and_best(name, budget, options, digest, best, rnnlm_small, k80x2,
                                                             tmp_path):
    cls = LEARNERS[name]
    grouping = colocation_grouping(rnnlm_small.graph) if cls.units == "colocation" else rnnlm_small.grouping
    env = SimulatedEnvironment(rnnlm_small.graph, grouping, k80x2)
    result = run_search(cls(env, cls.Config(budget=budget, seed=0, **options)), env, log_path=tmp_path / "log.jsonl")
    assert len(result.step_times) == budget
    assert result.best_step_time_s == best
    assert fingerprint(tmp_path / "log.jsonl") == digest


@pytest.mark.parametrize("engine", ["fast", "contracted"])
def test_measure_batch_equals_measure_and_the_op_level_batch(engine, rnnlm_small, k80x2):
    """The batch path (the kernel expands the group placements) gives the measurements of one placement at
    a time, and of the simulator run on the expanded op placements (``run_batch``) field by field."""
    env = SimulatedEnvironment(rnnlm_small.graph, rnnlm_small.grouping, k80x2, engine=engine)
    rng = np.random.default_rng(0)
    groups = rng.integers(0, len(k80x2.devices), size=(6, rnnlm_small.grouping.num_groups))
    groups[0] = 1  # one placement that runs out of memory or nearly so: every group on one GPU
    batch = env.measure_batch(groups)
    assert batch == [env.measure(p) for p in groups]
    for m, r in zip(batch, env.simulator.run_batch(groups[:, env._unit_group])):
        assert (m.step_time_s, m.oom, m.compute_s, m.transfer_s, m.peak_memory_bytes, m.simulated_step_time_s) == (
            None if r.oom else r.step_time_s, r.oom, r.compute_s, r.transfer_s, r.peak_memory_bytes, r.step_time_s)
