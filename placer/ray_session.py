"""Ray plumbing of the distributed search ([`placer.distributed`][placer.distributed]): a local Ray bound to
127.0.0.1 or a running cluster ([`ray_session`][placer.ray_session.ray_session]), the address check, the actors' resource
options and ``ray.get`` with the actors' own exception types. No placement logic lives here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

#: Environment of a local Ray started by [`ray_session`][placer.ray_session.ray_session]: no auth token written to ~/.ray
#: (``RAY_AUTH_MODE=disabled``), listening on 127.0.0.1 only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``:
#: measured, ``_node_ip_address`` alone is overridden and Ray listens on 0.0.0.0), no usage statistics.
LOCAL_RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}
#: Settings of a local Ray for a loaded 2-core machine, each set only where the user has not set it: a worker
#: process (an actor importing torch and this project) gets 300 s to register instead of Ray's 60, and runs at
#: the driver's priority (niceness 0) instead of Ray's 15 (measured: at 15, beside three busy nice-0 processes,
#: two controllers did not start within 300 s; the actors are the search's own work, not background work).
LOCAL_RAY_DEFAULTS = {"RAY_worker_register_timeout_seconds": "300", "RAY_worker_niceness": "0"}
#: Ray keeps unix sockets under its temp dir (``<dir>/ray-XXXXXXXX/session_<date>_<time>_<us>_<pid>/sockets/
#: plasma_store``), whose paths must stay within 107 bytes: longer parents fall back to the system temp folder.
_MAX_TEMP_DIR_CHARS = 30
logger = logging.getLogger(__name__)


def check_ray_address(address: str) -> tuple[str, int] | None:
    """Validate ``address`` and return the ``(host, port)`` to probe (``None`` for ``"auto"``).

    Accepted: ``"auto"`` (the cluster this machine's ``ray start`` made, or ``RAY_ADDRESS``),
    ``"ray://host:port"`` (Ray Client, port 10001 by default) and ``"host:port"`` (the GCS
    address of a cluster this machine belongs to).

    Raises:
        ValueError: anything else (names ``ray_address`` and the value).
    """
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"ray_address: {address!r} is not an address; use 'auto', 'ray://host:port' or 'host:port'")
    if address == "auto":
        return None
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    if parts.scheme not in ("ray", "gcs") or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"ray_address: {address!r} is not an address; use 'auto', 'ray://host:port' or 'host:port'")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is None and parts.scheme == "ray":
        port = 10001
    if port is None or not 0 < port < 65536:
        raise ValueError(f"ray_address: {address!r} has no valid port; use 'ray://host:port' or 'host:port'")
    return parts.hostname, port


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """Set [`LOCAL_RAY_ENV`][placer.ray_session.LOCAL_RAY_ENV] and [`LOCAL_RAY_DEFAULTS`][placer.ray_session.LOCAL_RAY_DEFAULTS] (inherited by the processes Ray starts meanwhile) and Ray's own
    flag for it: Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once, when imported, and with it
    off takes 127.0.0.1 as this node's address, so a local Ray's servers listen there only and a
    driver joins a cluster on 127.0.0.1 by that address. Restores both afterwards."""
    from ray._private import ray_constants

    saved = {k: os.environ.get(k) for k in (*LOCAL_RAY_ENV, *LOCAL_RAY_DEFAULTS)}
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ.update(LOCAL_RAY_ENV)
    for name, value in LOCAL_RAY_DEFAULTS.items():
        os.environ.setdefault(name, value)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def ray_session(
    address: str | None = None,
    num_cpus: int | None = None,
    temp_dir: str | Path | None = None,
    runtime_env: dict | None = None,
    connect_timeout_s: float = 5.0,
    start_attempts: int = 3,
) -> Iterator[bool]:
    """Run the body with Ray initialised in this process; yields True if this call initialised it
    (started a local Ray or connected to ``address``; it shuts it down or disconnects after).

    * ``address=None`` and Ray already initialised in this process (e.g. by a test
      fixture, or an outer ``ray_session``): the body uses it, nothing is shut down.
    * ``address=None`` otherwise: starts a local Ray with [`LOCAL_RAY_ENV`][placer.ray_session.LOCAL_RAY_ENV] (listening
      on 127.0.0.1 only, no dashboard), ``num_cpus`` CPUs (``None``: all), its files under
      a fresh folder in ``temp_dir`` (``None`` or a path too long for Ray's unix sockets:
      the system temp folder; that folder is deleted afterwards), and shuts it down after.
    * ``address`` given ([`check_ray_address`][placer.ray_session.check_ray_address]): connects to that cluster and
      disconnects after. Its nodes must be able to import this project (install it there,
      or pass ``runtime_env={"working_dir": ...}``).

    Ray's start takes ~2-5 s and ~1 GB of memory over about a dozen processes on a 2-core machine,
    27 s at load 12 (measured here). Ray gives its raylet a fixed 30 s to register, so a local start
    that fails is tried again, up to ``start_attempts`` times in all, each in a fresh folder.

    Raises:
        ValueError: a malformed ``address``.
        ConnectionError: nothing answers at ``address`` within ``connect_timeout_s`` seconds,
            or Ray cannot connect to it (the message names the address).
        RuntimeError: an ``address`` given while Ray is already initialised in this process, or a
            local Ray that did not start in ``start_attempts`` tries (the last error in the message).
    """
    import ray

    if address is None and ray.is_initialized():
        yield False
        return
    if address is not None:
        target = check_ray_address(address)
        if target is not None:
            host, port = target
            try:
                socket.create_connection((host, port), timeout=connect_timeout_s).close()
            except OSError as e:
                raise ConnectionError(
                    f"ray_address {address!r}: nothing answers at {host}:{port} ({e}); start a cluster "
                    "(`ray start --head`) or pass ray_address=None for a local Ray"
                ) from e
        if ray.is_initialized():
            raise RuntimeError(
                f"ray_address {address!r}: Ray is already initialised in this process; call ray.shutdown() first "
                "or pass ray_address=None to use the running Ray"
            )
        loopback = target is not None and (target[0] == "localhost" or target[0].startswith("127."))
        try:
            with _loopback_only() if loopback else contextlib.nullcontext():
                ray.init(address=address, runtime_env=runtime_env, logging_level=logging.WARNING)
        except Exception as e:  # ConnectionError, RuntimeError, gRPC errors: all mean "cannot connect"
            raise ConnectionError(f"ray_address {address!r}: cannot connect to a Ray cluster: {e}") from e
        try:
            yield True
        finally:
            ray.shutdown()
        return
    parent = Path(temp_dir).resolve() if temp_dir is not None else None
    if parent is None or len(str(parent)) > _MAX_TEMP_DIR_CHARS:
        parent = Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, start_attempts + 1):
        folder = tempfile.mkdtemp(prefix="ray-", dir=parent)
        try:
            with _loopback_only():
                ray.init(num_cpus=num_cpus, include_dashboard=False, _temp_dir=folder, runtime_env=runtime_env,
                         logging_level=logging.WARNING)
            break
        except Exception as e:  # Ray's start-up timeouts are plain Exception ("timed out during startup")
            ray.shutdown()
            shutil.rmtree(folder, ignore_errors=True)
            if attempt == start_attempts:
                raise RuntimeError(f"a local Ray did not start in {start_attempts} attempts (Ray waits 30 s for its "
                                   f"raylet; a loaded machine can take longer): {e}") from e
            logger.warning("a local Ray did not start (attempt %d of %d), starting it again: %s", attempt,
                           start_attempts, e)
    try:
        yield True
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


def ray_get(refs):
    """``ray.get`` that re-raises an actor's exception as an instance of its own type (e.g.
    ``ValueError``; Ray's ``as_instanceof_cause``), the remote traceback in its message."""
    import ray

    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        raise e.as_instanceof_cause() from None


def actor_options(role: Literal["server", "controller", "worker"], *, gpus: float = 0, cpus: float = 0) -> dict:
    """The Ray ``.options`` of each actor: restartable server, controllers and workers (``max_restarts=-1``;
    retries are the driver's: ``max_task_retries=0``), ``num_gpus``/``num_cpus`` as asked."""
    opts: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus}
    opts.update(max_restarts=-1, max_task_retries=0)  # the server too: the driver restores its last state
    return opts
