"""Every learner of the registry (placer.LEARNERS) through the one search loop: the exact
optimum of a small graph (known by enumeration), determinism by seed, resume after an
interruption (in-process, and a child process stopped by SIGINT and by SIGKILL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import default_sigint  # noqa: E402
from learner_toy import make_learner, optimum  # noqa: E402

from placer import LEARNERS  # noqa: E402
from placer.search import PlacementLog, run_search  # noqa: E402
from placer.warm import WARM_SUFFIX, base_learner  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def best():
    return optimum()


def test_the_toy_optimum_is_unique_and_known(best):
    t, p = best
    assert t == pytest.approx(12.41) and list(p) == [0, 0, 0, 1, 1, 2, 0]


def test_registry_lists_the_learners():
    assert {"rl", "post", "ppo", "ce", "pg"} <= set(LEARNERS)
    for name, cls in LEARNERS.items():
        assert cls.name == name and cls.units in ("groups", "colocation") and cls.paper
        assert "budget" in cls.Config.model_fields and "seed" in cls.Config.model_fields


# the learners as their papers start them (the warm-started variants, rl_warm...: test_warm_start.py)
GROUP_LEARNERS = [n for n, c in LEARNERS.items() if c.units == "groups" and not n.endswith(WARM_SUFFIX)]
SLOW = {"hierarchical": ("search", "resume"), "rl": ("optimum",), "eagle_ce": ("resume",)}  # the cases over 5 s here


def params(names, test):
    """``names`` as pytest parameters, those of :data:`SLOW` for ``test`` marked slow (a warm-started
    variant as its learner)."""
    return [pytest.param(n, marks=pytest.mark.slow) if test in SLOW.get(base_learner(n), ()) else n for n in names]


@pytest.mark.parametrize("name", params(GROUP_LEARNERS, "optimum"))  # hierarchical, eagle, eagle_ce: test_learners_grouping.py
def test_learner_reaches_the_exact_optimum(name, best):
    """One of seeds 0-2 finds the enumerated optimum; every seed within 10% of it."""
    found = []
    for seed in (0, 1, 2):
        learner, env = make_learner(name, seed)
        r = run_search(learner, env)
        assert len(r.step_times) == learner.config.budget
        found.append(r.best_step_time_s)
        if r.best_step_time_s == best[0]:
            assert list(r.best_op_placement) == list(best[1])
    assert min(found) == best[0], found
    assert max(found) <= 1.10 * best[0], found


@pytest.mark.parametrize("name", params(LEARNERS, "search"))
def test_same_seed_same_search(name):
    def run(seed):
        learner, env = make_learner(name, seed, budget=60)
        return run_search(learner, env)

    a, b, c = run(3), run(3), run(4)
    assert a.step_times == b.step_times and a.curve == b.curve
    assert [{k: v for k, v in u.items() if k != "wall_s"} for u in a.updates] == \
        [{k: v for k, v in u.items() if k != "wall_s"} for u in b.updates]
    assert a.step_times != c.step_times
    assert len(a.curve) == len(a.updates) and a.curve[-1]["placements"] == 60


class Interrupt(Exception):
    pass


class StopAfter:
    """The toy environment that raises :class:`Interrupt` once ``n`` placements were measured."""

    def __init__(self, env, n):
        self.env, self.n, self.calls = env, n, 0
        self.kind, self.graph, self.grouping, self.spec, self.simulator = env.kind, env.graph, env.grouping, env.spec, env.simulator

    def measure(self, p):
        if self.calls >= self.n:
            raise Interrupt
        self.calls += 1
        return self.env.measure(p)


def _strip(r):
    return r.step_times, r.curve, [{k: v for k, v in u.items() if k != "wall_s"} for u in r.updates], \
        list(r.best_placement)


@pytest.mark.parametrize("with_checkpoint", [True, False])
@pytest.mark.parametrize("name", params(LEARNERS, "resume"))
def test_resume_equals_the_uninterrupted_search(name, with_checkpoint, tmp_path):
    """Stop after 37 measured placements, resume: same result, the 37 never measured again."""
    budget = 90
    learner, env = make_learner(name, 1, budget=budget)
    whole = run_search(learner, env)
    log, ckpt = tmp_path / "s.jsonl", (tmp_path / "s.pt" if with_checkpoint else None)
    learner, env = make_learner(name, 1, budget=budget)
    with pytest.raises(Interrupt):
        run_search(learner, StopAfter(env, 37), log_path=log, checkpoint_path=ckpt, checkpoint_every_s=0.0)
    first = 1 if learner.start is not None else 0  # a warm start is placement 0, measured on its own
    logged_before = first + (37 - first) - (37 - first) % learner.batch_size  # the batch cut off is not logged
    assert len(log.read_text().splitlines()) == 1 + logged_before
    learner, env = make_learner(name, 1, budget=budget)
    counting = StopAfter(env, budget)
    resumed = run_search(learner, counting, log_path=log, checkpoint_path=ckpt, resume=True, checkpoint_every_s=0.0)
    logged = len(log.read_text().splitlines()) - 1
    assert logged == budget
    assert counting.calls == resumed.measured == budget - logged_before
    assert _strip(resumed) == _strip(whole)
    # without --resume the log starts afresh
    learner, env = make_learner(name, 1, budget=budget)
    run_search(learner, env, log_path=log, checkpoint_path=ckpt)
    assert len(PlacementLog(log, json.loads(log.read_text().splitlines()[0])).records) == budget


def test_checkpoint_is_loaded_with_weights_only(tmp_path):
    learner, env = make_learner("rl", 0, budget=16)
    run_search(learner, env, log_path=tmp_path / "l.jsonl", checkpoint_path=tmp_path / "new" / "c.pt")
    state = torch.load(tmp_path / "new" / "c.pt", weights_only=True)
    assert state["sampled"] == 16 and "policy" in state["learner"]
    book = json.loads((tmp_path / "new" / "c.json").read_text())
    assert book["sampled"] == 16 and len(book["step_times"]) == 16


@pytest.mark.slow  # over 5 s here
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_resume_after_a_signal_equals_the_uninterrupted_search(sig, tmp_path, name="rl"):
    """A child process searching is stopped by ``sig`` inside its 33rd measurement (a handshake:
    it prints ``paused`` there and blocks); the log then holds the batches before it, and the
    resumed child measures only the rest and prints the same result."""
    script = Path(__file__).resolve().parent / "learner_toy.py"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    log, ckpt = tmp_path / "s.jsonl", tmp_path / "s.pt"
    child = subprocess.Popen([sys.executable, str(script), name, str(log), str(ckpt), "0", "pause=33"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_sigint)
    try:
        line = child.stdout.readline().decode().strip()  # "" if the child ended without pausing
        assert line == "paused", child.stderr.read().decode()[-2000:]
        child.send_signal(sig)
        child.wait(600)  # a hang's bound, not a speed limit
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    logged = len(log.read_text().splitlines()) - 1
    k = make_learner(name)[0].batch_size
    assert logged == 32 // k * k and 30 <= logged < 96  # the batches measured before the 33rd placement
    done = subprocess.run([sys.executable, str(script), name, str(log), str(ckpt), "0", "resume"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = json.loads(done.stdout.strip().splitlines()[-1])
    learner, env_ = make_learner(name, budget=96)
    whole = run_search(learner, env_)
    assert resumed["measured"] == 96 - logged
    assert resumed["step_times"] == whole.step_times and resumed["curve"] == whole.curve
    assert resumed["best"] == [int(x) for x in whole.best_placement]
    assert np.isfinite(whole.best_step_time_s)


@pytest.mark.slow  # over 5 s here
def test_compare_summary_plot_and_mlflow_record(tmp_path):
    """Two learners x two seeds on the toy: summary figures, one PNG, curves in a real SQLite MLflow."""
    from mlflow.tracking import MlflowClient

    from placer.compare import summarize_runs
    from tracking.learners import plot_learner_curves, record_comparison

    runs = {}
    for name in ("ce", "post"):
        for seed in (0, 1):
            learner, env = make_learner(name, seed, budget=120)
            runs.setdefault(name, []).append(run_search(learner, env))
    summary = summarize_runs(runs)
    for name, results in runs.items():
        bests = [r.best_step_time_s for r in results]
        assert summary[name]["best_step_time_s"]["median"] == pytest.approx(float(np.median(bests)))
        assert summary[name]["best_step_time_s"]["min"] == min(bests)
        for r, n in zip(results, summary[name]["placements_to_within_5pct"]["values"]):
            assert min(t for t in r.step_times[:n] if t is not None) <= 1.05 * r.best_step_time_s
            assert n == 1 or min(t for t in r.step_times[: n - 1] if t is not None) > 1.05 * r.best_step_time_s
    png = plot_learner_curves(runs, tmp_path / "curves.png", "toy")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    pid = record_comparison(tracking_uri=uri, artifact_location=str(tmp_path / "artifacts"), params={"model": "toy"},
                            summary=summary, runs=runs, plot_path=png, seeds=[0, 1], prefect_flow_run_id=None)
    client = MlflowClient(tracking_uri=uri)
    assert [a.path for a in client.list_artifacts(pid)] == ["curves.png", "summary.json"]
    children = client.search_runs([client.get_run(pid).info.experiment_id], f"tags.mlflow.parentRunId = '{pid}'")
    assert sorted(c.info.run_name for c in children) == ["ce-seed0", "ce-seed1", "post-seed0", "post-seed1"]
    child = next(c for c in children if c.info.run_name == "post-seed1")
    hist = client.get_metric_history(child.info.run_id, "best_step_time_s")
    assert [m.step for m in hist] == [p["placements"] for p in runs["post"][1].curve]
    by_wall = client.get_metric_history(child.info.run_id, "best_step_time_s_vs_wall_ms")
    r = runs["post"][1]
    assert {(m.step, m.value) for m in by_wall} == {(int(1000 * u["wall_s"]), p["best_step_time_s"])
                                                    for p, u in zip(r.curve, r.updates)}


@pytest.mark.parametrize("option, needle", [
    ("rl.hidden_size=-3", "--learner-option rl.hidden_size must be at least 1, got -3"),
    ("rl.nope=1", "rl.nope: unknown setting 'nope'; valid: moves_per_sample, k, "),
    ("magic.k=1", "unknown learner 'magic'; valid: rl, post"),
    ("rl-k=1", "expected METHOD.FIELD=VALUE"),
])
def test_cli_learner_options_are_validated_by_the_learner_config(option, needle):
    from typer.testing import CliRunner

    from cli.main import app

    res = CliRunner().invoke(app, ["experiment", "--methods", "rl,post", "--learner-option", option])
    assert res.exit_code == 2
    assert needle in res.output and len(res.output.strip().splitlines()) == 1, res.output
