"""The papers' machines: datasheet figures of each chip with their sources, and the presets built
from them with the fitted parameters ([`cluster.fitting`][cluster.fitting]).

Three machines, one preset each per GPU count:

* 2017 (Mirhoseini et al., Sec. 4.1): ``k80x2``, ``k80x4`` -- an 18-core Haswell (Xeon E5-2699 v3)
  and 2 or 4 Tesla K80 GPUs, 50 GB of RAM allowed, TensorFlow of 2017.
* Post (Gao et al. 2018, Sec. 4 "Setup"): ``gcp-k80x2``, ``gcp-k80x4``, ``gcp-k80x8`` -- Google
  Cloud machines with an 8-core Broadwell, 26 GB of RAM and 2, 4 or 8 K80s.
* EAGLE (Lan et al. 2021, Sec. IV-C "Environment"): ``p100x4`` -- 2x Xeon E5-2650 v4, 125 GB of RAM
  and 4 P100s, TensorFlow 1.12.

One chip has one set of chip parameters in every preset that uses it: the fitted efficiencies
and overheads are per device *kind* (CPU, GPU) and shared by every machine; the K80 of 2017 and
the K80 of Post are the same GK210. Only the named software terms
([`cluster.fitting.SOFTWARE_TERMS`][cluster.fitting.SOFTWARE_TERMS]) differ per table. ``p100x4`` takes the P100's datasheet
and the chip-independent terms of the K80 fit; it is compared with EAGLE's Table IV, never
fitted on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cluster.fitting import FIT_PARAMS, SOFTWARE_TERMS, rounded, spec_values
from cluster.spec import ClusterSpec

PRESET_DIR = Path(__file__).parent / "presets"


@dataclass(frozen=True)
class Chip:
    """One chip's datasheet figures.

    Attributes:
        kind: ``cpu`` or ``gpu``.
        model: the product name.
        peak_flops: peak FP32 FLOP/s of the chip (all sockets or one GPU).
        memory_bandwidth: peak memory bandwidth (bytes/s).
        memory_bytes: memory a GPU shows the framework (bytes; ``None`` for a CPU: the machine's RAM).
        derivation: how the figures follow from the datasheet.
        sources: the datasheets.
    """

    kind: str
    model: str
    peak_flops: float
    memory_bandwidth: float
    memory_bytes: float | None
    derivation: str
    sources: tuple[str, ...]


MIB = 2**20

CHIPS: dict[str, Chip] = {
    "xeon-e5-2699v3": Chip(
        "cpu", "Intel Xeon E5-2699 v3", 18 * 2.3e9 * 32, 68.0e9, None,
        "18 cores x 2.3 GHz x 32 FP32 FLOP/cycle (two 256-bit FMA units) = 1.3248e12 FLOP/s; "
        "4 channels DDR4-2133 = 68 GB/s",
        ("Intel ARK, Xeon E5-2699 v3 (18 cores, 2.3 GHz, AVX2, 68 GB/s max memory bandwidth)",)),
    "gcp-broadwell-8": Chip(
        "cpu", "Google Cloud 8-core Intel Broadwell (Xeon E5 v4, 2.2 GHz)", 8 * 2.2e9 * 32, 76.8e9, None,
        "8 cores x 2.2 GHz x 32 FP32 FLOP/cycle = 5.632e11 FLOP/s; the socket's 4 channels DDR4-2400 "
        "= 76.8 GB/s (a VM's share may be less)",
        ("Post (Gao et al. 2018) Sec. 4 Setup: an Intel Broadwell 8-core CPU, 26 GB",
         "Google Cloud documentation, CPU platforms: Broadwell E5 v4 at 2.2 GHz base",
         "Intel ARK, Xeon E5-2699 v4 (4 channels DDR4-2400, 76.8 GB/s)")),
    "xeon-e5-2650v4x2": Chip(
        "cpu", "2x Intel Xeon E5-2650 v4", 2 * 12 * 2.2e9 * 32, 2 * 76.8e9, None,
        "2 sockets x 12 cores x 2.2 GHz x 32 FP32 FLOP/cycle = 1.6896e12 FLOP/s; 2 x 76.8 GB/s "
        "(4 channels DDR4-2400 each)",
        ("EAGLE (Lan et al. 2021) Sec. IV-C: 2 Intel E5-2650 v4 Broadwell @ 2.2GHz, 125GB",
         "Intel ARK, Xeon E5-2650 v4 (12 cores, 2.2 GHz, 76.8 GB/s max memory bandwidth)")),
    "k80-gk210": Chip(
        "gpu", "Tesla K80 (one GK210)", 8.73e12 / 2, 480.0e9 / 2, 11441 * MIB,
        "K80 board: 8.73 TFLOP/s FP32 with GPU Boost and 480 GB/s for its two GK210, i.e. 4.365e12 "
        "FLOP/s and 240 GB/s per GPU; 11441 MiB per GK210 with ECC on (what nvidia-smi reports and "
        "TensorFlow 1.x logs as totalMemory 11.17GiB), not the datasheet's 12 GiB",
        ("NVIDIA Tesla K80 datasheet (8.73 TFLOPS FP32 boost, 480 GB/s, 24 GB, PCIe Gen3 x16)",
         "Post (Gao et al. 2018) Sec. 4 Setup: K80 GPUs, each with 11 GB of memory")),
    "p100-pcie-16gb": Chip(
        "gpu", "Tesla P100 PCIe 16 GB", 9.3e12, 732.0e9, 16280 * MIB,
        "P100 for PCIe, 16 GB: 9.3 TFLOP/s FP32, 732 GB/s HBM2; 16280 MiB visible with ECC on (HBM2's "
        "ECC takes no capacity; nvidia-smi reports 16280 MiB)",
        ("NVIDIA Tesla P100 PCIe datasheet (9.3 TFLOPS FP32, 732 GB/s, 16 GB CoWoS HBM2, PCIe Gen3 x16)",
         "EAGLE (Lan et al. 2021) Sec. IV-C: 4 NVIDIA P100 Pascal GPUs")),
}

PCIE3_X16 = 15.75e9
"""PCI Express 3.0 x16: 8 GT/s x 16 lanes x 128/130 encoding = 15.75 GB/s per direction (PCI-SIG)."""


@dataclass(frozen=True)
class Machine:
    """One preset: which chips, how many GPUs, the RAM, the table it reproduces and its TensorFlow.

    Attributes:
        name: the preset name (``--cluster``).
        table: the table whose software terms it takes ([`cluster.tables.TABLES`][cluster.tables.TABLES]).
        cpu, gpu: keys of [`CHIPS`][cluster.machines.CHIPS].
        gpus: number of GPUs.
        ram_bytes: host memory the paper gives (bytes).
        gpu_peer_access: GPUs copy to each other directly (see [`cluster.spec.TransferSpec`][cluster.spec.TransferSpec]).
        peer_access_source: why.
        description, sources: the paper's words and where they are.
    """

    name: str
    table: str
    cpu: str
    gpu: str
    gpus: int
    ram_bytes: float
    gpu_peer_access: bool
    peer_access_source: str
    description: str
    sources: tuple[str, ...]


_K80_PEER = ("false: TensorFlow of 2017-2018 copied between K80s through host memory (device -> host -> "
             "device, GPUUtil's fallback when peer access is not enabled between the GPUs)")

MACHINES: dict[str, Machine] = {
    **{f"k80x{g}": Machine(
        f"k80x{g}", "2017-table2", "xeon-e5-2699v3", "k80-gk210", g, 50e9, False, _K80_PEER,
        f"1x 18-core Haswell CPU + {g}x Tesla K80 (GK210) over PCIe 3.0 x16 (2017 Sec. 4.1), fitted to 2017 Table 2",
        ("Mirhoseini et al. 2017, Sec. 4.1 (Intel Haswell 2300 CPU with 18 cores, 2 or 4 K80 GPUs, "
         "50 GB of RAM allowed) and Table 2 (the fitted step times)",)) for g in (2, 4)},
    **{f"gcp-k80x{g}": Machine(
        f"gcp-k80x{g}", "post-table1", "gcp-broadwell-8", "k80-gk210", g, 26e9, False, _K80_PEER,
        f"Google Cloud: 8-core Broadwell + {g}x Tesla K80 (GK210), 26 GB (Post Sec. 4 Setup); "
        "the K80 fit's chip terms, TensorFlow of 2018",
        ("Gao et al. 2018 (Post), Sec. 4 Setup: 26 GB of main memory, an Intel Broadwell 8-core CPU and "
         "2, 4 or 8 NVIDIA Tesla K80 GPUs, each with 11 GB of memory",)) for g in (2, 4, 8)},
    "p100x4": Machine(
        "p100x4", "eagle-table4", "xeon-e5-2650v4x2", "p100-pcie-16gb", 4, 125e9, True,
        "true: TensorFlow 1.12 enables peer access between GPUs that support it (cudaDeviceCanAccessPeer; "
        "P100s under one PCIe switch do)",
        "2x Xeon E5-2650 v4 + 4x Tesla P100 PCIe 16 GB, 125 GB (EAGLE Sec. IV-C); P100 datasheet with the "
        "K80 fit's chip-independent terms, TensorFlow 1.12; never fitted",
        ("Lan et al. 2021 (EAGLE), Sec. IV-C Environment: 4 NVIDIA P100 Pascal GPUs, 2 Intel E5-2650 v4 "
         "Broadwell @ 2.2GHz CPUs and 125GB memory, TensorFlow r1.12",)),
}


def software_terms(table: str) -> dict[str, float]:
    """The named software terms of ``table``'s TensorFlow ([`cluster.fitting.SOFTWARE_TERMS`][cluster.fitting.SOFTWARE_TERMS])."""
    return {k: v[table][0] for k, v in SOFTWARE_TERMS.items()}


def build_spec(machine: Machine, values: dict[str, float], allocator_overhead: float, fit_record: dict | None = None) -> ClusterSpec:
    """The [`cluster.spec.ClusterSpec`][cluster.spec.ClusterSpec] of ``machine`` with the fitted ``values`` (keys of
    [`cluster.fitting.FIT_PARAMS`][cluster.fitting.FIT_PARAMS]), the GPUs' ``allocator_overhead`` and the table's software terms."""
    soft = software_terms(machine.table)
    cpu, gpu = CHIPS[machine.cpu], CHIPS[machine.gpu]
    values = rounded(values)
    allocator_overhead = float(f"{allocator_overhead:.6g}")

    def fields(kind):
        out = {p.name: float(values[p.key]) for p in FIT_PARAMS if p.kind == kind}
        out.update({k.split(".", 1)[1]: v for k, v in soft.items() if k.startswith(kind + ".")})
        return out

    devices = [dict(name="/cpu:0", kind="cpu", model=cpu.model, peak_flops=cpu.peak_flops,
                    memory_bandwidth=cpu.memory_bandwidth, memory_bytes=machine.ram_bytes, **fields("cpu"))]
    devices += [dict(name=f"/gpu:{i}", kind="gpu", model=gpu.model, peak_flops=gpu.peak_flops,
                     memory_bandwidth=gpu.memory_bandwidth, memory_bytes=gpu.memory_bytes,
                     allocator_overhead=float(allocator_overhead), **fields("gpu")) for i in range(machine.gpus)]
    transfer = {p.name: float(values[p.key]) for p in FIT_PARAMS if p.kind == "transfer"}
    return ClusterSpec(
        name=machine.name, description=machine.description, devices=devices,
        default_link={"bandwidth": PCIE3_X16, "latency_s": 10e-6}, links=[],
        transfer={**transfer, "gpu_peer_access": machine.gpu_peer_access}, compute_memory_overlap=False,
        fit=fit_record, sources=[*machine.sources, *cpu.sources, *gpu.sources,
                                 "PCI-SIG, PCI Express 3.0 x16 (15.75 GB/s per direction)",
                                 "TensorFlow grappler OpLevelCostEstimator (compute + memory per op)"])


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def preset_yaml(machine: Machine, values: dict[str, float], allocator_overhead: dict, fit_record: dict) -> str:
    """The YAML text of ``machine``'s preset: every figure with its source, every fitted parameter
    with its bound (the spec itself is [`build_spec`][cluster.machines.build_spec]'s)."""
    import yaml

    spec = build_spec(machine, values, allocator_overhead["value"], fit_record)
    values = spec_values(spec)  # what the preset stores (rounded inside the bounds by build_spec)
    cpu, gpu = CHIPS[machine.cpu], CHIPS[machine.gpu]
    lines = [f"# {machine.description}.", "#", "# DATASHEET figures:",
             f"# - CPU {cpu.model}: {cpu.derivation}.", f"# - GPU {gpu.model}: {gpu.derivation}.",
             f"# - RAM: {machine.ram_bytes / 1e9:g} GB (the paper).",
             "# - Links: PCI Express 3.0 x16, 15.75 GB/s per direction (PCI-SIG); latency_s 10 us (estimate).",
             f"# - transfer.gpu_peer_access: {machine.peer_access_source}.",
             "# - compute_memory_overlap: false, grappler OpLevelCostEstimator's default (compute + memory).",
             "#", "# SOFTWARE terms (named, not fitted; cluster/fitting.py SOFTWARE_TERMS):"]
    for key, per_table in SOFTWARE_TERMS.items():
        v, why = per_table[machine.table]
        lines.append(f"# - {key} = {_fmt(v)}: {why}.")
    lines += ["#", "# FITTED figures (cluster/fitting.py, scripts/fit_presets.py; two stages on 2017 Table 2: the chips on",
              "# the single-device cells, the transfers on the split cells), each inside its physical bound:"]
    for p in FIT_PARAMS:
        lines.append(f"# - {p.key} = {_fmt(values[p.key])} in [{_fmt(p.lo)}, {_fmt(p.hi)}]"
                     + (f" (on its {fit_record['on_bound'][p.key]} bound)" if p.key in fit_record.get("on_bound", {}) else ""))
    lines += [f"# - GPU allocator_overhead {_fmt(allocator_overhead['value'])}: geometric mean of the interval in which",
              "#   NMT on one K80 is OOM and every placement 2017 measured fits "
              f"[{_fmt(allocator_overhead['lower'])}, {_fmt(allocator_overhead['upper'])}].",
              "# Every fit, with the leave-one-model-out ones, is in cluster/presets/k80_fit.json; the bounds' sources",
              "# are there and in cluster/fitting.py."]
    data = spec.model_dump(exclude_defaults=False)
    for dev in data["devices"]:
        for k in ("tf_device", "compute_pool"):
            dev.pop(k, None)
    return "\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False, width=120)


def write_presets(values: dict[str, float], allocator_overhead: dict, fit_record: dict, names=None) -> list[Path]:
    """Write the preset YAML of every machine (or of ``names``) into ``cluster/presets/``; returns the paths."""
    out = []
    for name in names or MACHINES:
        path = PRESET_DIR / f"{name}.yaml"
        path.write_text(preset_yaml(MACHINES[name], values, allocator_overhead, fit_record))
        ClusterSpec.from_yaml(path)  # validates
        out.append(path)
    return out
