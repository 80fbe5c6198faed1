"""One end-to-end run of the placement-experiment flow under Prefect's test harness,
checked against the real SQLite MLflow store it wrote."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def prefect_harness():
    from conftest import prefect_harness as harness

    with harness():
        yield


@pytest.mark.slow
def test_flow_end_to_end_logs_parent_and_nested_runs(prefect_harness, tmp_path):
    from mlflow.tracking import MlflowClient

    from baselines import OP_LEVEL_BASELINES
    from flows.experiment import placement_experiment
    from tasks.config import ExperimentConfig

    METHODS = ExperimentConfig().resolved_methods  # the default methods: every baseline that applies, rl and post
    from pathlib import Path

    out = tmp_path / "runs"
    result = placement_experiment(budget=16, learners={"rl": {"k": 4}}, seed=0, tracking={"out_dir": str(out)})
    assert set(result["methods"]) == set(METHODS)
    for name, row in result["methods"].items():
        assert row["oom"] is False and row["step_time_s"] > 0, name
        # op-level placers (Baechi) report a device per op, the others per group
        assert len(row["placement"]) == (result["ops"] if name in OP_LEVEL_BASELINES else result["groups"]), name
    assert result["prefect_flow_run_id"]
    assert (out / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    parent = client.get_run(result["mlflow_run_id"])
    assert parent.data.tags["prefect.flow_run_id"] == result["prefect_flow_run_id"]
    assert parent.data.params["model"] == "rnnlm" and parent.data.params["budget"] == "16"
    assert parent.data.params["k"] == "4"  # rl's K, from the learners' options
    assert parent.data.params["grouper"] == "2017" and parent.data.params["num_groups_target"] == "none"
    assert int(parent.data.params["groups"]) == result["groups"]
    # named by its settings (the model is known only after the run was created), opened as runs in the UI,
    # and stamped with the code that made it
    import re

    from baselines import BASELINES

    learners = ",".join(m for m in METHODS if m not in BASELINES)
    name = rf"rnnlm-small__k80x2-sim__{re.escape(learners)}__budget16__seed0__\d{{8}}-\d{{6}}"
    assert re.fullmatch(name, parent.info.run_name), parent.info.run_name
    assert parent.info.run_name.endswith(Path(result["run_dir"]).name[:15])  # the run folder's time stamp
    assert parent.data.tags["placement.recommended"] == result["recommendation"]["method"]
    assert parent.data.metrics["best_step_time_s"] == pytest.approx(
        min(r["step_time_s"] for r in result["methods"].values()))
    assert client.get_experiment(parent.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    assert parent.data.tags["version.mlflow"] and parent.data.tags["placement.version"]
    if (Path(__file__).resolve().parent.parent / ".git").exists():
        assert len(parent.data.tags["mlflow.source.git.commit"]) == 40
        assert parent.data.tags["placement.git_dirty"] in ("true", "false")
    assert parent.data.tags["mlflow.note.content"].startswith("| task | cluster |")  # table.md, the run description
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    by_method = {r.data.tags["method"]: r for r in children}
    assert set(by_method) == set(METHODS)
    for method, run in by_method.items():
        assert run.data.metrics["step_time_s"] == pytest.approx(result["methods"][method]["step_time_s"])
        best = result["methods"][result["best_baseline"]]["step_time_s"]
        assert run.data.metrics["x_best_baseline"] == pytest.approx(result["methods"][method]["step_time_s"] / best)
    # each baseline's level: Scotch, MinCut and METIS place the op graph, as the papers ran them
    assert {m: by_method[m].data.params.get("level") for m in ("scotch", "mincut", "metis", "expert", "m_etf")} == {
        "scotch": "op", "mincut": "op", "metis": "op", "expert": "group", "m_etf": "op"}
    curve = client.get_metric_history(by_method["rl"].info.run_id, "best_step_time_s")
    assert [m.step for m in curve] == [4, 8, 12, 16]  # one point per update of K = 4
    rl = by_method["rl"].data.params  # the rate is over the search loop's CPU-seconds, within the task's
    assert 0 < float(rl["search_loop_cpu_s"]) <= float(rl["search_cpu_s"])
    assert float(rl["placements_per_cpu_s"]) == pytest.approx(16 / float(rl["search_loop_cpu_s"]), rel=0.01)
    from cluster.machine_readers import host_cpu_model

    assert rl["host_cpu"] == host_cpu_model() != ""  # the CPU the rate was counted on
    assert curve[-1].value == pytest.approx(result["methods"]["rl"]["step_time_s"])
    assert len(client.get_metric_history(by_method["rl"].info.run_id, "sample_mean_step_time_s")) == 4
    # the learner's diagnostics, live, as CleanRL names them: one point per policy update
    live = client.get_run(by_method["rl"].info.run_id).data.metrics
    assert {"losses/baseline", "losses/entropy", "charts/placements_per_s"} <= set(live), sorted(live)
    assert [m.step for m in client.get_metric_history(by_method["rl"].info.run_id, "losses/entropy")] == [4, 8, 12, 16]
    assert live["charts/placements_per_s"] > 0
    placement_file = client.download_artifacts(by_method["expert"].info.run_id, "placement.json", str(tmp_path))
    assert json.loads(open(placement_file).read()) == result["methods"]["expert"]["placement"]
    # Prefect artifacts: the results as a table, the plots as images, the Table 2 markdown, the MLflow link
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as pc:
        flow_run = pc.read_flow_run(UUID(result["prefect_flow_run_id"]))
        assert re.fullmatch(name, flow_run.name), flow_run.name
        assert {"model:rnnlm", "size:small", "cluster:k80x2", "env:sim"} <= set(flow_run.tags), flow_run.tags
        arts = pc.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(result["prefect_flow_run_id"])])))
    by_type = {}
    for a in arts:
        by_type.setdefault(a.type, []).append(a)
    assert {"table", "image", "markdown"} <= set(by_type), sorted(by_type)  # (a link artifact is markdown)
    assert any("#/experiments/" in (a.data or "") for a in by_type["markdown"])
    # images link to the run's MLflow artifacts (served by the printed `mlflow ui`), no inline data
    assert len(by_type["image"]) >= 2
    for a in by_type["image"]:
        assert a.data.startswith("http://127.0.0.1:5000/get-artifact?path=plots/"), a.data[:80]
        assert a.data.endswith(f"&run_uuid={result['mlflow_run_id']}")
    assert '"method"' in by_type["table"][0].data and "step_time_s" in by_type["table"][0].data
    # a progress artifact per search, at 100% when it ended
    from placer import DEFAULT_LEARNERS as LEARNERS

    # (an artifact key has dashes for underscores: search-rl-warm)
    assert {a.key: float(a.data) for a in by_type["progress"]} == {f"search-{m}".replace("_", "-"): 100.0 for m in LEARNERS}

    # one log per learner, named by the run's settings (not the clock), so --resume finds it
    logs = {p.name for p in (out / "placement-logs").glob("*.jsonl")}
    assert logs == {f"rnnlm-small-k80x2-2017-{m}-seed0-budget16.jsonl" for m in LEARNERS}
    assert all(len((out / "placement-logs" / p).read_text().splitlines()) == 17 for p in logs)  # header + 16 each
    assert result["best_learned"] in LEARNERS
    assert set(result["speedups"]) == set(LEARNERS)
    # the warm-started learners (placer.warm): labelled with their start, never slower than the best baseline
    best = result["best_baseline"]
    assert result["labels"] == {"rl_warm": f"rl (warm: {best})", "post_warm": f"post (warm: {best})"}
    for m in ("rl_warm", "post_warm"):
        assert result["methods"][m]["step_time_s"] <= result["methods"][best]["step_time_s"], m
        assert by_method[m].data.params["init_source"] == best
    # what to do next: the fastest placement of the run, and the export command that writes it
    import shlex

    from cli.main import app

    rec = result["recommendation"]
    assert rec["step_time_s"] == min(r["step_time_s"] for r in result["methods"].values())
    assert rec["figures"] == "simulated (the cost model of preset k80x2), not measured on hardware"
    argv = shlex.split(rec["export_command"])
    assert argv[:2] == ["placement", "export"]
    written = tmp_path / "exported.json"
    r = CliRunner().invoke(app, [*argv[1:], "--output", str(written)])
    assert r.exit_code == 0, r.output
    exported = json.loads(written.read_text())
    assert exported["method"] == rec["method"] and exported["step_time_s"] == pytest.approx(rec["step_time_s"])
    assert set(exported["devices"].values()) <= {"/cpu:0", "/gpu:0", "/gpu:1"} and len(exported["devices"]) == result["ops"]


@pytest.mark.slow
def test_sweep_runs_one_experiment_per_combination_and_reports_failures(prefect_harness, tmp_path):
    from mlflow.tracking import MlflowClient

    from flows.sweep import placement_sweep

    out = tmp_path / "sweep"
    missing = str(tmp_path / "missing.yaml")  # (an unknown model is refused by the sweep's Literal parameter type)
    base = {"source": {"kind": "benchmark", "size": "small"}, "budget": 8, "methods": ["single_gpu", "post"],
            "tracking": {"out_dir": str(out)}}
    rows = placement_sweep(base=base, models=["rnnlm"], clusters=["k80x2", missing], seeds=[0, 1])
    ok = [r for r in rows if "error" not in r]
    assert [(r["model"], r["seed"]) for r in ok] == [("rnnlm", 0), ("rnnlm", 1)]
    assert all(r["best_baseline"] == "single_gpu" and r["best_learned"] == "post" for r in ok)
    bad = [r for r in rows if "error" in r]
    assert len(bad) == 2 and f"cluster spec {missing}: no such file" in bad[0]["error"]
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("placement-experiment").experiment_id], max_results=50)
    parents = {r.info.run_id for r in runs if r.data.tags.get("placement.kind") == "experiment" and r.info.status == "FINISHED"}
    assert parents == {r["mlflow_run_id"] for r in ok}
    # the second experiment read the preprocessed graph from the cache the first one wrote
    assert any((out / "graph-cache").iterdir())


@pytest.mark.parametrize(
    "args, needle",
    [
        (["experiment", "--model", "nope"], "unknown model 'nope'; valid: rnnlm"),
        (["experiment", "--ray-address", "auto"], "--ray-address needs --controllers"),
        (["experiment", "--controllers", "-1"], "--controllers must be at least 0, got -1"),
        (["experiment", "--grouper", "nope"], "unknown --grouper value 'nope'; valid: 'heuristic', '2017', 'metis' or 'fluid'"),
        (["experiment", "--cluster", "nope"], "unknown cluster 'nope'; valid: a100x4-pcie, a100x8, cpu4, gcp-k80x2, gcp-k80x4, gcp-k80x8, h100x1, h100x8, "
                                                "h200x1, k80x2, k80x4, p100x4"),
        (["experiment", "--methods", "rl,magic"], "unknown --methods value 'magic'; valid: 'single_cpu'"),
        (["experiment", "--budget", "0"], "--budget must be at least 1, got 0"),
        (["graph-stats", "--model", "nope"], "unknown model 'nope'"),
    ],
)
def test_cli_bad_values_exit_2_with_one_line(args, needle):
    from cli.main import app

    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2
    assert needle in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert "Traceback" not in r.output


def test_cli_lists_models_and_clusters():
    from cli.main import app

    runner = CliRunner()
    models = [x.split("\t")[0] for x in runner.invoke(app, ["models"]).output.strip().splitlines()]
    assert models[0] == "rnnlm" and {"nmt", "gnmt", "bert_base", "gpt", "resnet50_torch"} <= set(models)
    lines = runner.invoke(app, ["clusters"]).output.strip().splitlines()
    assert [x.split("\t")[0] for x in lines] == ["a100x4-pcie", "a100x8", "cpu4", "gcp-k80x2", "gcp-k80x4", "gcp-k80x8",
                                                 "h100x1", "h100x8", "h200x1", "k80x2", "k80x4", "p100x4"]


def test_model_help_states_the_default_only_where_there_is_one():
    """``experiment`` runs rnnlm without ``--model``; ``train`` needs a graph, so its help gives no default."""
    from cli.main import app

    def model_help(command):
        text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "300"}).output
        return next(line for line in text.splitlines() if "--model " in line)

    assert "(default rnnlm)" in model_help("experiment")
    assert "(default rnnlm)" not in model_help("train") and "(no default here)" in model_help("train")


def test_cli_graph_stats_json(rnnlm_small):
    from cli.main import app

    r = CliRunner().invoke(app, ["graph-stats", "--model", "rnnlm", "--json", "-"])
    assert r.exit_code == 0, r.output
    stats = json.loads(r.stdout)
    assert stats["ops"] == rnnlm_small.graph.num_ops and stats["groups"] == rnnlm_small.grouping.num_groups
    assert stats["total_flops"] > 1e9 and stats["param_bytes"] > 1e7


@pytest.mark.parametrize("args, expected", [
    (["--methods", "rl,post", "--k", "4"], {"rl": {"k": 4}}),
    (["--methods", "rl", "--k", "4", "--learner-option", "rl.k=4"], {"rl": {"k": 4}}),  # both, the same K
    (["--methods", "rl"], {}),  # no --k: rl's paper K, no override
    (["--methods", "rl", "--k", "8"], {}),  # the paper's K given: still no override
])
def test_cli_k_reaches_rl_through_learner_options(tmp_path, monkeypatch, args, expected):
    """The flow has no ``k`` parameter (only rl uses it): the CLI's ``--k`` becomes ``learners.rl.k``, an
    override of rl's options when it differs from the paper's."""
    import cli.main

    seen = {}

    class Stop(Exception):
        pass

    def run_flow(flow_fn, fail, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(cli.main, "run_flow", run_flow)
    r = CliRunner().invoke(cli.main.app, ["experiment", *args, "--out-dir", str(tmp_path)])
    assert isinstance(r.exception, Stop), r.output
    from tasks.config import ExperimentConfig

    assert "k" not in seen and ExperimentConfig(**seen).learner_options == expected


@pytest.mark.parametrize("args, needle", [
    (["--methods", "rl", "--k", "4", "--learner-option", "rl.k=6"], "--k 4 and --learner-option rl.k=6 disagree"),
    (["--methods", "post", "--k", "4"], "--k 4: sets rl's K, and rl is not in --methods (post)"),  # it would go nowhere
])
def test_cli_k_that_would_be_ignored_is_refused(tmp_path, args, needle):
    import cli.main

    r = CliRunner().invoke(cli.main.app, ["experiment", *args, "--out-dir", str(tmp_path)])
    assert r.exit_code == 2 and needle in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_a_typo_is_refused_before_torch_or_tensorflow_load():
    """`placement experiment --model rnn` (and a bad method) exit 2 having imported neither torch nor
    TensorFlow: the names come from registries that are cheap to list (placer.LEARNER_NAMES)."""
    import subprocess
    import sys

    code = ("import sys\nfrom cli.main import app\n"
            "for args in (['experiment', '--model', 'rnn'], ['experiment', '--methods', 'rl,magic']):\n"
            "    try:\n        app(args)\n    except SystemExit as e:\n        print('rc', e.code)\n"
            "print('heavy', sorted(m for m in ('torch', 'tensorflow') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.stdout.split("\n")[:3] == ["rc 2", "rc 2", "heavy []"], r.stdout + r.stderr
    assert "unknown model 'rnn'" in r.stderr and "unknown --methods value 'magic'" in r.stderr


def test_learner_names_are_the_registry():
    import placer

    ours = tuple(name for name, cls in placer.LEARNERS.items() if cls.__module__.startswith("placer."))
    assert placer.LEARNER_NAMES == ours  # (tests register toy learners of their own)
    from placer.configs import CONFIGS  # the configs, known without torch (the experiment config types with them)

    assert tuple(CONFIGS) == ours and all(CONFIGS[m] is placer.LEARNERS[m].Config for m in ours)
