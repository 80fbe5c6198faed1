"""An exclusive file lock (``flock``) for the local stores several processes may create at once:
Prefect's SQLite database (its migration) and MLflow's SQLite store."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive_lock(path: str | Path) -> Iterator[None]:
    """Hold ``flock(LOCK_EX)`` on ``path`` (created with its folders) for the ``with`` block."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
