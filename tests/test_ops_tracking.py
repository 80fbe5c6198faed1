"""MLflow while it runs, the run folder, ``placement log-run`` and ``placement compare``, on a real
SQLite MLflow store under Prefect's test harness."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def prefect_harness():
    from conftest import prefect_harness as harness

    with harness():
        yield


def _client(out):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")


@pytest.mark.slow
def test_spooled_run_keeps_everything_in_its_folder_and_log_run_logs_it(prefect_harness, tmp_path):
    from cli.main import app
    from flows.experiment import placement_experiment

    out = tmp_path / "runs"
    result = placement_experiment(methods=["single_gpu", "scotch", "post"], budget=8, train_steps=0,
                                  tracking={"out_dir": str(out), "spool": True})
    assert result["mlflow_run_id"] is None and not (out / "mlflow.db").exists()
    folder = out / "runs" / result["run_dir"].rsplit("/", 1)[1]
    saved = json.loads((folder / "results.json").read_text())
    assert saved["result"]["methods"]["post"]["step_time_s"] == result["methods"]["post"]["step_time_s"]
    assert "| rnnlm (small) | k80x2 |" in (folder / "table.md").read_text()
    assert json.loads((folder / "placements.json").read_text())["scotch"] == result["methods"]["scotch"]["placement"]
    pngs = sorted(p.name for p in (folder / "plots").glob("*.png"))
    best = result["best_baseline"]
    assert set(pngs) == {"device-bars.png", "learning-curves.png", f"placement-{best}.png", "placement-post.png",
                         f"timeline-{best}.png", "timeline-post.png"}
    assert all((folder / "plots" / p).read_bytes()[:8] == PNG for p in pngs)
    traces = sorted(p.name for p in (folder / "plots").glob("*.json"))
    assert traces == sorted({f"trace-{best}.json", "trace-post.json"})
    trace = json.loads((folder / "plots" / "trace-post.json").read_text())  # a Chrome trace of the step measured
    assert trace["otherData"]["step_time_s"] == pytest.approx(result["methods"]["post"]["step_time_s"])
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    assert len(ops) == result["ops"] and max(e["ts"] + e["dur"] for e in ops) <= 1e6 * trace["otherData"]["step_time_s"] * (1 + 1e-9)

    r = CliRunner().invoke(app, ["log-run", str(folder)])
    assert r.exit_code == 0, r.output
    run_id = (folder / "mlflow_run_id").read_text().strip()
    client = _client(out)
    parent = client.get_run(run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["placement.kind"] == "experiment"
    assert parent.data.metrics["post.step_time_s"] == pytest.approx(result["methods"]["post"]["step_time_s"])
    assert {a.path for a in client.list_artifacts(run_id, "plots")} == {f"plots/{p}" for p in [*pngs, *traces]}
    curve = [m.step for m in client.get_metric_history(
        client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}' and tags.method = 'post'")[0].info.run_id,
        "best_step_time_s")]
    assert curve and curve[-1] == 8


@pytest.mark.slow
def test_sweep_is_a_parent_run_with_nested_experiments_and_a_compare_table(prefect_harness, tmp_path, monkeypatch):
    from cli.main import app
    from cluster.spec import PRESET_DIR
    from flows.sweep import placement_sweep
    from tasks import stages

    out = tmp_path / "sweep"
    missing = str(tmp_path / "missing.yaml")  # refused by the config: no experiment starts
    broken = tmp_path / "broken.yaml"  # k80x2 under another name, whose baselines fail once the MLflow runs exist
    broken.write_text((PRESET_DIR / "k80x2.yaml").read_text().replace("\nname: k80x2\n", "\nname: broken\n"))
    place = stages.baseline_placements

    def baseline_placements(methods, prepared, spec):
        if spec.name == "broken":
            raise RuntimeError("a stage failed")
        return place(methods, prepared, spec)

    monkeypatch.setattr(stages, "baseline_placements", baseline_placements)
    base = {"source": {"kind": "benchmark", "size": "small"}, "budget": 8, "methods": ["single_gpu", "scotch", "post"],
            "tracking": {"out_dir": str(out)}}
    rows = placement_sweep(base=base, models=["rnnlm"], clusters=["k80x2", missing, str(broken)], seeds=[0, 1])
    errors = [r["error"] for r in rows if "error" in r]
    assert len(errors) == 4 and sum(f"cluster spec {missing}: no such file" in e for e in errors) == 2
    assert sum("a stage failed" in e for e in errors) == 2
    client = _client(out)
    exp = client.get_experiment_by_name("placement-experiment")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    sweep = [r for r in runs if r.data.tags.get("placement.kind") == "sweep"]
    assert len(sweep) == 1 and sweep[0].info.status == "FINISHED"
    sid = sweep[0].info.run_id
    experiments = [r for r in runs if r.data.tags.get("placement.kind") == "experiment"]
    # two finished under the sweep; the broken cluster's runs were created at the start and ended FAILED;
    # the missing cluster was refused before any run
    assert all(r.data.tags["mlflow.parentRunId"] == sid for r in experiments)
    assert sorted(r.info.status for r in experiments) == ["FAILED", "FAILED", "FINISHED", "FINISHED"]
    # the learner's points were logged as the search went: one timestamp per point, not one for all
    post = [r for r in runs if r.data.tags.get("method") == "post" and r.info.status == "FINISHED"][0]
    history = client.get_metric_history(post.info.run_id, "best_step_time_s")
    assert [m.step for m in history][-1] == 8
    assert {a.path for a in client.list_artifacts(sid)} >= {"compare.json", "compare.md", "compare.png"}
    table = json.loads(open(client.download_artifacts(sid, "compare.json", str(tmp_path))).read())
    by_method = {r["method"]: r for r in table}
    assert set(by_method) == {"single_gpu", "scotch", "post"} and all(r["seeds"] == 2 for r in table)
    best = min(("single_gpu", "scotch"), key=lambda m: by_method[m]["median_step_time_s"])
    assert by_method[best]["x_best_baseline_median"] == pytest.approx(1.0)
    assert by_method["post"]["learner"] is True

    r = CliRunner().invoke(app, ["compare", "--out-dir", str(out), "--json", str(tmp_path / "cmp.json")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "rnnlm/small on k80x2" in r.output and "post *" in r.output
    assert json.loads((tmp_path / "cmp.json").read_text()) == table


def test_learning_curve_points_are_buffered_and_flushed_in_batches(tmp_path, monkeypatch):
    """One MLflow write per flush, not per update (Post updates every 12 placements); every
    point keeps its own step and timestamp, and nothing buffered is lost at the end."""
    import tracking.live as live

    monkeypatch.setattr(live, "FLUSH_EVERY_S", 1e9)  # only explicit flushes
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rec = live.ExperimentRecorder(uri, str(tmp_path / "artifacts"), {"model": "m", "cluster": "c", "seed": 0}, ["post"])
    writes = []
    real = rec.client.log_batch
    monkeypatch.setattr(rec.client, "log_batch", lambda *a, **k: (writes.append(1), real(*a, **k))[1])
    log = rec.on_update("post")
    for i in range(1, 51):
        log({"placements": 12 * i, "best_step_time_s": 1.0 / i, "sample_mean_step_time_s": 2.0 / i})
    client = _client(tmp_path)
    run_id = rec.child_ids["post"]
    assert client.get_metric_history(run_id, "best_step_time_s") == [] and writes == []
    rec.flush()
    history = client.get_metric_history(run_id, "best_step_time_s")
    assert [m.step for m in history] == [12 * i for i in range(1, 51)] and len(writes) == 1
    assert len(client.get_metric_history(run_id, "sample_mean_step_time_s")) == 50
    log({"placements": 612, "best_step_time_s": 0.01})
    rec.finish(None)  # the end flushes what is left (here: a failed recording, the runs end FAILED)
    assert client.get_metric_history(run_id, "best_step_time_s")[-1].step == 612
    assert client.get_run(run_id).info.status == "FAILED"


def test_compare_groups_by_every_setting_and_counts_distinct_seeds(tmp_path):
    """Runs of budgets 500 and 2000, seeds 0 and 1 (seed 0 of budget 500 twice): two groups of 2 seeds,
    not one pooled group of 5 runs; methods sorted by step time; both ratios t(method) / t(reference)."""
    from cli.main import app
    from tracking import artifact_root, record_experiment

    out = tmp_path / "store"
    out.mkdir()
    uri = f"sqlite:///{out / 'mlflow.db'}"
    for budget, seed, rl_s in [(500, 0, 3.0), (500, 1, 2.5), (500, 0, 2.9), (2000, 0, 1.5), (2000, 1, 1.7)]:
        results = {m: {"step_time_s": t, "oom": False, "placement": {"g0": "/gpu:0"}}
                   for m, t in (("single_gpu", 2.0), ("expert", 4.0), ("rl", rl_s))}
        params = {"model": "nmt", "size": "paper", "cluster": "k80x4", "env": "sim", "grouper": "2017", "seed": seed,
                  "budget": budget, "learner_options": '{"rl":{"k":8}}'}
        record_experiment(uri, artifact_root(out), params, results, {"best_baseline": "single_gpu", "speedups": {"rl": 0.0},
                                                                     "lower_bound_s": 1.0}, {}, {}, None)
    r = CliRunner().invoke(app, ["compare", "--tracking-uri", uri, "--json", str(tmp_path / "cmp.json")],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "cmp.json").read_text())
    assert {(row["budget"], row["method"]): row["seeds"] for row in rows} == {
        (b, m): 2 for b in ("2000", "500") for m in ("single_gpu", "expert", "rl")}
    b500 = [row for row in rows if row["budget"] == "500"]
    assert [row["method"] for row in b500] == ["single_gpu", "rl", "expert"]  # fastest first
    rl = b500[1]
    # seed 0's newest run (2.9 s) counts once, with seed 1's 2.5 s
    assert (rl["min_step_time_s"], rl["max_step_time_s"], rl["median_step_time_s"]) == (2.5, 2.9, pytest.approx(2.7))
    assert rl["x_best_baseline_median"] == pytest.approx(2.7 / 2.0) and rl["x_lower_bound_median"] == pytest.approx(2.7)
    assert {k: rl[k] for k in ("model", "size", "cluster", "env", "grouper", "learner_options")} == {
        "model": "nmt", "size": "paper", "cluster": "k80x4", "env": "sim", "grouper": "2017",
        "learner_options": '{"rl":{"k":8}}'}
    assert "budget=500" in r.output and "budget=2000" in r.output
    # --by pools what it is not given: one group, still 2 distinct seeds per method
    r = CliRunner().invoke(app, ["compare", "--tracking-uri", uri, "--by", "model,cluster", "--json", "-"])
    assert r.exit_code == 0, r.output
    pooled = json.loads(r.stdout)
    assert len(pooled) == 3 and all(row["seeds"] == 2 for row in pooled)


def test_an_outage_warns_once_a_minute_and_loses_no_point(tmp_path, monkeypatch):
    """While every MLflow write fails: one warning per OUTAGE_RETRY_S (not one per metric), writes
    skipped in between, points kept; when MLflow answers, every point is written."""
    import warnings

    import tracking.live as live

    monkeypatch.setattr(live, "FLUSH_EVERY_S", 0.0)  # a flush per update: the worst case
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rec = live.ExperimentRecorder(uri, str(tmp_path / "artifacts"), {"model": "m", "cluster": "c", "seed": 0}, ["post"])
    clock = [1000.0]
    rec._clock = lambda: clock[0]
    real, calls = rec.client.log_batch, []

    def down(*a, **k):
        calls.append(1)
        raise ConnectionError("tracking store unreachable")

    monkeypatch.setattr(rec.client, "log_batch", down)
    log = rec.on_update("post")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(1, 201):
            clock[0] += 0.5  # 200 updates over 100 s
            log({"placements": i, "best_step_time_s": 1.0 / i})
        assert len(calls) == 2 and len(caught) == 2, [str(w.message) for w in caught]  # t=0 and t=60 s
        assert "next try in 60 s" in str(caught[0].message) and "\n" not in str(caught[0].message)
        monkeypatch.setattr(rec.client, "log_batch", real)
        clock[0] += 61
        log({"placements": 201, "best_step_time_s": 1.0 / 201})
        assert "answers again" in str(caught[-1].message)
    run_id = rec.child_ids["post"]
    assert [m.step for m in _client(tmp_path).get_metric_history(run_id, "best_step_time_s")] == list(range(1, 202))
    rec.finish("recorded")


def test_runs_are_named_by_what_differs_and_the_runs_table_shows_key_metrics(tmp_path, monkeypatch):
    """Two runs that differ only in budget (issue 37: both were `rnnlm-small-k80x2-sim-seed0`) get names
    that tell them apart (model, size, cluster, env, learners, budget, seed, time stamp); the parent run
    carries the run's best step time and recommended method; the experiment carries MLflow's shared view
    that the printed link opens, and its columns are metrics the runs have; `placement compare` without
    --out-dir reads the home's store."""
    import re
    from urllib.parse import parse_qs, urlsplit

    from cli.main import app
    from tracking import KEY_METRICS, artifact_root, record_experiment, runs_page

    home = tmp_path / "home"
    monkeypatch.setenv("PLACEMENT_HOME", str(home))
    uri = f"sqlite:///{home / 'mlflow.db'}"
    results = {m: {"step_time_s": t, "oom": False, "placement": {"g0": "/gpu:0", "g1": "/gpu:1"}}
               for m, t in (("single_gpu", 2.0), ("expert", 1.6), ("rl", 1.2), ("post", None))}
    results["post"]["oom"] = True
    ids = []
    for budget, stamp in ((200, "20261126-101500"), (1000, "20261126-101733")):
        params = {"model": "rnnlm", "size": "small", "cluster": "k80x2", "env": "sim", "seed": 0, "budget": budget,
                  "methods": "single_gpu,expert,rl,post", "grouper": "2017", "learner_options": "{}"}
        run_dir = tmp_path / f"{stamp}-rnnlm-small-k80x2-seed0"
        run_dir.mkdir()
        ids.append(record_experiment(uri, artifact_root(home), params, results,
                                     {"best_baseline": "expert", "speedups": {"rl": 1.6 / 1.2 - 1, "post": None},
                                      "speedup_over_best_baseline": 1.6 / 1.2 - 1}, {}, {}, None, run_dir=str(run_dir)))
    client = _client(home)
    parents = [client.get_run(i) for i in ids]
    assert [p.info.run_name for p in parents] == ["rnnlm-small__k80x2-sim__rl,post__budget200__seed0__20261126-101500",
                                                   "rnnlm-small__k80x2-sim__rl,post__budget1000__seed0__20261126-101733"]
    p = parents[0]
    assert p.data.metrics["best_step_time_s"] == 1.2 and p.data.metrics["x_best_baseline"] == pytest.approx(0.75)
    assert p.data.tags["placement.recommended"] == "rl"
    # the link opens the runs table ("Model training" view) with the shared view of the key metrics
    link = urlsplit(runs_page(uri, ids[0]).replace("/#/", "/"))
    assert re.fullmatch(r"/experiments/\d+/runs", link.path)
    query = {k: v[0] for k, v in parse_qs(link.query).items()}
    assert query["workflowType"] == "machine_learning"
    tags = client.get_experiment(p.info.experiment_id).tags
    view = json.loads(tags[f"mlflow.sharedViewState.{query['viewStateShareKey']}"])
    assert isinstance(view["name"], str) and isinstance(view["createdAt"], int)  # the UI's saved-view envelope
    columns = json.loads(view["state"])["selectedColumns"]
    metric_columns = [c[len("metrics.`"):-1] for c in columns if c.startswith("metrics.`")]
    assert metric_columns == list(KEY_METRICS)
    runs = client.search_runs([p.info.experiment_id])
    logged = {k for r in runs for k in r.data.metrics}
    assert set(metric_columns) <= logged, set(metric_columns) - logged
    assert "tags.`placement.recommended`" in columns
    before = dict(tags)  # the view is written once, not on every run
    record_experiment(uri, artifact_root(home), {"model": "rnnlm"}, results, {"best_baseline": "expert"}, {}, {}, None)
    assert client.get_experiment(p.info.experiment_id).tags == before
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["compare", "--json", "-"])
    assert r.exit_code == 0, r.output
    assert {row["budget"] for row in json.loads(r.stdout)} >= {"200", "1000"}
