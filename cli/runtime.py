"""The Prefect API a ``placement`` command runs its flow against, started so that it does not fall over.

Prefect 3.8 without ``PREFECT_API_URL`` starts a temporary ("ephemeral") API server on the
first flow call. On a busy machine that failed in three ways (measured on a 2-core machine
under load: the default run and 6 harness tests died with "Timed out while attempting to
connect to ephemeral Prefect API server"): its 20 s start-up limit ran out; two runs sharing one
``PREFECT_HOME`` raced in the database migration (``duplicate column name``); and a run
stopped by SIGTERM or SIGKILL left its server running. [`prefect_api`][cli.runtime.prefect_api] replaces it with
the same server (Prefect's own ``prefect.server.api.server:create_app`` under uvicorn, bound to
127.0.0.1, on the SQLite database in ``PREFECT_HOME``, so the flow history is kept) but

* waits for ``/api/health`` up to ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``
  (default here [`STARTUP_TIMEOUT_S`][cli.runtime.STARTUP_TIMEOUT_S], not Prefect's 20 s);
* holds an exclusive lock on ``$PREFECT_HOME/placement-server.lock`` from start until the
  server answers, so only one process migrates the database at a time;
* stops the server when the command ends: normally, on an exception, on SIGINT and on
  SIGTERM (turned into ``SystemExit``), and on SIGKILL of the command through Linux's
  parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGTERM)`` in the server process).

With ``PREFECT_API_URL`` set (in the environment or the Prefect profile: a persistent
``prefect server start``, Prefect Cloud, or ``prefect_test_harness``) that server is used instead; it is checked first and, if it does not answer, the command fails
with one line (exit 2) before any work. Without it, the server ``placement server start`` keeps
running ([`tracking.server`][tracking.server], recorded under ``PLACEMENT_HOME``) is used when it answers; the
temporary server is the default when none does.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from tracking.locks import exclusive_lock

STARTUP_TIMEOUT_S = 180.0
"""Default wait for the temporary server's ``/api/health`` (seconds); Prefect's own default is 20 s."""

PR_SET_PDEATHSIG = 1


class PrefectServerError(RuntimeError):
    """The Prefect API could not be reached or started (the message is one line)."""


def configure_environment() -> None:
    """Quiet, local defaults for every ``placement`` process (set only where the user has not):
    no telemetry, and the generous ephemeral start-up limit also for code paths that still use
    Prefect's own temporary server (tests under ``prefect_test_harness``, Ray workers)."""
    for key, value in (
        ("PREFECT_SERVER_ANALYTICS_ENABLED", "false"),
        ("MLFLOW_DISABLE_TELEMETRY", "true"),
        ("DO_NOT_TRACK", "true"),
        ("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", str(int(STARTUP_TIMEOUT_S))),
    ):
        os.environ.setdefault(key, value)


def prefect_home() -> Path:
    """``$PREFECT_HOME`` or Prefect's default ``~/.prefect``."""
    return Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(api_url: str, timeout_s: float) -> bool:
    import httpx

    try:
        return httpx.get(f"{api_url.rstrip('/')}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def _die_with_parent() -> None:  # runs in the server process before exec (Linux only)
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def start_server(timeout_s: float | None = None) -> tuple[subprocess.Popen, str]:
    """Start Prefect's API server on a free port of 127.0.0.1 and wait until it answers.

    Returns:
        ``(process, api_url)``; ``api_url`` is ``http://127.0.0.1:<port>/api``.
    Raises:
        PrefectServerError: it exited or did not answer ``/api/health`` within ``timeout_s``
            seconds (default ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` or 180).
    """
    import prefect

    timeout_s = timeout_s or float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", STARTUP_TIMEOUT_S))
    home = prefect_home()
    log = home / "placement-server.log"
    with exclusive_lock(home / "placement-server.lock"):  # one migration of the database at a time
        port = _free_port()
        api_url = f"http://127.0.0.1:{port}/api"
        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
        env.pop("PREFECT_API_URL", None)
        cmd = [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent), "--factory",
               "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
               "--log-level", "error", "--lifespan", "on"]
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise PrefectServerError(f"the Prefect server exited with code {proc.returncode} on start-up; see {log}")
            if _healthy(api_url, 2.0):
                return proc, api_url
            time.sleep(0.2)
        stop_server(proc)
        raise PrefectServerError(f"the Prefect server did not answer {api_url}/health within {timeout_s:.0f} s "
                                 f"(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS); see {log}")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM the server, SIGKILL it after 10 s, and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _drain_prefect_workers() -> None:
    """Send Prefect's queued logs and events before the server stops (as ``prefect_test_harness`` does)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for drain in (lambda: APILogWorker.drain_all(timeout=10), lambda: EventsWorker.drain_all(timeout=10)):
        try:
            drain()
        except Exception:  # a worker that never started, or a server already gone: nothing to send
            pass


def _raise_system_exit(signum, frame):  # SIGTERM -> SystemExit, so finally-blocks and atexit run
    raise SystemExit(128 + signum)


def check_prefect_api(check_timeout_s: float = 5.0) -> str | None:
    """The Prefect API URL this process is given (``PREFECT_API_URL``, the profile or a test
    harness), checked to answer within ``check_timeout_s`` seconds; else that of the server
    ``placement server start`` recorded, if it answers ([`tracking.server.running_api_url`][tracking.server.running_api_url]);
    ``None`` when there is neither (a temporary server will be started).

    Raises:
        PrefectServerError: the given API does not answer (names the URL).
    """
    from prefect.settings import get_current_settings

    given = os.environ.get("PREFECT_API_URL") or get_current_settings().api.url  # env, profile or test harness
    if given and not _healthy(given, check_timeout_s):
        raise PrefectServerError(f"PREFECT_API_URL={given} does not answer (start it with "
                                 "`prefect server start --host 127.0.0.1`, or unset PREFECT_API_URL)")
    if not given:
        from tracking.server import running_api_url

        return running_api_url(check_timeout_s)
    return given


@contextlib.contextmanager
def prefect_api(check_timeout_s: float = 5.0) -> Iterator[str]:
    """The Prefect API for one command: the server at ``PREFECT_API_URL`` if set (checked), else a
    temporary server of this process (see the module docstring). Yields the API URL.

    Raises:
        PrefectServerError: ``PREFECT_API_URL`` does not answer within ``check_timeout_s`` seconds,
            or the temporary server did not start.
    """
    from prefect.settings import PREFECT_API_URL, temporary_settings

    given = check_prefect_api(check_timeout_s)
    if given:
        from prefect.settings import get_current_settings

        if given != (os.environ.get("PREFECT_API_URL") or get_current_settings().api.url):
            from tracking.progress import say

            say(f"Prefect: the server `placement server start` keeps running, at {given}")
        kept = os.environ.get("PREFECT_API_URL")
        os.environ["PREFECT_API_URL"] = given  # the recorded server's (placement server start), for Ray workers too
        try:
            with temporary_settings(updates={PREFECT_API_URL: given}):
                yield given
        finally:
            _drain_prefect_workers()  # the run's logs and events reach the server before this process exits
            if kept is None:
                os.environ.pop("PREFECT_API_URL", None)
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _raise_system_exit)
    proc = None
    try:
        from tracking.progress import say

        say("Prefect: starting a temporary server (`placement server start` keeps one running) ...")
        proc, api_url = start_server()
        say(f"Prefect: server at {api_url}")
        os.environ["PREFECT_API_URL"] = api_url  # child processes (Ray workers) use it too
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            yield api_url
    finally:
        if proc is not None:
            _drain_prefect_workers()
        os.environ.pop("PREFECT_API_URL", None)
        if proc is not None:
            stop_server(proc)
        if previous in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_flow(flow_fn, fail, **kwargs):
    """``flow_fn(**kwargs)`` under [`prefect_api`][cli.runtime.prefect_api]; a Prefect API that cannot be reached or
    started is reported through ``fail(message)`` (the CLI's one line, exit 2)."""
    try:
        with prefect_api():
            return flow_fn(**kwargs)
    except PrefectServerError as exc:
        fail(str(exc))


OUT_DIR_ENTRIES = ("runs", "placement-logs", "checkpoints", "graph-cache", "cost-tables", "plots")
"""What a run writes under ``--out-dir`` (besides the default MLflow store, ``mlflow.db`` and
``mlartifacts``): each must resolve inside it ([`out_dir_problem`][cli.runtime.out_dir_problem])."""


def out_dir_problem(out_dir: str, default_store: bool) -> str | None:
    """The first of [`OUT_DIR_ENTRIES`][cli.runtime.OUT_DIR_ENTRIES] (and, with ``default_store``, ``mlflow.db`` and
    ``mlartifacts``) under ``out_dir`` that resolves outside it (a symlink leading out), as one line;
    ``None`` if none does. A run would be refused there only once it writes, after all its work."""
    from compgraph.paths import UnsafePath, inside

    entries = (*OUT_DIR_ENTRIES, *(("mlflow.db", "mlartifacts") if default_store else ()))
    for name in entries:
        path = Path(out_dir) / name
        if not (path.is_symlink() or path.exists()):
            continue
        try:
            inside(out_dir, path)
        except UnsafePath as exc:
            return f"--out-dir: {exc}"
    return None


def preflight(out_dir: str, tracking_uri: str | None, spool: bool, fail) -> None:
    """Before any work: ``out_dir`` writable, the folders a run writes there inside it
    ([`out_dir_problem`][cli.runtime.out_dir_problem]: no symlink leading out), (unless ``spool``) the MLflow store usable (a
    tracking server must answer ``/health`` within 5 s), and a given Prefect API answering
    ([`check_prefect_api`][cli.runtime.check_prefect_api]). Failures go to ``fail(message)``."""
    from tracking import default_tracking_uri
    from tracking.live import TrackingUnavailable, check_tracking, check_writable

    try:
        check_writable(out_dir, "--out-dir")
        problem = out_dir_problem(out_dir, default_store=not spool and not tracking_uri)
        if problem:
            fail(problem)
        if not spool:
            check_tracking(tracking_uri or default_tracking_uri(out_dir))
        check_prefect_api()
    except (TrackingUnavailable, PrefectServerError) as exc:
        fail(str(exc))


def one_line_errors_group():
    """A typer group class whose usage errors (``--seed abc``, a missing option) are one line,
    ``error: ...``, exit code 2, instead of click's usage box."""
    import click
    import typer
    from typer.core import TyperGroup

    click_errors, aborts = (click.ClickException,), (click.exceptions.Abort,)
    try:  # typer 0.29 vendors its own click (typer._click) and has its own Abort
        from typer._click.exceptions import ClickException as VendoredClickException
        from typer.exceptions import Abort as TyperAbort

        click_errors, aborts = (*click_errors, VendoredClickException), (*aborts, TyperAbort)
    except ImportError:
        pass

    class OneLineErrors(TyperGroup):
        def main(self, *args, standalone_mode: bool = True, **kwargs):
            os.environ["PLACEMENT_START_TIME"] = repr(time.time())  # stage lines count from this command's start
            if not standalone_mode:
                return super().main(*args, standalone_mode=False, **kwargs)
            try:
                rv = super().main(*args, standalone_mode=False, **kwargs)
            except click_errors as exc:
                argv = list(kwargs.get("args") or (args[0] if args else None) or sys.argv[1:])
                message = " ".join(exc.format_message().split())
                for opt in getattr(getattr(exc, "param", None), "opts", None) or []:
                    if opt in argv[:-1] and "got " not in message:  # name the value as well as the field
                        message += f" (got {argv[argv.index(opt) + 1]!r})"
                typer.echo(f"error: {message}", err=True)
                sys.exit(exc.exit_code)
            except aborts:
                typer.echo("aborted", err=True)
                sys.exit(1)
            sys.exit(rv if isinstance(rv, int) else 0)

    return OneLineErrors
