"""Cluster specs: devices (kind, peak FLOP/s, memory bandwidth and capacity) and links.

A spec is a pydantic model, loadable from YAML (:meth:`ClusterSpec.from_yaml`); the
presets in ``cluster/presets/`` (:func:`load_cluster`) are the 2017 paper's machines,
with their datasheet sources in each file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, Field, PositiveFloat, ValidationError, model_validator

PRESET_DIR = Path(__file__).parent / "presets"


class Device(BaseModel):
    """One device.

    Attributes:
        name: TensorFlow-style device name, e.g. ``/gpu:0``.
        kind: ``cpu`` or ``gpu`` (GPUs run only ops with a GPU kernel).
        peak_flops: peak FP32 throughput (FLOP/s).
        memory_bandwidth: peak device-memory bandwidth (bytes/s).
        memory_bytes: memory capacity available to the graph (bytes).
        op_overhead_s: fixed cost added to every op run on it (seconds): launch/dispatch.
        model: free-text hardware model (documentation only).
        tf_device: optional TensorFlow device string this device runs on in real execution
            (:mod:`cluster.real`), e.g. ``/device:CPU:1``; ``None`` lets the real environment
            map it (CPUs to ``/device:CPU:k``, GPUs to the GPUs that exist). The simulator ignores it.
        compute_pool: optional name of the executor this device shares with others. Devices
            that name the same pool run one op at a time between them, in the order ops became
            ready (as one device does alone): e.g. logical TensorFlow CPU devices of one process,
            which share its thread pools and the machine's cores. ``None`` (the default): the
            device is its own pool and runs ops in parallel with every other device. Links,
            memory and per-device compute seconds stay per device (:mod:`cluster.simulator`).
    """

    name: str
    kind: Literal["cpu", "gpu"]
    peak_flops: PositiveFloat
    memory_bandwidth: PositiveFloat
    memory_bytes: PositiveFloat
    op_overhead_s: float = Field(0.0, ge=0)
    model: str = ""
    tf_device: str | None = Field(None, pattern=r"^/(device:)?(CPU|GPU|cpu|gpu):\d+$")
    compute_pool: str | None = Field(None, pattern=r"^\S+$")


class LinkSpec(BaseModel):
    """A link's cost: a transfer of ``b`` bytes takes ``latency_s + b / bandwidth`` seconds."""

    bandwidth: PositiveFloat  # bytes/s
    latency_s: float = Field(0.0, ge=0)


class Link(LinkSpec):
    """A link between two named devices (both directions, each with its own queue)."""

    between: tuple[str, str]


class ClusterSpec(BaseModel):
    """Devices and the links between them.

    Every pair of distinct devices needs a link: one listed in ``links`` or else
    ``default_link``.

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
        """``[num_devices]`` compute-pool index of each device (see :attr:`Device.compute_pool`).

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

    def link(self, a: int, b: int) -> LinkSpec:
        """The link between device indices ``a`` and ``b`` (``a != b``)."""
        pair = {self.devices[a].name, self.devices[b].name}
        for link in self.links:
            if set(link.between) == pair:
                return link
        assert self.default_link is not None
        return self.default_link

    @classmethod
    def from_yaml(cls, path: str | Path) -> "ClusterSpec":
        """Load a spec from a YAML file (``yaml.safe_load``).

        Raises:
            ValueError: the file does not parse or does not hold a valid spec; the message
                names the file and the bad field.
        """
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"cluster spec {path}: {exc}") from exc
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise ValueError(f"cluster spec {path}: {loc}: {err['msg']} (got {err.get('input')!r})") from exc


def preset_names() -> list[str]:
    """Names of the preset clusters, sorted."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_cluster(name_or_path: str) -> ClusterSpec:
    """A preset by name (``k80x2``) or a spec from a YAML file path.

    Raises:
        ValueError: neither a preset nor an existing file (lists the presets), or an invalid file.
    """
    if name_or_path in preset_names():
        return ClusterSpec.from_yaml(PRESET_DIR / f"{name_or_path}.yaml")
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return ClusterSpec.from_yaml(path)
    raise ValueError(f"unknown cluster {name_or_path!r}; valid: {', '.join(preset_names())} or a path to a YAML spec")
