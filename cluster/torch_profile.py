"""Profile this machine for [`cluster.torch_calibrate`][cluster.torch_calibrate]: real PyTorch steps written in the shared format.

[`collect`][cluster.torch_profile.collect] measures what ``../shared/measurements/h200-2026-11-26`` holds (its README says how each
figure was taken; this is the same protocol, so [`cluster.torch_calibrate.fit_from_profile`][cluster.torch_calibrate.fit_from_profile] reads
the folder as it reads that one):

* ``steps.json``: ``eager`` rows, each model's eager step (``zero_grad(set_to_none=True)``, forward to
  the loss, ``backward()``, ``optimizer.step()``) on ``cuda`` with ``foreach=False`` (the single-tensor
  update the capture models) and ``foreach=True``, and ResNet-50 on the CPU: warm-up steps (3, or 1
  when the first took over 4 s), then up to ``max_steps`` timed steps within ``budget_s``, each between
  two ``torch.cuda.synchronize()``; ``median_s``, ``min_s``, ``times_s``, ``first_s`` and
  ``peak_bytes`` (``torch.cuda.max_memory_allocated``, GPU only).
* ``prof_<model>_shapes.json``: ``torch.profiler`` (CPU and CUDA activities, ``record_shapes``) over one
  eager GPU step after the warm-up; rows of ``key_averages(group_by_input_shape=True)``: ``name``,
  ``count``, ``shapes``, ``self_device_us``, ``self_cpu_us``.
* ``cpuprof_<model>.json``: one eager CPU step under the profiler (CPU activity) after one unprofiled
  step: ``wall_s`` and the rows.
* ``copies.json``: one tensor of ``bytes`` host to device (``h2d``), back (``d2h``) and
  ``tensor.to("cuda")`` allocating its result (``to_cuda_new``), pageable and pinned host memory,
  and ``tensor.to("cpu")`` into new pageable host memory (``to_cpu_new``: what a placed step's copy to
  the host does; fresh pages cost more than a copy into a reused buffer), median of 30 (up to 1 MiB)
  or 8 copies after 2 warm-ups.
* ``env.json``: torch and CUDA versions, the GPU, the thread count, the TF32 switches, ``/proc/meminfo``'s
  first lines and ``lscpu``.

The models are [`cluster.torch_calibrate.PROFILE_MODELS`][cluster.torch_calibrate.PROFILE_MODELS] (GPT-2 small at [8, 1024] with Adam,
ResNet-50 at [32, 3, 224, 224] with SGD), built by [`compgraph.torch_models`][compgraph.torch_models] with their own
initialization under ``torch.manual_seed(seed)``; inputs random (token ids uniform over the vocabulary,
images N(0, 1), labels uniform). About 1-2 minutes on one H100 (GPT-2's CPU step is about 12 s).

Usage on the machine to profile: ``python -m cluster.torch_profile OUT_DIR [--no-cpu]``; then anywhere
``placement calibrate --torch --from-profile OUT_DIR --cluster BASE --output PRESET.yaml``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

COPY_SIZES = (4096, 65536, 1 << 20, 16 << 20, 256 << 20)
"""Bytes of the copied tensors (4 KiB to 256 MiB, as the shared set)."""


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _build(model: str, device: str, seed: int, size: str | None = None):
    """``(module, inputs, optimizer kind)`` of a profile model on ``device`` (``size``: another benchmark size)."""
    import torch

    from compgraph import torch_models
    from compgraph.models import BENCHMARKS
    from cluster.torch_calibrate import PROFILE_MODELS

    bench, default = PROFILE_MODELS[model]
    cfg: Any = BENCHMARKS[bench].sizes[size or default]
    token = torch_models.BUILD_DEVICE.set("cpu")
    try:
        torch.manual_seed(seed)
        module, args = torch_models.resnet50(cfg) if bench == "resnet50_torch" else torch_models.gpt(cfg)
    finally:
        torch_models.BUILD_DEVICE.reset(token)
    g = torch.Generator().manual_seed(seed + 1)
    inputs: tuple = ((torch.randn(args[0].shape, generator=g), torch.randint(0, cfg.classes, args[1].shape, generator=g))
                     if bench == "resnet50_torch" else tuple(torch.randint(0, cfg.vocab, a.shape, generator=g) for a in args))
    return module.to(device).train(), tuple(x.to(device) for x in inputs), ("sgd" if bench == "resnet50_torch" else "adam")


def _optimizer(kind: str, module, foreach: bool):
    import torch

    if kind == "sgd":
        return torch.optim.SGD(module.parameters(), lr=0.01, foreach=foreach)
    return torch.optim.Adam(module.parameters(), foreach=foreach)


def _step(module, inputs, opt) -> None:
    opt.zero_grad(set_to_none=True)
    module(*inputs).backward()
    opt.step()


def _timed_steps(module, inputs, opt, max_steps: int, budget_s: float) -> dict:
    """Warm-up (3 steps, 1 if the first took over 4 s), then up to ``max_steps`` timed steps within ``budget_s``."""
    t0 = time.perf_counter()
    _step(module, inputs, opt)
    _sync()
    first = time.perf_counter() - t0
    for _ in range(0 if first > 4 else 2):
        _step(module, inputs, opt)
    _sync()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_steps and (not times or time.perf_counter() - start < budget_s):
        t = time.perf_counter()
        _step(module, inputs, opt)
        _sync()
        times.append(time.perf_counter() - t)
    return {"first_s": first, "times_s": times, "median_s": statistics.median(times), "min_s": min(times)}


def _rows(prof, device_time: bool) -> list[dict]:
    out = []
    for e in prof.key_averages(group_by_input_shape=True):
        row = {"name": e.key, "count": int(e.count), "shapes": str(e.input_shapes),
               "self_cpu_us": float(e.self_cpu_time_total)}
        if device_time:
            row["self_device_us"] = float(getattr(e, "self_device_time_total", 0.0) or 0.0)
        out.append(row)
    return out


def _env() -> dict:
    import torch

    def text(cmd: list[str]) -> list[str]:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.splitlines()
        except (OSError, subprocess.SubprocessError):
            return []

    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()[:3]
    except OSError:
        meminfo = []
    return {"torch": torch.__version__, "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "threads": torch.get_num_threads(), "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_conv": bool(torch.backends.cudnn.allow_tf32), "meminfo": meminfo,
            "lscpu_summary": text(["lscpu"]), "date": time.strftime("%Y-%m-%d"),
            "nvidia_smi": text(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,memory.total",
                                "--format=csv"])}


def copies(repeats_small: int = 30, repeats_large: int = 8) -> list[dict]:
    """Host<->device copy medians (``copies.json`` rows, module docstring)."""
    import torch

    rows = []
    for nbytes in COPY_SIZES:
        reps = repeats_small if nbytes <= (1 << 20) else repeats_large
        host = torch.randn(nbytes // 4)
        dev = torch.empty(nbytes // 4, device="cuda")
        for pinned in (False, True):
            src = host.pin_memory() if pinned else host
            dst = torch.empty_like(src, pin_memory=pinned)
            cases = {"h2d": lambda: dev.copy_(src, non_blocking=pinned), "d2h": lambda: dst.copy_(dev, non_blocking=pinned),
                     "to_cuda_new": lambda: src.to("cuda", non_blocking=pinned)}
            if not pinned:  # what the placed step's aten._to_copy to the host does: a new pageable tensor each time
                cases["to_cpu_new"] = lambda: dev.to("cpu")
            for direction, fn in cases.items():
                for _ in range(2):
                    fn()
                _sync()
                times = []
                for _ in range(reps):
                    _sync()
                    t = time.perf_counter()
                    fn()
                    _sync()
                    times.append(time.perf_counter() - t)
                med = statistics.median(times)
                row = {"bytes": nbytes, "pinned": pinned, "dir": direction, "median_s": med}
                if direction not in ("to_cuda_new", "to_cpu_new"):
                    row["GBps"] = nbytes / med / 1e9
                rows.append(row)
    return rows


def collect(out_dir: str | Path, models: tuple[str, ...] = ("gpt2", "resnet50"), cpu: bool = True, seed: int = 0,
            max_steps: int = 10, budget_s: float = 15.0, device: str = "cuda", size: str | None = None) -> Path:
    """Measure this machine into ``out_dir`` (module docstring); files are written as each is done.

    ``device="cpu"`` and ``size="small"`` rehearse the whole protocol without a GPU (what the tests run):
    the "cuda" rows are then measured on the CPU, no copies are made, and the folder calibrates nothing.

    Raises:
        RuntimeError: ``device`` is ``cuda`` and there is no CUDA device.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    gpu = device == "cuda"
    if gpu and not torch.cuda.is_available():
        raise RuntimeError("cluster.torch_profile: no CUDA device here (the profile needs one GPU)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "env.json").write_text(json.dumps(_env(), indent=1) + "\n")
    steps: dict = {"eager": [], "seed": seed}
    for model in models:
        for foreach in (False, True):
            module, inputs, kind = _build(model, device, seed, size)
            opt = _optimizer(kind, module, foreach)
            if gpu:
                torch.cuda.reset_peak_memory_stats()
            row = _timed_steps(module, inputs, opt, max_steps, budget_s)
            row.update(model=model, device="cuda", foreach=foreach, optimizer="sgd" if kind == "sgd" else "adam",
                       peak_bytes=int(torch.cuda.max_memory_allocated()) if gpu else None)
            steps["eager"].append(row)
            if not foreach:
                acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
                with profile(activities=acts, record_shapes=True) as prof:
                    _step(module, inputs, opt)
                    _sync()
                (out / f"prof_{model}_shapes.json").write_text(json.dumps(_rows(prof, True)) + "\n")
            del module, inputs, opt
            if gpu:
                torch.cuda.empty_cache()
        (out / "steps.json").write_text(json.dumps(steps, indent=1) + "\n")
        if cpu:
            module, inputs, kind = _build(model, "cpu", seed, size)
            opt = _optimizer(kind, module, False)
            if model == "resnet50":
                row = _timed_steps(module, inputs, opt, 5, budget_s)
                row.update(model=model, device="cpu", foreach=False, optimizer="sgd")
                steps["eager"].append(row)
                (out / "steps.json").write_text(json.dumps(steps, indent=1) + "\n")
            else:
                _step(module, inputs, opt)
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                t = time.perf_counter()
                _step(module, inputs, opt)
                wall = time.perf_counter() - t
            (out / f"cpuprof_{model}.json").write_text(json.dumps({"wall_s": wall, "rows": _rows(prof, False)}) + "\n")
            del module, inputs, opt
    (out / "copies.json").write_text(json.dumps(copies() if gpu else [], indent=1) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    """``python -m cluster.torch_profile OUT_DIR [--no-cpu]``: [`collect`][cluster.torch_profile.collect], printing each file's name."""
    import argparse

    ap = argparse.ArgumentParser(description="Profile this machine's GPU and host for placement calibrate --torch.")
    ap.add_argument("out_dir")
    ap.add_argument("--no-cpu", action="store_true", help="skip the CPU steps (GPT-2's takes about 12 s on 16 cores)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = collect(args.out_dir, cpu=not args.no_cpu)
    for p in sorted(out.iterdir()):
        print(p)
    print(f"profiled in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
