"""cluster.torch_profile writes the shared profile format that cluster.torch_calibrate reads (its CPU rehearsal)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from cluster.torch_calibrate import load_profile  # noqa: E402
from cluster.torch_profile import collect  # noqa: E402


def test_the_rehearsal_writes_what_load_profile_reads(tmp_path):
    out = collect(tmp_path / "prof", models=("gpt2",), device="cpu", size="small", max_steps=2, budget_s=1.0)
    prof = load_profile(out)
    eager = [(r["model"], r["device"], r["foreach"]) for r in prof.steps["eager"]]
    assert eager == [("gpt2", "cuda", False), ("gpt2", "cuda", True)]
    assert all(len(r["times_s"]) == 2 and r["median_s"] > 0 for r in prof.steps["eager"])
    names = {r["name"] for r in prof.gpu_rows["gpt2"]}
    assert "aten::mm" in names and all({"count", "shapes", "self_cpu_us", "self_device_us"} <= set(r)
                                       for r in prof.gpu_rows["gpt2"])
    assert prof.cpu_wall_s["gpt2"] > 0 and any(r["name"] == "aten::mm" for r in prof.cpu_rows["gpt2"])
    assert prof.env["torch"] and json.loads((out / "copies.json").read_text()) == []


def test_a_gpu_profile_needs_a_gpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA device"):
        collect(tmp_path / "prof")
