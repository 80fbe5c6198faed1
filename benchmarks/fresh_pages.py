"""Copies into new host memory against copies into a reused buffer, repeated: prints one JSON object.

Why: a placed PyTorch step copies every tensor it moves to the host into a new pageable tensor
(``aten._to_copy``), and glibc serves each allocation of 32 MiB and up with a new ``mmap``
(mallopt(3), ``DEFAULT_MMAP_THRESHOLD_MAX``) whose pages the kernel faults in and zeroes during the
copy. On the lent GPUs that cost came and went: a copy of 256 MiB from the GPU into new memory took
0.023 s in one run and 0.269 s in the next on one H100 (``benchmarks/results/h100-2026-11-26``).
The cluster spec prices it as ``transfer.fresh_host_bytes_per_s``; this script measures how often it
is paid and records what decides it on the host: transparent huge pages (the kernel's
``/sys/kernel/mm/transparent_hugepage`` settings; a 2 MiB page is zeroed in one fault), the
``AnonHugePages`` the process holds, glibc's version, and PyTorch's ``THP_MEM_ALLOC_ENABLE``
(c10's CPU allocator aligns allocations of 2 MiB and up to 2 MiB and asks for huge pages).

For each size (bytes), ``--repeats`` times, in this order: a copy into new memory (``src.to(dst_device)``),
then into a buffer allocated once (``buf.copy_(src)``). With CUDA the source is on ``cuda:0`` and the
copies go to the host; without it the source is a host tensor and the copies are host-to-host
(``clone`` and ``copy_``), which pays the same faults: that form checks the script (a test runs it).

``--history MIB``: before measuring, leave the C heap as a long-running process leaves it
([`leave_heap_history`][cluster.torch_real.leave_heap_history]: tensors below glibc's dynamic mmap threshold
allocated and freed under a live one), and with ``--trim`` hand the free pages back (``malloc_trim(0)``).
This is what decided it (found on the development machine, 2026-11-27): glibc's ``malloc`` serves a large
request from a free chunk of its heap before it maps new memory, so after such a history a copy of 98 MiB
into "new" memory lands in pages already faulted in. Each copy's minor page faults
(``getrusage``'s ``ru_minflt``) are recorded (``new_faults``): about ``bytes / 4096`` when it paid, 0 when not.

``--step``: also the pattern of a placed step with a gradient sum on the host (ResNet-50's ``cpu_last``
runs 14 of them on tensors of 49-98 MiB): two copies into new host memory, their sum on the host (a new
tensor), the sum copied back, each part timed (``step_rows``: ``to_host_s``, ``add_s``, ``back_s``).

Usage: ``python benchmarks/fresh_pages.py [--step] [--history MIB [--trim]] [--sizes 16,64,256] (MiB) [--repeats 10] [--json PATH]``.
JSON: ``{"host": {...}, "device", "rows": [{"bytes", "new_s": [...], "reused_s": [...], "new": spread,
"reused": spread, "fresh_s_per_byte", "paid": count of new copies at least 1.5x the reused median}]}``
(times in seconds; ``spread`` as [`cluster.torch_real.spread`][cluster.torch_real.spread]).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

THP_DIR = Path("/sys/kernel/mm/transparent_hugepage")
PAID_FACTOR = 1.5
"""A copy into new memory counts as having paid for fresh pages when it takes at least this many times
the median copy into the reused buffer."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def anon_huge_bytes() -> int | None:
    """This process's ``AnonHugePages`` (bytes, ``/proc/self/smaps_rollup``), ``None`` where unreadable."""
    text = _read(Path("/proc/self/smaps_rollup"))
    for line in (text or "").splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) * 1024
    return None


def host_settings() -> dict:
    """What decides whether a copy pays for fresh pages: THP's settings, glibc, ``THP_MEM_ALLOC_ENABLE``."""
    return {"thp_enabled": _read(THP_DIR / "enabled"), "thp_defrag": _read(THP_DIR / "defrag"),
            "thp_khugepaged_defrag": _read(THP_DIR / "khugepaged" / "defrag"),
            "glibc": "-".join(platform.libc_ver()), "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE"),
            "MALLOC_MMAP_THRESHOLD_": os.environ.get("MALLOC_MMAP_THRESHOLD_"), "kernel": platform.release(),
            "cpus": os.cpu_count()}


def measure(sizes: list[int], repeats: int) -> dict:
    """The measurement (module docstring); ``sizes`` in bytes."""
    import torch

    from cluster.torch_real import minor_faults, spread

    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rows = []
    for nbytes in sizes:
        n = nbytes // 4
        src = torch.randn(n, device="cuda" if cuda else "cpu")
        buf = torch.empty(n)
        new_s, reused_s, faults = [], [], []
        huge_before = anon_huge_bytes()
        for _ in range(repeats):
            sync()
            f0 = minor_faults()
            t0 = time.perf_counter()
            out = src.to("cpu") if cuda else src.clone()
            sync()
            new_s.append(time.perf_counter() - t0)
            f1 = minor_faults()
            faults.append(None if f0 is None or f1 is None else f1 - f0)
            del out
            t0 = time.perf_counter()
            buf.copy_(src)
            sync()
            reused_s.append(time.perf_counter() - t0)
        new, reused = spread(new_s), spread(reused_s)
        extra = new["median_s"] - reused["median_s"]
        rows.append({"bytes": nbytes, "new_s": new_s, "reused_s": reused_s, "new": new, "reused": reused,
                     "new_faults": faults,
                     "fresh_s_per_byte": extra / nbytes if extra > 0 else 0.0,
                     "paid": sum(t >= PAID_FACTOR * reused["median_s"] for t in new_s),
                     "anon_huge_bytes_before": huge_before, "anon_huge_bytes_after": anon_huge_bytes()})
        del src, buf
    return {"host": host_settings(), "device": torch.cuda.get_device_name(0) if cuda else "cpu",
            "torch": torch.__version__, "repeats": repeats, "rows": rows}


def measure_step(sizes: list[int], repeats: int) -> list[dict]:
    """The host gradient sum of ``--step`` (module docstring), ``repeats`` times per size (bytes)."""
    import torch

    from cluster.torch_real import spread

    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    home = "cuda" if cuda else "cpu"
    rows = []
    for nbytes in sizes:
        x, y = (torch.randn(nbytes // 4, device=home) for _ in range(2))
        parts: dict[str, list[float]] = {"to_host_s": [], "add_s": [], "back_s": []}
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            a, b = (x.to("cpu"), y.to("cpu")) if cuda else (x.clone(), y.clone())
            sync()
            t1 = time.perf_counter()
            c = a + b
            t2 = time.perf_counter()
            d = c.to(home) if cuda else c.clone()
            sync()
            t3 = time.perf_counter()
            parts["to_host_s"].append(t1 - t0)
            parts["add_s"].append(t2 - t1)
            parts["back_s"].append(t3 - t2)
            del a, b, c, d
        rows.append({"bytes": nbytes, **parts, **{k[:-2]: spread(v) for k, v in parts.items()}})
        del x, y
    return rows


def main(argv: list[str] | None = None) -> dict:
    """Parse ``argv``, measure, print the JSON (and write it to ``--json``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16,64,256", help="MiB, comma-separated")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--json", default=None)
    ap.add_argument("--step", action="store_true", help="also time a host gradient sum between copies")
    ap.add_argument("--history", type=float, default=None, metavar="MIB",
                    help="first leave this many MiB of freed heap memory, as a long-running process does")
    ap.add_argument("--trim", action="store_true", help="with --history: malloc_trim(0) after it")
    args = ap.parse_args(argv)
    try:
        sizes = [int(float(s) * 2**20) for s in args.sizes.split(",") if s]
    except ValueError:
        ap.error(f"--sizes: expected MiB numbers separated by commas, got {args.sizes!r}")
    if not sizes or min(sizes) <= 0 or args.repeats < 1:
        ap.error(f"--sizes {args.sizes!r} and --repeats {args.repeats}: need positive sizes and at least one repeat")
    if args.trim and args.history is None:
        ap.error("--trim: only with --history")
    from cluster.torch_real import leave_heap_history, malloc_trim

    history: dict | None = None
    if args.history is not None:
        try:
            history = leave_heap_history(int(args.history * 2**20))
        except ValueError as exc:
            ap.error(f"--history {args.history:g}: {exc}")
        if args.trim:
            history["malloc_trim"] = malloc_trim()
    result = measure(sizes, args.repeats)
    if history is not None:
        result["history"] = {k: v for k, v in history.items() if k != "keep"}
    if args.step:
        result["step_rows"] = measure_step(sizes, args.repeats)
    text = json.dumps(result)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return result


if __name__ == "__main__":
    main()
