"""Reading what a machine says about itself, for ``placement detect`` ([`cluster.detect`][cluster.detect]):
``/proc/cpuinfo``, ``lscpu``, ``/proc/meminfo``, a GPU's PCIe link in sysfs, ``nvidia-smi topo -m``.
Each reader returns ``None`` (or an empty result) where the machine does not tell, never a guess.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cluster.datasheets import PCIE_GT_S, pcie_bandwidth


class DetectError(ValueError):
    """Something could not be detected and no flagged assumption was allowed (one line)."""


NVIDIA_SMI_TIMEOUT_S = 20
"""Seconds ``lscpu`` or ``nvidia-smi`` may take before it is given up on."""


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """The processor blocks of a ``/proc/cpuinfo`` text, each ``{key: value}`` (keys as written, e.g.
    ``model name``, ``physical id``, ``flags``); lines outside a ``processor`` block (ARM's ``Hardware``)
    go into every block that lacks them."""
    blocks: list[dict[str, str]] = []
    common: dict[str, str] = {}
    current: dict[str, str] = {}
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if "processor" in current:
                blocks.append(current)
            else:
                common.update(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip()] = value.strip()
    return [{**common, **b} for b in blocks]


def parse_lscpu(text: str) -> dict[str, str]:
    """``lscpu``'s ``Key: value`` lines as a dict (``Model name``, ``Socket(s)``, ``CPU max MHz``...)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def parse_meminfo(text: str) -> float:
    """``MemTotal`` of a ``/proc/meminfo`` text, in bytes (the kernel's ``kB`` is 1024 bytes).

    Raises:
        DetectError: no ``MemTotal`` line.
    """
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.MULTILINE)
    if not m:
        raise DetectError("no 'MemTotal: N kB' line in the meminfo text")
    return int(m.group(1)) * 1024.0


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def host_cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """This machine's CPU model as the kernel names it (``/proc/cpuinfo``'s first ``model name``, e.g.
    ``AMD EPYC``), else ``platform.processor()``, else ``platform.machine()``: the label beside a figure
    per CPU-second, which moves with the machine (learners' ``placements_per_cpu_s``)."""
    import platform

    text = _read(cpuinfo)
    blocks = parse_cpuinfo(text) if text else []
    return (blocks[0].get("model name", "") if blocks else "") or platform.processor() or platform.machine()


def run_lscpu() -> str | None:
    """The output of ``lscpu`` in the C locale, or ``None`` where it is missing or fails."""
    if not shutil.which("lscpu"):
        return None
    try:
        done = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S,
                              env={**os.environ, "LC_ALL": "C"}, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _int(text: str | None, base: int = 10) -> int | None:
    try:
        return int(str(text).strip(), base)
    except (TypeError, ValueError):
        return None


def _float(text: str | None) -> float | None:
    try:
        return float(str(text).strip().replace(",", "."))
    except (TypeError, ValueError):
        return None


def _pcie_gen(speed_text: str | None) -> int | None:
    m = re.match(r"\s*([\d.]+)\s*GT/s", speed_text or "")
    if not m:
        return None
    gts = float(m.group(1)) * 1e9
    return next((g for g, v in PCIE_GT_S.items() if abs(v - gts) < 0.1e9), None)


@dataclass(frozen=True)
class PcieLink:
    """A GPU's PCIe link: generation, lanes, bandwidth per direction (bytes/s) and where they came from."""

    gen: int
    width: int
    provenance: str

    @property
    def bandwidth(self) -> float:
        """Bytes/s per direction ([`pcie_bandwidth`][cluster.datasheets.pcie_bandwidth])."""
        return pcie_bandwidth(self.gen, self.width)


def read_pcie_link(bus_id: str, sys_root: str | Path = "/sys") -> PcieLink | None:
    """The PCIe link of the PCI function ``bus_id`` (``0000:18:00.0``) from
    ``<sys_root>/bus/pci/devices/<bus_id>/max_link_speed`` and ``max_link_width`` (the link the GPU trains
    to under load), each capped by its upstream port's (the parent folder in ``/sys/devices``); ``None``
    where they are not readable. ``current_link_*`` is reported in the provenance only: a GPU lowers its
    link speed when idle."""
    dev = Path(sys_root) / "bus/pci/devices" / bus_id

    def link(folder: Path, kind: str) -> tuple[int | None, int | None]:
        return (_pcie_gen(_read(folder / f"{kind}_link_speed")), _int(_read(folder / f"{kind}_link_width")))

    gen, width = link(dev, "max")
    if gen is None or not width:
        gen, width = link(dev, "current")
        if gen is None or not width:
            return None
        return PcieLink(gen, width, f"read: {dev}/current_link_speed and current_link_width (no max_link_*)")
    why = f"read: {dev}/max_link_speed and max_link_width"
    try:
        upstream = dev.resolve().parent
    except OSError:
        upstream = dev.parent
    if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", upstream.name):
        ugen, uwidth = link(upstream, "max")
        if ugen and uwidth and (ugen < gen or uwidth < width):
            gen, width = min(gen, ugen), min(width, uwidth)
            why += f", capped by the upstream port {upstream.name}'s"
    current, cwidth = (_read(dev / "current_link_speed") or "").strip(), _int(_read(dev / "current_link_width"))
    if current and cwidth:
        why += f" (current_link {current} x{cwidth} when read)"
    return PcieLink(gen, width, why)


def parse_nvidia_topo(topo_text: str, index_text: str) -> dict[tuple[str, str], int]:
    """NVLinks between GPU pairs from ``nvidia-smi topo -m`` (the matrix: ``NV<k>`` = k bonded links) and
    ``nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader`` (``0, 00000000:18:00.0``):
    ``{(bus id, bus id): links}`` with bus ids as ``0000:18:00.0``, for pairs joined by NVLink."""
    bus_of: dict[int, str] = {}
    for line in index_text.splitlines():
        idx, _, bus = line.partition(",")
        m = re.fullmatch(r"\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-7])\s*", bus)
        if _int(idx) is not None and m:
            d, b, s, f = (int(x, 16) for x in m.groups())
            bus_of[int(idx)] = f"{d:04x}:{b:02x}:{s:02x}.{f}"
    rows = [re.sub(r"\x1b\[[0-9;]*m", "", ln).split() for ln in topo_text.splitlines()]  # no underline codes
    header = next((r for r in rows if "GPU0" in r and "X" not in r), None)
    if header is None:
        return {}
    cols = [int(h[3:]) for h in header if re.fullmatch(r"GPU\d+", h)]
    out: dict[tuple[str, str], int] = {}
    for cells in rows:
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]) or "X" not in cells:
            continue
        row = int(cells[0][3:])
        for col, cell in zip(cols, cells[1:1 + len(cols)]):
            m = re.fullmatch(r"NV(\d+)", cell)
            if m and row in bus_of and col in bus_of and row != col:
                out[(bus_of[row], bus_of[col])] = int(m.group(1))
    return out


def run_nvidia_topo() -> tuple[str, str] | None:
    """``nvidia-smi topo -m`` and the index-to-bus-id query ([`parse_nvidia_topo`][cluster.machine_readers.parse_nvidia_topo]), or ``None`` where
    ``nvidia-smi`` is missing or fails (it is optional)."""
    if not shutil.which("nvidia-smi"):
        return None
    out = []
    for args in (["topo", "-m"], ["--query-gpu=index,pci.bus_id", "--format=csv,noheader"]):
        try:
            done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True,
                                  timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode != 0:
            return None
        out.append(done.stdout)
    return out[0], out[1]
