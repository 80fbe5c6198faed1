"""The cluster spec of the machine this runs on (``placement detect``): what can be read, read; what
cannot, from a datasheet table or an assumption, each figure saying which.

**CPU** (``/cpu:0``, every socket as one device, as the presets do). The model, the cores (distinct
``physical id``/``core id`` pairs: SMT threads share their core's FMA units), the ISA flags and the clock
are read from ``/proc/cpuinfo`` (with ``lscpu`` and ``/sys/devices/system/cpu/cpu0/cpufreq/base_frequency``
where it lacks them); the peak FP32 throughput is ``cores x clock x FLOP/cycle``, the FLOP per cycle
following from the widest FMA ISA ([`flops_per_cycle`][cluster.detect.flops_per_cycle]: AVX-512 with two FMA units 64, AVX2 + FMA 32,
AVX 16, SSE 8; how many FMA units a core has is not in the flags, so it is an assumption, named). The
memory bandwidth is a datasheet figure for the CPUs the presets cite ([`CPU_MEMORY_BANDWIDTH`][cluster.datasheets.CPU_MEMORY_BANDWIDTH]), else
an assumption per core ([`ASSUMED_BANDWIDTH_PER_CORE`][cluster.detect.ASSUMED_BANDWIDTH_PER_CORE]), flagged; the memory is ``/proc/meminfo``'s
``MemTotal``.

**GPUs** (``/gpu:K``, torch's device order). ``torch.cuda.get_device_properties(K)`` gives the name and the
memory; the peaks and the memory bandwidth come from the datasheet table [`GPU_DATASHEETS`][cluster.datasheets.GPU_DATASHEETS] (the
figures of [`cluster.servers`][cluster.servers] and [`cluster.machines`][cluster.machines] where they have the chip, the others here
with their sources). A chip not in the table is refused ([`DetectError`][cluster.machine_readers.DetectError]) unless ``allow_unknown``,
which writes estimates from the device properties, each flagged as such in the YAML.

**Links.** CPU-GPU: the PCIe generation and width of the GPU's PCI function
(``/sys/bus/pci/devices/<bus id>/max_link_speed`` and ``max_link_width``, capped by its upstream port's:
a GPU lowers ``current_link_speed`` when idle, so the current figures are only reported), else the
datasheet's; per direction ``GT/s x lanes x encoding / 8`` ([`pcie_bandwidth`][cluster.datasheets.pcie_bandwidth]). GPU-GPU: the NVLinks
``nvidia-smi topo -m`` lists (links x the chip's per-link bandwidth), else peer-to-peer over PCIe (the
slower of the two GPUs' PCIe links), flagged.

**Terms that are not detectable** (efficiencies, per-op and per-transfer overheads) are carried
([`carried_terms`][cluster.detect.carried_terms]): the GPU's from the servers' reference preset
([`cluster.servers.REFERENCE_PRESET`][cluster.servers.REFERENCE_PRESET], [`cluster.servers.GPU_CARRIED`][cluster.servers.GPU_CARRIED]), the host's (CPU terms and host<->GPU copy terms)
from ``h200x1`` by default ([`HOST_PRESETS`][cluster.detect.HOST_PRESETS]; ``k80x2``'s CPU terms on request), and
PyTorch's software terms ([`cluster.servers.PYTORCH_TERMS`][cluster.servers.PYTORCH_TERMS]); the YAML says so.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.datasheets import (GPU_DATASHEETS, H200, KNOWN_GPUS, NEW_CHIPS, NVLINK, NVLINK1,  # noqa: F401 (re-exported)
                                 PCIE_ENCODING, PCIE_GT_S, CPU_MEMORY_BANDWIDTH, CPU_MEMORY_BANDWIDTH_BY_MODEL,
                                 FP32_LANES_PER_SM, GpuDatasheet, match_gpu, pcie_bandwidth)
from cluster.machine_readers import (NVIDIA_SMI_TIMEOUT_S, DetectError, PcieLink, _float, _int,  # noqa: F401
                                     _pcie_gen, _read, parse_cpuinfo, parse_lscpu, parse_meminfo,  # noqa: F401
                                     parse_nvidia_topo, read_pcie_link, run_lscpu, run_nvidia_topo)  # noqa: F401
from cluster.servers import (CHIP_TERMS, GPU_CARRIED, PYTORCH_TERMS, REFERENCE_PRESET, SERVER_CHIPS, load_cpu_reference, load_reference)
from cluster.spec import ClusterSpec

LINK_LATENCY_S = 2e-6
"""Latency of every link (seconds): an estimate, as [`cluster.servers.build_server_spec`][cluster.servers.build_server_spec] takes it."""
ASSUMED_BANDWIDTH_PER_CORE = 10e9
"""Memory bandwidth assumed per physical core of a CPU not in [`CPU_MEMORY_BANDWIDTH`][cluster.datasheets.CPU_MEMORY_BANDWIDTH] (bytes/s): the
``cpu4`` preset's guess of what a 2-vCPU slice of a DDR5 server sustains (~20 GB/s), capped per socket by
[`ASSUMED_SOCKET_BANDWIDTH_CAP`][cluster.detect.ASSUMED_SOCKET_BANDWIDTH_CAP]."""
ASSUMED_SOCKET_BANDWIDTH_CAP = SERVER_CHIPS["xeon-8480cx2"].memory_bandwidth / 2
"""At most 8 channels of DDR5-4800 per socket, 307.2 GB/s (bytes/s; Intel ARK, Xeon Platinum 8480+)."""
ASSUMED_CLOCK_HZ = 2.0e9
"""Clock assumed, with ``allow_unknown`` only, when none can be read (Hz)."""



@dataclass(frozen=True)
class Figure:
    """A detected figure and where it came from (``read: ...``, ``datasheet: ...``, ``assumed: ...``,
    ``estimated: ...``, ``carried from ...``)."""

    value: float
    provenance: str


# --------------------------------------------------------------------------------------------------- parsing


# --------------------------------------------------------------------------------------------------------- CPU


def flops_per_cycle(flags: set[str], vendor: str = "", family: int | None = None,
                    model: int | None = None) -> tuple[int, str, str] | None:
    """FP32 FLOP per cycle per core of the widest FMA ISA in ``flags`` (``/proc/cpuinfo`` ``flags`` or
    ARM's ``Features``): ``(FLOP/cycle, ISA, why)``, or ``None`` when no ISA below is present.

    A vector FMA unit does ``2 x lanes`` FLOP per cycle (lanes: 16 FP32 in 512 bits, 8 in 256, 4 in 128).
    How many units a core has is not in the flags; the counts below are the usual server parts'
    (Intel optimization reference manual, Sec. 2 per microarchitecture; AMD software optimization guides
    for family 17h and 19h):

    * ``avx512f``: Intel two 512-bit FMA units, 64 (Xeon Gold 6xxx/Platinum; Silver, Bronze and client
      parts have one: 32); AMD family 19h (Zen 4) issues 512-bit FMAs on two 256-bit units, 32; family
      1Ah (Zen 5) two 512-bit units, 64.
    * ``avx2`` + ``fma``: two 256-bit FMA units, 32 (Intel Haswell on, AMD Zen 2 on; Zen and Zen+, family
      17h models below 30h, split them into 128-bit halves: 16).
    * ``avx`` without FMA: one 256-bit add and one 256-bit multiply per cycle, 16 (Sandy/Ivy Bridge).
    * ``sse``/``sse2``: one 128-bit add and one 128-bit multiply, 8.
    * ARM ``asimd`` (NEON): two 128-bit FMA pipes, 16 (e.g. Arm Neoverse N1).
    """
    amd = vendor.lower().startswith(("authenticamd", "amd"))
    if "avx512f" in flags:
        if amd and family == 0x19:
            return 32, "avx512f", "AMD Zen 4 (family 19h) runs 512-bit FMAs on two 256-bit units"
        if amd and family == 0x1A:
            return 64, "avx512f", "AMD Zen 5 (family 1Ah): two 512-bit FMA units"
        return 64, "avx512f", ("two 512-bit FMA units per core (Xeon Gold 6xxx/Platinum and later; "
                               "Xeon Silver/Bronze and client parts have one: 32)")
    if "avx2" in flags and "fma" in flags:
        if amd and family == 0x17 and model is not None and model < 0x30:
            return 16, "avx2+fma", "AMD Zen/Zen+ (family 17h, model < 30h) splits 256-bit FMAs into 128-bit halves"
        return 32, "avx2+fma", "two 256-bit FMA units per core (Intel Haswell and later, AMD Zen 2 and later)"
    if "avx" in flags:
        return 16, "avx", "one 256-bit add and one 256-bit multiply per cycle, no FMA (Sandy/Ivy Bridge)"
    if "sse2" in flags or "sse" in flags:
        return 8, "sse", "one 128-bit add and one 128-bit multiply per cycle"
    if "asimd" in flags:
        return 16, "asimd", "two 128-bit NEON FMA pipes per core (e.g. Arm Neoverse N1)"
    return None


@dataclass(frozen=True)
class DetectedCpu:
    """The host CPU as detected.

    Attributes:
        model: the model name (``2x ...`` with two sockets); model_source: where it was read.
        vendor: ``vendor_id`` (``GenuineIntel``, ``AuthenticAMD``) or ARM's implementer, may be empty.
        sockets, cores: sockets and physical cores (all sockets); threads: logical CPUs.
        cores_source: where the core count was read.
        clock: the clock (Hz); isa: the widest FMA ISA; flops_per_cycle: FP32 FLOP/cycle/core.
        memory_bandwidth: peak memory bandwidth (bytes/s); memory_bytes: RAM (bytes).
    """

    model: str
    model_source: str
    vendor: str
    sockets: int
    cores: int
    threads: int
    cores_source: str
    clock: Figure
    isa: str
    flops_per_cycle: Figure
    memory_bandwidth: Figure
    memory_bytes: Figure

    @property
    def peak_flops(self) -> float:
        """Peak FP32 throughput (FLOP/s): ``cores x clock x flops_per_cycle``."""
        return self.cores * self.clock.value * self.flops_per_cycle.value


def detect_cpu(cpuinfo_path: str | Path = "/proc/cpuinfo", lscpu_text: str | None = None,
               meminfo_path: str | Path = "/proc/meminfo", sys_root: str | Path = "/sys",
               allow_unknown: bool = False) -> DetectedCpu:
    """The host CPU from ``cpuinfo_path`` (``/proc/cpuinfo`` format), ``lscpu_text`` (``lscpu``'s output;
    where the cpuinfo lacks a figure), ``meminfo_path`` (``MemTotal``) and, for the clock,
    ``<sys_root>/devices/system/cpu/cpu0/cpufreq/base_frequency`` (kHz).

    Units: clock in Hz, bandwidth in bytes/s, memory in bytes. Sources: the clock is the model name's
    ``@ x.xxGHz`` (the nominal base clock), else the cpufreq base frequency, else ``lscpu``'s ``CPU max
    MHz`` (the highest boost clock: optimistic), else cpuinfo's ``cpu MHz`` (the clock when read; a VM's
    nominal clock); FLOP/cycle from [`flops_per_cycle`][cluster.detect.flops_per_cycle]; bandwidth from [`CPU_MEMORY_BANDWIDTH`][cluster.datasheets.CPU_MEMORY_BANDWIDTH]
    else [`ASSUMED_BANDWIDTH_PER_CORE`][cluster.detect.ASSUMED_BANDWIDTH_PER_CORE] per core.

    Raises:
        DetectError: an unreadable cpuinfo or meminfo, or (without ``allow_unknown``) no clock or no known ISA.
    """
    text = _read(cpuinfo_path)
    if text is None:
        raise DetectError(f"cannot read the CPU description {cpuinfo_path}")
    procs = parse_cpuinfo(text)
    lscpu = parse_lscpu(lscpu_text or "")
    if not procs and not lscpu:
        raise DetectError(f"{cpuinfo_path}: no 'processor' block (not a /proc/cpuinfo text)")
    first = procs[0] if procs else {}
    where = str(cpuinfo_path)

    if first.get("model name"):
        model, model_source = first["model name"], f"read: {where} model name"
    elif lscpu.get("Model name"):
        model, model_source = lscpu["Model name"], "read: lscpu Model name"
    else:
        model, model_source = "unknown CPU", f"assumed: neither {where} nor lscpu names the model"
    vendor = first.get("vendor_id") or lscpu.get("Vendor ID") or first.get("CPU implementer", "")

    threads = len(procs) or _int(lscpu.get("CPU(s)")) or 1
    pairs = {(p.get("physical id"), p.get("core id")) for p in procs}
    lscpu_cores = (_int(lscpu.get("Core(s) per socket")) or 0) * (_int(lscpu.get("Socket(s)")) or 0)
    if procs and all(p.get("physical id") is not None and p.get("core id") is not None for p in procs):
        sockets = len({p["physical id"] for p in procs})
        cores, cores_source = len(pairs), f"read: {where} distinct (physical id, core id) pairs"
    elif lscpu_cores:
        sockets = _int(lscpu.get("Socket(s)")) or 1
        cores, cores_source = lscpu_cores, "read: lscpu Core(s) per socket x Socket(s)"
    else:
        sockets = 1
        cores, cores_source = threads, f"assumed: one core per logical CPU ({where} gives no core ids)"

    clock = _cpu_clock(first, procs, lscpu, model, where, Path(sys_root), allow_unknown,
                       read_sysfs=str(cpuinfo_path) == "/proc/cpuinfo")
    flags = set((first.get("flags") or first.get("Features") or lscpu.get("Flags") or "").split())
    isa = flops_per_cycle(flags, vendor, _int(first.get("cpu family")), _int(first.get("model")))
    if isa is None:
        if not allow_unknown:
            raise DetectError(f"CPU {model!r}: no FMA/vector ISA known in its flags ({len(flags)} flags read); "
                              "pass --allow-unknown to assume 2 FP32 FLOP/cycle (one scalar FMA), flagged")
        fpc = Figure(2, "assumed (--allow-unknown): one scalar FMA per cycle, no known vector ISA in the flags")
        isa_name = "unknown"
    else:
        fpc = Figure(isa[0], f"read: {where} flags ({isa[1]}); assumed: {isa[2]}")
        isa_name = isa[1]

    meminfo = _read(meminfo_path)
    if meminfo is None:
        raise DetectError(f"cannot read the memory description {meminfo_path}")
    memory = Figure(parse_meminfo(meminfo), f"read: {meminfo_path} MemTotal")

    bandwidth = None
    for pattern, per_socket, source in CPU_MEMORY_BANDWIDTH:
        if re.search(pattern, model):
            bandwidth = Figure(sockets * per_socket, f"datasheet: {sockets} socket(s) x {per_socket / 1e9:g} GB/s ({source})")
            break
    family_model = (vendor, _int(first.get("cpu family") or lscpu.get("CPU family")),
                    _int(first.get("model") or lscpu.get("Model")))
    if bandwidth is None and family_model in CPU_MEMORY_BANDWIDTH_BY_MODEL:
        per_socket, source = CPU_MEMORY_BANDWIDTH_BY_MODEL[family_model]  # type: ignore[index]
        bandwidth = Figure(sockets * per_socket, f"datasheet: {sockets} socket(s) x {per_socket / 1e9:g} GB/s, the "
                                                 f"socket's, shared with other tenants of a VM ({source})")
    if bandwidth is None:
        value = min(cores * ASSUMED_BANDWIDTH_PER_CORE, sockets * ASSUMED_SOCKET_BANDWIDTH_CAP)
        bandwidth = Figure(value, f"assumed: {model!r} is not in the datasheet table (DDR channels unknown): "
                                  f"{ASSUMED_BANDWIDTH_PER_CORE / 1e9:g} GB/s per core x {cores} cores, at most "
                                  f"{ASSUMED_SOCKET_BANDWIDTH_CAP / 1e9:g} GB/s per socket (8 channels DDR5-4800)")
    shown = f"{sockets}x {model}" if sockets > 1 else model
    return DetectedCpu(shown, model_source, vendor, sockets, cores, threads, cores_source, clock, isa_name, fpc,
                       bandwidth, memory)


def _cpu_clock(first: dict[str, str], procs: list[dict[str, str]], lscpu: dict[str, str], model: str, where: str,
               sys_root: Path, allow_unknown: bool, read_sysfs: bool) -> Figure:
    m = re.search(r"@\s*([\d.]+)\s*GHz", model)
    if m:
        return Figure(float(m.group(1)) * 1e9, f"read: {where} model name (the nominal base clock)")
    base = sys_root / "devices/system/cpu/cpu0/cpufreq/base_frequency"
    khz = _float(_read(base)) if read_sysfs else None
    if khz:
        return Figure(khz * 1e3, f"read: {base} (the base clock)")
    mhz = _float(lscpu.get("CPU max MHz"))
    if mhz:
        return Figure(mhz * 1e6, "read: lscpu CPU max MHz (the highest boost clock: optimistic for all-core vector code)")
    mhz = _float(first.get("cpu MHz"))
    if mhz:
        return Figure(mhz * 1e6, f"read: {where} cpu MHz (the clock when read; a VM reports its nominal clock)")
    if not allow_unknown:
        raise DetectError(f"CPU {model!r}: no clock in {where} (model name, cpu MHz), cpufreq or lscpu; "
                          f"pass --allow-unknown to assume {ASSUMED_CLOCK_HZ / 1e9:g} GHz, flagged")
    return Figure(ASSUMED_CLOCK_HZ, f"assumed (--allow-unknown): {ASSUMED_CLOCK_HZ / 1e9:g} GHz, no clock readable")


# ------------------------------------------------------------------------------------------------------- GPUs




@dataclass(frozen=True)
class DetectedGpu:
    """One GPU as detected.

    Attributes:
        index: torch's device index (``/gpu:<index>``); name: torch's device name.
        key: its [`GPU_DATASHEETS`][cluster.datasheets.GPU_DATASHEETS] key, ``None`` when unknown (then every figure is an estimate).
        model: the model written into the spec.
        peak_flops: FP32 peak (FLOP/s); tensor_peak_flops: dense tensor-core peaks (FLOP/s) and their source.
        memory_bandwidth (bytes/s), memory_bytes (bytes): with their sources.
        host_link: its PCIe link to the CPU; bus_id: its PCI address where torch gives one.
        nvlink: NVLink bandwidth per link per direction (bytes/s; 0: none or unknown).
    """

    index: int
    name: str
    key: str | None
    model: str
    peak_flops: Figure
    tensor_peak_flops: dict[str, float]
    tensor_source: str
    memory_bandwidth: Figure
    memory_bytes: Figure
    host_link: PcieLink
    bus_id: str | None
    nvlink: float = 0.0


def _bus_id(props: Any) -> str | None:
    dom, bus, dev = (getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    if not all(isinstance(v, int) for v in (dom, bus, dev)):
        return None
    return f"{dom:04x}:{bus:02x}:{dev:02x}.0"


def detect_gpu(index: int, props: Any, sys_root: str | Path = "/sys", allow_unknown: bool = False) -> DetectedGpu:
    """GPU ``index`` from its ``torch.cuda.get_device_properties(index)`` (``props``: ``name``,
    ``total_memory`` in bytes, and where torch has them ``pci_domain_id``/``pci_bus_id``/``pci_device_id``,
    ``multi_processor_count``, ``major``/``minor``, ``clock_rate`` and ``memory_clock_rate`` in kHz,
    ``memory_bus_width`` in bits).

    Sources: the peaks (FLOP/s) and the memory bandwidth (bytes/s) of [`GPU_DATASHEETS`][cluster.datasheets.GPU_DATASHEETS]; the memory
    (bytes) is ``total_memory`` (what the framework sees); the PCIe link from sysfs ([`read_pcie_link`][cluster.machine_readers.read_pcie_link]),
    else the datasheet's generation x16. With ``allow_unknown`` a chip not in the table gets estimates
    (FP32: SMs x [`FP32_LANES_PER_SM`][cluster.datasheets.FP32_LANES_PER_SM] x 2 x clock; bandwidth: memory clock x 2 x bus width / 8), each
    flagged ``estimated`` or ``assumed``.

    Raises:
        DetectError: a chip not in the table, without ``allow_unknown``.
    """
    name = str(getattr(props, "name", "") or "unnamed GPU")
    key = match_gpu(name)
    bus = _bus_id(props)
    link = read_pcie_link(bus, sys_root) if bus else None
    total = getattr(props, "total_memory", None)
    memory: Figure | None = (Figure(float(total), f"read: torch.cuda.get_device_properties({index}).total_memory")
                             if isinstance(total, (int, float)) and total > 0 else None)
    if key is not None:
        sheet = GPU_DATASHEETS[key]
        chip = sheet.chip
        src = f"datasheet: {chip.model}"
        if memory is None:
            if chip.memory_bytes is None:
                raise DetectError(f"GPU {index} {name!r}: torch gives no total_memory and its datasheet has several sizes")
            memory = Figure(chip.memory_bytes, src)
        if link is None:
            link = PcieLink(sheet.pcie_gen, 16, f"datasheet: {chip.model} has a PCIe {sheet.pcie_gen}.0 x16 host interface"
                                                + ("" if bus else " (torch gives no PCI bus id)")
                                                + ("; sysfs link not readable" if bus else ""))
        return DetectedGpu(index, name, key, chip.model, Figure(chip.peak_flops, src), dict(chip.tensor_peak_flops),
                           src if chip.tensor_peak_flops else f"datasheet: {chip.model} has no tensor cores",
                           Figure(chip.memory_bandwidth, src), memory, link, bus, sheet.nvlink)
    if not allow_unknown:
        raise DetectError(f"GPU {index} {name!r} is not in the datasheet table (cluster/detect.py GPU_DATASHEETS: "
                          f"{KNOWN_GPUS}); add its datasheet figures there, or pass --allow-unknown to write estimates "
                          "flagged as such")
    return _estimate_unknown(index, name, props, memory, link, bus)


def _estimate_unknown(index: int, name: str, props: Any, memory: Figure | None, link: PcieLink | None,
                      bus: str | None) -> DetectedGpu:
    what = f"UNKNOWN chip {name!r} (--allow-unknown)"
    sms, major, minor = (getattr(props, k, None) for k in ("multi_processor_count", "major", "minor"))
    lanes = None
    if isinstance(major, int):
        lanes = FP32_LANES_PER_SM.get((major, minor if isinstance(minor, int) else None)) \
            or FP32_LANES_PER_SM.get((major, None))
    clock_khz = getattr(props, "clock_rate", None)
    if isinstance(sms, int) and sms > 0 and lanes:
        if isinstance(clock_khz, (int, float)) and clock_khz > 0:
            clock, clock_why = clock_khz * 1e3, "clock_rate read from torch"
        else:
            clock, clock_why = 1.5e9, "clock assumed 1.5 GHz (torch gives no clock_rate)"
        peak = Figure(sms * lanes * 2 * clock, f"estimated, {what}: {sms} SMs x {lanes} FP32 lanes (compute capability "
                                               f"{major}.{minor}) x 2 x {clock / 1e9:g} GHz ({clock_why})")
    else:
        peak = Figure(10e12, f"assumed, {what}: 10 TFLOP/s (no SM count or compute capability from torch)")
    mclk, bits = getattr(props, "memory_clock_rate", None), getattr(props, "memory_bus_width", None)
    if isinstance(mclk, (int, float)) and mclk > 0 and isinstance(bits, int) and bits > 0:
        bandwidth = Figure(mclk * 1e3 * 2 * bits / 8, f"estimated, {what}: memory clock {mclk / 1e3:g} MHz x 2 (double "
                                                      f"data rate) x {bits} bits / 8, read from torch")
    else:
        bandwidth = Figure(500e9, f"assumed, {what}: 500 GB/s (torch gives no memory clock or bus width)")
    if memory is None:
        memory = Figure(16e9, f"assumed, {what}: 16 GB (torch gives no total_memory)")
    if link is None:
        link = PcieLink(4, 16, f"assumed, {what}: PCIe 4.0 x16 (no sysfs link readable)")
    return DetectedGpu(index, name, None, f"{name} (unknown chip: estimated)", peak, {},
                       f"not estimated, {what}: every precision at the FP32 peak", bandwidth, memory, link, bus, 0.0)


# ----------------------------------------------------------------------------------------------- the machine


@dataclass(frozen=True)
class Detected:
    """What [`detect_machine`][cluster.detect.detect_machine] found.

    Attributes:
        host: the host name; cpu: the CPU; gpus: the GPUs in torch's order.
        gpu_note: why there are no GPUs, or where they were read.
        gpu_pairs: bandwidth per direction (bytes/s) of each GPU pair ``(i, j)``, ``i < j``, with its source.
        peer_access: GPUs copy to each other directly, and why ([`cluster.spec.TransferSpec`][cluster.spec.TransferSpec]).
    """

    host: str
    cpu: DetectedCpu
    gpus: list[DetectedGpu]
    gpu_note: str
    gpu_pairs: dict[tuple[int, int], Figure] = field(default_factory=dict)
    peer_access: tuple[bool, str] = (True, "")

    @property
    def unknown(self) -> list[str]:
        """The GPUs written from estimates (unknown chips)."""
        return [f"/gpu:{g.index} {g.name!r}" for g in self.gpus if g.key is None]


def torch_gpu_properties() -> tuple[list[Any], str, Callable[[int, int], bool] | None]:
    """``torch.cuda.get_device_properties(i)`` of every visible GPU, a note saying where they came from
    (or why there are none) and torch's peer-access check (``None`` without GPUs)."""
    import torch

    if not torch.cuda.is_available():
        return [], f"no GPU: torch.cuda.is_available() is False (torch {torch.__version__})", None
    n = torch.cuda.device_count()
    props = [torch.cuda.get_device_properties(i) for i in range(n)]
    return props, f"read: torch.cuda.get_device_properties(0..{n - 1}) (torch {torch.__version__})", \
        torch.cuda.can_device_access_peer


def detect_machine(cpuinfo_path: str | Path = "/proc/cpuinfo", lscpu_text: str | None = None,
                   meminfo_path: str | Path = "/proc/meminfo", sys_root: str | Path = "/sys", use_gpu: bool = True,
                   gpu_properties: Sequence[Any] | None = None, peer_access: Callable[[int, int], bool] | None = None,
                   nvidia_topo: tuple[str, str] | None = None, allow_unknown: bool = False,
                   host: str | None = None) -> Detected:
    """Detect this machine: [`detect_cpu`][cluster.detect.detect_cpu], then (``use_gpu``) every GPU torch sees (or
    ``gpu_properties``: objects like ``torch.cuda.get_device_properties``'s, for tests) with
    [`detect_gpu`][cluster.detect.detect_gpu], and the links between GPUs (``nvidia_topo``: the texts of [`run_nvidia_topo`][cluster.machine_readers.run_nvidia_topo],
    run here when ``None`` and there are two GPUs or more; ``peer_access(i, j)``: torch's
    ``can_device_access_peer``). With the default ``/proc/cpuinfo`` and no ``lscpu_text``, ``lscpu`` runs
    too; with another cpuinfo file (another machine's), neither ``lscpu`` nor cpufreq is consulted.
    Units as [`DetectedCpu`][cluster.detect.DetectedCpu] and [`DetectedGpu`][cluster.detect.DetectedGpu].

    Raises:
        DetectError: what [`detect_cpu`][cluster.detect.detect_cpu] and [`detect_gpu`][cluster.detect.detect_gpu] raise.
    """
    if lscpu_text is None and str(cpuinfo_path) == "/proc/cpuinfo":
        lscpu_text = run_lscpu()
    cpu = detect_cpu(cpuinfo_path, lscpu_text, meminfo_path, sys_root, allow_unknown)
    if not use_gpu:
        props, note = [], "no GPU: --no-gpu"
    elif gpu_properties is not None:
        props, note = list(gpu_properties), "read: the GPU properties given"
    else:
        props, note, torch_peer = torch_gpu_properties()
        peer_access = peer_access or torch_peer
    gpus = [detect_gpu(i, p, sys_root, allow_unknown) for i, p in enumerate(props)]
    pairs: dict[tuple[int, int], Figure] = {}
    peer: tuple[bool, str] = (True, "assumed: peer access between GPUs (no peer-access check given)")
    if len(gpus) >= 2:
        if nvidia_topo is None and gpu_properties is None:
            nvidia_topo = run_nvidia_topo()
        nvlinks = parse_nvidia_topo(*nvidia_topo) if nvidia_topo else {}
        for a in gpus:
            for b in gpus[a.index + 1:]:
                n = nvlinks.get((a.bus_id or "", b.bus_id or ""), 0)
                per_link = min(a.nvlink, b.nvlink)
                if n and per_link:
                    pairs[(a.index, b.index)] = Figure(n * per_link, f"read: nvidia-smi topo -m NV{n}; datasheet: "
                                                                      f"{per_link / 1e9:g} GB/s per NVLink per direction")
                else:
                    slow = min(a.host_link, b.host_link, key=lambda link: link.bandwidth)
                    why = "no NVLink in nvidia-smi topo -m" if nvidia_topo else "nvidia-smi topo -m not available"
                    pairs[(a.index, b.index)] = Figure(slow.bandwidth, f"assumed: peer-to-peer over PCIe {slow.gen}.0 "
                                                                       f"x{slow.width}, the slower GPU's link ({why})")
        if peer_access is not None:
            ok = all(peer_access(a.index, b.index) for a in gpus for b in gpus if a.index != b.index)
            peer = (ok, f"read: torch.cuda.can_device_access_peer: {'every pair' if ok else 'not every pair'}")
    return Detected(host or socket.gethostname() or "localhost", cpu, gpus, note, pairs, peer)


HOST_PRESETS = ("h200x1", "k80x2")
"""The presets whose host terms a detected spec can carry ([`carried_terms`][cluster.detect.carried_terms]): ``h200x1`` (the default),
fitted on real PyTorch steps on a lent H200's 16-vCPU Xeon host, and ``k80x2``, the 2017 K80 fit's (TensorFlow)."""
HOST_CPU_TERMS = (*CHIP_TERMS, "dense_memory_efficiency", "conv_memory_efficiency", "op_overhead_s")
"""The CPU terms carried from a host preset that has them (``h200x1``'s fit: per-class efficiencies, the memory
terms of dense ops and convolutions, the per-op overhead); ``k80x2`` has [`cluster.servers.CHIP_TERMS`][cluster.servers.CHIP_TERMS] only."""


@dataclass(frozen=True)
class Carried:
    """The terms a detected spec cannot detect, carried from presets.

    Attributes:
        gpu: the GPU terms of [`cluster.servers.GPU_CARRIED`][cluster.servers.GPU_CARRIED] (fractions of peak, FLOP, seconds) and
            gpu_from: the preset they come from (the servers' reference, [`cluster.servers.REFERENCE_PRESET`][cluster.servers.REFERENCE_PRESET]).
        cpu: the CPU terms of [`HOST_CPU_TERMS`][cluster.detect.HOST_CPU_TERMS] the host preset sets and cpu_from: that preset.
        transfer: the host<->GPU copy terms (``send_recv_overhead_s`` seconds, ``bandwidth_efficiency``) of the
            host preset where it fitted them (``h200x1``), else PyTorch's named ones
            ([`cluster.servers.PYTORCH_TERMS`][cluster.servers.PYTORCH_TERMS]); transfer_from says which.
        compute_memory_overlap: the host preset's.
        note: why a fallback was taken, else empty.
    """

    gpu: dict[str, float]
    gpu_from: str
    cpu: dict[str, float]
    cpu_from: str
    compute_memory_overlap: bool
    note: str = ""
    transfer: dict[str, float] = field(default_factory=dict)
    transfer_from: str = ""


def carried_terms(host: str = HOST_PRESETS[0]) -> Carried:
    """The GPU terms of the servers' reference preset ([`cluster.servers.load_reference`][cluster.servers.load_reference]) and the host
    terms (CPU, copies) of ``host``: ``h200x1`` (default; fitted on PyTorch steps on a 16-vCPU Xeon host, its
    copies the copies a placed step makes: the spec `detect` writes from three lent machines' lscpu carrying
    them judged those machines' CPU+GPU placements with median |sim/real - 1| 0.10-0.34, where k80x2's gave
    0.51-0.64, docs/measurement.md) or ``k80x2`` (the K80 fit's CPU terms, TensorFlow 2017 on a dual-socket host, with
    PyTorch's named copy terms). Where the reference preset is not written yet
    ([`cluster.torch_calibrate`][cluster.torch_calibrate] writes it), the GPU terms come from ``k80x2``'s GPU, and
    [`Carried.note`][cluster.detect.Carried.note] says so.

    Raises:
        ValueError: ``host`` is not one of [`HOST_PRESETS`][cluster.detect.HOST_PRESETS], or its preset does not load.
    """
    if host not in HOST_PRESETS:
        raise ValueError(f"host terms {host!r}: valid: {', '.join(HOST_PRESETS)}")
    from cluster.spec import load_cluster

    cpu_ref = load_cluster(host)
    note = ""
    try:
        gpu_ref = load_reference()
    except ValueError:
        gpu_ref = load_cpu_reference()
        note = (f"the servers' reference preset {REFERENCE_PRESET} is not written (cluster/torch_calibrate.py "
                f"writes it), so the GPU terms are {gpu_ref.name}'s")
    ref_gpu = next((d for d in gpu_ref.devices if d.kind == "gpu"), None)
    ref_cpu = next(d for d in cpu_ref.devices if d.kind == "cpu")
    gpu = {k: getattr(ref_gpu, k) for k in GPU_CARRIED} if ref_gpu is not None else {}
    keys = CHIP_TERMS if host == "k80x2" else HOST_CPU_TERMS
    cpu = {k: getattr(ref_cpu, k) for k in keys if getattr(ref_cpu, k) is not None}
    if host == "k80x2":
        transfer = {k: PYTORCH_TERMS[k][0] for k in ("send_recv_overhead_s", "bandwidth_efficiency")}
        transfer_from = "cluster/servers.py PYTORCH_TERMS (named, not fitted)"
    else:
        transfer = {"send_recv_overhead_s": cpu_ref.transfer.send_recv_overhead_s,
                    "bandwidth_efficiency": cpu_ref.transfer.bandwidth_efficiency}
        if cpu_ref.transfer.host_to_device_efficiency:  # the host's staging copy to the GPU
            transfer["host_to_device_efficiency"] = cpu_ref.transfer.host_to_device_efficiency
        if cpu_ref.transfer.fresh_host_bytes_per_s:  # the host kernel's page faults, carried with the host terms
            transfer["fresh_host_bytes_per_s"] = cpu_ref.transfer.fresh_host_bytes_per_s
        transfer_from = f"the shipped {host} preset (fitted on a placed step's copies)"
    return Carried(gpu, gpu_ref.name, cpu, cpu_ref.name, cpu_ref.compute_memory_overlap, note, transfer, transfer_from)


def detected_spec(det: Detected, name: str | None = None, carried: Carried | None = None) -> ClusterSpec:
    """The [`cluster.spec.ClusterSpec`][cluster.spec.ClusterSpec] of ``det``: ``/cpu:0`` and ``/gpu:K`` with the detected figures
    (FLOP/s, bytes/s, bytes), the terms [`carried_terms`][cluster.detect.carried_terms] carries and PyTorch's software terms
    ([`cluster.servers.PYTORCH_TERMS`][cluster.servers.PYTORCH_TERMS]). Links: the CPU-GPU PCIe links (the slowest as ``default_link``,
    the others listed) and the GPU pairs (listed where they differ from it); latency [`LINK_LATENCY_S`][cluster.detect.LINK_LATENCY_S]."""
    carried = carried or carried_terms()
    terms = {k: v for k, (v, _) in PYTORCH_TERMS.items()}
    cpu = det.cpu
    devices: list[dict[str, Any]] = [dict(
        name="/cpu:0", kind="cpu", model=cpu.model, peak_flops=cpu.peak_flops,
        memory_bandwidth=cpu.memory_bandwidth.value, memory_bytes=cpu.memory_bytes.value,
        op_overhead_s=terms["op_overhead_s"], software_flops_fraction=terms["software_flops_fraction"])]
    devices[0].update(carried.cpu)
    for g in det.gpus:
        devices.append({
            "name": f"/gpu:{g.index}", "kind": "gpu", "model": g.model, "peak_flops": g.peak_flops.value,
            "tensor_peak_flops": dict(g.tensor_peak_flops), "tf32_matmul": terms["tf32_matmul"],
            "tf32_conv": terms["tf32_conv"], "memory_bandwidth": g.memory_bandwidth.value,
            "memory_bytes": g.memory_bytes.value, "op_overhead_s": terms["op_overhead_s"], **carried.gpu})
    links: list[dict[str, Any]] = []
    default_link = None
    if det.gpus:
        default_bw = min(g.host_link.bandwidth for g in det.gpus)
        default_link = {"bandwidth": default_bw, "latency_s": LINK_LATENCY_S}
        links += [{"between": ("/cpu:0", f"/gpu:{g.index}"), "bandwidth": g.host_link.bandwidth,
                   "latency_s": LINK_LATENCY_S} for g in det.gpus if g.host_link.bandwidth != default_bw]
        links += [{"between": (f"/gpu:{i}", f"/gpu:{j}"), "bandwidth": f.value, "latency_s": LINK_LATENCY_S}
                  for (i, j), f in sorted(det.gpu_pairs.items()) if f.value != default_bw]
    description = (f"{det.host} (detected): {cpu.model}, {cpu.cores} cores, {cpu.memory_bytes.value / 1e9:.0f} GB RAM; "
                   + (_gpu_counts(det) or "no GPU"))
    sources = ["placement detect (cluster/detect.py): figures read on the machine, else datasheets, else assumptions; "
               "each named in this file's comments"]
    sources += sorted({s for g in det.gpus if g.key for s in GPU_DATASHEETS[g.key].chip.sources})
    gpu_terms = f"the GPU terms of {carried.gpu_from} and " if det.gpus else ""
    sources.append(f"cluster/servers.py: {gpu_terms}the CPU terms of {carried.cpu_from} (carried), the copy terms of "
                   f"{carried.transfer_from or 'PyTorch (named)'}, PyTorch's software terms")
    if det.gpus:
        sources.append("PCI-SIG, PCI Express base specifications (GT/s and encoding)")
    return ClusterSpec(
        name=name or f"detected-{det.host}", description=description, devices=devices, links=links,
        default_link=default_link,
        transfer={"send_recv_overhead_s": carried.transfer.get("send_recv_overhead_s", terms["send_recv_overhead_s"]),
                  "bandwidth_efficiency": carried.transfer.get("bandwidth_efficiency", terms["bandwidth_efficiency"]),
                  "host_to_device_efficiency": carried.transfer.get("host_to_device_efficiency"),
                  "gpu_peer_access": det.peer_access[0],
                  "fresh_host_bytes_per_s": carried.transfer.get("fresh_host_bytes_per_s")},
        compute_memory_overlap=carried.compute_memory_overlap, sources=sources)


def _gpu_counts(det: Detected) -> str:
    models: dict[str, int] = {}
    for g in det.gpus:
        models[g.model] = models.get(g.model, 0) + 1
    return ", ".join(f"{n}x {m}" for m, n in models.items())


def _gb(x: float) -> str:
    return f"{x / 1e9:.4g} GB"


def detected_yaml(det: Detected, name: str | None = None, host: str = HOST_PRESETS[0]) -> str:
    """The YAML text of [`detected_spec`][cluster.detect.detected_spec], every figure with its provenance in a comment (``read``,
    ``datasheet``, ``assumed``, ``estimated``, ``carried from``), loadable by
    [`cluster.spec.ClusterSpec.from_yaml`][cluster.spec.ClusterSpec.from_yaml]; the host terms from ``host``
    ([`carried_terms`][cluster.detect.carried_terms]).

    Raises:
        ValueError: an unknown ``host``."""
    import yaml

    carried = carried_terms(host)
    spec = detected_spec(det, name, carried)
    cpu = det.cpu
    lines = [f"# {spec.description}.", "# Written by `placement detect` (cluster/detect.py). Every figure says where it "
             "came from: READ on this machine, DATASHEET, ASSUMED or ESTIMATED (flagged), CARRIED from a preset.", "#",
             f"# /cpu:0 {cpu.model}:",
             f"# - model: {cpu.model_source}.",
             f"# - cores: {cpu.cores} ({cpu.sockets} socket(s), {cpu.threads} logical CPUs): {cpu.cores_source}.",
             f"# - clock: {cpu.clock.value / 1e9:g} GHz: {cpu.clock.provenance}.",
             f"# - FLOP/cycle: {cpu.flops_per_cycle.value:g} FP32 per core ({cpu.isa}): {cpu.flops_per_cycle.provenance}.",
             f"# - peak_flops = {cpu.cores} cores x {cpu.clock.value / 1e9:g} GHz x {cpu.flops_per_cycle.value:g} = "
             f"{cpu.peak_flops:.4g} FLOP/s.",
             f"# - memory_bandwidth {_gb(cpu.memory_bandwidth.value)}/s: {cpu.memory_bandwidth.provenance}.",
             f"# - memory_bytes {_gb(cpu.memory_bytes.value)}: {cpu.memory_bytes.provenance}."]
    lines.append(f"# GPUs: {det.gpu_note}.")
    for g in det.gpus:
        flag = " UNKNOWN CHIP, figures estimated (--allow-unknown): check them" if g.key is None else ""
        tensor = ", ".join(f"{k} {v / 1e12:g}" for k, v in g.tensor_peak_flops.items()) or "none"
        lines += [f"# /gpu:{g.index} {g.name!r} -> {g.model}{flag}:",
                  f"# - peak_flops {g.peak_flops.value / 1e12:g} TFLOP/s FP32: {g.peak_flops.provenance}.",
                  f"# - tensor_peak_flops (dense, TFLOP/s): {tensor}: {g.tensor_source}.",
                  f"# - memory_bandwidth {_gb(g.memory_bandwidth.value)}/s: {g.memory_bandwidth.provenance}.",
                  f"# - memory_bytes {_gb(g.memory_bytes.value)}: {g.memory_bytes.provenance}.",
                  *([f"# - datasheet source: {'; '.join(GPU_DATASHEETS[g.key].chip.sources)}."] if g.key else []),
                  f"# - link to /cpu:0: PCIe {g.host_link.gen}.0 x{g.host_link.width} = {_gb(g.host_link.bandwidth)}/s per "
                  f"direction (PCI-SIG: GT/s x lanes x encoding / 8): {g.host_link.provenance}."]
    for (i, j), f in sorted(det.gpu_pairs.items()):
        lines.append(f"# - /gpu:{i} <-> /gpu:{j}: {_gb(f.value)}/s per direction: {f.provenance}.")
    if det.gpus:
        lines += [f"# - latency_s {LINK_LATENCY_S:g} s on every link: assumed (an estimate, as cluster/servers.py).",
                  f"# - transfer.gpu_peer_access {str(det.peer_access[0]).lower()}: {det.peer_access[1]}."]
    lines += ["#", "# CARRIED (not detectable):"]
    if det.gpus:
        lines.append(f"# - gpu: from the shipped {carried.gpu_from} preset: "
                     + ", ".join(f"{k} {v:.6g}" for k, v in carried.gpu.items()) + ".")
    what = ("the K80 fit's chip-independent terms, TensorFlow 2017" if carried.cpu_from == "k80x2" else
            "fitted on real PyTorch steps on a lent H200's 16-vCPU Xeon host")
    lines.append(f"# - cpu: from the shipped {carried.cpu_from} preset ({what}): "
                 + ", ".join(f"{k} {v:.6g}" for k, v in carried.cpu.items()) + ".")
    if det.gpus:
        lines.append(f"# - transfer: from {carried.transfer_from}: "
                     + ", ".join(f"{k} {v:.6g}" for k, v in carried.transfer.items()) + ".")
    lines.append(f"# - compute_memory_overlap {str(carried.compute_memory_overlap).lower()}, {carried.cpu_from}'s.")
    if carried.note:
        lines.append(f"# - NOTE: {carried.note}.")
    lines += ["#", "# SOFTWARE terms of PyTorch (carried from cluster/servers.py PYTORCH_TERMS; named, not fitted):"]
    lines += [f"# - {k} = {v}: {why}" + (f" (the CPU's; the GPU's is carried from {carried.gpu_from})"
                                          if k in carried.gpu and det.gpus else "") + "."
              for k, (v, why) in PYTORCH_TERMS.items()
              if k not in carried.cpu and (k not in carried.transfer or not det.gpus)]
    lines += ["# - allocator_overhead = 1 (PyTorch's caching allocator is not modelled)."]
    if det.unknown:
        lines += ["#", f"# WARNING: unknown GPU(s) {', '.join(det.unknown)}: their figures are estimates, not datasheet "
                       "values (written because of --allow-unknown)."]
    data = spec.model_dump(mode="json", exclude_defaults=False)
    for dev in data["devices"]:
        for k in ("tf_device", "compute_pool"):
            dev.pop(k, None)
    data.pop("fit", None)
    return "\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False, width=120)


def summary(det: Detected) -> str:
    """One line: what was detected (CPU cores, clock, ISA, peak in TFLOP/s, RAM in GB; each GPU model)."""
    cpu = det.cpu
    text = (f"CPU {cpu.model}: {cpu.cores} cores x {cpu.clock.value / 1e9:g} GHz x {cpu.flops_per_cycle.value:g} FLOP/cycle "
            f"({cpu.isa}) = {cpu.peak_flops / 1e12:.3g} TFLOP/s, {cpu.memory_bandwidth.value / 1e9:.4g} GB/s"
            f"{' (assumed)' if cpu.memory_bandwidth.provenance.startswith('assumed') else ''}, "
            f"{cpu.memory_bytes.value / 1e9:.3g} GB RAM")
    if not det.gpus:
        return f"{text}; {det.gpu_note}"
    gpus = _gpu_counts(det)
    links = sorted({f"PCIe {g.host_link.gen}.0 x{g.host_link.width}" for g in det.gpus})
    unknown = f" (UNKNOWN, estimated: {', '.join(det.unknown)})" if det.unknown else ""
    return f"{text}; GPUs {gpus}{unknown} on {', '.join(links)}"
