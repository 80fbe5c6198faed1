"""``benchmarks/learner_flops.py`` (issue 36 item 3): it counts a learner's matrix products and LSTM
layers, sampling included, and its bound on placements per CPU-second holds against the measured speed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import learner_flops as bench  # noqa: E402


def test_the_counting_mode_counts_products_under_no_grad_and_times_them():
    a, b = torch.randn(32, 8), torch.randn(8, 16)
    counter = bench.counting_mode()
    with counter, torch.no_grad():
        a @ b
        a @ b
        torch.relu(a)  # no formula: not counted
        a @ b[:, 0]  # a matrix-vector product, which torch's registry lacks
        a @ b[:, :4]  # a strided view: another layout, kept in the copy
    assert counter.flops == 2 * (2 * 32 * 8 * 16) + 2 * 32 * 8 + 2 * 32 * 8 * 4
    count, flops, args, _ = counter.calls[next(k for k in counter.calls if str(k[0]) == "aten.mm.default")]
    assert count == 2 and flops == 2 * 32 * 8 * 16 and [x.shape for x in args] == [a.shape, b.shape]
    strided = [v[2][1] for v in counter.calls.values() if v[2][1].shape == (8, 4)]
    assert [x.stride() for x in strided] == [b[:, :4].stride()]
    assert bench.product_seconds(counter.calls, repeats=2, seconds=0.001) > 0


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch's CPU LSTM layer is oneDNN's")
def test_torchs_cpu_lstm_is_counted_forward_and_backward():
    lstm = torch.nn.LSTM(6, 8, batch_first=True, bidirectional=True)
    x = torch.randn(3, 5, 6)
    forward = 2 * (3 * 5) * (6 + 8) * (4 * 8) * 2  # rows x (|W_ih| + |W_hh|), two directions
    counter = bench.counting_mode()
    with counter, torch.no_grad():
        lstm(x)
    assert counter.flops == forward
    counter = bench.counting_mode()
    with counter:
        out, _ = lstm(x)
        out.sum().backward()
    assert counter.flops == 3 * forward
    assert bench.product_seconds(counter.calls, repeats=2, seconds=0.001) > 0


def test_a_wider_decoder_counts_more_and_the_bound_holds(tmp_path, capsys):
    out = tmp_path / "flops.json"
    rc = bench.main(["--graphs", "rnnlm/small:k80x2", "--methods", "rl,post", "--batches", "1",
                     "--variant", "rl_wide=rl:hidden_size=512", "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    rows = {r["method"]: r for r in printed["runs"]}
    assert rows["post"]["gflop_per_batch"] == 0 and rows["post"]["bound_placements_per_cpu_s"] is None  # tables, no products
    narrow, wide = rows["rl"], rows["rl_wide"]
    assert wide["options"] == {"hidden_size": 512} and wide["gflop_per_batch"] > 2 * narrow["gflop_per_batch"] > 0
    assert printed["core_gflop_s"] > 0 and printed["core_rate_at"].split()[0] in ("mm", "mkldnn_linear")
    for row in (narrow, wide):
        assert row["gflop_per_placement"] == pytest.approx(row["gflop_per_batch"] / row["k"])
        assert row["gflop_sampling"] > 0 and row["gflop_update"] > row["gflop_sampling"]  # the update scores, with a backward pass
        assert row["gflop_sampling"] + row["gflop_update"] == pytest.approx(row["gflop_per_batch"])
        assert 0 < row["measured_placements_per_cpu_s"] <= row["bound_placements_per_cpu_s"]
        assert row["core_bound_placements_per_cpu_s"] == pytest.approx(
            row["k"] * printed["core_gflop_s"] / row["gflop_per_batch"])


def test_no_batches_is_refused():
    with pytest.raises(SystemExit, match="--batches: 0"):
        bench.main(["--batches", "0"])
