"""What an experiment's results say to do next: the placement to use and why, the command that
writes it, how far to trust the figures, and which learners lost to a baseline.

[`recommendation`][tracking.advice.recommendation] reads the experiment's result object (``placement experiment --json``;
[`tasks.experiment.save_and_record`][tasks.experiment.save_and_record] adds it as ``recommendation``) and [`next_steps`][tracking.advice.next_steps]
turns it into the lines the CLI prints after the table. Plain functions of plain data: no
MLflow, no Prefect.
"""

from __future__ import annotations

import shlex

ENV_WORDS = {
    "sim": "simulated (the cost model of {where}), not measured on hardware",
    "real": "measured: each step run on this machine's devices ({where})",
    "grappler": "estimated by TensorFlow's cost model, grappler ({where}), not measured on hardware",
}
"""How each measurement environment's figures are said; ``{where}`` is [`cluster_words`][tracking.advice.cluster_words]."""


def best_placement(results: dict[str, dict], best_baseline: str | None = None) -> dict | None:
    """The fastest placement among every method of ``results`` (baselines, learners and reference
    points alike) that ran: a step time, no OOM. Ties go to the method named first.

    Args:
        results: method -> row with ``step_time_s`` and ``oom`` (the result object's ``methods``, or
            [`cluster.evaluation.evaluate_placements`][cluster.evaluation.evaluate_placements]' rows).
        best_baseline: the best baseline's method, for ``x_best_baseline``.
    Returns:
        ``{"method", "step_time_s", "x_best_baseline", "measured", "runner_up", "runner_up_s"}``
        (``measured``: how many placements ran; ``runner_up``: the next fastest method or ``None``;
        ``x_best_baseline``: ``None`` without a best baseline), or ``None`` if none ran.
    """
    ran = [(r["step_time_s"], i, m) for i, (m, r) in enumerate(results.items())
           if r.get("step_time_s") is not None and not r.get("oom")]
    if not ran:
        return None
    ran.sort()
    (t, _, method), rest = ran[0], ran[1:]
    base = results.get(best_baseline or "", {})
    base_s = None if base.get("oom") else base.get("step_time_s")
    return {"method": method, "step_time_s": t, "x_best_baseline": t / base_s if base_s else None,
            "measured": len(ran), "runner_up": rest[0][2] if rest else None,
            "runner_up_s": rest[0][0] if rest else None}


def cluster_words(cluster: str) -> str:
    """``preset k80x2`` for a preset's name, else ``cluster spec <name>`` (a YAML spec's own name)."""
    from cluster.spec import preset_names

    return f"preset {cluster}" if cluster in preset_names() else f"cluster spec {cluster}"


def export_command(run_dir: str, method: str) -> str:
    """The ``placement export`` command that writes ``method``'s placement of the run folder
    ``run_dir`` as JSON (op -> device) to ``<method>-placement.json`` in the current folder."""
    return f"placement export {shlex.quote(str(run_dir))} --method {shlex.quote(method)}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _versus(t: float, base_s: float) -> str:
    """``t`` against the best baseline's ``base_s``: ``as fast as it``, ``X% slower`` or ``X% faster``."""
    if abs(t / base_s - 1) < 0.0005:
        return "as fast as it"
    return f"{_pct(t / base_s - 1)} slower" if t > base_s else f"{_pct(base_s / t - 1)} faster"


def learner_verdicts(result: dict, budget: int | None = None) -> list[str]:
    """One plain line per learner of ``result`` (its ``speedups``) that ended worse than the best
    baseline, or with no placement that ran, saying what to try: the learner's warm-started
    variant (``<learner>_warm`` of [`placer.LEARNER_NAMES`][placer.LEARNER_NAMES], started from the best baseline's
    placement) when it exists and was not in the run (how it did when it was), and a larger
    ``--budget``."""
    from placer import LEARNER_NAMES

    methods, best = result.get("methods") or {}, result.get("best_baseline")
    best_row = methods.get(best or "", {})
    best_s = None if best_row.get("oom") else best_row.get("step_time_s")
    more = "a larger --budget" + (f" (this run: {budget})" if budget is not None else "")
    lines = []
    for learner in result.get("speedups") or {}:
        row = methods.get(learner, {})
        warm = f"{learner}_warm"
        warm_s = None if methods.get(warm, {}).get("oom") else methods.get(warm, {}).get("step_time_s")
        if warm in LEARNER_NAMES and warm not in methods:
            advice = f"try {warm} (it starts from the best baseline's placement) or {more}"
        elif warm_s is not None and best_s is not None:  # the warm-started variant ran beside it
            advice = f"{warm}, started from the best baseline's placement, ended {_versus(warm_s, best_s)}; or try {more}"
        else:
            advice = f"try {more}"
        t = None if row.get("oom") else row.get("step_time_s")
        if t is None:
            why = "ran out of memory" if row.get("oom") else "found no placement that fits in memory"
            lines.append(f"{learner} {why}; {advice}")
        elif best_s is not None and t > best_s:
            lines.append(f"{learner} ended {_pct(t / best_s - 1)} slower than the best baseline ({best}); {advice}")
    return lines


def recommendation(result: dict, budget: int | None = None) -> dict | None:
    """What the experiment recommends, from its result object (``placement experiment --json``).

    Returns:
        ``None`` when no placement ran, else ``{"method", "step_time_s", "why", "figures",
        "export_command", "learners_behind"}``: ``why`` one sentence; ``figures`` whether the step
        times are simulated, measured or estimated, and on which preset or cluster spec;
        ``export_command`` the ``placement export`` command of the run folder (``None`` before
        the run folder is written); ``learners_behind`` [`learner_verdicts`][tracking.advice.learner_verdicts]' lines.
    """
    best = best_placement(result.get("methods") or {}, result.get("best_baseline"))
    if best is None:
        return None
    method, t = best["method"], best["step_time_s"]
    why = f"the fastest of the {best['measured']} methods' placements ({t:.5f} s per step"
    if best["runner_up"] is not None:
        behind = best["runner_up_s"] / t - 1
        why += f"; next: {best['runner_up']}, " + (f"{_pct(behind)} slower" if behind >= 0.0005 else "as fast")
    base = result.get("best_baseline")
    if base and base != method and best["x_best_baseline"] is not None:
        why += f"; {_pct(1 / best['x_best_baseline'] - 1)} faster than the best baseline, {base}"
    placement = ((result.get("methods") or {}).get(method) or {}).get("placement") or {}
    used = len(set(placement.values()))
    why += f"; {used} device{'s' if used != 1 else ''} used)" if placement else ")"
    env = result.get("env", "sim")
    figures = ENV_WORDS.get(env, f"from environment {env} ({{where}})").format(where=cluster_words(result["cluster"]))
    run_dir = result.get("run_dir")
    return {"method": method, "step_time_s": t, "why": why, "figures": figures,
            "export_command": export_command(run_dir, method) if run_dir else None,
            "learners_behind": learner_verdicts(result, budget)}


def next_steps(rec: dict | None) -> list[str]:
    """The lines printed after the results table for a [`recommendation`][tracking.advice.recommendation] (none for ``None``)."""
    if rec is None:
        return ["no placement ran (every method ran out of memory or found none): nothing to recommend"]
    lines = [f"recommended placement: {rec['method']}, {rec['why']}",
             f"these step times are {rec['figures']}"]
    if rec.get("export_command"):
        lines.append(f"write it (op -> device, JSON): {rec['export_command']}")
    return [*lines, *rec.get("learners_behind", [])]
