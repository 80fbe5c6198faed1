"""cluster/torch_calibrate.py: the bounded fit of a cluster's terms to real PyTorch profiles (one H200, 2026-11-26).

The profiles are read from ``tests/data/h200-2026-11-26/`` (copies of the small JSON files of
``../shared/measurements/h200-2026-11-26/``, so that the tests do not need ``../shared``; a test checks the
copies equal the shared files where those exist). Captures and fits are cached per module (a ResNet-50 or
GPT-2 capture takes a few seconds, a fit a few more).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("scipy")

from cluster import torch_calibrate as tc  # noqa: E402
from cluster.spec import ClusterSpec, load_cluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "h200-2026-11-26"
SHARED = ROOT.parent / "shared" / "measurements" / "h200-2026-11-26"


def _base() -> ClusterSpec:
    from cluster.servers import single_gpu_datasheet_spec

    return single_gpu_datasheet_spec("h200x1")


@pytest.fixture(scope="module")
def full_fit():
    return tc.fit_from_profile(DATA, _base())


def test_data_copies_match_the_shared_measurements():
    """The shipped copies are those checked against ../shared/measurements/h200-2026-11-26 (their recorded
    sha256), and equal to it where it sits beside the clone."""
    import hashlib

    sums = json.loads((DATA.parent / "shared_copies.sha256.json").read_text())["files"]
    for f in DATA.iterdir():
        assert hashlib.sha256(f.read_bytes()).hexdigest() == sums[f"{DATA.name}/{f.name}"], f"{f.name} changed"
    if not SHARED.is_dir():
        return
    for f in DATA.iterdir():
        assert json.loads(f.read_text()) == json.loads((SHARED / f.name).read_text()), f.name


def test_dispatch_s_defaults_to_nothing_and_floors_ops_that_do_work():
    from cluster.cost_model import op_time_matrix
    from compgraph.ir import Op, OpGraph

    ops = [Op(name="p", type="Parameter", output_shapes=[(4,)], output_bytes=[16], param_bytes=16),
           Op(name="a", type="aten.add_", output_shapes=[(4,)], output_bytes=[16], flops=4.0, bytes_accessed=48.0)]
    graph = OpGraph(name="g", ops=ops, edges=[], fetches=[])
    spec = load_cluster("k80x2")
    before = op_time_matrix(graph, spec)
    assert all(d.dispatch_s == 0 for d in spec.devices)
    devs = [d.model_copy(update={"dispatch_s": 1e-3}) for d in spec.devices]
    after = op_time_matrix(graph, spec.model_copy(update={"devices": devs}))
    assert np.array_equal(after[0], before[0])  # a Parameter does no work: no dispatch
    assert np.all(after[1] == 1e-3)  # a small op is launch-bound


def _scaled_profile(tmp: Path, factor: float) -> Path:
    """The ResNet-50 profile with every measured time multiplied by ``factor`` (absurd data)."""
    out = tmp / f"x{factor:g}"
    out.mkdir()
    steps = json.loads((DATA / "steps.json").read_text())
    for r in steps["eager"]:
        r["median_s"] *= factor
    (out / "steps.json").write_text(json.dumps(steps))
    rows = json.loads((DATA / "prof_resnet50_shapes.json").read_text())
    for r in rows:
        r["self_device_us"] *= factor
        r["self_cpu_us"] *= factor
    (out / "prof_resnet50_shapes.json").write_text(json.dumps(rows))
    cpu = json.loads((DATA / "cpuprof_resnet50.json").read_text())
    cpu["wall_s"] *= factor
    for r in cpu["rows"]:
        r["self_cpu_us"] *= factor
    (out / "cpuprof_resnet50.json").write_text(json.dumps(cpu))
    copies = json.loads((DATA / "copies.json").read_text())
    for c in copies:
        c["median_s"] *= factor
    (out / "copies.json").write_text(json.dumps(copies))
    shutil.copy(DATA / "env.json", out / "env.json")
    return out


@pytest.mark.parametrize("factor", [1e4, 1e-4])
def test_a_fit_to_absurd_data_stays_inside_every_bound(tmp_path, factor):
    spec, report = tc.fit_from_profile(_scaled_profile(tmp_path, factor), _base(), models=("resnet50",))
    bounds = {p.key: p for p in tc.ALL_PARAMS}
    # the shared set has no copy to new host memory, so no fresh-page term
    assert set(report["values"]) == set(bounds) - {tc.FRESH_PAGE_PARAM.key}
    for key, v in report["values"].items():
        p = bounds[key]
        assert p.lo <= v <= p.hi, (key, v, p.lo, p.hi)
    # the spec holds them, and something sits on a bound: the data asks for more than physics allows
    gpu = next(d for d in spec.devices if d.kind == "gpu")
    assert gpu.dispatch_s == report["values"]["gpu.dispatch_s"]
    assert spec.fit["on_bound"]
    lo, hi = tc.ALLOCATOR_BOUND
    assert lo <= gpu.allocator_overhead <= hi
    for params in (tc.TORCH_GPU_PARAMS, tc.TORCH_CPU_PARAMS, tc.TORCH_TRANSFER_PARAMS, (tc.FRESH_PAGE_PARAM,)):
        for p in params:  # every bound has its source
            assert p.lo < p.ref < p.hi and len(p.source) > 40


def test_every_profiled_kernel_group_is_matched_to_captured_ops():
    prof = tc.load_profile(DATA)
    for model in ("resnet50", "gpt2"):
        cap = tc.captured(model)
        match = tc.match_groups(cap, prof.gpu_rows[model], "gpu")
        total = sum(r["self_device_us"] for r in prof.gpu_rows[model] if r["name"].startswith("aten::")) * 1e-6
        assert match.matched_s > 0.85 * total  # most of the kernel time is matched op by op or by name
        assert any(g.shapes for g in match.groups)  # by input shapes where the capture and the profile agree


def test_the_fit_reproduces_the_fit_set_within_ten_percent(full_fit):
    spec, report = full_fit
    prof = tc.load_profile(DATA)
    for model in ("gpt2", "resnet50"):
        step, peak = tc.simulate_single(tc.captured(model), spec, "gpu")
        row = prof.eager_step(model, "cuda")
        assert step == pytest.approx(row["median_s"], rel=0.10)
        gpu = next(d for d in spec.devices if d.kind == "gpu")
        assert peak * gpu.allocator_overhead == pytest.approx(row["peak_bytes"], rel=0.10)
    cpu_step, _ = tc.simulate_single(tc.captured("resnet50"), spec, "cpu")
    assert cpu_step == pytest.approx(prof.eager_step("resnet50", "cpu")["median_s"], rel=0.10)
    # each direction's pageable copies (the fit weights them by their seconds): 256 MiB within 10%, 1-16 MiB
    # within 0.7-1.7x (one bandwidth a direction, where h2d runs at 11.6-13.8 GB/s at 1-16 MiB and 8.8 GB/s at 256)
    c0, g0 = spec.cpu_indices[0], spec.gpu_indices[0]
    for c in prof.copies:
        if not c["pinned"] and c["bytes"] >= 1 << 20:
            link = spec.link(c0, g0) if c["dir"] in tc.TO_GPU_COPIES else spec.link(g0, c0)
            ratio = (link.latency_s + c["bytes"] / link.bandwidth) / c["median_s"]
            assert (0.9 < ratio < 1.1) if c["bytes"] == 2**28 else (0.7 < ratio < 1.7), (c, ratio)


def test_the_shipped_h200x1_preset_reproduces_its_calibration_steps():
    spec = load_cluster("h200x1")
    prof = tc.load_profile(DATA)
    for model, kind, device in (("gpt2", "gpu", "cuda"), ("resnet50", "gpu", "cuda"), ("resnet50", "cpu", "cpu")):
        step, _ = tc.simulate_single(tc.captured(model), spec, kind)
        assert step == pytest.approx(prof.eager_step(model, device)["median_s"], rel=0.10), (model, kind)
    derived = load_cluster("h100x1")
    assert derived.fit["measured"] is False and derived.fit["derived_from"] == "h200x1"
    h100, h200 = derived.devices[1], spec.devices[1]
    assert h100.dispatch_s == h200.dispatch_s and h100.dense_efficiency == h200.dense_efficiency
    assert h100.memory_bytes == 80e9 and h100.memory_bandwidth == 3350e9


def test_held_out_rows_are_marked_and_reported():
    spec, report = tc.fit_from_profile(DATA, _base(), holdout="gpt2")
    assert report["fit_models"] == ["resnet50"] and report["holdout"] == "gpt2"
    rows = tc.fidelity_rows(DATA, spec, report["fit_models"], copies=False)
    sets = {r["figure"].split()[0]: r["set"] for r in rows}
    assert sets == {"gpt2": "held-out", "resnet50": "fit"}
    assert all(math.isfinite(r["ratio"]) and r["ratio"] > 0 for r in rows)
    assert "| figure |" in tc.format_table(rows)
    with pytest.raises(ValueError, match="unknown profile model"):
        tc.fit_from_profile(DATA, _base(), holdout="bert")


def test_cli_writes_a_loadable_preset(tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    out = tmp_path / "fit.yaml"
    res = CliRunner().invoke(app, ["calibrate", "--torch", "--from-profile", str(DATA), "--cluster", "h200x1",
                                   "--output", str(out), "--holdout", "gpt2"])
    assert res.exit_code == 0, res.output
    spec = ClusterSpec.from_yaml(out)
    assert spec.fit["holdout"] == "gpt2" and spec.fit["fit_models"] == ["resnet50"]
    assert spec.name == "fit" and load_cluster(str(out)) == spec  # named by its file, not as the base preset
    text = out.read_text()
    assert "# CALIBRATED by cluster/torch_calibrate.py" in text and "torch 2.11.0+cu130" in text
    assert "gpu.dispatch_s" in text
    # refusals: one line, exit 2
    res = CliRunner().invoke(app, ["calibrate", "--torch", "--from-profile", str(DATA), "--cluster", "h200x1",
                                   "--output", str(tmp_path / "h200x1.yaml")])
    assert res.exit_code == 2 and "'h200x1' is a preset's" in res.output and not (tmp_path / "h200x1.yaml").exists()
    from cluster.spec import PRESET_DIR  # a preset's own file, fitted from another preset: refused, the file untouched

    before = (PRESET_DIR / "k80x2.yaml").read_text()
    res = CliRunner().invoke(app, ["calibrate", "--torch", "--from-profile", str(DATA), "--cluster", "h200x1",
                                   "--output", str(PRESET_DIR / "k80x2.yaml")])
    assert res.exit_code == 2 and "'k80x2' is a preset's" in res.output and (PRESET_DIR / "k80x2.yaml").read_text() == before
    res = CliRunner().invoke(app, ["calibrate", "--torch", "--cluster", "h200x1", "--output", str(out)])
    assert res.exit_code == 2 and "--from-profile" in res.output
    res = CliRunner().invoke(app, ["calibrate", "--torch", "--from-profile", str(tmp_path), "--cluster", "h200x1",
                                   "--output", str(out)])
    assert res.exit_code == 2 and "steps.json" in res.output
    res = CliRunner().invoke(app, ["calibrate", "--torch", "--from-profile", str(DATA), "--cluster", "h200x1",
                                   "--output", str(out), "--copies-from", str(tmp_path / "none.json")])
    assert res.exit_code == 2 and "--copies-from" in res.output and "none.json" in res.output


PLACED_COPIES = ROOT / "benchmarks" / "results" / "h200-2026-11-27" / "profile" / "copies.json"


def test_the_copies_a_placed_step_makes_set_the_shipped_transfer_terms():
    """A profile with copies to new host memory (``to_cpu_new``) fits the pageable terms on the copies a placed
    step makes (to a new GPU tensor, to new host memory), which cost more than copies into reused buffers;
    the shipped h200x1 (and h100x1, derived) carry that fit of the 2026-11-27 H200's copies."""
    rows = json.loads(PLACED_COPIES.read_text())
    assert {c["dir"] for c in tc._copy_rows(rows, pinned=False)} == set(tc.PLACED_STEP_COPIES)
    legacy_rows = [c for c in rows if c["dir"] != "to_cpu_new"]
    assert {c["dir"] for c in tc._copy_rows(legacy_rows, pinned=False)} == {"h2d", "d2h", "to_cuda_new"}
    raw = _base().raw_link(0, 1)
    fresh = tc.fit_fresh_pages(rows)
    assert tc.fit_fresh_pages(legacy_rows) is None
    rate = fresh["values"]["transfer.fresh_host_bytes_per_s"]
    assert 1.5e9 < rate < 1.9e9  # 256 MiB: 0.179 s to new host memory, 0.021 s into a reused buffer
    one_way = tc.fit_copies(rows, raw.bandwidth, raw.latency_s, pinned=False, fresh_bytes_per_s=rate)
    # with the fresh pages priced apart, every copy a placed step makes is within 0.75-1.3 of its measurement
    for r in one_way["rows"]:
        assert 0.75 < r["predicted_s"] / r["measured_s"] < 1.3, r
    assert "transfer.host_to_device_efficiency" not in one_way["values"]
    without = tc.fit_copies(rows, raw.bandwidth, raw.latency_s, pinned=False)["values"]
    assert without["transfer.bandwidth_efficiency"] < one_way["values"]["transfer.bandwidth_efficiency"]
    placed = tc.fit_copies(rows, raw.bandwidth, raw.latency_s, pinned=False, fresh_bytes_per_s=rate,
                           per_direction=True, time_weighted=True)
    v = placed["values"]
    # to the GPU slower than from it (256 MiB: 6.9 GB/s against 12.8 GB/s into a reused buffer)
    assert v["transfer.host_to_device_efficiency"] < v["transfer.bandwidth_efficiency"]
    big = {r["dir"]: r["predicted_s"] / r["measured_s"] for r in placed["rows"] if r["bytes"] == 2**28}
    assert all(0.95 < x < 1.05 for x in big.values()), big  # the copies a step's time is made of
    for name in ("h200x1", "h100x1"):
        tr = load_cluster(name).transfer
        assert tr.send_recv_overhead_s == v["transfer.send_recv_overhead_s"], name
        assert tr.bandwidth_efficiency == v["transfer.bandwidth_efficiency"], name
        assert tr.host_to_device_efficiency == v["transfer.host_to_device_efficiency"], name
        assert tr.fresh_host_bytes_per_s == rate, name


def test_the_time_weighted_fit_follows_the_large_copies_and_equal_weights_the_small():
    """One bandwidth for copies of 1 MiB (measured at 10 GB/s) and 256 MiB (5 GB/s): with equal weights
    the many small rows win; weighted by their seconds the large copy does (within 10%)."""
    rows = [{"bytes": b, "dir": "to_cuda_new", "pinned": False, "median_s": 2e-5 + b / gbps / 1e9}
            for b, gbps in ((2**20, 10), (2**21, 10), (2**22, 10), (2**28, 5))]
    link = 63e9
    equal = tc.fit_copies(rows, link, 0.0, pinned=False)
    weighted = tc.fit_copies(rows, link, 0.0, pinned=False, time_weighted=True)
    ratio = {name: next(r["predicted_s"] / r["measured_s"] for r in fit["rows"] if r["bytes"] == 2**28)
             for name, fit in (("equal", equal), ("weighted", weighted))}
    assert ratio["equal"] < 0.8 and 0.9 < ratio["weighted"] < 1.1, ratio


def test_the_fresh_page_rate_stays_inside_its_bound():
    """Copies to new host memory a thousand times slower (or barely slower) than into a reused buffer: the
    rate sits on its cited bound, never outside."""
    p = tc.FRESH_PAGE_PARAM
    for new_s, bound in ((21.0, p.lo), (0.021 + 1e-6, p.hi)):
        rows = [{"bytes": 2**28, "dir": "d2h", "pinned": False, "median_s": 0.021},
                {"bytes": 2**28, "dir": "to_cpu_new", "pinned": False, "median_s": new_s}]
        fit = tc.fit_fresh_pages(rows)
        assert fit["values"][p.key] == bound and fit["on_bound"]
    small = [{"bytes": 2**24, "dir": "d2h", "pinned": False, "median_s": 0.001},
             {"bytes": 2**24, "dir": "to_cpu_new", "pinned": False, "median_s": 0.002}]
    assert tc.fit_fresh_pages(small) is None  # below glibc's 32 MiB: no fresh pages
    assert load_cluster("h200x1").fit["copies_from"] == "benchmarks/results/h200-2026-11-27/profile/copies.json"


def test_copies_from_must_be_a_copies_file(tmp_path):
    with pytest.raises(ValueError, match="copies_from .*no such file"):
        tc.load_profile(DATA, tmp_path / "missing.json")
    bad = tmp_path / "copies.json"
    bad.write_text(json.dumps([{"bytes": 4096, "dir": "h2d"}]))
    with pytest.raises(ValueError, match="rows need bytes, pinned, dir and median_s"):
        tc.load_profile(DATA, bad)
    prof = tc.load_profile(DATA, PLACED_COPIES)
    assert any(c["dir"] == "to_cpu_new" for c in prof.copies) and prof.steps == tc.load_profile(DATA).steps


def test_cli_profiles_live_when_a_gpu_is_here_else_asks_for_a_profile(tmp_path, monkeypatch):
    """Without --from-profile, `calibrate --torch` takes this machine's profile first (here the collect is
    replaced by a copy of the shared set, and CUDA is faked present), then fits it; with no GPU it refuses
    in one line."""
    import torch
    from typer.testing import CliRunner

    import cluster.torch_profile
    from cli.main import app

    out = tmp_path / "mine.yaml"
    args = ["calibrate", "--torch", "--cluster", "h200x1", "--output", str(out)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "no CUDA device here" in res.output and not out.exists()

    taken = []

    def fake_collect(out_dir, **kwargs):
        taken.append(Path(out_dir))
        shutil.copytree(DATA, out_dir, dirs_exist_ok=True)
        return Path(out_dir)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cluster.torch_profile, "collect", fake_collect)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert taken == [tmp_path / "mine-profile"] and "profiling this machine into" in res.output
    assert ClusterSpec.from_yaml(out).fit["profile_dir"] == str(tmp_path / "mine-profile")
    res = CliRunner().invoke(app, [*args, "--profile-dir", str(tmp_path / "mine-profile")])
    assert res.exit_code == 2 and "exists and is not empty" in res.output
