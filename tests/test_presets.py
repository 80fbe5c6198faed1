"""The papers' machines as presets: datasheet figures as their sources state them, one set of chip
parameters per chip across presets, every fitted parameter inside its physical bound, and a fit
that cannot leave its bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cluster.fitting import FIT_PARAMS, FitParam, check_bounds, fit, on_bound, spec_values
from cluster.machines import CHIPS, MACHINES
from cluster.spec import load_cluster

#: (preset, GPUs, CPU peak FLOP/s, CPU GB/s, GPU peak FLOP/s, GPU GB/s, GPU memory MiB, RAM GB), from the
#: datasheets and papers the presets cite, written out here by hand.
DATASHEETS = [
    ("k80x2", 2, 18 * 2.3e9 * 32, 68e9, 8.73e12 / 2, 480e9 / 2, 11441, 50),
    ("k80x4", 4, 18 * 2.3e9 * 32, 68e9, 8.73e12 / 2, 480e9 / 2, 11441, 50),
    ("gcp-k80x2", 2, 8 * 2.2e9 * 32, 76.8e9, 8.73e12 / 2, 480e9 / 2, 11441, 26),
    ("gcp-k80x4", 4, 8 * 2.2e9 * 32, 76.8e9, 8.73e12 / 2, 480e9 / 2, 11441, 26),
    ("gcp-k80x8", 8, 8 * 2.2e9 * 32, 76.8e9, 8.73e12 / 2, 480e9 / 2, 11441, 26),
    ("p100x4", 4, 2 * 12 * 2.2e9 * 32, 2 * 76.8e9, 9.3e12, 732e9, 16280, 125),
]


@pytest.mark.parametrize("name, gpus, cpu_flops, cpu_bw, gpu_flops, gpu_bw, gpu_mib, ram_gb", DATASHEETS)
def test_preset_datasheet_figures_match_their_sources(name, gpus, cpu_flops, cpu_bw, gpu_flops, gpu_bw, gpu_mib, ram_gb):
    spec = load_cluster(name)
    cpu, *gpu = spec.devices
    assert cpu.kind == "cpu" and len(gpu) == gpus and all(d.kind == "gpu" for d in gpu)
    assert cpu.peak_flops == pytest.approx(cpu_flops) and cpu.memory_bandwidth == pytest.approx(cpu_bw)
    assert cpu.memory_bytes == pytest.approx(ram_gb * 1e9)
    for d in gpu:
        assert d.peak_flops == pytest.approx(gpu_flops) and d.memory_bandwidth == pytest.approx(gpu_bw)
        assert d.memory_bytes == gpu_mib * 2**20
    assert spec.default_link.bandwidth == pytest.approx(15.75e9)  # PCIe 3.0 x16 per direction
    machine = MACHINES[name]
    for chip in (CHIPS[machine.cpu], CHIPS[machine.gpu]):
        assert set(chip.sources) <= set(spec.sources)  # the preset cites its datasheets
        assert chip.model in (cpu.model, gpu[0].model)


@pytest.mark.parametrize("name", list(MACHINES))
def test_every_shipped_parameter_is_inside_its_bound_and_chips_agree(name):
    spec = load_cluster(name)
    values = spec_values(spec)
    check_bounds(values)  # raises if one is outside
    assert values == spec_values(load_cluster("k80x2"))  # one chip, one set of chip parameters
    cpu = spec.devices[0]
    assert cpu.software_flops_fraction == {"2017-table2": 0.25, "post-table1": 0.5,
                                           "eagle-table4": 0.5}[MACHINES[name].table]


def test_check_bounds_names_the_parameter():
    with pytest.raises(ValueError, match=r"transfer.send_recv_overhead_s=0.0112 is outside its bound \[5e-06, 0.001\]"):
        check_bounds({"transfer.send_recv_overhead_s": 0.0112})


def test_a_fit_cannot_leave_its_bounds():
    """Data that want a parameter far outside its range (a cell 100x slower than the model at the
    upper bound): the fit ends on that bound, says so, and never beyond."""
    p = FitParam("transfer", "send_recv_overhead_s", 5e-6, 1e-3, 5e-5, "test")
    q = FitParam("gpu", "dense_efficiency", 0.1, 0.9, 0.5, "test")

    def predict(values, placements):  # "a": 1000 transfers + 1 s; "b": 1 s of compute at efficiency 1
        t = 1000 * values[p.key] + 1.0
        return {"placements": {}, (("row", 2), "a"): {"step_time_s": t, "oom": False, "fits_below_overhead": 2.0},
                (("row", 2), "b"): {"step_time_s": 1.0 / values[q.key], "oom": False, "fits_below_overhead": 2.0}}

    cells = [(("row", 2), "a", 100.0), (("row", 2), "b", 0.2)]  # "a" needs 0.1 s a transfer; "b" efficiency 5
    res = fit(predict, cells, (p, q), rounds=1, log=lambda s: None)
    assert p.lo <= res["values"][p.key] <= p.hi and q.lo <= res["values"][q.key] <= q.hi
    assert res["on_bound"] == {p.key: "upper", q.key: "upper"}
    assert on_bound({p.key: 5e-6}, (p,)) == {p.key: "lower"}
    assert math.isclose(res["values"][p.key], 1e-3, rel_tol=1e-6)
    assert np.isfinite(res["rms_log_ratio"])


def test_fit_params_cover_the_issues_bounds():
    """At least as tight as the physical-model issue asks."""
    b = {p.key: (p.lo, p.hi) for p in FIT_PARAMS}
    assert b["transfer.send_recv_overhead_s"] == (5e-6, 1e-3)
    assert b["transfer.bandwidth_efficiency"][0] * 15.75e9 >= 3e9 - 1
    for kind in ("cpu", "gpu"):
        assert b[f"{kind}.dense_efficiency"][0] >= 0.10 and b[f"{kind}.conv_efficiency"][0] >= 0.10
        assert b[f"{kind}.memory_efficiency"][0] >= 0.30
        assert b[f"{kind}.op_overhead_s"][0] >= 1e-6 and b[f"{kind}.op_overhead_s"][1] <= 1e-4
    assert all(p.source for p in FIT_PARAMS)


def test_required_value_bisects_to_the_paper_cell_by_hand():
    """Step = 100 transfers x overhead + 1 s: the paper's 3 s needs 20 ms a transfer; 0.5 s cannot be
    reached (even the smallest overhead is slower) and 1e9 s not within the search range."""
    from cluster.fitting import required_value

    def predict(values, placements):
        return {(("row", 2), "a"): {"step_time_s": 100 * values["transfer.send_recv_overhead_s"] + 1.0}}

    v = required_value(predict, {}, "transfer.send_recv_overhead_s", (("row", 2), "a", 3.0), None)
    assert v == pytest.approx(0.02, rel=1e-6)
    assert required_value(predict, {}, "transfer.send_recv_overhead_s", (("row", 2), "a", 0.5), None) is None
    assert required_value(predict, {}, "transfer.send_recv_overhead_s", (("row", 2), "a", 1e9), None) is None


def test_rounded_values_stay_inside_their_bounds():
    from cluster.fitting import rounded

    out = rounded({"transfer.bandwidth_efficiency": 0.19050000001, "transfer.send_recv_overhead_s": 0.0009999999990,
                   "gpu.dense_efficiency": 0.616153456})
    assert out == {"transfer.bandwidth_efficiency": 0.1905, "transfer.send_recv_overhead_s": 0.001,
                   "gpu.dense_efficiency": 0.616153}
    check_bounds(out)


#: (preset, GPUs, CPU FP32 FLOP/s, CPU GB/s, GPU FP32, TF32, BF16 FLOP/s, GPU GB/s, GPU-GPU and CPU-GPU GB/s per
#: direction, RAM TB), from the datasheets cluster/servers.py cites, written out here by hand.
SERVER_DATASHEETS = [
    ("a100x8", 8, 2 * 64 * 2.25e9 * 32, 2 * 204.8e9, 19.5e12, 156e12, 312e12, 2039e9, 300e9, 31.5e9, 2),
    ("h100x8", 8, 2 * 56 * 2.0e9 * 64, 2 * 307.2e9, 67e12, 989e12 / 2, 1979e12 / 2, 3350e9, 450e9, 63.0e9, 2),
    ("a100x4-pcie", 4, 2 * 64 * 2.25e9 * 32, 2 * 204.8e9, 19.5e12, 156e12, 312e12, 1935e9, 31.5e9, 31.5e9, 1),
]


@pytest.mark.parametrize("name, gpus, cpu_flops, cpu_bw, fp32, tf32, bf16, gpu_bw, gpu_link, host_link, ram_tb",
                         SERVER_DATASHEETS)
def test_server_presets_match_their_datasheets(name, gpus, cpu_flops, cpu_bw, fp32, tf32, bf16, gpu_bw, gpu_link,
                                               host_link, ram_tb):
    from cluster.servers import SERVER_CHIPS, SERVERS, build_server_spec

    spec = load_cluster(name)
    assert spec == build_server_spec(SERVERS[name])  # the shipped YAML is what the module builds
    cpu, *gpu = spec.devices
    assert len(gpu) == gpus and cpu.peak_flops == pytest.approx(cpu_flops) and cpu.memory_bandwidth == pytest.approx(cpu_bw)
    assert cpu.memory_bytes == pytest.approx(ram_tb * 1e12)
    for d in gpu:
        assert d.peak_flops == pytest.approx(fp32) and d.memory_bandwidth == pytest.approx(gpu_bw)
        assert d.tensor_peak_flops["tf32"] == pytest.approx(tf32, rel=1e-3)
        assert d.tensor_peak_flops["bfloat16"] == pytest.approx(bf16, rel=1e-3) == d.tensor_peak_flops["float16"]
        assert d.memory_bytes == 80e9 and not d.tf32_matmul and d.tf32_conv  # PyTorch's defaults
    assert spec.raw_link(1, 2).bandwidth == pytest.approx(gpu_link, rel=1e-3)
    assert spec.raw_link(0, 1).bandwidth == pytest.approx(host_link, rel=1e-3)
    server = SERVERS[name]
    for chip in (SERVER_CHIPS[server.cpu], SERVER_CHIPS[server.gpu]):
        assert set(chip.sources) <= set(spec.sources)
    # the chip-independent GPU terms are carried from h200x1 (fitted on real PyTorch steps on one H200,
    # cluster/torch_calibrate.py), the CPU's are the K80 fit's; the software terms sit inside their physical bounds
    k80 = {d.kind: d for d in load_cluster("k80x2").devices}
    h200 = {d.kind: d for d in load_cluster("h200x1").devices}
    for term in ("dense_efficiency", "conv_efficiency", "other_efficiency", "memory_efficiency", "half_efficiency_flops",
                 "op_overhead_s", "dispatch_s"):
        assert getattr(gpu[0], term) == getattr(h200["gpu"], term)
    assert cpu.memory_efficiency == k80["cpu"].memory_efficiency
    bounds = {p.key: (p.lo, p.hi) for p in FIT_PARAMS}
    for key, value in (("gpu.op_overhead_s", gpu[0].op_overhead_s),
                       ("transfer.send_recv_overhead_s", spec.transfer.send_recv_overhead_s),
                       ("transfer.bandwidth_efficiency", spec.transfer.bandwidth_efficiency)):
        lo, hi = bounds[key]
        assert lo <= value <= hi


@pytest.mark.slow  # the 6.7B capture: about 25 s here
def test_a_6_7b_decoder_fits_no_single_gpu_of_today_but_a_server():
    """The 6.7B step (weights and Adam moments: 80 GB) is OOM on one 80 GB GPU; layers split over 8 fit."""
    pytest.importorskip("torch")
    from baselines import BASELINES, BaselineContext
    from cluster.simulator import Simulator
    from compgraph.frontends import BenchmarkSource, prepare_source

    prepared = prepare_source(BenchmarkSource(model="gpt", size="6.7b"))
    spec = load_cluster("a100x8")
    ctx = BaselineContext(prepared.graph, prepared.grouping, spec, prepared.benchmark, prepared.config)
    sim = Simulator(prepared.graph, spec)
    one = sim.run(prepared.grouping.expand(BASELINES["single_gpu"](ctx)))
    split = sim.run(prepared.grouping.expand(BASELINES["expert"](ctx)))
    assert one.oom and not split.oom
