"""``placement server start|stop|status``: one Prefect server kept running for a sweep or a UI
session, so that a command does not spend 20-30 s starting a temporary one
([`tracking.server`][tracking.server])."""

from __future__ import annotations

import sys

import typer
from typer.core import TyperGroup

from cli.common import _fail, _plain_help_group, app

server_app = typer.Typer(help="Keep one Prefect server running (127.0.0.1) for a sweep or a UI session: commands use "
                              "it instead of starting a temporary server each.", no_args_is_help=True,
                         cls=_plain_help_group(TyperGroup))
app.add_typer(server_app, name="server")


@server_app.command("start")
def server_start(
    port: int = typer.Option(4200, help="port on 127.0.0.1 for the API and the UI"),
    timeout: float = typer.Option(None, help="seconds to wait for the server to answer (default 180, or "
                                             "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)"),
) -> None:
    """Start a Prefect server (API, UI and services) on 127.0.0.1 in the background, wait until it
    answers, and record it: every placement command then runs its flow against it, until
    `placement server stop`. A server already running is kept."""
    from tracking.server import ServerError, running_api_url, start, state_path

    if not 1 <= port <= 65535:
        _fail(f"--port must be between 1 and 65535, got {port}")
    if running_api_url() is None:
        typer.echo(f"Prefect: starting a server on 127.0.0.1:{port} (up to a few minutes on a busy machine) ...", err=True)
    try:
        state, started = start(port, timeout)
    except ServerError as exc:
        _fail(str(exc))
    typer.echo(f"Prefect server {'running' if started else 'already running'} at {state.api_url} (pid {state.pid}); "
               f"UI: {state.url}")
    typer.echo(f"recorded in {state_path()}; commands use it until `placement server stop`", err=True)


@server_app.command("stop")
def server_stop() -> None:
    """Stop the server `placement server start` started, and remove its record; commands start a
    temporary server again."""
    from tracking.server import ServerError, stop

    try:
        state = stop()
    except ServerError as exc:
        _fail(str(exc))
    typer.echo("no Prefect server recorded" if state is None else f"stopped the Prefect server at {state.url} (pid {state.pid})")


@server_app.command("status")
def server_status() -> None:
    """Say whether the recorded Prefect server runs and answers (exit 0), or not (exit 1)."""
    from tracking.server import alive, healthy, read_state, state_path

    state = read_state()
    if state is None:
        typer.echo("not running: commands start a temporary Prefect server (`placement server start` keeps one)")
        sys.exit(1)
    if alive(state.pid) and healthy(state.api_url, 5.0):
        typer.echo(f"running at {state.api_url} (pid {state.pid}); UI: {state.url}; log: {state.log}")
        return
    why = "its process is gone" if not alive(state.pid) else "it does not answer /api/health"
    typer.echo(f"not running: the server recorded in {state_path()} (pid {state.pid}, {state.url}): {why}; "
               "`placement server stop` removes the record")
    sys.exit(1)
