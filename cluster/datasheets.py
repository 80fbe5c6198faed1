"""The datasheet figures ``placement detect`` reads a machine against ([`cluster.detect`][cluster.detect]): the GPUs
it knows by torch's device name, NVLink per link, PCIe by generation. Every figure names its datasheet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster.machines import CHIPS, Chip
from cluster.servers import SERVER_CHIPS, ServerChip


def _server_chip(chip: Chip) -> ServerChip:
    return ServerChip(chip.kind, chip.model, chip.peak_flops, chip.memory_bandwidth, chip.memory_bytes,
                      chip.derivation, chip.sources)


NEW_CHIPS: dict[str, ServerChip] = {
    "p100-pcie-12gb": ServerChip(
        "gpu", "Tesla P100 PCIe 12 GB", 9.3e12, 549e9, 12e9,
        "P100 for PCIe, 12 GB: 9.3 TFLOP/s FP32, 549 GB/s HBM2; no tensor cores",
        ("NVIDIA Tesla P100 datasheet (P100 for PCIe: 9.3 TFLOPS FP32; 12 GB CoWoS HBM2 at 549 GB/s)",)),
    "p100-sxm2-16gb": ServerChip(
        "gpu", "Tesla P100 SXM2 16 GB", 10.6e12, 732e9, 16e9,
        "P100 for NVLink-optimized servers: 10.6 TFLOP/s FP32, 732 GB/s HBM2; no tensor cores",
        ("NVIDIA Tesla P100 datasheet (P100 for NVLink: 10.6 TFLOPS FP32, 16 GB at 732 GB/s, NVLink 160 GB/s)",)),
    "v100-sxm2": ServerChip(
        "gpu", "Tesla V100 SXM2", 15.7e12, 900e9, None,
        "FP32 15.7 TFLOP/s; tensor cores (FP16 inputs) 125 TFLOP/s dense; HBM2 900 GB/s; no TF32/BF16 units",
        ("NVIDIA Tesla V100 datasheet (V100 SXM2: FP32 15.7 TFLOPS, Tensor Performance 125 TFLOPS, 900 GB/s, "
         "16 or 32 GB, NVLink 300 GB/s)",),
        {"float16": 125e12}),
    "v100-pcie": ServerChip(
        "gpu", "Tesla V100 PCIe", 14e12, 900e9, None,
        "FP32 14 TFLOP/s; tensor cores (FP16 inputs) 112 TFLOP/s dense; HBM2 900 GB/s; no TF32/BF16 units",
        ("NVIDIA Tesla V100 datasheet (V100 PCIe: FP32 14 TFLOPS, Tensor Performance 112 TFLOPS, 900 GB/s, "
         "16 or 32 GB, PCIe 32 GB/s)",),
        {"float16": 112e12}),
    "v100s-pcie": ServerChip(
        "gpu", "Tesla V100S PCIe 32 GB", 16.4e12, 1134e9, 32e9,
        "FP32 16.4 TFLOP/s; tensor cores (FP16 inputs) 130 TFLOP/s dense; HBM2 1,134 GB/s",
        ("NVIDIA Tesla V100S datasheet (V100S PCIe: FP32 16.4 TFLOPS, Tensor Performance 130 TFLOPS, "
         "32 GB at 1,134 GB/s)",),
        {"float16": 130e12}),
    "a100-sxm4-40gb": ServerChip(
        "gpu", "A100-SXM4-40GB", 19.5e12, 1555e9, 40e9,
        "FP32 19.5 TFLOP/s; tensor cores dense: TF32 156, BF16 312, FP16 312 TFLOP/s; HBM2 1,555 GB/s; 40 GB",
        ("NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM: FP32 19.5 TFLOPS, TF32 156 | 312* TFLOPS, BF16 and "
         "FP16 312 | 624* TFLOPS, * with sparsity; 1,555 GB/s; NVLink 600 GB/s; PCIe Gen4 64 GB/s)",),
        {"tf32": 156e12, "bfloat16": 312e12, "float16": 312e12}),
    "a100-pcie-40gb": ServerChip(
        "gpu", "A100-PCIe-40GB", 19.5e12, 1555e9, 40e9,
        "FP32 19.5 TFLOP/s; tensor cores dense: TF32 156, BF16 312, FP16 312 TFLOP/s; HBM2 1,555 GB/s; 40 GB",
        ("NVIDIA A100 Tensor Core GPU datasheet (A100 40GB PCIe: FP32 19.5 TFLOPS, TF32 156 | 312* TFLOPS, BF16 and "
         "FP16 312 | 624* TFLOPS, * with sparsity; 1,555 GB/s; PCIe Gen4 64 GB/s)",),
        {"tf32": 156e12, "bfloat16": 312e12, "float16": 312e12}),
    "h100-pcie-80gb": ServerChip(
        "gpu", "H100 PCIe 80GB", 51e12, 2000e9, 80e9,
        "FP32 51 TFLOP/s; tensor cores dense: TF32 378, BF16 756.5, FP16 756.5 TFLOP/s (half the datasheet's "
        "756/1,513/1,513 with sparsity); HBM2e 2 TB/s; 80 GB",
        ("NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe: FP32 51 TFLOPS, TF32 756 TFLOPS*, BF16 and FP16 "
         "1,513 TFLOPS*, * with sparsity; 80 GB, 2 TB/s; PCIe Gen5 128 GB/s)",),
        {"tf32": 378e12, "bfloat16": 756.5e12, "float16": 756.5e12}),
}
"""GPUs that [`cluster.servers`][cluster.servers] and [`cluster.machines`][cluster.machines] do not have, with their datasheets."""
H200 = SERVER_CHIPS["h200-sxm-141gb"]
"""The H200 SXM's datasheet figures: [`cluster.servers`][cluster.servers]' (one copy)."""


NVLINK1 = 20e9
"""NVLink 1 (P100): 20 GB/s per link per direction (NVIDIA Tesla P100 whitepaper: 4 links, 160 GB/s both ways)."""
NVLINK = 25e9
"""NVLink 2, 3 and 4 (V100, A100, H100, H200): 25 GB/s per link per direction (V100: 6 links, 300 GB/s both ways;
A100: 12, 600 GB/s; H100/H200: 18, 900 GB/s; the datasheets; cluster/servers.py's NVLINK3_A100, NVLINK4_H100)."""


@dataclass(frozen=True)
class GpuDatasheet:
    """A GPU of the datasheet table.

    Attributes:
        pattern: regex matching the whole of torch's device name, upper-cased, ``-``/``_`` as spaces.
        chip: its datasheet figures (FP32 and dense tensor peaks in FLOP/s, bandwidth in bytes/s).
        pcie_gen: its host interface (PCIe generation, x16).
        nvlink: bandwidth per NVLink link per direction (bytes/s; 0: none).
    """

    pattern: str
    chip: ServerChip
    pcie_gen: int
    nvlink: float


GPU_DATASHEETS: dict[str, GpuDatasheet] = {
    "k80-gk210": GpuDatasheet(r"(TESLA )?K80", _server_chip(CHIPS["k80-gk210"]), 3, 0.0),
    "p100-pcie-16gb": GpuDatasheet(r"(TESLA )?P100 PCIE 16GB", _server_chip(CHIPS["p100-pcie-16gb"]), 3, 0.0),
    "p100-pcie-12gb": GpuDatasheet(r"(TESLA )?P100 PCIE 12GB", NEW_CHIPS["p100-pcie-12gb"], 3, 0.0),
    "p100-sxm2-16gb": GpuDatasheet(r"(TESLA )?P100 SXM2 16GB", NEW_CHIPS["p100-sxm2-16gb"], 3, NVLINK1),
    "v100-sxm2": GpuDatasheet(r"(TESLA )?V100 SXM2 (16|32)GB", NEW_CHIPS["v100-sxm2"], 3, NVLINK),
    "v100-pcie": GpuDatasheet(r"(TESLA )?V100 PCIE (16|32)GB", NEW_CHIPS["v100-pcie"], 3, 0.0),
    "v100s-pcie": GpuDatasheet(r"(TESLA )?V100S PCIE 32GB", NEW_CHIPS["v100s-pcie"], 3, 0.0),
    "a100-sxm4-40gb": GpuDatasheet(r"(NVIDIA )?A100 SXM4? 40GB", NEW_CHIPS["a100-sxm4-40gb"], 4, NVLINK),
    "a100-sxm4-80gb": GpuDatasheet(r"(NVIDIA )?A100 SXM4? 80GB", SERVER_CHIPS["a100-sxm4-80gb"], 4, NVLINK),
    "a100-pcie-40gb": GpuDatasheet(r"(NVIDIA )?A100 PCIE 40GB", NEW_CHIPS["a100-pcie-40gb"], 4, NVLINK),
    "a100-pcie-80gb": GpuDatasheet(r"(NVIDIA )?A100 (80GB PCIE|PCIE 80GB)", SERVER_CHIPS["a100-pcie-80gb"], 4, NVLINK),
    "h100-sxm5-80gb": GpuDatasheet(r"(NVIDIA )?H100 (80GB HBM3|SXM5? 80GB)", SERVER_CHIPS["h100-sxm5-80gb"], 5, NVLINK),
    "h100-pcie-80gb": GpuDatasheet(r"(NVIDIA )?H100 PCIE( 80GB)?", NEW_CHIPS["h100-pcie-80gb"], 5, NVLINK),
    "h200-sxm-141gb": GpuDatasheet(r"(NVIDIA )?H200( SXM)?( 141GB)?", H200, 5, NVLINK),
}
"""The GPUs ``placement detect`` knows, by torch's device name (``torch.cuda.get_device_properties(i).name``,
e.g. ``NVIDIA H100 80GB HBM3``, ``NVIDIA A100-SXM4-40GB``, ``Tesla V100-SXM2-16GB``). A name that matches
none (an H100 NVL, a MIG slice, a consumer card) is unknown. A100 and H100 PCIe boards take NVLink
bridges, hence their per-link figure (used only where ``nvidia-smi topo -m`` lists NVLinks)."""
KNOWN_GPUS = "K80, P100 PCIe/SXM2, V100 PCIe/SXM2, V100S, A100 40/80GB SXM/PCIe, H100 SXM/PCIe, H200 SXM"
"""The families of [`GPU_DATASHEETS`][cluster.datasheets.GPU_DATASHEETS], as error messages name them."""


def match_gpu(name: str) -> str | None:
    """The [`GPU_DATASHEETS`][cluster.datasheets.GPU_DATASHEETS] key of torch's device name ``name``, or ``None`` (unknown)."""
    norm = " ".join(re.sub(r"[-_]", " ", name.upper()).split())
    for key, sheet in GPU_DATASHEETS.items():
        if re.fullmatch(sheet.pattern, norm):
            return key
    return None


PCIE_GT_S = {1: 2.5e9, 2: 5e9, 3: 8e9, 4: 16e9, 5: 32e9, 6: 64e9}
"""Transfers per second per lane of each PCIe generation (PCI-SIG base specifications 1.0-6.0)."""
PCIE_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
"""Payload fraction of the line code: 8b/10b (1.x, 2.x), 128b/130b (3.0-5.0), 6.0's FLIT (242 of 256 bytes)."""


def pcie_bandwidth(gen: int, width: int) -> float:
    """Bandwidth per direction of a PCIe link (bytes/s): ``GT/s x lanes x encoding / 8`` (PCI-SIG), e.g.
    3.0 x16 15.75 GB/s, 4.0 x16 31.5 GB/s, 5.0 x16 63 GB/s ([`cluster.servers.PCIE5_X16`][cluster.servers.PCIE5_X16])."""
    return PCIE_GT_S[gen] * width * PCIE_ENCODING[gen] / 8


def _per_socket(chip: Chip | ServerChip, sockets: int) -> float:
    return chip.memory_bandwidth / sockets


CPU_MEMORY_BANDWIDTH: list[tuple[str, float, str]] = [
    (r"EPYC 7742", _per_socket(SERVER_CHIPS["epyc-7742x2"], 2), SERVER_CHIPS["epyc-7742x2"].sources[0]),
    (r"Platinum 8480", _per_socket(SERVER_CHIPS["xeon-8480cx2"], 2), SERVER_CHIPS["xeon-8480cx2"].sources[1]),
    (r"E5-2699 v3", _per_socket(CHIPS["xeon-e5-2699v3"], 1), CHIPS["xeon-e5-2699v3"].sources[0]),
    (r"E5-2650 v4", _per_socket(CHIPS["xeon-e5-2650v4x2"], 2), CHIPS["xeon-e5-2650v4x2"].sources[1]),
    (r"E5-2699 v4", _per_socket(CHIPS["gcp-broadwell-8"], 1), CHIPS["gcp-broadwell-8"].sources[2]),
]
"""(regex on the CPU model name, peak memory bandwidth per socket in bytes/s, source): the CPUs whose
datasheets [`cluster.servers`][cluster.servers] and [`cluster.machines`][cluster.machines] cite, with their figures."""

CPU_MEMORY_BANDWIDTH_BY_MODEL: dict[tuple[str, int, int], tuple[float, str]] = {
    ("GenuineIntel", 6, 143): (SERVER_CHIPS["xeon-spr-16vcpu"].memory_bandwidth,
                               "Intel family 6 model 143, 4th Gen Xeon Scalable (Sapphire Rapids): 8 channels DDR5-4800; "
                               + SERVER_CHIPS["xeon-spr-16vcpu"].sources[1]),
    ("GenuineIntel", 6, 207): (SERVER_CHIPS["xeon-emr-16vcpu"].memory_bandwidth,
                               "Intel family 6 model 207, 5th Gen Xeon Scalable (Emerald Rapids): 8 channels DDR5-5600; "
                               + SERVER_CHIPS["xeon-emr-16vcpu"].sources[1]),
}
"""((vendor, family, model), (peak memory bandwidth per socket in bytes/s, source)): CPUs a cloud VM names only
"Intel(R) Xeon(R) Processor", told apart by the family and model numbers it does show (the lent H100s' and H200s'
hosts)."""


FP32_LANES_PER_SM: dict[tuple[int, int | None], int] = {(3, None): 192, (5, None): 128, (6, 0): 64, (6, None): 128, (7, None): 64, (8, 0): 64,
                     (8, None): 128, (9, None): 128, (10, None): 128, (12, None): 128}
"""FP32 multiply-adds per clock per SM by compute capability ((major, minor); ``None``: any other minor), from the
CUDA C++ Programming Guide's arithmetic-instruction throughput table: used only to estimate an unknown GPU."""
