"""Cluster specs: devices (kind, peak FLOP/s, memory bandwidth and capacity) and links.

A spec is a pydantic model, loadable from YAML ([`ClusterSpec.from_yaml`][cluster.spec.ClusterSpec.from_yaml]); the
presets in ``cluster/presets/`` ([`load_cluster`][cluster.spec.load_cluster]) are the 2017 paper's machines,
with their datasheet sources in each file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationError, model_validator

PRESET_DIR = Path(__file__).parent / "presets"
MAX_SPEC_BYTES = 1_000_000
"""Largest cluster spec file read (bytes): a spec of 1,000 devices is about 300 kB."""
QUOTE_CHARS = 200
"""Characters of a bad value quoted in an error message, at most."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of a YAML file read (levels of nodes): a spec needs about 4; PyYAML composes a
node's children by recursion, so 300,000 levels in a 600 kB file would end in ``RecursionError``."""


class _Strict(BaseModel):
    """Unknown keys are refused (named in the error) and numbers must be finite (no ``.inf``/``.nan``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def quote_value(value: object, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters (an error message never echoes a whole input)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class _NoAliasLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases (``*name``): a spec needs none, and nested aliases
    ("billion laughs") expand a 1 kB file into gigabytes once anything walks the result; and nesting
    deeper than [`MAX_YAML_DEPTH`][cluster.spec.MAX_YAML_DEPTH] (refused as its node starts, before any recursion deeper)."""

    _depth = 0

    def compose_node(self, parent, index):  # noqa: D102 (PyYAML's Composer hook)
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"YAML aliases (*{event.anchor}) are not allowed", event.start_mark)
        if self._depth >= MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"YAML nested more than {MAX_YAML_DEPTH} levels deep is not "
                                              "allowed", self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml_file(path: str | Path, max_bytes: int = MAX_SPEC_BYTES, what: str = "cluster spec") -> object:
    """The YAML document in ``path``, read only if it is at most ``max_bytes`` bytes, without aliases.

    Raises:
        ValueError: unreadable, too large, not YAML, using aliases or nested deeper than [`MAX_YAML_DEPTH`][cluster.spec.MAX_YAML_DEPTH]
            (one line naming ``what`` and the file).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ValueError(f"{what} {path}: {size:,} bytes, more than the {max_bytes:,} allowed")
        with path.open("rb") as fh:
            text = fh.read(max_bytes + 1)
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader subclass)
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{what} {path}: {' '.join(str(exc).split())[:QUOTE_CHARS]}") from None


class Device(_Strict):
    """One device.

    Attributes:
        name: TensorFlow-style device name, e.g. ``/gpu:0``.
        kind: ``cpu`` or ``gpu`` (GPUs run only ops with a GPU kernel).
        peak_flops: peak FP32 throughput (FLOP/s).
        memory_bandwidth: peak device-memory bandwidth (bytes/s).
        memory_bytes: memory capacity available to the graph (bytes).
        op_overhead_s: fixed cost added to every op run on it (seconds): launch/dispatch
            (TensorFlow's executor overhead per op on this device kind).
        dense_efficiency: achieved fraction of ``peak_flops`` on a large ``MatMul`` /
            ``BatchMatMul`` ([`cluster.cost_model`][cluster.cost_model]); 1.0 = the datasheet peak.
        conv_efficiency: the same for convolutions (``Conv2D*``, pooling).
        other_efficiency: the same for the compute term of every other op (element-wise,
            reductions, softmax, optimizer updates).
        half_efficiency_flops: op size (FLOP) at which a dense op reaches half its
            efficiency: ``eff(f) = eff * f / (f + half_efficiency_flops)``; 0 = no size effect.
        memory_efficiency: achieved fraction of ``memory_bandwidth`` (1.0 = the datasheet).
        dense_memory_efficiency, conv_memory_efficiency: the same for the memory term of dense ops
            and of convolutions alone; ``None`` (the default) = ``memory_efficiency``. A CPU's
            oneDNN convolutions and large matrix products reorder NCHW tensors into blocked
            layouts and back, so they move their tensors at a fraction of the socket's streaming
            rate that element-wise ops do not see ([`cluster.torch_calibrate`][cluster.torch_calibrate] fits them on a
            profile by op and shape: on the H200's host, convolutions at 0.05-0.6 of the CPU peak,
            the low end the 1x1 convolutions over 56x56 images).
        software_flops_fraction: a named software term, not a hardware figure: the fraction of
            ``peak_flops`` the software's kernels can issue at all, e.g. 0.25 on a Haswell whose
            TensorFlow wheel was built for SSE only (8 of its 32 FP32 FLOP per cycle). The
            efficiencies apply on top of it ([`cluster.cost_model`][cluster.cost_model]). 1.0 = none.
        allocator_overhead: bytes the allocator holds per byte of tensors (TensorFlow's BFC
            allocator rounds and fragments; temporaries the graph does not show): a device is
            out of memory when ``allocator_overhead * peak > memory_bytes``
            ([`tensor_capacity_bytes`][cluster.spec.Device.tensor_capacity_bytes]). 1.0 = none.
        model: free-text hardware model (documentation only).
        tf_device: optional TensorFlow device string this device runs on in real execution
            ([`cluster.real`][cluster.real]), e.g. ``/device:CPU:1``; ``None`` lets the real environment
            map it (CPUs to ``/device:CPU:k``, GPUs to the GPUs that exist). The simulator ignores it.
        tensor_peak_flops: peak FLOP/s of the device's matrix units (tensor cores) by input
            precision, dense (no structured sparsity): keys ``tf32``, ``bfloat16``, ``float16``.
            A dense op or convolution in that precision runs against it instead of
            ``peak_flops`` ([`cluster.cost_model`][cluster.cost_model]); empty (the default, and every GPU before
            Volta) means ``peak_flops`` for every precision.
        tf32_matmul, tf32_conv: named software terms: the framework runs FP32 matrix products /
            convolutions on the TF32 tensor cores (PyTorch's ``torch.backends.cuda.matmul.allow_tf32``,
            default off since 1.12, and ``torch.backends.cudnn.allow_tf32``, default on).
        dispatch_s: host-side dispatch per op (seconds): the framework's eager dispatch and the
            kernel launch on the host thread (PyTorch eager, [`cluster.torch_calibrate`][cluster.torch_calibrate]). The
            host issues ops while the device runs earlier ones, so an op that does work (FLOPs or
            bytes) takes ``max(op time, dispatch_s)`` ([`cluster.cost_model`][cluster.cost_model]): a step of many
            small ops is launch-bound, ``>= ops * dispatch_s``. 0 (the default) = not modelled.
        compute_pool: optional name of the executor this device shares with others. Devices
            that name the same pool run one op at a time between them, in the order ops became
            ready (as one device does alone): e.g. logical TensorFlow CPU devices of one process,
            which share its thread pools and the machine's cores. ``None`` (the default): the
            device is its own pool and runs ops in parallel with every other device. Links,
            memory and per-device compute seconds stay per device ([`cluster.simulator`][cluster.simulator]).
    """

    name: str
    kind: Literal["cpu", "gpu"]
    peak_flops: PositiveFloat
    memory_bandwidth: PositiveFloat
    memory_bytes: PositiveFloat
    op_overhead_s: float = Field(0.0, ge=0)
    dense_efficiency: float = Field(1.0, gt=0, le=1)
    conv_efficiency: float = Field(1.0, gt=0, le=1)
    other_efficiency: float = Field(1.0, gt=0, le=1)
    half_efficiency_flops: float = Field(0.0, ge=0)
    memory_efficiency: float = Field(1.0, gt=0, le=1)
    dense_memory_efficiency: float | None = Field(None, gt=0, le=1)
    conv_memory_efficiency: float | None = Field(None, gt=0, le=1)
    software_flops_fraction: float = Field(1.0, gt=0, le=1)
    allocator_overhead: float = Field(1.0, ge=1)
    model: str = ""
    tf_device: str | None = Field(None, pattern=r"^/(device:)?(CPU|GPU|cpu|gpu):\d+$")
    compute_pool: str | None = Field(None, pattern=r"^\S+$")
    tensor_peak_flops: dict[Literal["tf32", "bfloat16", "float16"], PositiveFloat] = {}
    tf32_matmul: bool = False
    tf32_conv: bool = False
    dispatch_s: float = Field(0.0, ge=0)

    @property
    def tensor_capacity_bytes(self) -> float:
        """Bytes of tensors the device holds before it is out of memory: ``memory_bytes / allocator_overhead``."""
        return self.memory_bytes / self.allocator_overhead


class LinkSpec(_Strict):
    """A link's cost: a transfer of ``b`` bytes takes ``latency_s + b / bandwidth`` seconds."""

    bandwidth: PositiveFloat  # bytes/s
    latency_s: float = Field(0.0, ge=0)


class TransferSpec(_Strict):
    """How TensorFlow moves a tensor between devices (its ``_Send``/``_Recv`` pair), on top of the link.

    A transfer of ``b`` bytes from ``a`` to ``c`` over link ``(bandwidth, latency_s)`` takes
    ``send_recv_overhead_s + latency_s + b / (bandwidth_efficiency * bandwidth)`` seconds.
    Between two GPUs without peer access (``gpu_peer_access: false``, as on the K80 boards of
    2017 TensorFlow, which copied GPU to GPU through host memory) the tensor is staged:
    device to host, then host to device, each a full link transfer, in series:
    ``send_recv_overhead_s + 2 * latency_s + 2 * b / (bandwidth_efficiency * bandwidth)``.
    [`ClusterSpec.link`][cluster.spec.ClusterSpec.link] returns these effective figures, so both simulators use them.

    Attributes:
        send_recv_overhead_s: fixed seconds per transfer (rendezvous, Send/Recv dispatch, the
            copy's set-up), on top of the link's ``latency_s``.
        bandwidth_efficiency: achieved fraction of the link's bandwidth (pageable host memory,
            small DMA chunks).
        host_to_device_efficiency: the achieved fraction for a copy from a CPU to a GPU, where it differs
            from the other direction's (a pageable copy to the GPU goes through a host memcpy into a
            pinned staging buffer that the DMA then reads; one from the GPU lands in the staging buffer
            first: measured 6.9 GB/s against 12.8 GB/s at 256 MiB on a lent H200,
            ``benchmarks/results/h200-2026-11-27``). ``None``: ``bandwidth_efficiency`` both ways.
        gpu_peer_access: GPUs copy to each other directly (``true``) or through the host (``false``).
        fresh_host_bytes_per_s: PyTorch placed steps only ([`cluster.eager`][cluster.eager]): a copy from a
            GPU into new pageable host memory of at least ``fresh_host_threshold_bytes`` also pays
            ``bytes / fresh_host_bytes_per_s`` seconds, the kernel faulting in and zeroing fresh pages
            (glibc serves every allocation above its largest dynamic mmap threshold, 32 MiB on 64-bit,
            with a new ``mmap``: mallopt(3), ``M_MMAP_THRESHOLD``). ``None``: not modelled. TensorFlow's
            dataflow model ([`cluster.simulator`][cluster.simulator]) ignores it.
        fresh_host_threshold_bytes: the size (bytes) from which that cost is paid.
    """

    send_recv_overhead_s: float = Field(0.0, ge=0)
    bandwidth_efficiency: float = Field(1.0, gt=0, le=1)
    host_to_device_efficiency: float | None = Field(None, gt=0, le=1)
    gpu_peer_access: bool = True
    fresh_host_bytes_per_s: float | None = Field(None, gt=0)
    fresh_host_threshold_bytes: int = Field(32 * 2**20, ge=0)


class Link(LinkSpec):
    """A link between two named devices (both directions, each with its own queue)."""

    between: tuple[str, str]


class ClusterSpec(_Strict):
    """Devices and the links between them.

    Every pair of distinct devices needs a link: one listed in ``links`` or else
    ``default_link``.

    Attributes (beyond devices and links):
        transfer: TensorFlow's Send/Recv costs and GPU peer access ([`TransferSpec`][cluster.spec.TransferSpec]).
        compute_memory_overlap: an op's time is ``max(compute, memory)`` (the roofline,
            ``true``) or ``compute + memory`` (``false``: grappler's OpLevelCostEstimator
            default, ``compute_memory_overlap_ = false``); see [`cluster.cost_model`][cluster.cost_model].
        fit: free-form record of the fit that produced the fitted parameters (script, rows,
            loss); ``None`` for a spec of datasheet figures only.

    Raises:
        pydantic.ValidationError: duplicate device names, a link naming an unknown
            device, a device pair with no link and no ``default_link``, or a
            ``compute_pool`` that is empty or holds whitespace.
    """

    name: str
    description: str = ""
    devices: list[Device] = Field(min_length=1)
    links: list[Link] = []
    default_link: LinkSpec | None = None
    sources: list[str] = []
    transfer: TransferSpec = TransferSpec()
    compute_memory_overlap: bool = True
    fit: dict | None = None

    @model_validator(mode="after")
    def _check(self) -> "ClusterSpec":
        names = [d.name for d in self.devices]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"devices: duplicate device name(s) {dupes}")
        for link in self.links:
            for end in link.between:
                if end not in names:
                    raise ValueError(f"links.between: unknown device {end!r}; devices are {names}")
        if self.default_link is None:
            have = {frozenset(link.between) for link in self.links}
            for i, a in enumerate(names):
                for b in names[i + 1 :]:
                    if frozenset((a, b)) not in have:
                        raise ValueError(f"links: no link between {a!r} and {b!r} and no default_link")
        return self

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]

    @property
    def pool_indices(self) -> list[int]:
        """``[num_devices]`` compute-pool index of each device (see [`Device.compute_pool`][cluster.spec.Device.compute_pool]).

        Pools are numbered ``0..num_pools-1`` in the order they first appear in ``devices``; a
        device with no ``compute_pool`` is a pool of its own. With no pools named this is
        ``[0, 1, ..., num_devices-1]``.
        """
        index: dict[str, int] = {}
        out = []
        for i, d in enumerate(self.devices):
            key = f"pool:{d.compute_pool}" if d.compute_pool is not None else f"device:{i}"
            out.append(index.setdefault(key, len(index)))
        return out

    @property
    def cpu_indices(self) -> list[int]:
        return [i for i, d in enumerate(self.devices) if d.kind == "cpu"]

    @property
    def gpu_indices(self) -> list[int]:
        return [i for i, d in enumerate(self.devices) if d.kind == "gpu"]

    def raw_link(self, a: int, b: int) -> LinkSpec:
        """The link listed for device indices ``a`` and ``b`` (``a != b``), else ``default_link``."""
        pair = {self.devices[a].name, self.devices[b].name}
        for link in self.links:
            if set(link.between) == pair:
                return link
        assert self.default_link is not None
        return self.default_link

    def link(self, a: int, b: int) -> LinkSpec:
        """The effective cost of a transfer from device ``a`` to ``b`` (``a != b``): the link
        ([`raw_link`][cluster.spec.ClusterSpec.raw_link]) with TensorFlow's Send/Recv overhead and host staging
        ([`TransferSpec`][cluster.spec.TransferSpec]) folded in, so ``latency_s + bytes / bandwidth`` is the
        transfer's time ([`cluster.cost_model.transfer_time`][cluster.cost_model.transfer_time]). With the default
        ``transfer`` it is the raw link itself."""
        return effective_link(self, a, b)

    @classmethod
    def from_yaml(cls, path: str | Path) -> "ClusterSpec":
        """Load a spec from a YAML file ([`load_yaml_file`][cluster.spec.load_yaml_file]: at most [`MAX_SPEC_BYTES`][cluster.spec.MAX_SPEC_BYTES], no aliases).

        Raises:
            ValueError: the file is too large, does not parse, uses YAML aliases, or does not hold a
                valid spec (an unknown key, a number that is not finite and positive...); one line
                naming the file and the bad field, quoting at most [`QUOTE_CHARS`][cluster.spec.QUOTE_CHARS] characters of it.
        """
        path = Path(path)
        data = load_yaml_file(path)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
            msg = err["msg"].removeprefix("Value error, ")  # a validator's own message names its field
            given = err.get("input")  # a missing field's, or a check across fields', input is the enclosing object
            got = "" if err["type"] == "missing" or isinstance(given, (dict, list)) else f" (got {quote_value(given)})"
            raise ValueError(f"cluster spec {path}: {loc}: {msg}{got}") from None


def first_difference(a, b, path: str = "") -> tuple[str, object, object] | None:
    """The first field where two JSON-like values differ: ``(dotted path, value in a, value in b)``
    (``devices.1.peak_flops``; ``<path>.length`` and the two lengths for lists of different lengths; a key
    one side lacks has ``None`` there; ``(top level)`` for two scalars); ``None`` if they are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys(), key=str):
            if key not in a or key not in b:
                return f"{path}{key}", a.get(key), b.get(key)
            found = first_difference(a[key], b[key], f"{path}{key}.")
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}length", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}{i}.")
            if found is not None:
                return found
        return None
    return None if a == b else (path.rstrip(".") or "(top level)", a, b)


def preset_names() -> list[str]:
    """Names of the preset clusters, sorted."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_cluster(name_or_path: str) -> ClusterSpec:
    """A preset by name (``k80x2``) or a spec from a YAML file path.

    A run is labelled, grouped and compared by its cluster's name, so a YAML spec may take a preset's
    name only if it is that preset (an edited copy of ``k80x2`` still named ``k80x2`` would be compared
    with the preset's runs as if it were the same machine).

    Raises:
        ValueError: neither a preset nor an existing file (lists the presets), an invalid file, or a
            file named as a preset that differs from it (names the first field that differs).
    """
    presets = preset_names()
    if name_or_path in presets:
        return ClusterSpec.from_yaml(PRESET_DIR / f"{name_or_path}.yaml")
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):  # a path, not a preset's name: read it, or say what is wrong with it
        if path.is_file():
            spec = ClusterSpec.from_yaml(path)
            if spec.name in presets:
                differs = first_difference(spec.model_dump(mode="json"),
                                           ClusterSpec.from_yaml(PRESET_DIR / f"{spec.name}.yaml").model_dump(mode="json"))
                if differs is not None:
                    field, mine, theirs = differs
                    raise ValueError(f"cluster spec {name_or_path}: name {spec.name!r} is a preset's, but this spec "
                                     f"differs from that preset ({field}: {quote_value(mine)} here, "
                                     f"{quote_value(theirs)} in the preset); give it a name of its own (name: ...)")
            return spec
        raise ValueError(f"cluster spec {name_or_path}: " + ("a folder, not a YAML file" if path.is_dir() else "no such file"))
    raise ValueError(f"unknown cluster {name_or_path!r}; valid: {', '.join(preset_names())} or a path to a YAML spec")


def effective_link(spec: "ClusterSpec", a: int, b: int) -> LinkSpec:
    """The effective link of a transfer from device ``a`` to ``b`` (``a != b``).

    ``latency_s = send_recv_overhead_s + link latency``,
    ``bandwidth = efficiency * link bandwidth``, the efficiency being ``host_to_device_efficiency`` for
    a copy from a CPU to a GPU where the spec sets it, else ``bandwidth_efficiency``; between two GPUs
    without peer access, the tensor goes GPU ``a`` -> first CPU -> GPU ``b``, two link transfers in
    series: latencies add and ``1 / bandwidth`` adds (the two hops' links, each with its direction's
    efficiency; the a-b link twice if the spec has no CPU). With the default
    [`cluster.spec.TransferSpec`][cluster.spec.TransferSpec] this is
    [`cluster.spec.ClusterSpec.raw_link`][cluster.spec.ClusterSpec.raw_link] itself.
    """
    tr = spec.transfer
    raw = spec.raw_link(a, b)
    h2d = tr.host_to_device_efficiency
    if tr.send_recv_overhead_s == 0 and tr.bandwidth_efficiency == 1 and tr.gpu_peer_access and h2d in (None, 1):
        return raw
    kind = [d.kind for d in spec.devices]
    both_gpu = kind[a] == "gpu" and kind[b] == "gpu"
    if both_gpu and not tr.gpu_peer_access:
        cpus = spec.cpu_indices
        hops = ([(spec.raw_link(a, cpus[0]), kind[a], "cpu"), (spec.raw_link(cpus[0], b), "cpu", kind[b])] if cpus
                else [(raw, kind[a], kind[b])] * 2)
    else:
        hops = [(raw, kind[a], kind[b])]

    def eff(src: str, dst: str) -> float:
        return h2d if h2d is not None and src == "cpu" and dst == "gpu" else tr.bandwidth_efficiency

    latency = tr.send_recv_overhead_s + sum(h.latency_s for h, _, _ in hops)
    effs = [eff(s, d) for _, s, d in hops]
    if all(e == tr.bandwidth_efficiency for e in effs):  # the arithmetic of before, so those specs' times stay bit-equal
        bandwidth = tr.bandwidth_efficiency / sum(1.0 / h.bandwidth for h, _, _ in hops)
    else:
        bandwidth = 1.0 / sum(1.0 / (e * h.bandwidth) for e, (h, _, _) in zip(effs, hops))
    return LinkSpec(bandwidth=bandwidth, latency_s=latency)
