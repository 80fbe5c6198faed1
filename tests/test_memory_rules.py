"""Memory as TensorFlow allocated it (2017 Table 2): parameter totals by hand, and on the
shipped K80 presets NMT (2 x 1024, batch 64, length 40) is OOM on one GPU while RNNLM
(2 x 2048, batch 64) fits.

The paper-size check reads the graphs from the project's graph cache
(``placement-runs/graph-cache``, written by ``placement reproduce`` / ``scripts/fit_presets.py``);
on a cold cache it builds them (about 15 s each on an idle machine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compgraph.memory import memory_breakdown

CACHE = Path(__file__).resolve().parents[1] / "placement-runs" / "graph-cache"


def test_small_rnnlm_weights_and_adam_slots_by_hand(rnnlm_small):
    """Small RNNLM: vocab 4000, 2 layers of 512. Weights: embedding 4000*512, kernels 2*(1024*2048),
    biases 2*2048, softmax 512*4000 + 4000 = 8,298,400 floats = 33,193,600 bytes; Adam: two slots each
    plus its two scalar accumulators beta1_power, beta2_power (8 bytes)."""
    c = rnnlm_small.config
    h, v = c.hidden_size, c.vocab_size
    floats = v * h + c.num_layers * (2 * h * 4 * h + 4 * h) + h * v + v
    b = memory_breakdown(rnnlm_small.graph)
    assert b["weights"] == 4 * floats == 33_193_600
    assert b["optimizer_slots"] == 2 * b["weights"] + 8
    assert b["resident"] == rnnlm_small.graph.total_param_bytes()
    assert b["gradients"] > 0 and b["forward"] > 0


@pytest.mark.parametrize("model, oom", [("nmt", True), ("rnnlm", False)])
def test_paper_size_single_gpu_oom_as_in_table2(model, oom):
    from baselines import single_gpu, BaselineContext
    from cluster.fast_simulator import FastSimulator
    from cluster.spec import load_cluster
    from compgraph.prepare import prepare

    p = prepare(model, "paper", cache_dir=str(CACHE))
    spec = load_cluster("k80x2")
    gp = single_gpu(BaselineContext(p.graph, p.grouping, spec, p.benchmark, p.config))
    r = FastSimulator(p.graph, spec).run(p.grouping.expand(gp))
    assert r.oom is oom
    gpu = spec.devices[1]
    assert (r.peak_memory_bytes[1] * gpu.allocator_overhead > gpu.memory_bytes) is oom
    assert np.all(np.array(r.peak_memory_bytes[2:]) == 0)
