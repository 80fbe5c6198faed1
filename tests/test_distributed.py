"""The distributed search on Ray (placer/distributed.py, placer/actors.py) through the experiment's one
search task (tasks.search.learner_search, placer.search.run_search): any learner through the contract,
reproducibility, the log, equivalence with the in-process searches, faults, GPU requests."""

from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("ray")

from cluster.simulated import SimulatedEnvironment  # noqa: E402
from placer.actors import ParameterServer, ServerRestarted, _make_learner, merge_parameters  # noqa: E402
from placer.distributed import RaySettings, controller_seed  # noqa: E402
from placer.post import PostConfig, PostLearner  # noqa: E402
from placer.ray_session import actor_options, ray_session  # noqa: E402
from placer.reinforce import ReinforceConfig, ReinforceLearner  # noqa: E402
from placer.search import run_search  # noqa: E402
from tasks.search import learner_search  # noqa: E402


def ray_search(method, config, prepared, spec, env_kind="sim", *, log_path=None, env_options=None, **settings):
    """``method``'s search on Ray through the one search task (its function: no Prefect run), over the
    learner's own units, an existing log replayed; ``settings``: :class:`placer.distributed.RaySettings`."""
    return learner_search.fn(method, prepared, spec, env_kind, config, log_path=log_path, resume=True,
                             env_options=env_options, ray=RaySettings(**settings))


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """One local Ray (2 CPUs) for the module; every search in it reuses it."""
    with ray_session(num_cpus=2, temp_dir=tmp_path_factory.mktemp("ray")) as started:
        assert started
        yield


@pytest.fixture(autouse=True)
def one_torch_thread():
    """In-process searches with one intra-op thread, as in Ray's actors (much faster on a loaded machine)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _records(path):
    lines = path.read_text().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def _same(a, b):
    assert a.step_times == b.step_times and a.curve == b.curve
    assert a.best_step_time_s == b.best_step_time_s and (a.best_placement == b.best_placement).all()


def test_local_ray_listens_on_the_loopback_address_only(local_ray):
    import ray

    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    assert [n["NodeManagerAddress"] for n in ray.nodes()] == ["127.0.0.1"]


@pytest.mark.slow  # over 5 s here
def test_one_controller_equals_the_in_process_2017_search(local_ray, rnnlm_small, k80x2):
    cfg = ReinforceConfig(budget=24, k=4, seed=0, hidden_size=64, learning_rate=0.05, valid_only_after=3)
    env = SimulatedEnvironment(rnnlm_small.graph, rnnlm_small.grouping, k80x2)
    expected = run_search(ReinforceLearner(env, cfg), env)
    got = ray_search("rl", cfg, rnnlm_small, k80x2, controllers=1, workers=2)
    _same(got, expected)
    assert got.failing_signal == expected.failing_signal
    # the one search loop: the same per-update diagnostics on Ray as in-process (loss, entropy, baseline...)
    def diagnostics(r):
        return [{k: v for k, v in u.items() if k != "wall_s"} for u in r.updates]

    assert len(got.updates) == len(got.curve) == 6 and "loss" in got.updates[0]
    assert diagnostics(got) == diagnostics(expected)
    assert got.distributed == {"controllers": 1, "workers": 2, "async_updates": False, "worker_retries": 0,
                               "controller_restarts": 0, "server_restarts": 0}
    # The updates matter: without learning, the same seed samples other placements after the first batch.
    frozen = run_search(ReinforceLearner(env, cfg.model_copy(update={"learning_rate": 1e-12})), env)
    assert frozen.step_times[:4] == expected.step_times[:4] and frozen.step_times != expected.step_times


@pytest.mark.slow  # over 5 s here
def test_one_controller_equals_the_in_process_search_with_the_ppo_option(local_ray, rnnlm_small, k80x2):
    """The named PPO option of rl distributes through the learner contract (the controller runs the
    learner's own update): one controller gives the in-process search."""
    cfg = ReinforceConfig(budget=16, k=4, seed=0, hidden_size=32, ppo_epochs=2, normalize_advantage=True,
                          learning_rate=0.01)
    env = SimulatedEnvironment(rnnlm_small.graph, rnnlm_small.grouping, k80x2)
    expected = run_search(ReinforceLearner(env, cfg), env)
    _same(ray_search("rl", cfg, rnnlm_small, k80x2, controllers=1, workers=2), expected)


@pytest.mark.slow
def test_two_controllers_same_seed_same_result_and_every_sample_logged_once(local_ray, rnnlm_small, k80x2, tmp_path):
    cfg = ReinforceConfig(budget=22, k=4, seed=3, hidden_size=32)
    log = tmp_path / "a.jsonl"
    a = ray_search("rl", cfg, rnnlm_small, k80x2, controllers=2, workers=4, log_path=log)
    b = ray_search("rl", cfg, rnnlm_small, k80x2, controllers=2, workers=3)
    _same(a, b)  # the same whatever the number of workers and the timing
    # 22 placements: two rounds of 2 x 4, then 4 for controller 0 and 2 for controller 1.
    assert [p["placements"] for p in a.curve] == [4, 8, 12, 16, 20, 22]
    header, recs = _records(log)
    assert header["distributed"] == {"controllers": 2, "workers": 4, "async_updates": False}
    assert header["search"]["learner"] == "rl" and header["search"]["seed"] == 3
    assert sorted(r["index"] for r in recs) == list(range(22))  # appended as they arrived, each once
    by_index = {r["index"]: r for r in recs}
    assert [by_index[i]["step_time_s"] for i in range(22)] == a.step_times
    assert [(by_index[i]["round"], by_index[i]["controller"]) for i in (0, 4, 8, 12, 16, 20)] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    # The two controllers sample with their own generators: round 0's batches differ.
    assert [by_index[i]["placement"] for i in range(4)] != [by_index[i]["placement"] for i in range(4, 8)]


@pytest.mark.slow
def test_an_interrupted_log_is_resumed(local_ray, rnnlm_small, k80x2, tmp_path):
    cfg = ReinforceConfig(budget=16, k=4, seed=1, hidden_size=32)
    log = tmp_path / "r.jsonl"
    first = ray_search("rl", cfg, rnnlm_small, k80x2, controllers=2, workers=2, log_path=log)
    full = log.read_text().splitlines()
    assert len(full) == 1 + 16
    log.write_text("\n".join(full[:1 + 10]) + "\n")  # interrupted after 10 records
    resumed = ray_search("rl", cfg, rnnlm_small, k80x2, controllers=2, workers=2, log_path=log)
    _same(resumed, first)
    lines = log.read_text().splitlines()
    assert len(lines) == 1 + 16  # the 10 logged samples replayed, not appended again
    assert sorted(json.loads(x)["index"] for x in lines[1:]) == list(range(16))


@pytest.mark.slow  # over 5 s here
def test_post_one_controller_equals_the_in_process_post_before_a_cross_entropy_step(local_ray, rnnlm_small, k80x2):
    cfg = PostConfig(budget=24, k=6, n_ce=60, seed=2)
    env = SimulatedEnvironment(rnnlm_small.graph, rnnlm_small.grouping, k80x2)
    _same(ray_search("post", cfg, rnnlm_small, k80x2, controllers=1, workers=2), run_search(PostLearner(env, cfg), env))


def test_the_cross_entropy_step_runs_at_the_server_over_pooled_samples(rnnlm_small, k80x2):
    """ParameterServer.pooled as a plain object: Eq. 10 over both controllers' placements."""
    cfg = PostConfig(budget=100, k=3, n_ce=6, rho=0.5, epsilon=0.0, seed=0)
    g, d = rnnlm_small.grouping.num_groups, len(k80x2.devices)
    server = ParameterServer({"u": np.zeros((g, d))}, PostLearner, cfg, rnnlm_small, k80x2, "sim", {})
    with pytest.raises(ServerRestarted):  # a (re)started server serves nothing until the driver restores it
        server.get_params()
    server.restore(None)
    rng = np.random.default_rng(0)
    rows = rng.integers(0, d, size=(6, g))
    times = np.array([5.0, 1.0, 4.0, 2.0, 6.0, 3.0])

    def batch(sl):
        return {"placements": rows[sl].tolist(), "log_prob": [0.0] * 3, "step_times_s": times[sl].tolist(),
                "oom": [False] * 3}

    assert server.pooled(batch(slice(0, 3))) is None  # 3 of n_ce=6 pooled: no step yet
    assert (server.params["u"] == 0).all()
    assert server.pooled(batch(slice(3, 6)))["cross_entropy"] == 1.0
    elites = rows[[1, 3, 5]]  # the best rho * 6 = 3: times 1, 2, 3
    freq = np.stack([(elites == j).mean(axis=0) for j in range(d)], axis=1)
    np.testing.assert_allclose(server.params["u"], np.log(np.clip(freq, 1e-6, None)))


def _kill_when_measuring(log, target, stop: threading.Event, min_records=1, after_s=0.05):
    """Kill ``target()`` (a Ray actor) from a thread once ``log`` has ``min_records`` records,
    ``after_s`` later (while the next placements are being measured). The thread waits on the
    log, however long the actors take to start on a loaded machine, until ``stop`` is set
    (after the search): no deadline of its own."""
    import ray

    def run():
        while not stop.is_set():
            if log.exists() and len(log.read_text().splitlines()) > min_records:
                time.sleep(after_s)
                ray.kill(target(), no_restart=False)
                return
            stop.wait(0.02)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _stop(stop: threading.Event, *threads) -> None:
    stop.set()
    for t in threads:
        t.join()


@pytest.mark.slow
def test_killed_worker_and_controller_synchronous_same_result(local_ray, rnnlm_small, k80x2, tmp_path):
    """Post with 2 controllers: the pooled cross-entropy step at the server (n_ce=8) and each
    controller's PPO steps; a worker and a controller killed mid-search change nothing."""
    cfg = PostConfig(budget=16, k=4, n_ce=8, seed=5)
    opts = dict(controllers=2, workers=4, measure_delay_s=0.5)
    clean = ray_search("post", cfg, rnnlm_small, k80x2, **opts)
    actors: dict = {}
    log = tmp_path / "faults.jsonl"
    stop = threading.Event()
    killers = [_kill_when_measuring(log, lambda: actors["workers"][0], stop, min_records=1),
               _kill_when_measuring(log, lambda: actors["controllers"][1], stop, min_records=6)]
    try:
        faulty = ray_search("post", cfg, rnnlm_small, k80x2, log_path=log, on_start=actors.update, **opts)
    finally:
        _stop(stop, *killers)
    _same(faulty, clean)
    _, recs = _records(log)
    assert sorted(r["index"] for r in recs) == list(range(16))  # every sample once
    assert faulty.distributed["worker_retries"] >= 1 and any(r["attempt"] >= 1 for r in recs)
    assert faulty.distributed["controller_restarts"] >= 1


@pytest.mark.slow
def test_asynchronous_search_with_faults_accounts_for_every_sample(local_ray, rnnlm_small, k80x2, tmp_path):
    cfg = ReinforceConfig(budget=24, k=4, seed=0, hidden_size=32)
    actors: dict = {}
    log = tmp_path / "async.jsonl"
    stop = threading.Event()
    killers = [_kill_when_measuring(log, lambda: actors["workers"][1], stop, min_records=1),
               _kill_when_measuring(log, lambda: actors["controllers"][0], stop, min_records=8)]
    try:
        res = ray_search("rl", cfg, rnnlm_small, k80x2, controllers=2, workers=3, async_updates=True,
                                 measure_delay_s=0.3, log_path=log, on_start=actors.update)
    finally:
        _stop(stop, *killers)
    header, recs = _records(log)
    assert header["distributed"]["async_updates"] is True
    assert len(res.step_times) == 24 and sorted(r["index"] for r in recs) == list(range(24))
    assert sorted(res.step_times, key=str) == sorted((r["step_time_s"] for r in recs), key=str)
    assert res.curve[-1]["placements"] == 24
    assert res.distributed["worker_retries"] + res.distributed["controller_restarts"] >= 1
    with pytest.raises(ValueError, match="cannot resume"):
        ray_search("rl", cfg, rnnlm_small, k80x2, controllers=2, workers=3, async_updates=True,
                           log_path=log)


@pytest.mark.slow  # over 5 s here
def test_gpu_requests_and_their_absence(local_ray, rnnlm_small, k80x2):
    import ray

    assert actor_options("worker", gpus=2, cpus=1) == {"num_cpus": 1, "num_gpus": 2, "max_restarts": -1,
                                                       "max_task_retries": 0}
    assert actor_options("server") == {"num_cpus": 0, "num_gpus": 0, "max_restarts": -1, "max_task_retries": 0}
    cfg = ReinforceConfig(budget=4, k=2, seed=0, hidden_size=16)
    with pytest.raises(ValueError, match="gpus_per_worker: 1 GPUs asked, the Ray cluster has 0"):
        ray_search("rl", cfg, rnnlm_small, k80x2, controllers=1, gpus_per_worker=1)
    with pytest.raises(ValueError, match=r"gpus_per_controller: 1.0 GPUs asked.*policy_device='cuda'"):
        ray_search("rl", cfg, rnnlm_small, k80x2, controllers=1, policy_device="cuda")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="policy_device: 'cuda' but CUDA is not available"):
            _make_learner(_learner_cls("rl"), cfg, rnnlm_small, k80x2, "sim", {}, "cuda", False)
    seen: dict = {}
    ray_search("rl", cfg, rnnlm_small, k80x2, controllers=1, workers=1,
                       on_start=lambda a: seen.update(gpus=ray.get(a["workers"][0].visible_gpus.remote())))
    assert seen == {"gpus": ""}  # a worker that asked for no GPU sees none


def _learner_cls(name):
    from placer import LEARNERS

    return LEARNERS[name]


def test_a_worker_error_is_raised_as_its_type(local_ray, rnnlm_small, k80x2):
    cfg = ReinforceConfig(budget=4, k=2, seed=0, hidden_size=16, failing_signal=5.0)
    with pytest.raises(ValueError, match="unknown engine 'warp'"):
        ray_search("rl", cfg, rnnlm_small, k80x2, controllers=1, env_options={"engine": "warp"})


def test_bad_ray_address_is_a_clear_error(rnnlm_small, k80x2):
    cfg = ReinforceConfig(budget=4, k=2, seed=0, hidden_size=16)
    with pytest.raises(ValueError, match="ray_address: 'not an address'"):
        ray_search("rl", cfg, rnnlm_small, k80x2, address="not an address")
    with pytest.raises(ValueError, match="ray_address: 'ray://127.0.0.1:0' has no valid port"):
        ray_search("rl", cfg, rnnlm_small, k80x2, address="ray://127.0.0.1:0")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match=f"ray_address 'ray://127.0.0.1:{port}': nothing answers"):
        ray_search("rl", cfg, rnnlm_small, k80x2, address=f"ray://127.0.0.1:{port}")


def test_bad_arguments_are_refused_before_ray_starts(rnnlm_small, k80x2):
    cfg = ReinforceConfig(budget=4, k=4, seed=0, hidden_size=16)
    with pytest.raises(ValueError, match="controllers: must be >= 1, got 0"):
        ray_search("rl", cfg, rnnlm_small, k80x2, controllers=0)
    with pytest.raises(ValueError, match="workers: must be >= 1, got 0"):
        ray_search("rl", cfg, rnnlm_small, k80x2, workers=0)
    with pytest.raises(ValueError, match="env_kind: unknown environment 'gpu'"):
        ray_search("rl", cfg, rnnlm_small, k80x2, env_kind="gpu")
    with pytest.raises(ValueError, match="policy_device: 'tpu'"):
        ray_search("rl", cfg, rnnlm_small, k80x2, policy_device="tpu")
    with pytest.raises(ValueError, match="learner: unknown learner 'nope'"):
        ray_search("nope", cfg, rnnlm_small, k80x2)
    with pytest.raises(ValueError, match="gpus_per_worker: 0, but env 'real' on cluster 'k80x2'"):
        ray_search("rl", cfg, rnnlm_small, k80x2, env_kind="real")


def test_one_search_task_names_its_runs_by_where_they_search():
    """The experiment's one search task: ``search-<method>`` in-process, ``search-<method>-ray`` on Ray
    (the experiment's ``ray`` section distributes every learner, and only learners)."""
    from tasks.config import RayOptions
    from tasks.search import _search_run_name, ray_settings

    assert _search_run_name({"method": "post"}) == "search-post"
    assert _search_run_name({"method": "post", "ray": RayOptions()}) == "search-post"
    assert _search_run_name({"method": "post", "ray": RayOptions(controllers=2)}) == "search-post-ray"
    assert _search_run_name({"method": "rl", "ray": RaySettings(controllers=1)}) == "search-rl-ray"
    got = ray_settings(RayOptions(controllers=2, workers=0, async_updates=True), "rl")
    assert got == RaySettings(controllers=2, workers=None, async_updates=True)


def test_merge_parameters_and_controller_seeds():
    pulled = {"w": np.zeros(2, np.float32), "n": np.array([1])}
    a = {"w": np.array([1.0, 2.0], np.float32), "n": np.array([2])}
    b = {"w": np.array([0.5, 0.0], np.float32), "n": np.array([3])}
    assert merge_parameters(pulled, [a])["w"] is a["w"]  # one controller: its parameters, bit for bit
    merged = merge_parameters(pulled, [a, b])
    assert merged["w"].tolist() == [1.5, 2.0] and merged["n"].tolist() == [2]
    assert controller_seed(7, 0) == 7
    seeds = {controller_seed(s, c) for s in range(4) for c in range(1, 5)}
    assert len(seeds) == 16 and all(0 <= x < 2**63 for x in seeds) and not seeds & set(range(4))


@pytest.mark.parametrize("name, cfg", [
    ("hierarchical", {"k": 2, "hidden_size": 16, "num_groups": 8, "grouping_hidden_size": 8}),
    ("eagle_ce", {"k": 2, "hidden_size": 16, "num_groups": 8, "grouping_hidden_size": 8, "link_hidden_size": 8,
                  "ce_interval": 2, "ce_epochs": 1, "ppo_epochs": 1}),
])
@pytest.mark.slow  # over 5 s here
def test_grouping_learners_one_controller_equals_the_in_process_search(local_ray, rnnlm_small, k80x2, name, cfg,
                                                                        tmp_path):
    """The learners that group ops themselves distribute over the colocation units (the units they place
    in-process): one controller gives the in-process search, every update and CE step included."""
    from compgraph.grouping import colocation_grouping
    from placer import LEARNERS

    units = colocation_grouping(rnnlm_small.graph)
    assert units.num_groups != rnnlm_small.grouping.num_groups
    config = LEARNERS[name].Config(budget=6, seed=1, **cfg)
    env = SimulatedEnvironment(rnnlm_small.graph, units, k80x2)
    expected = run_search(LEARNERS[name](env, config), env)
    log = tmp_path / "units.jsonl"
    got = ray_search(name, config, rnnlm_small, k80x2, controllers=1, workers=2, log_path=log)
    _same(got, expected)
    assert len(got.best_placement) == units.num_groups
    header, recs = _records(log)
    assert header["groups"] == units.num_groups and len(recs) == 6
    assert [p["placements"] for p in got.curve] == [2, 4, 6]  # three updates, merged at the server


@pytest.mark.slow  # over 5 s here
def test_local_search_two_controllers_climb_on_their_own(local_ray, rnnlm_small, k80x2, tmp_path):
    """A hill climber has no policy to share: each controller climbs from its own seed, the workers are
    shared, and the best is never worse than the start (the single-GPU placement, measured first)."""
    from placer.local_search import LocalSearchConfig

    cfg = LocalSearchConfig(budget=32, k=4, seed=0)
    log = tmp_path / "ls.jsonl"
    res = ray_search("local_search", cfg, rnnlm_small, k80x2, controllers=2, workers=2, log_path=log)
    _, recs = _records(log)
    by_index = {r["index"]: r for r in recs}
    assert sorted(by_index) == list(range(32))
    start = SimulatedEnvironment(rnnlm_small.graph, rnnlm_small.grouping, k80x2).measure(
        np.full(rnnlm_small.grouping.num_groups, k80x2.gpu_indices[0]))
    assert by_index[0]["placement"] == by_index[4]["placement"]  # both controllers start from one GPU
    assert by_index[1]["placement"] != by_index[5]["placement"]  # ... and move with their own seeds
    assert res.best_step_time_s <= start.step_time_s


def test_a_policy_device_a_learner_cannot_use_is_refused_before_ray_starts(rnnlm_small, k80x2):
    from placer import LEARNERS, policy_device_problem

    assert LEARNERS["rl"].policy_devices == ("cpu", "cuda")
    assert policy_device_problem(["rl", "expert", "post"], "cpu") is None
    assert policy_device_problem(["rl", "expert"], "cuda") is None
    for name in ("hierarchical", "post", "local_search"):
        with pytest.raises(ValueError, match=f"policy_device 'cuda': learner '{name}' runs its policy on cpu only "
                                             r"\(on cuda: rl, rl_warm\)"):
            ray_search(name, LEARNERS[name].Config(budget=2), rnnlm_small, k80x2, policy_device="cuda")


@pytest.mark.parametrize("args, message", [
    (["--async"], "--async needs --controllers 1 or more"),
    (["--workers", "4"], "--workers needs --controllers 1 or more"),
    (["--controllers", "2", "--workers", "-1"], "--workers must be at least 0, got -1"),
    (["--controllers", "2", "--gpus-per-worker", "-1"], "--gpus-per-worker must be at least 0, got -1.0"),
    (["--controllers", "2", "--policy-device", "tpu"], "unknown --policy-device value 'tpu'; valid: 'cpu' or 'cuda'"),
    (["--methods", "rl,eagle", "--controllers", "1", "--policy-device", "cuda"],
     "--policy-device 'cuda': learner 'eagle' runs its policy on cpu only (on cuda: rl, rl_warm)"),
])
def test_cli_distributed_options_are_checked(args, message):
    from typer.testing import CliRunner

    from cli.main import app

    r = CliRunner().invoke(app, ["experiment", "--methods", "rl", *args])
    assert r.exit_code == 2 and message in r.output


@pytest.mark.slow
def test_killed_parameter_server_synchronous_same_result(local_ray, rnnlm_small, k80x2, tmp_path):
    """Post with 2 controllers (the pooled cross-entropy step runs at the server): the parameter
    server killed mid-search is revived and restored from the last round's state; same result."""
    cfg = PostConfig(budget=16, k=4, n_ce=8, seed=5)
    opts = dict(controllers=2, workers=4, measure_delay_s=0.5)
    clean = ray_search("post", cfg, rnnlm_small, k80x2, **opts)
    actors: dict = {}
    log = tmp_path / "server.jsonl"
    stop = threading.Event()
    killer = _kill_when_measuring(log, lambda: actors["server"], stop, min_records=9)
    try:
        faulty = ray_search("post", cfg, rnnlm_small, k80x2, log_path=log, on_start=actors.update, **opts)
    finally:
        _stop(stop, killer)
    _same(faulty, clean)
    assert faulty.distributed["server_restarts"] >= 1
    _, recs = _records(log)
    assert sorted(r["index"] for r in recs) == list(range(16))


@pytest.mark.slow  # a PyTorch capture in each worker
def test_workers_measure_a_pytorch_step_for_real(local_ray, tmp_path):
    """--env real on Ray for a PyTorch step: each worker runs the placed torch.fx step (cluster.torch_real)
    on its node's devices (here cpu4's logical CPUs) and the placement log keeps the spread."""
    from cluster.spec import load_cluster
    from compgraph.frontends import BenchmarkSource, prepare_source
    from placer.search import PlacementLog

    prepared = prepare_source(BenchmarkSource(model="gpt", size="small"))
    cfg = ReinforceConfig(budget=4, k=2, seed=0, hidden_size=16)
    log = tmp_path / "real.jsonl"
    got = ray_search("rl", cfg, prepared, load_cluster("cpu4"), env_kind="real", controllers=1, workers=1,
                             env_options={"repeats": 2, "warmup": 0, "threads": 1}, log_path=log)
    assert len(got.step_times) == 4 and all(t is not None and t > 0 for t in got.step_times)
    records = PlacementLog(log, json.loads(log.read_text().splitlines()[0])).records
    assert len(records) == 4 and records[0]["step_time_s"] > 0


@pytest.mark.slow  # a PyTorch capture in each worker, measured for real
def test_a_worker_killed_while_it_runs_a_pytorch_step_is_retried(local_ray, tmp_path):
    """Issue 35 item 5: a worker holding the real environment's devices, killed mid-search, is
    replaced; every sample is measured and logged once, the killed one again on a new attempt."""
    from cluster.spec import load_cluster
    from compgraph.frontends import BenchmarkSource, prepare_source

    prepared = prepare_source(BenchmarkSource(model="gpt", size="small"))
    cfg = ReinforceConfig(budget=6, k=2, seed=0, hidden_size=16)
    actors: dict = {}
    log = tmp_path / "real-faults.jsonl"
    stop = threading.Event()
    killer = _kill_when_measuring(log, lambda: actors["workers"][0], stop, min_records=1, after_s=0.0)
    t0 = time.perf_counter()
    try:
        got = ray_search("rl", cfg, prepared, load_cluster("cpu4"), env_kind="real", controllers=1,
                                 workers=1, env_options={"repeats": 2, "warmup": 0, "threads": 1}, log_path=log,
                                 on_start=actors.update)
    finally:
        _stop(stop, killer)
    _, recs = _records(log)
    assert sorted(r["index"] for r in recs) == list(range(6))
    assert got.distributed["worker_retries"] >= 1 and any(r["attempt"] >= 1 for r in recs)
    assert all(r["step_time_s"] > 0 for r in recs)
    print(json.dumps({"seconds": time.perf_counter() - t0, "worker_retries": got.distributed["worker_retries"]}))
