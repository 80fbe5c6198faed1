"""Real execution of a PyTorch training step: run a placement on this machine's devices and time it.

The step is the captured one ([`compgraph.torch_step.capture_training_step`][compgraph.torch_step.capture_training_step]: forward, loss,
backward and the optimizer's update at the ATen level), run placed by
[`compgraph.torch_step.placed_module`][compgraph.torch_step.placed_module]: each op on the torch device of its spec device, an
``aten._to_copy`` wherever an op reads a tensor that lives on another device. It is the step
``placement export --format torch`` writes, and it trains exactly as eager PyTorch does
(``tests/test_torch_placed.py``: loss, parameters, buffers and optimizer state after one step).

**Devices** ([`torch_devices`][cluster.torch_real.torch_devices]): a spec device ``/cpu:0`` runs on ``cpu``, ``/cpu:K`` (K > 0)
on ``cpu:K`` (the same memory and cores, but a distinct device to the placed step, so a transfer
between two logical CPUs is a real copy, as TensorFlow's logical CPUs make one), ``/gpu:K`` on
``cuda:K``. A spec device this machine lacks is refused in one line ([`DeviceUnavailableError`][cluster.torch_real.DeviceUnavailableError]);
``devices=[...]`` maps them by hand (e.g. ``["cpu", "cpu:1"]`` runs a CPU+GPU spec on two logical
CPUs, the copies kept).

**Tensors** ([`step_tensors`][cluster.torch_real.step_tensors]): the module is built again on the CPU under
``torch.manual_seed(seed)``, so its parameters are initialized as its own constructors and
``reset_parameters`` do (a module its function builds on the ``meta`` device is materialized with
``to_empty``, parameters drawn N(0, 0.02), buffers zero, then every submodule's
``reset_parameters``/``reset_running_stats``); the optimizer state is zero (the first step); the
inputs are drawn from the seed by dtype and shape: floats N(0, 1), booleans fair coins, integer ids
uniform below the size of what they index ([`int_input_bounds`][cluster.torch_real.int_input_bounds]: the embedding table, the
classes of a loss, the dimension an ``index_select``/``gather`` reads), or a bound given per input
(``int_bounds``, as ``--int-bound input/0=N``). Each measurement starts from those same tensors.

**Timing** ([`TorchRealEnvironment.measure`][cluster.torch_real.TorchRealEnvironment.measure]): ``warmup`` steps, then ``repeats`` timed steps,
each ``time.perf_counter`` around the call and a ``torch.cuda.synchronize`` of every CUDA device the
placement uses (the papers' protocol: 2017 Sec. 3.4 runs 10 steps and drops the first). The step
time is the **median** of the timed steps, with the quartiles, the interquartile range and the
count in every record ([`TorchMeasurement`][cluster.torch_real.TorchMeasurement]), because a step with ops on the host CPU is noisy:
on the H200 of ``../shared/measurements/h200-2026-11-26`` the same CPU+GPU placement moved by up to
3.5x between runs, a single-GPU one by under 1%. The torch thread count is set when given
(``threads``) and recorded either way.

**Host memory** (found 2026-11-27; `benchmarks/fresh_pages.py --history`): a step copies every tensor it
moves to the host into a new pageable tensor, and glibc's ``malloc`` serves a large request from a free
chunk of its heap before it maps new memory (mallopt(3): the heap grows below the dynamic mmap
threshold, which rises to 32 MiB as mapped chunks are freed; this is the main arena's ``brk`` heap,
which keeps freed memory below a live chunk; a thread on another arena gets heaps of at most 64 MiB
that glibc trims). In a process that ran other steps before, such chunks hold hundreds of MB already
faulted in, and a copy of 98 MiB into them took 12 ms on the development machine's CPU, 0 page faults;
in a new process 46 ms and 25,089 faults (one a 4 KiB page, each zeroed by the kernel). So a
measurement can depend on what this process ran before it: on the lent GPUs ResNet-50's ``cpu_last``
took 0.53-0.59 s inside ``benchmarks/gpu_truth.py`` after GPT-2's placements and 1.30 s in a process
of its own. Each record keeps the minor page faults of each timed
step (``page_faults``), and ``isolate=True`` measures each placement in a process of its own, which is
what a training run of that placement pays. ``host_memory="reuse"`` (a named option, not PyTorch's
default) tells glibc to keep freed memory and never map a large tensor anew
([`reuse_host_memory`][cluster.torch_real.reuse_host_memory]), so after the warm-up every copy to the host
lands in pages already faulted in: a toy step that copies two 36 MiB activations between ``cpu`` and
``cpu:1``, each in a process of its own on the development machine's CPU (load 2), went from 119,821
faults and 0.401 s a step (IQR 0.026 s, 5 steps) to 0-1 faults and 0.0729 s (IQR 0.001 s). Most
copies, not always all: on the CI machine of 2026-11-28 the same toy step, three steps in a process of
its own, still faulted in one of its 36 MiB tensors a step (9,216 faults; not traced there: a large
allocation on a thread of another arena, whose emptied heap glibc unmaps, would do it).

**Failures**: ``torch.OutOfMemoryError`` (and the CPU allocator's "can't allocate memory") is an OOM
result (``oom=True``), not a crash; a step over ``time_limit_s`` ends the measurement with
``step_time_s=None`` and its reason in ``failure`` (the limit is checked after each step: a step
is not interrupted). Peak memory is ``torch.cuda.max_memory_allocated`` per CUDA device over the
measurement (0 for a CPU device, where PyTorch keeps no such count: ``peak_memory_measured``).
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cluster.environment import Measurement, measure_rows
from cluster.spec import ClusterSpec
from compgraph.ir import Grouping, OpGraph

DEFAULT_REPEATS = 5
"""Timed steps per measurement when not given (``--repeats``): five fit a 2-core CI machine."""
DEFAULT_WARMUP = 1
"""Steps run and dropped before the timed ones (2017 Sec. 3.4 drops 1 of 10)."""
DEFAULT_TIME_LIMIT_S = 300.0
"""Seconds one step may take before the placement is failed (``--time-limit``)."""

#: View-like and copying ops an integer input passes through unchanged on its way to its use.
_PASS_THROUGH = frozenset("""view _unsafe_view reshape flatten t transpose permute expand unsqueeze squeeze slice
    select clone _to_copy contiguous alias detach lift_fresh_copy""".split())


class DeviceUnavailableError(ValueError):
    """A spec device maps to a torch device this machine does not have."""


@dataclass
class TorchMeasurement(Measurement):
    """A placement of a PyTorch step measured for real.

    Attributes (besides [`Measurement`][cluster.environment.Measurement]'s; ``step_time_s`` is the median):
        step_times_s: seconds of each timed step ``[steps]`` (on OOM or failure, those that finished).
        q1_s, q3_s, iqr_s: the quartiles of ``step_times_s`` and their difference (seconds; ``None``
            with fewer than two steps).
        min_s, max_s: fastest and slowest timed step (seconds).
        steps: timed steps (``repeats`` unless a step failed).
        warmup_s: seconds of each dropped warm-up step.
        threads: ``torch.get_num_threads()`` while measuring.
        devices: torch device of each spec device.
        peak_memory_measured: per spec device, whether ``peak_memory_bytes`` is a reading (CUDA).
        failure: why the placement failed (over the time limit), else ``None``.
        losses: the loss of every step run, warm-up included.
        page_faults: minor page faults of the measuring process during each timed step ``[steps]``
            (``getrusage``'s ``ru_minflt``, every thread): a copy to the host into memory the kernel
            has to fault in and zero counts ``bytes / 4096``; one into memory glibc reused counts none
            (module docstring, "Host memory").
        isolated: measured in a process of its own (``isolate=True``).
        host_memory: ``default`` or ``reuse`` (``host_memory`` of the environment).
    """

    step_times_s: list[float] = field(default_factory=list)
    q1_s: float | None = None
    q3_s: float | None = None
    iqr_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    steps: int = 0
    warmup_s: list[float] = field(default_factory=list)
    threads: int = 0
    devices: list[str] = field(default_factory=list)
    peak_memory_measured: list[bool] = field(default_factory=list)
    failure: str | None = None
    losses: list[float] = field(default_factory=list)
    page_faults: list[int] = field(default_factory=list)
    isolated: bool = False
    host_memory: str = "default"

    @property
    def page_faults_per_step(self) -> float | None:
        """Median of ``page_faults`` (``None`` without timed steps)."""
        return float(statistics.median(self.page_faults)) if self.page_faults else None

    def log_fields(self) -> dict:
        """What the placement log keeps beside the step time and OOM flag: the spread and count."""
        return {"step_times_s": self.step_times_s, "iqr_s": self.iqr_s, "steps": self.steps,
                "threads": self.threads, "failure": self.failure, "peak_memory_bytes": self.peak_memory_bytes,
                "page_faults_per_step": self.page_faults_per_step, "isolated": self.isolated,
                "host_memory": self.host_memory}


def minor_faults() -> int | None:
    """Minor page faults of this process so far (``getrusage(RUSAGE_SELF).ru_minflt``: every thread's);
    ``None`` where the platform has no ``resource`` module (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def leave_heap_history(total_bytes: int, chunk_bytes: int = 24 << 20) -> dict:
    """Leave about ``total_bytes`` of free, faulted-in memory inside glibc's heap, as a process that has
    run other steps leaves it, and return what was done.

    One tensor of ``chunk_bytes`` is allocated and freed (a freed ``mmap`` chunk raises glibc's dynamic
    mmap threshold to its size, mallopt(3)); then ``total_bytes // chunk_bytes + 1`` tensors of that size
    come from the heap, each written; the one at the highest address stays alive (so the heap cannot
    shrink below it) and the others are freed. The live tensor is returned in ``"keep"`` and must be
    held by the caller.

    Raises:
        ValueError: ``chunk_bytes`` not in 1 MiB..32 MiB (above, glibc always maps anew) or ``total_bytes`` below it.
    """
    import torch

    if not (1 << 20 <= chunk_bytes <= 32 << 20):
        raise ValueError(f"chunk_bytes: must be 1-32 MiB (glibc's largest dynamic mmap threshold), got {chunk_bytes}")
    if total_bytes < chunk_bytes:
        raise ValueError(f"total_bytes: must be at least chunk_bytes ({chunk_bytes}), got {total_bytes}")
    first = torch.ones(chunk_bytes, dtype=torch.uint8)
    del first
    chunks = [torch.ones(chunk_bytes, dtype=torch.uint8) for _ in range(total_bytes // chunk_bytes + 1)]
    top = int(np.argmax([c.data_ptr() for c in chunks]))
    keep = chunks.pop(top)
    n = len(chunks)
    del chunks
    return {"chunk_bytes": chunk_bytes, "chunks": n, "keep": keep}


def malloc_trim() -> int | None:
    """``malloc_trim(0)`` of glibc (its free heap pages back to the kernel): its return value, ``None`` without glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return int(ctypes.CDLL(name or "libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return None


HOST_MEMORY = ("default", "reuse")
"""The real environment's ``host_memory`` settings (module docstring, "Host memory")."""

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt(3)'s parameter numbers (glibc's malloc.h)


def has_glibc() -> bool:
    """This process's C library is glibc (whose ``malloc`` the "Host memory" paragraph describes)."""
    import platform

    return platform.libc_ver()[0] == "glibc"


def reuse_host_memory() -> bool:
    """Make this process's glibc ``malloc`` keep what is freed and serve every request from its heap:
    ``mallopt(M_MMAP_MAX, 0)`` (no allocation gets a new ``mmap``, whose pages the kernel would fault in
    and zero on first touch) and ``mallopt(M_TRIM_THRESHOLD, INT_MAX)`` (freed memory is not handed back).
    For the rest of the process; its memory then never shrinks. The same as starting a process with
    ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647`` (mallopt(3)).

    Returns:
        ``True`` when glibc took both settings; ``False`` without glibc (another C library, Windows,
        macOS), where nothing changes.
    """
    import ctypes
    import ctypes.util

    if not has_glibc():
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
    except (OSError, AttributeError):
        return False


def spread(times: list[float]) -> dict:
    """``{"median_s", "q1_s", "q3_s", "iqr_s", "min_s", "max_s"}`` of step times (seconds; the
    quartiles ``None`` for fewer than two, everything ``None`` for none). Quartiles are
    `statistics.quantiles`' inclusive method (linear interpolation, as numpy's default)."""
    if not times:
        return {"median_s": None, "q1_s": None, "q3_s": None, "iqr_s": None, "min_s": None, "max_s": None}
    q1 = q3 = None
    if len(times) > 1:
        q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return {"median_s": float(statistics.median(times)), "q1_s": q1, "q3_s": q3,
            "iqr_s": None if q1 is None or q3 is None else q3 - q1, "min_s": min(times), "max_s": max(times)}


# ----------------------------------------------------------------------------- devices


def torch_devices(spec: ClusterSpec, devices: list[str] | None = None) -> list[str]:
    """The torch device each spec device runs on (module docstring): ``/cpu:0`` -> ``cpu``,
    ``/cpu:K`` -> ``cpu:K``, ``/gpu:K`` -> ``cuda:K``, by the device's ``tf_device`` where it names
    one (``/device:CPU:2`` -> ``cpu:2``); ``devices`` overrides (one per spec device).

    Raises:
        ValueError: ``devices`` of the wrong length or not torch device strings.
    """
    import torch

    if devices is not None:
        if len(devices) != len(spec.devices):
            raise ValueError(f"devices: {len(devices)} given, cluster {spec.name!r} has {len(spec.devices)}")
        for d in devices:
            try:
                torch.device(d)
            except (RuntimeError, TypeError):
                raise ValueError(f"devices: {d!r} is not a torch device (cpu, cpu:1, cuda:0)") from None
        return list(devices)
    out = []
    for dev in spec.devices:
        name, gpu = dev.name, dev.kind == "gpu"
        if dev.tf_device:  # the device it runs on for real, named for TensorFlow (cpu4's logical CPUs)
            name, gpu = dev.tf_device, "GPU" in dev.tf_device.upper()
        k = int(name.rsplit(":", 1)[-1]) if name.rsplit(":", 1)[-1].isdigit() else 0
        out.append(f"cuda:{k}" if gpu else ("cpu" if k == 0 else f"cpu:{k}"))
    return out


def check_devices(spec: ClusterSpec, devs: list[str]) -> None:
    """Refuse, in one line, a spec device whose torch device this machine lacks.

    Raises:
        DeviceUnavailableError: a ``cuda:K`` with no CUDA or fewer than ``K + 1`` CUDA devices.
    """
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for d, dev in zip(spec.devices, devs):
        t = torch.device(dev)
        if t.type == "cuda" and (t.index or 0) >= have:
            raise DeviceUnavailableError(
                f"cluster {spec.name!r}: device {d.name} runs on {dev}, but this machine has "
                f"{have} CUDA device(s); measure on a spec of this machine (`placement detect`) or map "
                "the devices by hand")
        if t.type not in ("cpu", "cuda"):
            raise DeviceUnavailableError(f"cluster {spec.name!r}: device {d.name} runs on {dev}: only cpu and cuda run here")


# ----------------------------------------------------------------------------- the step and its tensors


def is_torch_step(prepared) -> bool:
    """True for a prepared PyTorch step: a PyTorch benchmark or a user's ``--torch`` model (its front end's
    framework, [`compgraph.frontends.framework_of`][compgraph.frontends.framework_of], when it was prepared from a source)."""
    if getattr(prepared, "framework", None):
        return prepared.framework == "torch"
    bench = getattr(prepared, "benchmark", None)
    if bench is not None:
        return getattr(bench, "framework", "tf") == "torch"
    return getattr(prepared, "torch_source", None) is not None


def load_step(prepared):
    """``(captured step, build)`` of a prepared PyTorch step: the step captured again (the prepared
    graph keeps no ``torch.fx`` module; the same source and settings capture the same ops), and
    ``build()`` -> ``(module, example_args, optimizer)``, the module built anew on the CPU.

    Raises:
        ValueError: not a PyTorch step.
        compgraph.user_graph.UserGraphError: the user's function fails (the message names it).
    """
    from compgraph import torch_models
    from compgraph.frontends import capture_source

    if not is_torch_step(prepared):
        raise ValueError(f"{prepared.name}: not a PyTorch step (real execution of a TensorFlow graph is cluster.real)")
    bench = prepared.benchmark
    if bench is not None:
        from compgraph.frontends import BenchmarkSource

        step = capture_source(BenchmarkSource(model=bench.name, size=prepared.size))
        cfg = prepared.config

        def build():
            token = torch_models.BUILD_DEVICE.set("cpu")
            try:
                if bench.name == "resnet50_torch":
                    return (*torch_models.resnet50(cfg), "sgd")
                return (*torch_models.gpt(cfg), "adam")
            finally:
                torch_models.BUILD_DEVICE.reset(token)
        return step, build
    source = prepared.torch_source
    step = capture_source(source)

    def build_user():
        from compgraph.user_graph import UserGraphError, resolve_user_function

        fn, func_name = resolve_user_function(source.spec, "torch")
        token = torch_models.BUILD_DEVICE.set("cpu")
        try:
            module, args = fn()
        except Exception as e:
            raise UserGraphError(f"torch {source.spec!r}: {func_name}() failed: {type(e).__name__}: {e}") from e
        finally:
            torch_models.BUILD_DEVICE.reset(token)
        return module, tuple(args) if isinstance(args, (tuple, list)) else (args,), source.optimizer
    return step, build_user


def int_input_bounds(step) -> dict[str, int]:
    """Input op name (``input/K``) -> exclusive bound of the ids an integer input of a captured step
    may take, read from what it indexes (module docstring); inputs whose use tells none are absent."""
    import torch

    out: dict[str, int] = {}
    phs = [n for n in step.gm.graph.nodes if n.op == "placeholder"]
    for n in phs:
        name = step.holder[n.name]
        val = n.meta.get("val")
        if not name.startswith("input/") or not isinstance(val, torch.Tensor) or val.dtype.is_floating_point \
                or val.dtype == torch.bool:
            continue
        bound = None
        frontier = [n]
        seen = set()
        while frontier and bound is None:
            src = frontier.pop()
            for u in src.users:
                if u in seen or not isinstance(u.target, torch._ops.OpOverload):
                    continue
                seen.add(u)
                pk = u.target.overloadpacket.__name__
                if pk in _PASS_THROUGH:
                    frontier.append(u)
                    continue
                bound = _bound_of_use(pk, u, src)
                if bound is not None:
                    break
        if bound is not None:
            out[name] = int(bound)
    return out


def _shape(node) -> tuple:
    val = node.meta.get("val") if hasattr(node, "meta") else None
    return tuple(int(d) for d in val.shape) if val is not None and hasattr(val, "shape") else ()


def _bound_of_use(pk: str, u, src) -> int | None:
    """The bound an ATen op ``pk`` puts on its integer argument ``src`` (module docstring)."""
    args = list(u.args)
    if pk == "embedding" and len(args) > 1 and args[1] is src:
        return _shape(args[0])[0]
    if pk.startswith(("nll_loss", "cross_entropy")) and len(args) > 1 and args[1] is src:
        s = _shape(args[0])
        return s[1] if len(s) >= 2 else (s[0] if s else None)
    if pk == "index_select" and len(args) > 2 and args[2] is src:
        return _shape(args[0])[int(args[1])]
    if pk == "gather" and len(args) > 2 and args[2] is src:
        return _shape(args[0])[int(args[1])]
    if pk == "index" and len(args) > 1 and isinstance(args[1], (list, tuple)) and src in args[1]:
        return _shape(args[0])[list(args[1]).index(src)]
    if pk == "one_hot" and len(args) > 1:
        return int(args[1]) if int(args[1]) > 0 else None
    return None


def step_tensors(step, module, example_args, optimizer: str, seed: int = 0,
                 int_bounds: dict[str, int] | None = None) -> dict[str, Any]:
    """Op name -> the CPU tensor each placeholder of ``step`` starts from (module docstring):
    parameters and buffers from ``module`` (built under ``torch.manual_seed(seed)``), zero optimizer
    state (``<param>/Adam``, ``<param>/Adam_1``), inputs ``input/K`` drawn from ``seed``.

    Raises:
        ValueError: an integer input whose bound is neither given nor read from the step (names it
            and ``--int-bound``), a module whose parameters do not match the captured step's.
    """
    import torch

    with torch.no_grad():
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if any(p.is_meta for _, p in named) or any(b.is_meta for _, b in module.named_buffers()):
            module.to_empty(device="cpu")
            g = torch.Generator().manual_seed(seed)
            for _, p in module.named_parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.02)
            for _, b in module.named_buffers():
                b.zero_()
            for m in module.modules():
                for hook in ("reset_parameters", "reset_running_stats"):
                    if callable(getattr(m, hook, None)):
                        getattr(m, hook)()
            named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        tensors: dict[str, Any] = {n: p.detach().to("cpu").clone() for n, p in named}
        tensors.update({n: b.detach().to("cpu").clone() for n, b in module.named_buffers()})
        if optimizer == "adam":
            for n, p in named:
                tensors[f"{n}/Adam"] = torch.zeros_like(tensors[n])
                tensors[f"{n}/Adam_1"] = torch.zeros_like(tensors[n])
    bounds = {**int_input_bounds(step), **(int_bounds or {})}
    g = torch.Generator().manual_seed(seed + 1)
    phs = [n for n in step.gm.graph.nodes if n.op == "placeholder"]
    for n in phs:
        name = step.holder[n.name]
        val = n.meta.get("val")
        if name in tensors:
            if tuple(tensors[name].shape) != tuple(val.shape):
                raise ValueError(f"{name}: the module built has shape {tuple(tensors[name].shape)}, the captured "
                                 f"step {tuple(val.shape)}")
            continue
        if not name.startswith("input/"):
            raise ValueError(f"{name}: the module built has no such parameter or buffer")
        if val.dtype.is_floating_point:
            tensors[name] = torch.randn(val.shape, generator=g, dtype=val.dtype)
        elif val.dtype == torch.bool:
            tensors[name] = torch.randint(0, 2, val.shape, generator=g).bool()
        else:
            if name not in bounds:
                raise ValueError(f"integer input {name!r}: the step does not tell the range of its ids (no embedding "
                                 f"table, loss or index it reaches); give --int-bound {name}=N")
            tensors[name] = torch.randint(0, int(bounds[name]), val.shape, generator=g, dtype=val.dtype)
    return tensors


def _is_oom(exc: BaseException) -> bool:
    """True for a device or host out-of-memory error."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)


# ----------------------------------------------------------------------------- environment


def _measure_in_child(kwargs: dict, group_placement: np.ndarray, steps: int, warmup: int) -> TorchMeasurement:
    """The body of an isolated measurement, in the child process
    ([`TorchRealEnvironment`][cluster.torch_real.TorchRealEnvironment] with ``isolate=True``)."""
    return TorchRealEnvironment(**kwargs).run(group_placement, steps, warmup)


class TorchRealEnvironment:
    """Measures placements of a PyTorch step by running it on this machine's devices
    ([`Environment`][cluster.environment.Environment]; module docstring).

    Args:
        prepared: a prepared PyTorch step ([`is_torch_step`][cluster.torch_real.is_torch_step]).
        spec: the cluster; its device ``i`` runs on ``torch_devices(spec, devices)[i]``.
        grouping: the units placements are over (default ``prepared.grouping``).
        repeats: timed steps per measurement (>= 1; default [`DEFAULT_REPEATS`][cluster.torch_real.DEFAULT_REPEATS]).
        warmup: steps dropped before them (>= 0; default [`DEFAULT_WARMUP`][cluster.torch_real.DEFAULT_WARMUP]).
        seed: seed of the weights and inputs.
        threads: ``torch.set_num_threads`` while measuring (``None``: as it is).
        time_limit_s: seconds a step may take (default [`DEFAULT_TIME_LIMIT_S`][cluster.torch_real.DEFAULT_TIME_LIMIT_S]).
        int_bounds: integer input name (``input/K``) -> exclusive bound of its ids.
        devices: torch device per spec device, overriding [`torch_devices`][cluster.torch_real.torch_devices].
        isolate: measure each placement in a process of its own (module docstring, "Host memory"):
            what a training run of that placement pays, whatever this process ran before; costs the
            child's start, ``import torch`` and the step's capture (seconds) per measurement.
        host_memory: ``default`` (PyTorch's and glibc's) or ``reuse`` (named option,
            [`reuse_host_memory`][cluster.torch_real.reuse_host_memory] before the steps: in the child with ``isolate``,
            else in this process for the rest of its life).
    Raises:
        ValueError: bad ``repeats``/``warmup``/``threads``/``time_limit_s``/``devices``/``host_memory``; not a
            PyTorch step.
        DeviceUnavailableError: a spec device this machine lacks (one line).
    """

    kind = "real"

    def __init__(self, prepared, spec: ClusterSpec, grouping: Grouping | None = None, repeats: int | None = None,
                 warmup: int | None = None, seed: int = 0, threads: int | None = None,
                 time_limit_s: float | None = None, int_bounds: dict[str, int] | None = None,
                 devices: list[str] | None = None, isolate: bool = False, host_memory: str = "default") -> None:
        self.repeats = DEFAULT_REPEATS if repeats is None else int(repeats)
        self.warmup = DEFAULT_WARMUP if warmup is None else int(warmup)
        if self.repeats < 1:
            raise ValueError(f"repeats: must be at least 1, got {self.repeats}")
        if self.warmup < 0:
            raise ValueError(f"warmup: must be >= 0, got {self.warmup}")
        if threads is not None and int(threads) < 1:
            raise ValueError(f"threads: must be at least 1, got {threads}")
        self.time_limit_s = DEFAULT_TIME_LIMIT_S if time_limit_s is None else float(time_limit_s)
        if not (self.time_limit_s > 0 and math.isfinite(self.time_limit_s)):
            raise ValueError(f"time_limit_s: must be a positive number of seconds, got {time_limit_s}")
        if not is_torch_step(prepared):
            raise ValueError(f"{prepared.name}: not a PyTorch step")
        self.prepared, self.spec = prepared, spec
        self.graph: OpGraph = prepared.graph
        self.grouping: Grouping = prepared.grouping if grouping is None else grouping
        self.seed, self.threads, self.int_bounds = int(seed), threads, dict(int_bounds or {})
        self.devices = torch_devices(spec, devices)
        check_devices(spec, self.devices)
        self.isolate = bool(isolate)
        if host_memory not in HOST_MEMORY:
            raise ValueError(f"host_memory: {host_memory!r}; valid: {', '.join(HOST_MEMORY)}")
        if host_memory == "reuse" and not has_glibc():
            raise ValueError("host_memory 'reuse': needs glibc's malloc, which this platform does not use")
        self.host_memory = host_memory
        self._step: Any = None
        self._tensors: dict | None = None

    @classmethod
    def from_prepared(cls, prepared, spec: ClusterSpec, **kwargs) -> "TorchRealEnvironment":
        """Build from a prepared PyTorch step (same arguments as the constructor)."""
        return cls(prepared, spec, **kwargs)

    def _load(self) -> None:
        """Capture the step and build its tensors, once (seconds for GPT-2 small)."""
        if self._step is not None:
            return
        import torch

        step, build = load_step(self.prepared)
        names = [op.name for op in self.graph.ops]
        if [op.name for op in step.graph.ops] != names:
            raise ValueError(f"{self.prepared.name}: the step captured now differs from the prepared graph's ops "
                             "(the source changed since it was prepared)")
        torch.manual_seed(self.seed)
        module, args, optimizer = build()
        self._tensors = step_tensors(step, module, args, optimizer, self.seed, self.int_bounds)
        del module, args
        self._step = step

    def op_placement(self, group_placement: np.ndarray) -> np.ndarray:
        """``[num_ops]`` device indices of ``group_placement`` (``[num_groups]``).

        Raises:
            ValueError: wrong length or a device index out of range.
        """
        gp = np.asarray(group_placement, dtype=np.int64)
        if gp.shape != (self.grouping.num_groups,):
            raise ValueError(f"placement: length {gp.shape}, expected ({self.grouping.num_groups},)")
        nd = len(self.spec.devices)
        if gp.size and (gp.min() < 0 or gp.max() >= nd):
            raise ValueError(f"placement: device index out of range 0..{nd - 1} (got {gp.min()}..{gp.max()})")
        return self.grouping.expand(gp)

    def placed(self, op_placement: np.ndarray):
        """``(module, inputs)`` of [`compgraph.torch_step.placed_module`][compgraph.torch_step.placed_module] for an op placement ``[num_ops]``."""
        from compgraph.torch_step import placed_module

        self._load()
        assert self._step is not None
        return placed_module(self._step, {op.name: self.devices[int(d)] for op, d in zip(self.graph.ops, op_placement)})

    def run(self, group_placement: np.ndarray, steps: int, warmup: int,
            on_step=None) -> TorchMeasurement:
        """Run ``warmup`` + ``steps`` steps of ``group_placement`` from the initial tensors and time them
        (module docstring); ``on_step(k, seconds, loss)`` after each timed step.

        Raises:
            ValueError: see [`op_placement`][cluster.torch_real.TorchRealEnvironment.op_placement].
        """
        import torch

        p = self.op_placement(group_placement)
        if self.isolate:
            return self._run_isolated(group_placement, steps, warmup, on_step)
        if self.host_memory == "reuse":
            reuse_host_memory()
        module, inputs = self.placed(p)
        assert self._tensors is not None
        if self.threads is not None:
            torch.set_num_threads(int(self.threads))
        threads = torch.get_num_threads()
        cuda = sorted({torch.device(d) for d in set(self.devices) if torch.device(d).type == "cuda"}, key=str)
        for c in cuda:  # a fresh process (isolate) has no CUDA context yet: its allocator's stats need one
            torch.zeros((), device=c)
            torch.cuda.reset_peak_memory_stats(c)
        times: list[float] = []
        warm: list[float] = []
        losses: list[float] = []
        faults: list[int] = []
        oom, failure = False, None
        tensors: list = []
        try:
            tensors = [self._tensors[name].to(dev, copy=True) for name, dev in inputs]
            for k in range(warmup + steps):
                for c in cuda:
                    torch.cuda.synchronize(c)
                f0 = minor_faults()
                t0 = time.perf_counter()
                out = module(*tensors)
                for c in cuda:
                    torch.cuda.synchronize(c)
                dt = time.perf_counter() - t0
                f1 = minor_faults()
                if k >= warmup and f0 is not None and f1 is not None:
                    faults.append(f1 - f0)
                loss = float(out[0].detach().float().cpu()) if out and isinstance(out[0], torch.Tensor) else math.nan
                losses.append(loss)
                (warm if k < warmup else times).append(dt)
                if k >= warmup and on_step is not None:
                    on_step(k - warmup, dt, loss)
                if dt > self.time_limit_s:
                    failure = f"a step took {dt:.3g} s, over the time limit of {self.time_limit_s:g} s"
                    break
        except Exception as exc:  # noqa: BLE001 (an OOM is a result; anything else propagates)
            if not _is_oom(exc):
                raise
            oom = True
        finally:
            del tensors
            gc.collect()
        peak = [0] * len(self.spec.devices)
        measured = [False] * len(self.spec.devices)
        for j, dev in enumerate(self.devices):
            t = torch.device(dev)
            if t.type == "cuda":
                peak[j] = int(torch.cuda.max_memory_allocated(t))
                measured[j] = True
        if cuda:
            torch.cuda.empty_cache()
        s = spread(times)
        ok = not oom and failure is None and bool(times)
        return TorchMeasurement(
            step_time_s=s["median_s"] if ok else None, oom=oom, peak_memory_bytes=peak, step_times_s=times,
            q1_s=s["q1_s"], q3_s=s["q3_s"], iqr_s=s["iqr_s"], min_s=s["min_s"], max_s=s["max_s"], steps=len(times),
            warmup_s=warm, threads=threads, devices=list(self.devices), peak_memory_measured=measured,
            failure=failure, losses=losses, page_faults=faults, host_memory=self.host_memory)

    def _run_isolated(self, group_placement: np.ndarray, steps: int, warmup: int, on_step=None) -> TorchMeasurement:
        """[`run`][cluster.torch_real.TorchRealEnvironment.run] in a new process (``multiprocessing``'s
        ``spawn``: nothing of this one's heap, threads or CUDA context), which captures the step, builds
        its tensors from the seed and runs it; ``on_step`` is called here afterwards, once per timed step.
        A child that dies (a signal: the kernel's OOM killer, a crash) is a failed placement naming its
        exit code; an error it raises is raised here."""
        import concurrent.futures as cf
        import multiprocessing as mp

        kwargs = {"prepared": self.prepared, "spec": self.spec, "grouping": self.grouping, "seed": self.seed,
                  "threads": self.threads, "time_limit_s": self.time_limit_s, "int_bounds": self.int_bounds,
                  "devices": self.devices, "host_memory": self.host_memory}
        gp = np.asarray(group_placement, dtype=np.int64)
        with cf.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
            future = pool.submit(_measure_in_child, kwargs, gp, int(steps), int(warmup))
            try:
                m = future.result()
            except cf.process.BrokenProcessPool as exc:
                codes = [p.exitcode for p in getattr(pool, "_processes", {}).values()]
                m = TorchMeasurement(step_time_s=None, oom=False, devices=list(self.devices), host_memory=self.host_memory,
                                     failure=f"the measuring process ended before its result (exit codes {codes}): {exc}")
        m.isolated = True
        if on_step is not None:
            for k, dt in enumerate(m.step_times_s):
                on_step(k, dt, m.losses[warmup + k] if warmup + k < len(m.losses) else math.nan)
        return m

    def measure(self, group_placement: np.ndarray) -> TorchMeasurement:
        """Measure ``group_placement`` (``[num_groups]`` device indices): ``warmup`` then ``repeats``
        timed steps; ``step_time_s`` the median (seconds), ``None`` on OOM or failure.

        Raises:
            ValueError: see [`op_placement`][cluster.torch_real.TorchRealEnvironment.op_placement].
        """
        return self.run(group_placement, self.repeats, self.warmup)

    def measure_batch(self, group_placements: np.ndarray) -> list[TorchMeasurement]:
        """[`measure`][cluster.torch_real.TorchRealEnvironment.measure] each row of ``group_placements`` (``[K, num_groups]``), one after another
        ([`cluster.environment.measure_rows`][cluster.environment.measure_rows]: one placement holds the devices at a time).

        Raises:
            ValueError: not a 2-D array; and whatever [`measure`][cluster.torch_real.TorchRealEnvironment.measure] raises.
        """
        return measure_rows(self, group_placements)
