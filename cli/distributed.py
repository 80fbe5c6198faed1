"""Checks of the distributed-search options of ``placement experiment`` (one line each, for exit code 2)."""

from __future__ import annotations


def check_distributed_options(controllers: int, workers: int, gpus_per_worker: float, policy_device: str,
                              async_updates: bool) -> str | None:
    """The first problem with the options of :func:`placer.distributed.distributed_search`, or ``None``."""
    if workers < 0:
        return f"--workers must be at least 0, got {workers}"
    if gpus_per_worker < 0:
        return f"--gpus-per-worker must be at least 0, got {gpus_per_worker}"
    if policy_device not in ("cpu", "cuda"):
        return f"--policy-device: unknown device {policy_device!r}; valid: cpu, cuda"
    if controllers == 0:
        for name, given in (("--workers", workers), ("--gpus-per-worker", gpus_per_worker),
                            ("--policy-device cuda", policy_device == "cuda"), ("--async", async_updates)):
            if given:
                return f"{name} needs --controllers 1 or more (the distributed search)"
    return None
