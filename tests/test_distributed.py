"""The 2017 distributed search on Ray (placer/distributed.py): reproducibility, the log, equivalence."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

pytest.importorskip("ray")

from cluster.environment import SimulatedEnvironment  # noqa: E402
from placer.distributed import controller_seed, distributed_reinforce_search, ray_session  # noqa: E402
from placer.reinforce import ReinforceConfig, reinforce_search  # noqa: E402


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """One local Ray (2 CPUs) for the module; every search in it reuses it."""
    with ray_session(num_cpus=2, temp_dir=tmp_path_factory.mktemp("ray")) as started:
        assert started
        yield


def test_local_ray_listens_on_the_loopback_address_only(local_ray):
    import ray

    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    assert [n["NodeManagerAddress"] for n in ray.nodes()] == ["127.0.0.1"]


def _records(path):
    lines = path.read_text().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def test_same_seed_same_result_and_log_in_round_controller_worker_order(local_ray, rnnlm_small, k80x2, tmp_path):
    cfg = ReinforceConfig(budget=30, k=4, seed=3, hidden_size=32)
    log = tmp_path / "a.jsonl"
    a = distributed_reinforce_search(rnnlm_small, k80x2, cfg, num_controllers=2, log_path=log)
    b = distributed_reinforce_search(rnnlm_small, k80x2, cfg, num_controllers=2)
    c = distributed_reinforce_search(rnnlm_small, k80x2, cfg.model_copy(update={"seed": 4}), num_controllers=2)
    assert a.step_times == b.step_times and a.curve == b.curve
    assert (a.best_placement == b.best_placement).all()
    assert a.step_times != c.step_times
    # 30 placements: three rounds of 2 x 4, then 4 for controller 0 and 2 for controller 1.
    assert len(a.step_times) == 30
    assert [p["placements"] for p in a.curve] == [4, 8, 12, 16, 20, 24, 28, 30]
    assert a.best_step_time_s == min(t for t in a.step_times if t is not None)

    header, recs = _records(log)
    assert header["distributed"] == {"num_controllers": 2, "workers_per_controller": 4, "asynchronous": False}
    assert header["search"]["seed"] == 3
    assert [r["index"] for r in recs] == list(range(30))
    order = [(r["round"], r["controller"], r["worker"]) for r in recs]
    expected = [(rnd, ctl, w) for rnd in range(3) for ctl in range(2) for w in range(4)]
    expected += [(3, 0, w) for w in range(4)] + [(3, 1, w) for w in range(2)]
    assert order == expected
    assert [r["step_time_s"] for r in recs] == a.step_times
    assert [r["placement"] for r in recs if r["step_time_s"] == a.best_step_time_s][0] == a.best_placement.tolist()
    # The two controllers sample with their own generators: round 0's batches differ.
    assert [r["placement"] for r in recs[:4]] != [r["placement"] for r in recs[4:8]]


def test_one_controller_equals_the_in_process_search(local_ray, rnnlm_small, k80x2):
    cfg = ReinforceConfig(budget=32, k=4, seed=0, hidden_size=64, learning_rate=0.05, valid_only_after=3)
    env = SimulatedEnvironment(rnnlm_small.graph, rnnlm_small.grouping, k80x2)
    expected = reinforce_search(env, cfg)
    got = distributed_reinforce_search(rnnlm_small, k80x2, cfg, num_controllers=1)
    assert got.step_times == expected.step_times
    assert got.curve == expected.curve
    assert got.best_step_time_s == expected.best_step_time_s
    assert (got.best_placement == expected.best_placement).all()
    assert got.failing_signal == expected.failing_signal
    # The updates matter: without learning, the same seed samples other placements after the first batch.
    frozen = reinforce_search(env, cfg.model_copy(update={"learning_rate": 1e-12}))
    assert frozen.step_times[:4] == expected.step_times[:4]
    assert frozen.step_times != expected.step_times


def test_an_interrupted_log_is_resumed(local_ray, rnnlm_small, k80x2, tmp_path):
    cfg = ReinforceConfig(budget=16, k=4, seed=1, hidden_size=32)
    log = tmp_path / "r.jsonl"
    first = distributed_reinforce_search(rnnlm_small, k80x2, cfg, num_controllers=2, workers_per_controller=2,
                                         log_path=log)
    full = log.read_text().splitlines()
    assert len(full) == 1 + 16
    log.write_text("\n".join(full[:1 + 10]) + "\n")  # interrupted after 10 records
    resumed = distributed_reinforce_search(rnnlm_small, k80x2, cfg, num_controllers=2, workers_per_controller=2,
                                           log_path=log)
    assert resumed.step_times == first.step_times and resumed.curve == first.curve
    lines = log.read_text().splitlines()
    # the 10 logged samples are replayed, not measured (appended) again; the other 6 are appended
    assert [json.loads(x) for x in lines] == [json.loads(x) for x in full]
    # workers_per_controller=2 < K=4: placement i of a batch went to worker i % 2
    assert [json.loads(x)["worker"] for x in full[1:5]] == [0, 1, 0, 1]


def test_asynchronous_search_measures_its_budget(local_ray, rnnlm_small, k80x2, tmp_path):
    cfg = ReinforceConfig(budget=18, k=4, seed=0, hidden_size=32)
    log = tmp_path / "async.jsonl"
    res = distributed_reinforce_search(rnnlm_small, k80x2, cfg, num_controllers=2, workers_per_controller=2,
                                       log_path=log, asynchronous=True)
    header, recs = _records(log)
    assert header["distributed"]["asynchronous"] is True
    assert len(res.step_times) == 18 and [r["index"] for r in recs] == list(range(18))
    assert [r["step_time_s"] for r in recs] == res.step_times
    assert res.curve[-1]["placements"] == 18
    for ctl in range(2):  # each controller's rounds are consecutive in the log
        rounds = [r["round"] for r in recs if r["controller"] == ctl]
        assert rounds == sorted(rounds) and rounds[0] == 0
    with pytest.raises(ValueError, match="cannot resume"):
        distributed_reinforce_search(rnnlm_small, k80x2, cfg, num_controllers=2, workers_per_controller=2,
                                     log_path=log, asynchronous=True)


def test_a_worker_error_is_raised_as_its_type(local_ray, rnnlm_small, k80x2):
    cfg = ReinforceConfig(budget=4, k=2, seed=0, hidden_size=16, failing_signal=5.0)
    with pytest.raises(ValueError, match="unknown engine 'warp'"):
        distributed_reinforce_search(rnnlm_small, k80x2, cfg, num_controllers=1, env_options={"engine": "warp"})


def test_bad_ray_address_is_a_clear_error(rnnlm_small, k80x2):
    cfg = ReinforceConfig(budget=4, k=2, seed=0, hidden_size=16)
    with pytest.raises(ValueError, match="ray_address: 'not an address'"):
        distributed_reinforce_search(rnnlm_small, k80x2, cfg, ray_address="not an address")
    with pytest.raises(ValueError, match="ray_address: 'ray://127.0.0.1:0' has no valid port"):
        distributed_reinforce_search(rnnlm_small, k80x2, cfg, ray_address="ray://127.0.0.1:0")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match=f"ray_address 'ray://127.0.0.1:{port}': nothing answers"):
        distributed_reinforce_search(rnnlm_small, k80x2, cfg, ray_address=f"ray://127.0.0.1:{port}")


def test_bad_arguments_are_refused_before_ray_starts(rnnlm_small, k80x2):
    cfg = ReinforceConfig(budget=4, k=4, seed=0, hidden_size=16)
    with pytest.raises(ValueError, match="workers_per_controller: must be 1..k=4"):
        distributed_reinforce_search(rnnlm_small, k80x2, cfg, workers_per_controller=5)
    with pytest.raises(ValueError, match="num_controllers: must be >= 1, got 0"):
        distributed_reinforce_search(rnnlm_small, k80x2, cfg, num_controllers=0)
    with pytest.raises(ValueError, match="env_kind: unknown environment 'gpu'"):
        distributed_reinforce_search(rnnlm_small, k80x2, cfg, env_kind="gpu")


def test_controller_seeds():
    assert controller_seed(7, 0) == 7
    seeds = {controller_seed(s, c) for s in range(4) for c in range(1, 5)}
    assert len(seeds) == 16 and all(0 <= x < 2**63 for x in seeds) and not seeds & set(range(4))
