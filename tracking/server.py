"""One Prefect server kept running for a sweep or a UI session (``placement server start|stop|status``).

Without it, every ``placement`` command starts a temporary Prefect server of its own and stops it
when it ends ([`cli.runtime`][cli.runtime]: 20-30 s of start-up on a loaded machine before a 2-3 s search).
[`start`][tracking.server.start] starts Prefect's full server (``prefect server start``: the API, the UI and its
services) bound to 127.0.0.1, on the SQLite database in ``PREFECT_HOME`` (the same flow history
the temporary servers write), detached from the terminal; waits for its ``/api/health`` up to a
start-up limit that fits a loaded machine ([`STARTUP_TIMEOUT_S`][tracking.server.STARTUP_TIMEOUT_S]); and records it in
``$PLACEMENT_HOME/prefect-server.json`` ([`state_path`][tracking.server.state_path]: its URLs, port, process id,
``PREFECT_HOME`` and log). A command then finds it there ([`running_api_url`][tracking.server.running_api_url], checked to
answer) and runs its flow against it; ``PREFECT_API_URL`` set in the environment or the Prefect
profile still comes first, and with neither the temporary server stays the default.
[`stop`][tracking.server.stop] stops it (its process group) and removes the record.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tracking import placement_home
from tracking.locks import exclusive_lock

STATE_NAME = "prefect-server.json"
"""The record of the running server, in the user-level home ([`tracking.placement_home`][tracking.placement_home])."""

DEFAULT_PORT = 4200
"""Prefect's own default port: the UI at http://127.0.0.1:4200 (``--port`` picks another)."""

STARTUP_TIMEOUT_S = 180.0
"""How long [`start`][tracking.server.start] waits for ``/api/health`` (seconds) unless told otherwise
(``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``, as the temporary server): the full server
runs its database migration and services first; a loaded 2-core machine took over 30 s."""

STOP_TIMEOUT_S = 30.0
"""How long [`stop`][tracking.server.stop] waits for the server to exit after SIGTERM before SIGKILL (seconds)."""


class ServerError(RuntimeError):
    """The server could not be started or stopped (the message is one line)."""


@dataclass(frozen=True)
class ServerState:
    """The record of a running server (``prefect-server.json``)."""

    url: str
    """The UI, ``http://127.0.0.1:<port>``."""
    api_url: str
    """The API, ``<url>/api`` (what ``PREFECT_API_URL`` would say)."""
    port: int
    pid: int
    """The ``prefect server start`` process, leader of its own process group."""
    prefect_home: str
    log: str
    started: float
    """``time.time()`` when it answered."""


def state_path() -> Path:
    """``$PLACEMENT_HOME/prefect-server.json``."""
    return placement_home() / STATE_NAME


def read_state() -> ServerState | None:
    """The recorded server, or ``None`` if there is no record (or an unreadable one)."""
    try:
        return ServerState(**json.loads(state_path().read_text()))
    except (OSError, ValueError, TypeError):
        return None


def healthy(api_url: str, timeout_s: float = 2.0) -> bool:
    """True if ``<api_url>/health`` answers 200 within ``timeout_s`` seconds."""
    import httpx

    try:
        return httpx.get(f"{api_url.rstrip('/')}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def alive(pid: int) -> bool:
    """True if process ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # no /proc (macOS): os.kill said it is there
        return True


def _is_prefect_server(pid: int) -> bool:
    """True unless ``/proc`` shows ``pid`` is some other program (a process id reused after the
    server died): only then would [`stop`][tracking.server.stop] signal the wrong process group."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return alive(pid)
    return b"prefect" in cmdline and b"server" in cmdline


def running_api_url(timeout_s: float = 2.0) -> str | None:
    """The API URL of the server [`start`][tracking.server.start] recorded, if its process runs and it answers
    ``/api/health`` within ``timeout_s`` seconds; else ``None`` (no server: a command starts its
    temporary one)."""
    state = read_state()
    if state is None or not alive(state.pid) or not healthy(state.api_url, timeout_s):
        return None
    return state.api_url


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _prefect_home() -> Path:
    return Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()


def _write_state(state: ServerState) -> None:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(state), indent=1) + "\n")
    tmp.replace(path)


def start(port: int = DEFAULT_PORT, timeout_s: float | None = None) -> tuple[ServerState, bool]:
    """Start the server on 127.0.0.1:``port`` and wait until it answers, or find the one running.

    Returns:
        ``(state, started)``: ``started`` is False when a recorded server already answered.
    Raises:
        ServerError: ``port`` is taken by something else, or the server exited or did not answer
            ``/api/health`` within ``timeout_s`` seconds (default [`STARTUP_TIMEOUT_S`][tracking.server.STARTUP_TIMEOUT_S], or
            ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``); it is stopped then.
    """
    existing = read_state()
    if existing is not None and alive(existing.pid) and healthy(existing.api_url):
        return existing, False
    if existing is not None:  # a record left by a server that died: not ours to keep
        state_path().unlink(missing_ok=True)
    if not _port_free(port):
        raise ServerError(f"port {port} on 127.0.0.1 is taken (another Prefect server?); pick another with --port")
    timeout_s = timeout_s or float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", STARTUP_TIMEOUT_S))
    home = _prefect_home()
    home.mkdir(parents=True, exist_ok=True)
    log = placement_home() / "prefect-server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_API_HOST": "127.0.0.1",
           "PREFECT_SERVER_API_PORT": str(port), "PREFECT_UI_API_URL": f"{url}/api",  # the UI calls this API
           "PREFECT_SERVER_ANALYTICS_ENABLED": os.environ.get("PREFECT_SERVER_ANALYTICS_ENABLED", "false")}
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with exclusive_lock(home / "placement-server.lock"):  # one migration of the database at a time (cli.runtime)
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)  # its own session: outlives this command and its terminal
        deadline = time.monotonic() + timeout_s
        while not healthy(f"{url}/api"):
            if proc.poll() is not None:
                raise ServerError(f"the Prefect server exited with code {proc.returncode} on start-up; see {log}")
            if time.monotonic() > deadline:
                _stop_group(proc.pid, STOP_TIMEOUT_S)
                raise ServerError(f"the Prefect server did not answer {url}/api/health within {timeout_s:.0f} s "
                                  f"(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS); see {log}")
            time.sleep(0.5)  # between two health checks
    state = ServerState(url=url, api_url=f"{url}/api", port=port, pid=proc.pid, prefect_home=str(home), log=str(log),
                        started=time.time())
    _write_state(state)
    return state, True


def _stop_group(pid: int, timeout_s: float) -> None:
    """SIGTERM process group ``pid`` (the server and the processes it started), SIGKILL it if
    ``pid`` still runs after ``timeout_s`` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + timeout_s
        while alive(pid) and time.monotonic() < deadline:
            try:  # our own child (a test, or a failed start): reap it, else it stays a zombie
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                pass
            time.sleep(0.2)
        if not alive(pid):
            return


def stop(timeout_s: float = STOP_TIMEOUT_S) -> ServerState | None:
    """Stop the recorded server and remove its record.

    Returns:
        The record, or ``None`` if there was none.
    Raises:
        ServerError: it still ran after SIGKILL (the record is kept).
    """
    state = read_state()
    if state is None:
        state_path().unlink(missing_ok=True)
        return None
    if alive(state.pid) and _is_prefect_server(state.pid):
        _stop_group(state.pid, timeout_s)
        if alive(state.pid):
            raise ServerError(f"the Prefect server (pid {state.pid}) still runs after SIGTERM and SIGKILL")
    state_path().unlink(missing_ok=True)
    return state
