"""What the experiment says after its table (tracking.advice): the recommended placement and why, the
export command, how the figures were obtained, and the learners that lost to a baseline."""

from __future__ import annotations

import shlex

import pytest

from tracking.advice import best_placement, learner_verdicts, next_steps, recommendation


def _result(times: dict, learners=("rl", "post"), env="sim", cluster="k80x2", best_baseline=None, run_dir="/r/20261126-1"):
    methods = {m: {"step_time_s": None if t == "oom" else t, "oom": t == "oom",
                   "placement": {"g0": "/gpu:0", "g1": "/gpu:1" if m != "single_gpu" else "/gpu:0"}}
               for m, t in times.items()}
    if best_baseline is None:
        ran = {m: t for m, t in times.items() if m not in learners and t != "oom"}
        best_baseline = min(ran, key=ran.get) if ran else None
    return {"methods": methods, "best_baseline": best_baseline, "speedups": {m: {} for m in learners if m in times},
            "env": env, "cluster": cluster, "run_dir": run_dir}


def test_the_recommendation_is_the_fastest_of_baselines_and_learners():
    rec = recommendation(_result({"single_gpu": 2.0, "expert": 1.6, "rl": 1.2, "post": "oom"}), budget=200)
    assert rec["method"] == "rl" and rec["step_time_s"] == 1.2
    assert rec["why"] == ("the fastest of the 3 methods' placements (1.20000 s per step; next: expert, 33.3% slower; "
                          "33.3% faster than the best baseline, expert; 2 devices used)")
    assert rec["figures"] == "simulated (the cost model of preset k80x2), not measured on hardware"
    assert rec["export_command"] == "placement export /r/20261126-1 --method rl"
    rec = recommendation(_result({"single_gpu": 1.0, "expert": 1.6, "rl": 1.2}))  # a baseline can win
    assert rec["method"] == "single_gpu" and "best baseline" not in rec["why"] and "1 device used" in rec["why"]
    assert best_placement(_result({"expert": 1.0, "rl": 1.0})["methods"])["method"] == "expert"  # a tie: the first named


@pytest.mark.parametrize("env, cluster, words", [
    ("sim", "k80x2", "simulated (the cost model of preset k80x2), not measured on hardware"),
    ("real", "cpu4", "measured: each step run on this machine's devices (preset cpu4)"),
    ("grappler", "my-box", "estimated by TensorFlow's cost model, grappler (cluster spec my-box), not measured on hardware"),
])
def test_the_figures_say_simulated_or_measured_and_on_which_preset(env, cluster, words):
    assert recommendation(_result({"expert": 1.0, "rl": 2.0}, env=env, cluster=cluster))["figures"] == words


def test_one_plain_line_per_learner_that_lost_to_the_best_baseline():
    result = _result({"single_gpu": 2.0, "expert": 1.0, "rl": 1.259, "post": 0.9, "ppo": "oom"}, learners=("rl", "post", "ppo"))
    assert learner_verdicts(result, budget=200) == [
        "rl ended 25.9% slower than the best baseline (expert); try rl_warm (it starts from the best baseline's placement) "
        "or a larger --budget (this run: 200)",
        "ppo ran out of memory; try ppo_warm (it starts from the best baseline's placement) or a larger --budget (this run: 200)"]
    # the warm-started variant ran beside it: how it did; it lost too: only the budget is left to try
    result = _result({"expert": 1.0, "rl": 1.5, "rl_warm": 1.2}, learners=("rl", "rl_warm"))
    assert learner_verdicts(result) == [
        "rl ended 50.0% slower than the best baseline (expert); rl_warm, started from the best baseline's placement, "
        "ended 20.0% slower; or try a larger --budget",
        "rl_warm ended 20.0% slower than the best baseline (expert); try a larger --budget"]
    result = _result({"expert": 1.0, "post": 1.5, "post_warm": 1.0}, learners=("post", "post_warm"))
    assert learner_verdicts(result, 64) == [
        "post ended 50.0% slower than the best baseline (expert); post_warm, started from the best baseline's placement, "
        "ended as fast as it; or try a larger --budget (this run: 64)"]
    assert learner_verdicts(_result({"rl": 1.0, "post": 2.0}, best_baseline=None)) == []  # no baseline ran


def test_the_lines_after_the_table_and_a_path_that_needs_quoting():
    rec = recommendation(_result({"expert": 1.0, "rl": 2.0}, run_dir="/my runs/20261126-1"), budget=50)
    lines = next_steps(rec)
    assert lines[0].startswith("recommended placement: expert, the fastest of the 2 methods' placements")
    assert lines[1] == "these step times are simulated (the cost model of preset k80x2), not measured on hardware"
    assert shlex.split(lines[2].split(": ", 1)[1]) == ["placement", "export", "/my runs/20261126-1", "--method", "expert"]
    assert lines[3].startswith("rl ended 100.0% slower than the best baseline (expert)")
    assert len(lines) == 4
    assert recommendation(_result({"expert": "oom", "rl": "oom"})) is None
    assert next_steps(None) == ["no placement ran (every method ran out of memory or found none): nothing to recommend"]


def test_the_results_table_artifact_rounds_its_figures():
    """The Prefect table artifact showed 17-digit floats (issue 37, item 6): 4 significant digits for step
    times (issue 37: 4), 3 for the ratios, fastest first."""
    from tasks.publish import results_table_rows

    result = _result({"expert": 0.07928630430884585, "rl": 0.1594941359223348, "post": "oom"})
    result["methods"]["expert"].update(x_lower_bound=1.8426549881, x_optimum=None)
    rows = results_table_rows(result)
    assert [r["method"] for r in rows] == ["expert", "rl", "post"]
    assert rows[0]["step_time_s"] == 0.07929 and rows[1]["step_time_s"] == 0.1595 and rows[2]["step_time_s"] is None
    assert rows[0]["x_lower_bound"] == 1.84 and rows[0]["x_optimum"] is None


def test_plot_images_link_to_the_mlflow_artifacts(tmp_path):
    """An image artifact links to the plot among the run's MLflow artifacts (issue 37, item 6): on the
    tracking server, or on the printed `mlflow ui`'s address for a local store; inline data only for a
    run not logged to MLflow."""
    from tasks.publish import plot_urls

    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "device-bars.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 64)
    result = {"run_dir": str(tmp_path)}
    local = plot_urls(result, "sqlite:////x/mlflow.db", "abc123")
    assert local == {"device-bars": "http://127.0.0.1:5000/get-artifact?path=plots/device-bars.png&run_uuid=abc123"}
    served = plot_urls(result, "http://mlflow.lab:8080/", "abc123")
    assert served["device-bars"].startswith("http://mlflow.lab:8080/get-artifact?path=plots/device-bars.png")
    assert plot_urls(result, "sqlite:////x/mlflow.db", None)["device-bars"].startswith("data:image/png;base64,")
