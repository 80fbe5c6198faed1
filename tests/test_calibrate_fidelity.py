"""Tests for cluster.calibrate, cluster.fidelity and cluster.training on the small RNNLM.

Real TensorFlow runs on the ``cpu4`` preset (logical CPUs of this machine), 2-3 steps each.
No timed assertions: step times are only checked to be positive and consistent with
what the functions return.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cluster.calibrate import CostTable, calibrate, kind_placements
from cluster.cost_model import op_time_matrix
from cluster.fidelity import fidelity, random_placements
from cluster.simulator import Simulator
from cluster.spec import load_cluster
from cluster.training import projected_training, train


@pytest.fixture(scope="module")
def cpu4():
    return load_cluster("cpu4")


@pytest.fixture(scope="module")
def table(rnnlm_small, cpu4):
    return calibrate(rnnlm_small, cpu4, steps=3)


def test_kind_placements_put_everything_on_each_kind(rnnlm_small, cpu4):
    kp = kind_placements(rnnlm_small, cpu4)
    assert set(kp) == {"cpu", "gpu"}
    assert (kp["cpu"] == 0).all() and (kp["gpu"] == 1).all()  # rnnlm has no CPU-only op


def test_calibration_table_drives_the_simulator(rnnlm_small, cpu4, table, tmp_path):
    g = rnnlm_small.graph
    assert table.model == "rnnlm" and table.size == "small" and table.cluster == "cpu4" and table.tf_version
    assert table.devices == {"cpu": "/device:CPU:0", "gpu": "/device:CPU:1"}
    assert table.coverage(g) > 0.99
    for name, row in table.op_seconds.items():
        assert name in g.index and set(row) == {"cpu", "gpu"}
        assert all(math.isfinite(s) and s >= 0 for s in row.values())

    path = table.save(tmp_path / "costs.json")
    assert json.loads(path.read_text())["op_seconds"] == table.op_seconds
    loaded = CostTable.load(path)
    assert loaded == table

    times = loaded.op_times(g, cpu4)
    roof = op_time_matrix(g, cpu4)
    assert times.shape == (g.num_ops, 4)
    measured = np.array([op.name in table.op_seconds for op in g.ops])
    np.testing.assert_array_equal(times[~measured], roof[~measured])  # unmeasured ops keep the roofline
    i = g.index["gradients/rnnlm/layer_0/step_0/MatMul_grad/MatMul"]
    assert times[i, 0] == table.op_seconds[g.ops[i].name]["cpu"]
    assert (times[i, 1:] == table.op_seconds[g.ops[i].name]["gpu"]).all()  # every gpu-kind device

    # on one device with no transfers, the simulated step is the sum of that device's op times
    sim = Simulator(g, cpu4, op_times=times)
    assert sim.run(np.zeros(g.num_ops, dtype=np.int64)).step_time_s == pytest.approx(times[:, 0].sum())
    assert sim.run(np.zeros(g.num_ops, dtype=np.int64)).step_time_s != pytest.approx(roof[:, 0].sum())


def test_cost_table_load_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        CostTable.load(bad)
    bad.write_text(json.dumps({"op_seconds": {"a": {"cpu": "slow"}}}))
    with pytest.raises(ValueError, match="op_seconds.a.cpu"):
        CostTable.load(bad)


def test_random_placements_are_seeded_and_in_range():
    a = random_placements(61, 4, 3, seed=1)
    b = random_placements(61, 4, 3, seed=1)
    assert list(a) == ["random_0", "random_1", "random_2"]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert a[k].shape == (61,) and a[k].min() >= 0 and a[k].max() < 4
    assert not np.array_equal(a["random_0"], random_placements(61, 4, 1, seed=2)["random_0"])
    with pytest.raises(ValueError, match="num_devices: must be >= 1, got 0"):
        random_placements(61, 0, 3)


@pytest.mark.slow  # over 5 s here
def test_fidelity_reports_rank_and_error(rnnlm_small, cpu4, table):
    ng = rnnlm_small.grouping.num_groups
    placements = random_placements(ng, 4, 2, seed=0) | {"single_cpu": np.zeros(ng, dtype=np.int64)}
    seen = []
    out = fidelity(rnnlm_small, cpu4, placements, cost_table=table, steps=2, on_row=seen.append)
    assert {"kendall_tau", "mape", "kendall_tau_calibrated", "mape_calibrated", "rows"} <= set(out)
    assert out["n"] == 3 and [r["name"] for r in out["rows"]] == list(placements) and seen == out["rows"]
    rows = out["rows"]
    for r in rows:
        assert r["sim_s"] > 0 and r["sim_calibrated_s"] > 0 and r["real_s"] > 0 and not r["real_oom"]
    real = np.array([r["real_s"] for r in rows])
    sim = np.array([r["sim_s"] for r in rows])
    cal = np.array([r["sim_calibrated_s"] for r in rows])
    assert out["mape"] == pytest.approx(np.mean(np.abs(sim - real) / real))
    assert out["mape_calibrated"] == pytest.approx(np.mean(np.abs(cal - real) / real))
    assert -1.0 <= out["kendall_tau"] <= 1.0 and -1.0 <= out["kendall_tau_calibrated"] <= 1.0
    # the roofline row is the simulator's own answer
    assert rows[2]["sim_s"] == pytest.approx(Simulator(rnnlm_small.graph, cpu4).run(
        np.zeros(rnnlm_small.graph.num_ops, dtype=np.int64)).step_time_s)

    no_cal = fidelity(rnnlm_small, cpu4, {"single_cpu": placements["single_cpu"]}, steps=2)
    assert math.isnan(no_cal["kendall_tau"]) and math.isnan(no_cal["mape_calibrated"])
    assert no_cal["rows"][0]["sim_calibrated_s"] is None
    with pytest.raises(ValueError, match="placements: empty"):
        fidelity(rnnlm_small, cpu4, {})


def test_training_returns_finite_losses_per_step(rnnlm_small, cpu4):
    calls = []
    ng = rnnlm_small.grouping.num_groups
    r = train(rnnlm_small, cpu4, np.arange(ng) % 2, steps=3, seed=0, on_step=lambda *a: calls.append(a))
    assert len(r.losses) == 3 and len(r.step_times_s) == 3 and not r.simulated
    assert all(math.isfinite(x) for x in r.losses) and all(t > 0 for t in r.step_times_s)
    assert calls == [(k, r.step_times_s[k], r.losses[k]) for k in range(3)]
    assert r.total_s == pytest.approx(sum(r.step_times_s))
    # weights start uniform in [-0.05, 0.05]: the first loss is close to ln(vocab)
    assert r.losses[0] == pytest.approx(math.log(rnnlm_small.config.vocab_size), abs=0.05)
    with pytest.raises(ValueError, match="steps: must be >= 1, got 0"):
        train(rnnlm_small, cpu4, np.zeros(ng, dtype=np.int64), steps=0)


def test_projected_training_is_labelled_simulated():
    p = projected_training(0.25, 40)
    assert p.seconds == pytest.approx(10.0) and p.simulated and p.label == "simulated" and p.steps == 40
    with pytest.raises(ValueError, match="step_time_s"):
        projected_training(float("nan"), 10)
    with pytest.raises(ValueError, match="steps: must be >= 0"):
        projected_training(0.1, -1)
