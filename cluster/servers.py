"""Today's GPU servers as presets: datasheet figures with their sources, dtype-dependent peaks and topology.

Three presets (``--cluster``):

* ``a100x8``: an NVIDIA DGX A100 (80 GB): 8 A100-SXM4-80GB on NVSwitch, 2 AMD EPYC 7742, 2 TB.
* ``h100x8``: an NVIDIA DGX H100: 8 H100 SXM5 (80 GB) on NVSwitch, 2 Intel Xeon Platinum 8480C, 2 TB.
* ``a100x4-pcie``: 4 A100-PCIe-80GB on PCIe 4.0 without NVLink, 2 AMD EPYC 7742 (the DGX A100's
  CPUs; the issue names no CPU), 1 TB.

**Peaks by precision.** Each GPU lists its FP32 peak (``peak_flops``: the CUDA cores) and its tensor
cores' dense peaks for TF32, BF16 and FP16 (``tensor_peak_flops``; the datasheets' figures "with
sparsity" are halved). The cost model gives a dense op or convolution the peak of its precision
([`cluster.cost_model`][cluster.cost_model]). Whether FP32 products run as TF32 is a software term: PyTorch's
defaults (``torch.backends.cuda.matmul.allow_tf32`` off since 1.12, ``torch.backends.cudnn.allow_tf32``
on), so ``tf32_matmul: false`` and ``tf32_conv: true``.

**Topology.** On NVSwitch every GPU pair has its own link at the GPU's NVLink bandwidth per direction
(A100: 12 NVLink 3 links x 25 GB/s = 300 GB/s; H100: 18 NVLink 4 links x 25 GB/s = 450 GB/s); the
switch is non-blocking, but one GPU sending to several peers at once shares its NVLink ports,
which per-pair links do not model (an optimistic bound on many-to-one traffic). Every CPU-GPU
pair is a PCIe link (4.0 x16: 31.5 GB/s per direction; 5.0 x16: 63 GB/s). ``a100x4-pcie`` has no
NVLink: GPU-to-GPU copies are peer-to-peer DMA through the host's PCIe root complex, one PCIe 4.0
x16 link per pair.

**Efficiencies and software terms.** No published table measures a placed training step on these
machines, so nothing here is fitted. The chip-independent GPU terms are CARRIED from ``h200x1``
([`REFERENCE_PRESET`][cluster.servers.REFERENCE_PRESET], [`GPU_CARRIED`][cluster.servers.GPU_CARRIED]): the achieved fractions of peak for dense ops,
convolutions, other ops and memory, the dense-op size at half efficiency, the device-side gap per
kernel and PyTorch's host dispatch per op, fitted to real PyTorch 2.11 steps on one H200
([`cluster.torch_calibrate`][cluster.torch_calibrate]; they replaced the K80 fit's, TensorFlow 2017 on Kepler, which made
one H200 1.3-2x too slow). The CPU keeps the K80 fit's terms ([`CPU_REFERENCE_PRESET`][cluster.servers.CPU_REFERENCE_PRESET]; h200x1's
CPU is a 16-vCPU slice). The per-transfer overhead takes the physical-model issue's reference value
([`cluster.fitting.FIT_PARAMS`][cluster.fitting.FIT_PARAMS]' ``ref``: 50 us per transfer, a ``cudaMemcpyAsync`` set-up and the
framework's bookkeeping) and the link bandwidth efficiency its reference 0.5, each inside its bound
and with its source; the CPU's per-op overhead 10 us; the CPU's software fraction is 1 (PyTorch's
oneDNN/MKL kernels use AVX2 or AVX-512 with FMA); the allocator overhead is 1 (PyTorch's caching
allocator is not modelled).

Single-GPU hosts ([`SINGLE_GPU_HOSTS`][cluster.servers.SINGLE_GPU_HOSTS]: ``h200x1``, ``h100x1``) are not written here:
[`cluster.torch_calibrate.write_single_gpu_presets`][cluster.torch_calibrate.write_single_gpu_presets] fits ``h200x1`` from the shared measurements
and derives ``h100x1``; [`single_gpu_datasheet_spec`][cluster.servers.single_gpu_datasheet_spec] gives their datasheet figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cluster.spec import ClusterSpec

PRESET_DIR = Path(__file__).parent / "presets"


@dataclass(frozen=True)
class ServerChip:
    """A chip of today's servers: datasheet figures.

    Attributes:
        kind: ``cpu`` or ``gpu``.
        model: the product name.
        peak_flops: FP32 peak (FLOP/s; a CPU's over all sockets).
        tensor_peak_flops: dense tensor-core peaks by precision (``tf32``, ``bfloat16``, ``float16``).
        memory_bandwidth: peak memory bandwidth (bytes/s).
        memory_bytes: a GPU's memory (bytes; ``None`` for a CPU: the server's RAM).
        derivation: how the figures follow from the sources.
        sources: the datasheets.
    """

    kind: str
    model: str
    peak_flops: float
    memory_bandwidth: float
    memory_bytes: float | None
    derivation: str
    sources: tuple[str, ...]
    tensor_peak_flops: dict[str, float] = field(default_factory=dict)


SERVER_CHIPS: dict[str, ServerChip] = {
    "epyc-7742x2": ServerChip(
        "cpu", "2x AMD EPYC 7742", 2 * 64 * 2.25e9 * 32, 2 * 204.8e9, None,
        "2 sockets x 64 cores x 2.25 GHz base x 32 FP32 FLOP/cycle (two 256-bit FMA units per Zen 2 core) "
        "= 9.216e12 FLOP/s; 8 channels DDR4-3200 per socket = 204.8 GB/s each",
        ("AMD EPYC 7742 product page (64 cores, 2.25 GHz base, 8 channels DDR4-3200, 204.8 GB/s per socket)",
         "NVIDIA DGX A100 datasheet (dual AMD Rome 7742, 128 cores total, 2 TB of system memory)")),
    "xeon-8480cx2": ServerChip(
        "cpu", "2x Intel Xeon Platinum 8480C", 2 * 56 * 2.0e9 * 64, 2 * 307.2e9, None,
        "2 sockets x 56 cores x 2.0 GHz base x 64 FP32 FLOP/cycle (two 512-bit FMA units per core) "
        "= 1.4336e13 FLOP/s; 8 channels DDR5-4800 per socket = 307.2 GB/s each",
        ("NVIDIA DGX H100 datasheet (dual Intel Xeon Platinum 8480C, 112 cores total, 2.00 GHz base, 2 TB)",
         "Intel ARK, Xeon Platinum 8480+ (56 cores, 8 channels DDR5-4800, AVX-512 with 2 FMA units)")),
    "a100-sxm4-80gb": ServerChip(
        "gpu", "A100-SXM4-80GB", 19.5e12, 2039e9, 80e9,
        "FP32 19.5 TFLOP/s; tensor cores dense: TF32 156, BF16 312, FP16 312 TFLOP/s (the datasheet's 312/624/624 "
        "are with sparsity); HBM2e 2,039 GB/s; 80 GB",
        ("NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: FP32 19.5 TFLOPS, TF32 156 | 312* TFLOPS, "
         "BF16 and FP16 312 | 624* TFLOPS, * with sparsity; 2,039 GB/s; NVLink 600 GB/s; PCIe Gen4 64 GB/s)",),
        {"tf32": 156e12, "bfloat16": 312e12, "float16": 312e12}),
    "a100-pcie-80gb": ServerChip(
        "gpu", "A100-PCIe-80GB", 19.5e12, 1935e9, 80e9,
        "FP32 19.5 TFLOP/s; tensor cores dense: TF32 156, BF16 312, FP16 312 TFLOP/s; HBM2e 1,935 GB/s; 80 GB",
        ("NVIDIA A100 Tensor Core GPU datasheet (A100 80GB PCIe: FP32 19.5 TFLOPS, TF32 156 | 312* TFLOPS, "
         "BF16 and FP16 312 | 624* TFLOPS, * with sparsity; 1,935 GB/s; PCIe Gen4 64 GB/s)",),
        {"tf32": 156e12, "bfloat16": 312e12, "float16": 312e12}),
    "h100-sxm5-80gb": ServerChip(
        "gpu", "H100 SXM5 80GB", 67e12, 3350e9, 80e9,
        "FP32 67 TFLOP/s; tensor cores dense: TF32 494.5, BF16 989.5, FP16 989.5 TFLOP/s (half the datasheet's "
        "989/1,979/1,979 with sparsity); HBM3 3.35 TB/s; 80 GB",
        ("NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: FP32 67 TFLOPS, TF32 989 TFLOPS*, BF16 and FP16 "
         "1,979 TFLOPS*, * with sparsity; 80 GB, 3.35 TB/s; NVLink 900 GB/s; PCIe Gen5 128 GB/s)",),
        {"tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12}),
    "h200-sxm-141gb": ServerChip(
        "gpu", "H200 SXM 141GB", 67e12, 4800e9, 141e9,
        "FP32 67 TFLOP/s; tensor cores dense: TF32 494.5, BF16 989.5, FP16 989.5 TFLOP/s (half the datasheet's "
        "989/1,979/1,979 with sparsity); HBM3e 4.8 TB/s; 141 GB",
        ("NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: FP32 67 TFLOPS, TF32 989 TFLOPS*, BF16 and FP16 1,979 "
         "TFLOPS*, * with sparsity; 141 GB HBM3e, 4.8 TB/s; NVLink 900 GB/s; PCIe Gen5 128 GB/s)",),
        {"tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12}),
    "xeon-emr-16vcpu": ServerChip(
        "cpu", "Intel Xeon 5th gen (Emerald Rapids, model 207), 16 vCPUs", 16 * 2.0e9 * 64, 8 * 5600e6 * 8, None,
        "16 cores (1 thread each) x 2.0 GHz x 64 FP32 FLOP/cycle (two 512-bit FMA units per core) = 2.048e12 FLOP/s; "
        "the clock is an ASSUMPTION (lscpu reports none in the VM; 2.0 GHz is the base clock of the 5th-gen Xeon "
        "Platinum 8580); 8 channels DDR5-5600 = 358.4 GB/s (the socket's, shared with other tenants)",
        ("env.json of shared/measurements/h200-2026-11-26 (lscpu: model 207, 16 CPUs, AVX-512, AMX; 128 GiB)",
         "Intel ARK, 5th Gen Intel Xeon Platinum 8580 (2.0 GHz base, 8 channels DDR5-5600, AVX-512 with 2 FMA units)")),
    "xeon-spr-16vcpu": ServerChip(
        "cpu", "Intel Xeon 4th gen (Sapphire Rapids, model 143), 16 vCPUs", 16 * 2.0e9 * 64, 8 * 4800e6 * 8, None,
        "16 cores (1 thread each) x 2.0 GHz x 64 FP32 FLOP/cycle (two 512-bit FMA units per core) = 2.048e12 FLOP/s; "
        "the clock as /proc/cpuinfo reads it in the VM (2.0 GHz); 8 channels DDR5-4800 = 307.2 GB/s (the socket's, "
        "shared with other tenants); 105 MiB L3 (lscpu)",
        ("benchmarks/results/h100-2026-11-26/lscpu.txt (lent H100 host, 2026-11-26: family 6 model 143, 16 CPUs, "
         "1 thread a core, AVX-512, AMX; L3 105 MiB)",
         "Intel ARK, 4th Gen Intel Xeon Scalable (Sapphire Rapids: 8 channels DDR5-4800, AVX-512 with 2 FMA units)")),
}

PCIE4_X16 = 16e9 * 16 * 128 / 130 / 8
"""PCI Express 4.0 x16: 16 GT/s x 16 lanes x 128/130 encoding = 31.5 GB/s per direction (PCI-SIG)."""
PCIE5_X16 = 2 * PCIE4_X16
"""PCI Express 5.0 x16: 32 GT/s, 63.0 GB/s per direction (PCI-SIG)."""
NVLINK3_A100 = 12 * 25e9
"""A100 NVLink 3: 12 links x 25 GB/s per direction = 300 GB/s (600 GB/s both ways, the datasheet's figure)."""
NVLINK4_H100 = 18 * 25e9
"""H100 NVLink 4: 18 links x 25 GB/s per direction = 450 GB/s (900 GB/s both ways, the datasheet's figure)."""


@dataclass(frozen=True)
class Server:
    """One server preset.

    Attributes:
        name: the preset name (``--cluster``).
        cpu, gpu: keys of [`SERVER_CHIPS`][cluster.servers.SERVER_CHIPS].
        gpus: number of GPUs.
        ram_bytes: host memory (bytes).
        gpu_link: bandwidth per direction between two GPUs (bytes/s) and what it is.
        host_link: bandwidth per direction between the CPUs and a GPU (bytes/s) and what it is.
        description, sources: what it is and where that is written.
    """

    name: str
    cpu: str
    gpu: str
    gpus: int
    ram_bytes: float
    gpu_link: tuple[float, str]
    host_link: tuple[float, str]
    description: str
    sources: tuple[str, ...]


SERVERS: dict[str, Server] = {
    "a100x8": Server(
        "a100x8", "epyc-7742x2", "a100-sxm4-80gb", 8, 2e12,
        (NVLINK3_A100, "NVSwitch: every GPU pair at the A100's NVLink 3 bandwidth, 300 GB/s per direction"),
        (PCIE4_X16, "PCIe 4.0 x16, 31.5 GB/s per direction"),
        "NVIDIA DGX A100 (80 GB): 8x A100-SXM4-80GB on NVSwitch, 2x AMD EPYC 7742, 2 TB",
        ("NVIDIA DGX A100 datasheet (8x A100 80GB, 6 NVSwitches, 4.8 TB/s bi-directional, dual AMD Rome 7742, "
         "2 TB)",)),
    "h100x8": Server(
        "h100x8", "xeon-8480cx2", "h100-sxm5-80gb", 8, 2e12,
        (NVLINK4_H100, "NVSwitch: every GPU pair at the H100's NVLink 4 bandwidth, 450 GB/s per direction"),
        (PCIE5_X16, "PCIe 5.0 x16, 63 GB/s per direction"),
        "NVIDIA DGX H100: 8x H100 SXM5 80GB on NVSwitch, 2x Intel Xeon Platinum 8480C, 2 TB",
        ("NVIDIA DGX H100 datasheet (8x H100 80GB, 4 NVSwitches, 7.2 TB/s bi-directional GPU-to-GPU, dual "
         "Xeon Platinum 8480C, 2 TB)",)),
    "a100x4-pcie": Server(
        "a100x4-pcie", "epyc-7742x2", "a100-pcie-80gb", 4, 1e12,
        (PCIE4_X16, "no NVLink: peer-to-peer DMA through the host's PCIe 4.0 root complex, 31.5 GB/s per direction"),
        (PCIE4_X16, "PCIe 4.0 x16, 31.5 GB/s per direction"),
        "4x A100-PCIe-80GB on PCIe 4.0 without NVLink, 2x AMD EPYC 7742, 1 TB",
        ("a generic PCIe server; its CPUs and RAM are an assumption (the DGX A100's CPUs)",)),
}

#: Software terms of PyTorch on these servers (not fitted), each the physical-model issue's
#: reference value with its source ([`cluster.fitting.FIT_PARAMS`][cluster.fitting.FIT_PARAMS]).
PYTORCH_TERMS = {
    "op_overhead_s": (1e-5, "gpu.op_overhead_s's reference: a CUDA kernel launch (5-10 us) plus the framework's "
                            "dispatch; inside [1 us, 100 us]"),
    "send_recv_overhead_s": (5e-5, "transfer.send_recv_overhead_s's reference: a cudaMemcpyAsync set-up and the "
                                   "framework's bookkeeping, tens of microseconds; inside [5 us, 1 ms]"),
    "bandwidth_efficiency": (0.5, "transfer.bandwidth_efficiency's reference (the middle of its range); inside "
                                  "[0.19, 0.85]"),
    "software_flops_fraction": (1.0, "PyTorch's CPU kernels (oneDNN, MKL) issue AVX2/AVX-512 FMAs: the whole peak"),
    "tf32_matmul": (False, "torch.backends.cuda.matmul.allow_tf32: off by default since PyTorch 1.12"),
    "tf32_conv": (True, "torch.backends.cudnn.allow_tf32: on by default"),
}
CHIP_TERMS = ("dense_efficiency", "conv_efficiency", "other_efficiency", "memory_efficiency", "half_efficiency_flops")
"""The chip-independent CPU terms every server takes from [`CPU_REFERENCE_PRESET`][cluster.servers.CPU_REFERENCE_PRESET] (the K80 fit's)."""

SINGLE_GPU_HOSTS: dict[str, Server] = {
    "h200x1": Server(
        "h200x1", "xeon-emr-16vcpu", "h200-sxm-141gb", 1, 131981020 * 1024,
        (PCIE5_X16, "no other GPU"), (PCIE5_X16, "PCIe 5.0 x16, 63 GB/s per direction"),
        "one NVIDIA H200 SXM 141GB with a 16-vCPU Intel Xeon (Emerald Rapids) host, 128 GiB",
        ("shared/measurements/h200-2026-11-26 env.json (NVIDIA H200, driver 580.159.04; MemTotal 131981020 kB)",)),
    "h100x1": Server(
        "h100x1", "xeon-spr-16vcpu", "h100-sxm5-80gb", 1, 131981020 * 1024,
        (PCIE5_X16, "no other GPU"), (PCIE5_X16, "PCIe 5.0 x16, 63 GB/s per direction"),
        "one NVIDIA H100 SXM5 80GB with a 16-vCPU Intel Xeon (Sapphire Rapids) host, 128 GiB (derived; judged, "
        "not fitted, on a lent H100)",
        ("benchmarks/results/h100-2026-11-26 (detect.yaml, lscpu.txt: the lent H100's host; MemTotal as h200x1's, "
         "135.1 GB read)",)),
}
"""One-GPU hosts: datasheet figures only (their terms come from [`cluster.torch_calibrate`][cluster.torch_calibrate])."""


def single_gpu_datasheet_spec(name: str) -> ClusterSpec:
    """The datasheet figures of a [`SINGLE_GPU_HOSTS`][cluster.servers.SINGLE_GPU_HOSTS] host (``/cpu:0``, ``/gpu:0``; PCIe 5.0 x16 link, 2 us
    latency, an estimate), with PyTorch's named software terms ([`PYTORCH_TERMS`][cluster.servers.PYTORCH_TERMS]) and every efficiency 1:
    the base spec [`cluster.torch_calibrate.fit_from_profile`][cluster.torch_calibrate.fit_from_profile] fits."""
    server = SINGLE_GPU_HOSTS[name]
    cpu, gpu = SERVER_CHIPS[server.cpu], SERVER_CHIPS[server.gpu]
    terms = {k: v for k, (v, _) in PYTORCH_TERMS.items()}
    return ClusterSpec(
        name=name, description=server.description,
        devices=[dict(name="/cpu:0", kind="cpu", model=cpu.model, peak_flops=cpu.peak_flops,
                      memory_bandwidth=cpu.memory_bandwidth, memory_bytes=server.ram_bytes,
                      software_flops_fraction=terms["software_flops_fraction"]),
                 dict(name="/gpu:0", kind="gpu", model=gpu.model, peak_flops=gpu.peak_flops,
                      tensor_peak_flops=dict(gpu.tensor_peak_flops), tf32_matmul=terms["tf32_matmul"],
                      tf32_conv=terms["tf32_conv"], memory_bandwidth=gpu.memory_bandwidth,
                      memory_bytes=gpu.memory_bytes)],
        default_link={"bandwidth": server.host_link[0], "latency_s": 2e-6}, compute_memory_overlap=False,
        sources=[*server.sources, *cpu.sources, *gpu.sources, "PCI-SIG, PCI Express 5.0 x16 per direction"])


def build_server_spec(server: Server, reference: ClusterSpec | None = None,
                      cpu_reference: ClusterSpec | None = None) -> ClusterSpec:
    """The [`cluster.spec.ClusterSpec`][cluster.spec.ClusterSpec] of ``server``: datasheet figures, the chip-independent GPU
    terms of ``reference`` ([`GPU_CARRIED`][cluster.servers.GPU_CARRIED]; default the shipped ``h200x1`` preset), the CPU terms of
    ``cpu_reference`` ([`CHIP_TERMS`][cluster.servers.CHIP_TERMS]; default the shipped ``k80x2``) and [`PYTORCH_TERMS`][cluster.servers.PYTORCH_TERMS]."""
    ref = reference or load_reference()
    cpu_ref = cpu_reference or load_cpu_reference()
    ref_gpu = next(d for d in ref.devices if d.kind == "gpu")
    ref_cpu = next(d for d in cpu_ref.devices if d.kind == "cpu")
    cpu, gpu = SERVER_CHIPS[server.cpu], SERVER_CHIPS[server.gpu]
    terms = {k: v for k, (v, _) in PYTORCH_TERMS.items()}
    gpu_terms = {k: getattr(ref_gpu, k) for k in GPU_CARRIED}

    devices = [dict(name="/cpu:0", kind="cpu", model=cpu.model, peak_flops=cpu.peak_flops,
                    memory_bandwidth=cpu.memory_bandwidth, memory_bytes=server.ram_bytes,
                    op_overhead_s=terms["op_overhead_s"], software_flops_fraction=terms["software_flops_fraction"],
                    **{k: getattr(ref_cpu, k) for k in CHIP_TERMS})]
    devices += [dict(name=f"/gpu:{i}", kind="gpu", model=gpu.model, peak_flops=gpu.peak_flops,
                     tensor_peak_flops=dict(gpu.tensor_peak_flops), tf32_matmul=terms["tf32_matmul"],
                     tf32_conv=terms["tf32_conv"], memory_bandwidth=gpu.memory_bandwidth,
                     memory_bytes=gpu.memory_bytes, **gpu_terms)
                for i in range(server.gpus)]
    links = [{"between": (f"/gpu:{i}", f"/gpu:{j}"), "bandwidth": server.gpu_link[0], "latency_s": 2e-6}
             for i in range(server.gpus) for j in range(i + 1, server.gpus)]
    return ClusterSpec(
        name=server.name, description=server.description, devices=devices, links=links,
        default_link={"bandwidth": server.host_link[0], "latency_s": 2e-6},
        transfer={"send_recv_overhead_s": terms["send_recv_overhead_s"],
                  "bandwidth_efficiency": terms["bandwidth_efficiency"], "gpu_peer_access": True},
        compute_memory_overlap=cpu_ref.compute_memory_overlap,
        sources=[*server.sources, *cpu.sources, *gpu.sources, "PCI-SIG, PCI Express 4.0 and 5.0 x16 per direction",
                 "cluster/servers.py: h200x1's chip-independent GPU terms (carried), the K80 fit's CPU terms and "
                 "PyTorch's software terms"])


def server_yaml(server: Server) -> str:
    """The YAML text of ``server``'s preset, every figure with its source in a comment."""
    import yaml

    reference = load_reference()
    spec = build_server_spec(server, reference)
    cpu, gpu = SERVER_CHIPS[server.cpu], SERVER_CHIPS[server.gpu]
    lines = [f"# {server.description}.", "#", "# DATASHEET figures (cluster/servers.py):",
             f"# - CPU {cpu.model}: {cpu.derivation}.", f"# - GPU {gpu.model}: {gpu.derivation}.",
             f"# - RAM: {server.ram_bytes / 1e12:g} TB.",
             f"# - GPU-GPU links: {server.gpu_link[1]}; latency_s 2 us (estimate).",
             f"# - CPU-GPU links (default_link): {server.host_link[1]}; latency_s 2 us (estimate).",
             "#", "# CHIP-INDEPENDENT terms:"]
    ref_gpu = next(d for d in reference.devices if d.kind == "gpu")
    ref_cpu = next(d for d in load_cpu_reference().devices if d.kind == "cpu")
    lines.append("# - gpu: CARRIED from h200x1 (fitted on one H200 from real PyTorch 2.11 steps, "
                 "cluster/torch_calibrate.py; bounds there): "
                 + ", ".join(f"{k} {getattr(ref_gpu, k):.6g}" for k in GPU_CARRIED) + ".")
    lines.append("# - cpu: the K80 fit's (the shipped k80x2 preset; cluster/fitting.py bounds): "
                 + ", ".join(f"{k} {getattr(ref_cpu, k):.6g}" for k in CHIP_TERMS) + ".")
    lines += ["#", "# SOFTWARE terms of PyTorch (named, not fitted):"]
    lines += [f"# - {k} = {v}: {why}." for k, (v, why) in PYTORCH_TERMS.items()
              if not (k == "op_overhead_s" and "op_overhead_s" in GPU_CARRIED)]
    lines += ["# - op_overhead_s = 1e-05 on the CPU (the GPU's is carried from h200x1)."]
    lines += ["# - allocator_overhead = 1 (PyTorch's caching allocator is not modelled)."]
    data = spec.model_dump(mode="json", exclude_defaults=False)
    for dev in data["devices"]:
        for k in ("tf_device", "compute_pool"):
            dev.pop(k, None)
    return "\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False, width=120)


REFERENCE_PRESET = "h200x1"
"""The preset whose chip-independent GPU terms the servers carry: ``h200x1``, calibrated on one H200 from real
PyTorch steps ([`cluster.torch_calibrate`][cluster.torch_calibrate]). It replaced the K80 fit's GPU terms (TensorFlow 2017 on Kepler)."""
CPU_REFERENCE_PRESET = "k80x2"
"""The preset whose chip-independent CPU terms the servers keep: the K80 fit's (a dual-socket host; ``h200x1``'s
CPU is a 16-vCPU slice, not a server's CPUs)."""
GPU_CARRIED = (*("dense_efficiency", "conv_efficiency", "other_efficiency", "memory_efficiency", "half_efficiency_flops"),
               "op_overhead_s", "dispatch_s")
"""The GPU terms carried from [`REFERENCE_PRESET`][cluster.servers.REFERENCE_PRESET]: the achieved fractions of peak, the size term, the
device-side gap per kernel and PyTorch's host dispatch per op."""


def load_reference() -> ClusterSpec:
    """The preset whose chip-independent GPU terms the servers carry ([`REFERENCE_PRESET`][cluster.servers.REFERENCE_PRESET])."""
    from cluster.spec import load_cluster

    return load_cluster(REFERENCE_PRESET)


def load_cpu_reference() -> ClusterSpec:
    """The preset whose CPU terms the servers keep ([`CPU_REFERENCE_PRESET`][cluster.servers.CPU_REFERENCE_PRESET])."""
    from cluster.spec import load_cluster

    return load_cluster(CPU_REFERENCE_PRESET)


def write_server_presets(names=None) -> list[Path]:
    """Write the preset YAML of every server (or of ``names``) into ``cluster/presets/``; returns the paths."""
    out = []
    for name in names or SERVERS:
        path = PRESET_DIR / f"{name}.yaml"
        path.write_text(server_yaml(SERVERS[name]))
        ClusterSpec.from_yaml(path)  # validates
        out.append(path)
    return out


if __name__ == "__main__":  # python -m cluster.servers: rewrite the three presets
    for p in write_server_presets():
        print(p)
