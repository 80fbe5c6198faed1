"""``placement detect`` (cluster/detect.py, cli/detect.py): a machine's spec from a fake /proc/cpuinfo, lscpu
text, meminfo, sysfs and GPU properties, CPU only. Each expected figure is written out by hand from the
fake input and the datasheets (cores x clock x FLOP/cycle; the H100/H200 datasheets; PCI-SIG)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from cluster.detect import (LINK_LATENCY_S, DetectError, detect_cpu, detect_gpu, detect_machine, detected_spec, detected_yaml,
                            flops_per_cycle, match_gpu, parse_nvidia_topo, pcie_bandwidth)
from cluster.spec import ClusterSpec, load_cluster

GOLD_FLAGS = "fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512dq avx512cd avx512bw avx512vl ht"


def _cpuinfo(model: str, sockets: int, cores: int, threads_per_core: int, flags: str, extra: str = "",
             vendor: str = "GenuineIntel", family: int = 6, model_no: int = 85) -> str:
    """A /proc/cpuinfo text: ``sockets x cores x threads_per_core`` processor blocks."""
    blocks = []
    n = 0
    for s in range(sockets):
        for t in range(threads_per_core):
            for c in range(cores):
                blocks.append(f"processor\t: {n}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model_no}\n"
                              f"model name\t: {model}\n{extra}physical id\t: {s}\nsiblings\t: {cores * threads_per_core}\n"
                              f"core id\t\t: {c}\ncpu cores\t: {cores}\nflags\t\t: {flags}\n")
                n += 1
    return "\n".join(blocks) + "\n"


@pytest.fixture
def fake_host(tmp_path):
    """A 2-socket Xeon Gold 6248 (4 cores each shown, 2 threads per core, AVX-512) with 64 GiB: (cpuinfo, meminfo)."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(_cpuinfo("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", 2, 4, 2, GOLD_FLAGS, "cpu MHz\t\t: 1000.000\n"))
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       67108864 kB\nMemFree:        1000 kB\n")
    return cpuinfo, meminfo


LSCPU = "Architecture: x86_64\nCPU(s): 16\nModel name: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\nCPU max MHz: 3900.0000\n"


def test_cpu_from_fake_cpuinfo_gives_model_cores_and_peak(fake_host, tmp_path):
    cpuinfo, meminfo = fake_host
    cpu = detect_cpu(cpuinfo, LSCPU, meminfo, sys_root=tmp_path / "nosys")
    assert cpu.model == "2x Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"
    assert (cpu.sockets, cpu.cores, cpu.threads) == (2, 8, 16)  # SMT threads share their core
    assert cpu.clock.value == 2.5e9 and "model name" in cpu.clock.provenance  # not lscpu's 3.9 GHz boost, nor cpu MHz
    assert cpu.isa == "avx512f" and cpu.flops_per_cycle.value == 64
    assert cpu.peak_flops == pytest.approx(8 * 2.5e9 * 64)  # 1.28 TFLOP/s
    assert cpu.memory_bytes.value == 67108864 * 1024 and cpu.memory_bytes.provenance.startswith("read:")
    assert cpu.memory_bandwidth.value == pytest.approx(8 * 10e9)  # not in the table: 10 GB/s per core, flagged
    assert cpu.memory_bandwidth.provenance.startswith("assumed:")


def test_cpu_clock_falls_back_to_lscpu_and_known_model_takes_its_datasheet(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(_cpuinfo("AMD EPYC 7742 64-Core Processor", 1, 64, 1, "sse sse2 avx fma avx2", vendor="AuthenticAMD",
                                family=23, model_no=49))
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 1024 kB\n")
    cpu = detect_cpu(cpuinfo, "CPU max MHz:  2250.0000\n", meminfo)
    assert cpu.clock.value == 2.25e9 and "lscpu" in cpu.clock.provenance
    assert cpu.flops_per_cycle.value == 32 and cpu.isa == "avx2+fma"  # Zen 2: two 256-bit FMA units
    assert cpu.peak_flops == pytest.approx(64 * 2.25e9 * 32)  # the EPYC 7742 datasheet's 4.608 TFLOP/s per socket
    assert cpu.memory_bandwidth.value == pytest.approx(204.8e9)  # 8 channels DDR4-3200
    assert cpu.memory_bandwidth.provenance.startswith("datasheet:")


def test_cpu_without_a_clock_is_refused_unless_allowed(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(_cpuinfo("Mystery CPU", 1, 2, 1, GOLD_FLAGS))
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 1024 kB\n")
    with pytest.raises(DetectError, match=r"no clock .*--allow-unknown"):
        detect_cpu(cpuinfo, None, meminfo)
    cpu = detect_cpu(cpuinfo, None, meminfo, allow_unknown=True)
    assert cpu.clock.value == 2.0e9 and cpu.clock.provenance.startswith("assumed")


@pytest.mark.parametrize("flags, vendor, family, model, expected", [
    ({"avx512f", "avx2", "fma"}, "GenuineIntel", 6, 85, 64),
    ({"avx512f", "avx2", "fma"}, "AuthenticAMD", 0x19, 17, 32),  # Zen 4: 512-bit as 2x256
    ({"avx2", "fma"}, "GenuineIntel", 6, 63, 32),  # Haswell
    ({"avx2", "fma"}, "AuthenticAMD", 0x17, 1, 16),  # Zen 1
    ({"avx", "sse2"}, "GenuineIntel", 6, 45, 16),  # Sandy Bridge
    ({"sse", "sse2"}, "GenuineIntel", 6, 15, 8),
    ({"fp", "asimd"}, "", None, None, 16),
])
def test_flops_per_cycle_by_isa(flags, vendor, family, model, expected):
    got = flops_per_cycle(flags, vendor, family, model)
    assert got is not None and got[0] == expected
    assert flops_per_cycle({"fpu", "mmx"}) is None


def test_no_cuda_gives_a_cpu_only_spec_that_loads(fake_host, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpuinfo, meminfo = fake_host
    det = detect_machine(cpuinfo, LSCPU, meminfo, sys_root=tmp_path / "nosys", host="fakehost")
    assert det.gpus == [] and "is_available() is False" in det.gpu_note
    path = tmp_path / "spec.yaml"
    path.write_text(detected_yaml(det, "fake"))
    spec = ClusterSpec.from_yaml(path)
    assert spec.name == "fake" and spec.device_names == ["/cpu:0"]
    assert spec.devices[0].peak_flops == pytest.approx(1.28e12)
    assert spec.devices[0].memory_bytes == 67108864 * 1024
    host = load_cluster("h200x1").devices[0]  # the host terms carried by default: h200x1's, fitted on PyTorch steps
    for term in ("dense_efficiency", "conv_memory_efficiency", "op_overhead_s"):
        assert getattr(spec.devices[0], term) == getattr(host, term), term  # carried, not detected
    text = path.read_text()
    assert "read: " in text and "assumed: " in text and "CARRIED" in text and "h200x1" in text
    path.write_text(detected_yaml(det, "fake", "k80x2"))  # the 2017 K80 fit's CPU terms instead
    k80 = ClusterSpec.from_yaml(path)
    assert k80.devices[0].dense_efficiency == load_cluster("k80x2").devices[0].dense_efficiency
    assert k80.devices[0].conv_memory_efficiency is None and "k80x2" in path.read_text()
    with pytest.raises(ValueError, match="host terms 'p100x4': valid: h200x1, k80x2"):
        detected_yaml(det, "fake", "p100x4")


def test_a_vm_named_only_xeon_processor_gets_its_datasheet_bandwidth_by_family_and_model(tmp_path):
    """A cloud VM shows "Intel(R) Xeon(R) Processor" and the family/model numbers: model 207 (Emerald Rapids,
    the lent H200s' and the second H100's host) and 143 (Sapphire Rapids) take their DDR5 datasheets'."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 131981020 kB\n")
    for model_no, expected in ((207, 8 * 5600e6 * 8), (143, 8 * 4800e6 * 8), (106, 16 * 10e9)):
        cpuinfo = tmp_path / f"cpuinfo{model_no}"
        cpuinfo.write_text(_cpuinfo("Intel(R) Xeon(R) Processor", 1, 16, 1, GOLD_FLAGS.replace(" ht", ""),
                                    "cpu MHz\t\t: 2100.000\n", model_no=model_no))
        cpu = detect_cpu(cpuinfo, None, meminfo)
        assert cpu.memory_bandwidth.value == pytest.approx(expected), model_no
        assert cpu.memory_bandwidth.provenance.startswith("assumed:" if model_no == 106 else "datasheet:"), model_no


def _h100_props(bus: int = 0x18, name: str = "NVIDIA H100 80GB HBM3", total: int = 85_520_809_984):
    return SimpleNamespace(name=name, total_memory=total, major=9, minor=0, multi_processor_count=132,
                           pci_domain_id=0, pci_bus_id=bus, pci_device_id=0)


def _sysfs(root: Path, bus_id: str, speed: str, width: int, current: str = "2.5 GT/s PCIe") -> None:
    dev = root / "bus/pci/devices" / bus_id
    dev.mkdir(parents=True)
    (dev / "max_link_speed").write_text(f"{speed}\n")
    (dev / "max_link_width").write_text(f"{width}\n")
    (dev / "current_link_speed").write_text(f"{current}\n")  # an idle GPU's link: not what it trains to
    (dev / "current_link_width").write_text(f"{width}\n")


def test_h100_properties_give_the_datasheet_figures(tmp_path):
    _sysfs(tmp_path, "0000:18:00.0", "32.0 GT/s PCIe", 16)
    gpu = detect_gpu(0, _h100_props(), sys_root=tmp_path)
    assert gpu.key == "h100-sxm5-80gb" and gpu.model == "H100 SXM5 80GB"
    assert gpu.peak_flops.value == 67e12 and gpu.peak_flops.provenance.startswith("datasheet:")
    assert gpu.tensor_peak_flops == {"tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12}
    assert gpu.memory_bandwidth.value == 3350e9
    assert gpu.memory_bytes.value == 85_520_809_984 and "total_memory" in gpu.memory_bytes.provenance
    assert (gpu.host_link.gen, gpu.host_link.width) == (5, 16) and "max_link_speed" in gpu.host_link.provenance
    assert gpu.host_link.bandwidth == pytest.approx(63.0e9, rel=1e-3)
    # no sysfs: the datasheet's PCIe 5.0 x16
    bare = detect_gpu(0, _h100_props(), sys_root=tmp_path / "none")
    assert (bare.host_link.gen, bare.host_link.width) == (5, 16) and bare.host_link.provenance.startswith("datasheet:")


def test_h200_and_the_name_table():
    h200 = detect_gpu(0, _h100_props(name="NVIDIA H200", total=150_754_820_096), sys_root="/nonexistent")
    assert (h200.peak_flops.value, h200.memory_bandwidth.value) == (67e12, 4800e9)
    assert h200.tensor_peak_flops["bfloat16"] == 989.5e12
    names = {"Tesla K80": "k80-gk210", "Tesla P100-PCIE-16GB": "p100-pcie-16gb", "Tesla V100-SXM2-32GB": "v100-sxm2",
             "Tesla V100-PCIE-16GB": "v100-pcie", "NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb",
             "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb", "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
             "NVIDIA A100 80GB PCIe": "a100-pcie-80gb", "NVIDIA H100 PCIe": "h100-pcie-80gb", "NVIDIA H200": "h200-sxm-141gb",
             "NVIDIA H100 NVL": None, "NVIDIA H200 NVL": None, "NVIDIA GeForce RTX 4090": None,
             "NVIDIA A100-SXM4-40GB MIG 3g.20gb": None}
    assert {n: match_gpu(n) for n in names} == names


def test_unknown_gpu_is_refused_with_a_clear_message_unless_allowed(tmp_path):
    props = SimpleNamespace(name="NVIDIA GeForce RTX 4090", total_memory=25_393_692_672, major=8, minor=9,
                            multi_processor_count=128)
    with pytest.raises(DetectError) as err:
        detect_gpu(0, props, sys_root=tmp_path)
    msg = str(err.value)
    assert "'NVIDIA GeForce RTX 4090' is not in the datasheet table" in msg and "--allow-unknown" in msg
    assert "\n" not in msg
    gpu = detect_gpu(0, props, sys_root=tmp_path, allow_unknown=True)
    assert gpu.key is None and "unknown" in gpu.model
    assert gpu.peak_flops.value == pytest.approx(128 * 128 * 2 * 1.5e9)  # SMs x lanes x 2 x the assumed clock
    assert gpu.peak_flops.provenance.startswith("estimated") and gpu.memory_bandwidth.provenance.startswith("assumed")


TOPO = ("\x1b[4m\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
        "GPU0\t X \tNV18\t0-47\t0\t\tN/A\nGPU1\tNV18\t X \t0-47\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n"
        "  NV#  = Connection traversing a bonded set of # NVLinks\n")
INDEX = "0, 00000000:18:00.0\n1, 00000000:2A:00.0\n"


def test_two_h100s_with_nvlink_give_a_loadable_spec(fake_host, tmp_path):
    _sysfs(tmp_path, "0000:18:00.0", "32.0 GT/s PCIe", 16)
    _sysfs(tmp_path, "0000:2a:00.0", "16.0 GT/s PCIe", 16)  # a slower slot: its own CPU link
    assert parse_nvidia_topo(TOPO, INDEX) == {("0000:18:00.0", "0000:2a:00.0"): 18, ("0000:2a:00.0", "0000:18:00.0"): 18}
    cpuinfo, meminfo = fake_host
    det = detect_machine(cpuinfo, LSCPU, meminfo, sys_root=tmp_path, gpu_properties=[_h100_props(0x18), _h100_props(0x2A)],
                         peer_access=lambda i, j: True, nvidia_topo=(TOPO, INDEX), host="fakehost")
    spec = detected_spec(det, "two")
    assert spec.device_names == ["/cpu:0", "/gpu:0", "/gpu:1"]
    assert spec.raw_link(1, 2).latency_s == LINK_LATENCY_S  # the NVLink pair's own link, at the stated latency
    assert spec.raw_link(1, 2).bandwidth == pytest.approx(18 * 25e9)  # NV18 x 25 GB/s, the DGX H100's 450 GB/s
    assert spec.raw_link(0, 1).bandwidth == pytest.approx(pcie_bandwidth(5, 16))
    assert spec.raw_link(0, 2).bandwidth == pytest.approx(pcie_bandwidth(4, 16))
    path = tmp_path / "two.yaml"
    path.write_text(detected_yaml(det, "two"))
    loaded = ClusterSpec.from_yaml(path)
    assert loaded.devices[1].peak_flops == 67e12 and loaded.devices[1].tensor_peak_flops["tf32"] == 494.5e12
    assert "NV18" in path.read_text() and loaded.transfer.gpu_peer_access is True


def test_pcie_bandwidth_matches_the_presets():
    from cluster.machines import PCIE3_X16
    from cluster.servers import PCIE4_X16, PCIE5_X16

    assert pcie_bandwidth(3, 16) == pytest.approx(PCIE3_X16, rel=1e-3)
    assert pcie_bandwidth(4, 16) == pytest.approx(PCIE4_X16) and pcie_bandwidth(5, 16) == pytest.approx(PCIE5_X16)
    assert pcie_bandwidth(4, 8) == pytest.approx(PCIE4_X16 / 2)


def _invoke(args):
    from cli.main import app

    return CliRunner().invoke(app, args)


def test_cli_writes_a_loadable_spec_and_refuses_to_overwrite(fake_host, tmp_path):
    cpuinfo, _ = fake_host
    out = tmp_path / "out" / "mine.yaml"
    args = ["detect", "--cpuinfo", str(cpuinfo), "--no-gpu", "--name", "mine", "--output", str(out)]
    r = _invoke(args)
    assert r.exit_code == 0, r.output
    assert r.output.count("\n") == 1 and "8 cores x 2.5 GHz x 64 FLOP/cycle" in r.output
    spec = ClusterSpec.from_yaml(out)
    assert spec.name == "mine" and spec.devices[0].peak_flops == pytest.approx(1.28e12)
    before = out.read_text()
    out.write_text(before + "# edited\n")
    r = _invoke(args)
    assert r.exit_code == 2 and "exists; pass --force" in r.output and r.output.count("\n") == 1
    assert out.read_text().endswith("# edited\n")  # untouched
    r = _invoke([*args, "--force"])
    assert r.exit_code == 0, r.output
    assert out.read_text() == before


def test_cli_prints_yaml_without_output(fake_host):
    cpuinfo, _ = fake_host
    r = _invoke(["detect", "--cpuinfo", str(cpuinfo), "--no-gpu"])
    assert r.exit_code == 0, r.output
    data = yaml.safe_load(r.stdout)
    assert ClusterSpec.model_validate(data).devices[0].model.startswith("2x Intel(R) Xeon(R) Gold 6248")
    assert r.stderr.startswith("detected: CPU")
    r = _invoke(["detect", "--cpuinfo", str(cpuinfo), "--no-gpu", "--host-terms", "k80x2"])
    assert r.exit_code == 0, r.output
    k80 = ClusterSpec.model_validate(yaml.safe_load(r.stdout)).devices[0]
    assert k80.dense_efficiency == load_cluster("k80x2").devices[0].dense_efficiency
    r = _invoke(["detect", "--cpuinfo", str(cpuinfo), "--no-gpu", "--host-terms", "tpu"])
    assert r.exit_code == 2 and "--host-terms 'tpu': valid: h200x1, k80x2" in r.output


def test_cli_refuses_an_unknown_gpu_in_one_line(fake_host, tmp_path, monkeypatch):
    import cluster.detect

    props = SimpleNamespace(name="NVIDIA GeForce RTX 4090", total_memory=25_393_692_672)
    monkeypatch.setattr(cluster.detect, "torch_gpu_properties", lambda: ([props], "read: fake", None))
    cpuinfo, _ = fake_host
    out = tmp_path / "x.yaml"
    r = _invoke(["detect", "--cpuinfo", str(cpuinfo), "--output", str(out)])
    assert r.exit_code == 2 and r.output.startswith("error: GPU 0 'NVIDIA GeForce RTX 4090' is not in the datasheet")
    assert r.output.count("\n") == 1 and not out.exists()
    r = _invoke(["detect", "--cpuinfo", str(cpuinfo), "--output", str(out), "--allow-unknown"])
    assert r.exit_code == 0, r.output
    assert "UNKNOWN" in out.read_text() and ClusterSpec.from_yaml(out).device_names == ["/cpu:0", "/gpu:0"]


def test_bad_cpuinfo_path_is_one_line(tmp_path):
    r = _invoke(["detect", "--cpuinfo", str(tmp_path / "missing"), "--no-gpu"])
    assert r.exit_code == 2 and "cannot read the CPU description" in r.output and r.output.count("\n") == 1


def test_host_cpu_model_reads_the_first_model_name(tmp_path, monkeypatch):
    """The label of a learner's ``placements_per_cpu_s``: ``model name`` of the first processor; without one
    (an ARM cpuinfo, no file), ``platform.processor()``, then ``platform.machine()``."""
    import platform

    from cluster.machine_readers import host_cpu_model

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: other\n")
    assert host_cpu_model(info) == "AMD EPYC 7B13"
    info.write_text("processor\t: 0\nBogoMIPS\t: 50.00\n\nHardware\t: BCM2835\n")
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert host_cpu_model(info) == "aarch64" == host_cpu_model(tmp_path / "none")
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    assert host_cpu_model(tmp_path / "none") == "arm"
