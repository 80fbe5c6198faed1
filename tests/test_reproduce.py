"""``placement reproduce``: the table logic by hand, and the flow on a reduced row set (small
RNNLM, 2 GPUs) under Prefect's test harness with a real SQLite MLflow store in a tmp dir."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cluster.reproduce import (START, beyond_serial, kendall_tau, oom_right, paper_cells, reproduce_rows,
                               winners_matched, within)
from cluster.tables import ROWS


def test_paper_cells_and_tau_by_hand():
    cells = paper_cells()
    assert len(cells) == 24 and sum(c[3] is None for c in cells) == 1  # 23 numbers + NMT single-GPU OOM
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert kendall_tau([3, 2, 1], [10, 20, 30]) == pytest.approx(-1.0)
    assert kendall_tau([1, None, 2], [1, None, 2]) == pytest.approx(1.0)  # OOM is the slowest


class _Prepared:
    """A stand-in for a prepared graph: the fake placer and simulator below only read its name."""

    def __init__(self, model):
        self.model = model
        self.graph = type("Graph", (), {"num_ops": 10**6})()  # larger than the paper's: no overhead factor


def test_rows_ratios_shares_winners_and_speedups_by_hand(monkeypatch):
    """Ours = paper x 1.2 on every cell of 2017 Table 2 (NMT single GPU OOM as in the paper): every
    ratio 1.2, tau 1, 24/24 counted cells within 1.5x, every row's fastest baseline the paper's; a
    learner at 1.0 s beside a best baseline of 1.2 x 1.57 s: speedup 46.9%."""
    import cluster.reproduce as rep

    rows = [r for r in ROWS if r.table == "2017-table2"]
    paper = {r.gpus: r for r in rows}

    def fake_measure(prepared, spec, placements):
        row = next(r for r in rows if r.model == prepared.model and r.cluster == spec.name)
        cells = rep._row_paper(row)
        out = {}
        for m in placements:
            if m == "rl":
                out[m] = {"step_time_s": 1.0, "oom": False, "transfer_total_s": 0.0}
            else:
                v = cells[m]
                out[m] = {"step_time_s": 99.0 if v is None else 1.2 * v, "oom": v is None, "transfer_total_s": 0.25}
        return out

    monkeypatch.setattr(rep, "_measure", fake_measure)
    learned = {("2017-table2", "rnnlm", 2): {"rl": "placement"}}
    out = reproduce_rows(rows, lambda model, size: _Prepared(model), lambda prepared, spec, methods: {m: m for m in methods},
                         fits=None, learned=learned)
    assert len(out) == 6 and all(r["tau"] == pytest.approx(1.0) for r in out) and paper
    assert out[0]["cells"]["scotch"]["ratio"] == pytest.approx(1.2)
    assert within(out) == {"within": 24, "cells": 24, "share": 1.0}
    assert winners_matched(out) == {"matched": 6, "rows": 6, "share": 1.0}
    assert oom_right(out) == {"right": 1, "cells": 1}
    assert out[0]["cells"]["scotch"]["serial_upper_s"] == pytest.approx(1.2 * 13.43 + 0.25)
    assert beyond_serial(out) == {"cells": 0, "of": 18}  # 6 rows x (Scotch, MinCut, expert)
    assert out[0]["cells"]["single_gpu"]["splits"] is False and out[0]["cells"]["expert"]["splits"] is True
    assert [r["paper_winner"] for r in out] == ["single_gpu", "single_gpu", "expert", "expert", "single_gpu", "single_gpu"]
    assert out[1]["cells"]["single_gpu"]["counted"] is False  # a 4-GPU line: the single-device cells are the 2-GPU line's
    assert out[0]["cells"]["expert"]["command"] == (
        "placement experiment --model rnnlm --size paper --cluster k80x2 --methods expert --train-steps 0")
    sp = out[0]["learners"]["rl"]
    assert sp["speedup_pct"] == pytest.approx(100 * (1.2 * 1.57 - 1.0) / (1.2 * 1.57))
    assert sp["paper_s"] == 1.57 and sp["paper_speedup_pct"] == pytest.approx(0.0)


def test_post_and_eagle_experts_are_one_gpu_where_the_tables_say_so():
    """Post: "places the entire model on a single GPU for Inception-V3 and ResNet"; EAGLE: TF-slim's
    Inception-V3 on one GPU, no model-parallel BERT. RNN models keep the layer-per-GPU expert."""
    for r in ROWS:
        one_gpu = r.table in ("post-table1", "eagle-table4") and r.model not in ("rnnlm", "nmt", "gnmt")
        assert (r.aliases.get("expert") == "single_gpu") == one_gpu, (r.table, r.model)


@pytest.fixture(scope="module")
def prefect_harness():
    from conftest import prefect_harness as harness

    with harness():
        yield


@pytest.mark.slow
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
    assert (row["table"], row["model"], row["gpus"]) == ("2017-table2", "rnnlm", 2)
    assert list(row["cells"]) == ["single_cpu", "single_gpu", "scotch", "mincut", "expert"]
    for c in row["cells"].values():
        assert c["ours_s"] > 0 and c["held_out_s"] > 0 and c["ratio"] == pytest.approx(c["ours_s"] / c["paper_s"])
    assert -1.0 <= row["tau"] <= 1.0 and result["summary"]["2017-table2"]["shipped"]["cells"] == 5
    assert [c["method"] for c in result["cells"]] == list(row["cells"])
    assert {p["name"] for p in result["parameters"]} >= {"transfer.send_recv_overhead_s", "gpu.conv_efficiency"}
    assert all(p["lower"] <= p["value"] <= p["upper"] for p in result["parameters"])
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    run = client.get_run(result["mlflow_run_id"])
    assert run.data.params["models"] == "rnnlm" and run.data.params["budget"] == "0"
    assert run.data.metrics["tau.2017-table2.rnnlm.2"] == pytest.approx(row["tau"])
    assert run.data.tags["prefect.flow_run_id"] == result["prefect_flow_run_id"]


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "--table", "2018-table1"], "unknown --table '2018-table1'; valid: 2017-table2, post-table1, eagle-table4, all"),
    (["reproduce", "--table", "eagle-table4", "--gpus", "2"], "no row of eagle-table4 has model in [] and GPUs in [2]"),
    (["reproduce", "--models", "vgg"], "unknown --models 'vgg'"),
])
def test_cli_bad_input_exits_2(argv, message):
    from cli.main import app

    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 2 and message in r.output
