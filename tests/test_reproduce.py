"""``placement reproduce``: the table logic by hand, and the flow on a reduced row set (small
RNNLM, 2 GPUs) under Prefect's test harness with a real SQLite MLflow store in a tmp dir."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cluster.reproduce import PAPER_TABLE2, START, kendall_tau, paper_cells, table_rows, within


def test_paper_cells_and_tau_by_hand():
    cells = paper_cells()
    assert len(cells) == 24 and sum(c[3] is None for c in cells) == 1  # 23 numbers + NMT single-GPU OOM
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert kendall_tau([3, 2, 1], [10, 20, 30]) == pytest.approx(-1.0)
    assert kendall_tau([1, None, 2], [1, None, 2]) == pytest.approx(1.0)  # OOM is the slowest


def test_table_rows_ratios_shares_and_speedup_by_hand():
    """Ours = paper x 1.2 everywhere (NMT single GPU OOM as in the paper): every ratio 1.2, tau 1,
    24/24 within 1.5x; a learner at 1.0 s against the best baseline 1.2 * 1.57 s: speedup 46.9%."""
    pred = {}
    for m, t in PAPER_TABLE2.items():
        for g in (2, 4):
            row = {"single_cpu": t["single_cpu"], "single_gpu": t["single_gpu"], **{k: t["rows"][g][k] for k in ("scotch", "mincut", "expert")}}
            pred[(m, g)] = {k: {"step_time_s": 99.0 if v is None else 1.2 * v, "oom": v is None} for k, v in row.items()}
    learners = {("rnnlm", 2): {"rl": {"step_time_s": 1.0, "oom": False}}}
    rows = table_rows(pred, heldout=pred, learners=learners)
    assert len(rows) == 6 and all(r["tau"] == pytest.approx(1.0) for r in rows)
    assert rows[0]["cells"]["scotch"]["ratio"] == pytest.approx(1.2)
    assert within(rows) == {"within": 24, "cells": 24, "share": 1.0}
    assert within(rows, "heldout_ratio")["share"] == 1.0
    sp = rows[0]["learners"]["rl"]
    assert sp["speedup_pct"] == pytest.approx(100 * (1.2 * 1.57 - 1.0) / (1.2 * 1.57))
    assert sp["paper_speedup_pct"] == 0.0


@pytest.fixture(scope="module")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):  # generous: the machine is shared
        yield


def test_reproduce_flow_reduced_rows_logs_to_mlflow(prefect_harness, tmp_path):
    from mlflow.tracking import MlflowClient

    from flows.reproduce import placement_reproduce

    fit = tmp_path / "fit.json"
    rec = {"values": START, "allocator_overhead": {"lower": 1.0, "upper": 2.0, "value": 1.4}, "rms_log_ratio": 0.5}
    fit.write_text(json.dumps({"all_rows": rec, "leave_one_out": {"rnnlm": rec}}))
    out = tmp_path / "runs"
    result = placement_reproduce(models=["rnnlm"], gpus=[2], size="small", out_dir=str(out), fit_path=str(fit),
                                 budget=0)
    (row,) = result["rows"]
    assert (row["model"], row["gpus"]) == ("rnnlm", 2)
    assert list(row["cells"]) == ["single_cpu", "single_gpu", "scotch", "mincut", "expert"]
    for c in row["cells"].values():
        assert c["ours_s"] > 0 and c["heldout_s"] > 0 and c["ratio"] == pytest.approx(c["ours_s"] / c["paper_s"])
    assert -1.0 <= row["tau"] <= 1.0 and result["shipped"]["cells"] == 5
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    run = client.get_run(result["mlflow_run_id"])
    assert run.data.params["models"] == "rnnlm" and run.data.params["budget"] == "0"
    assert run.data.metrics["tau.rnnlm.2"] == pytest.approx(row["tau"])
    assert run.data.tags["prefect.flow_run_id"] == result["prefect_flow_run_id"]


def test_cli_bad_table_exits_2():
    from cli.main import app

    r = CliRunner().invoke(app, ["reproduce", "--table", "2018-table1"])
    assert r.exit_code == 2 and "--table" in r.output and "2017-table2" in r.output
