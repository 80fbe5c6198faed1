"""Whether an MLflow store can be used, checked before any work: the URI's scheme, a tracking server's
``/health``, a writable folder. Its own module so that the recorder ([`tracking.live`][tracking.live]) and the
export ([`tracking.export`][tracking.export]) both use it without importing each other in a circle.
"""

from __future__ import annotations

import time
from pathlib import Path


class TrackingUnavailable(RuntimeError):
    """The MLflow tracking server does not answer (the message is one line)."""


TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql")
"""URI schemes of MLflow stores that keep runs (MLflow's file store is in maintenance mode and refused)."""


def check_tracking(uri: str, timeout_s: float = 5.0) -> None:
    """Fail fast if the MLflow store at ``uri`` cannot be used: the URI must parse and name a store
    of [`TRACKING_SCHEMES`][tracking.store.TRACKING_SCHEMES] (a host for http(s)); for ``http(s)://`` the server's
    ``/health`` must answer within ``timeout_s`` seconds; for ``sqlite:///PATH`` the folder of
    PATH must be writable.

    Raises:
        TrackingUnavailable: with one line naming the URI.
    """
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError as exc:
        raise TrackingUnavailable(f"--tracking-uri {uri!r} is not a URI ({exc})") from None
    if parts.scheme not in TRACKING_SCHEMES:
        raise TrackingUnavailable(f"--tracking-uri {uri!r}: scheme {parts.scheme!r} is not a tracking store; "
                                  "use sqlite:///PATH, http(s)://HOST:PORT or a database URI "
                                  f"({', '.join(s + '://' for s in TRACKING_SCHEMES)})")
    if parts.scheme in ("http", "https") and not parts.hostname:
        raise TrackingUnavailable(f"--tracking-uri {uri!r} names no host")
    if parts.scheme == "sqlite" and not uri.startswith("sqlite:///"):
        raise TrackingUnavailable(f"--tracking-uri {uri!r}: a SQLite store is sqlite:///PATH (three slashes)")
    if uri.startswith(("http://", "https://")):
        import httpx

        try:
            ok = httpx.get(f"{uri.rstrip('/')}/health", timeout=timeout_s).status_code == 200
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise TrackingUnavailable(f"MLflow tracking server {uri} does not answer ({type(exc).__name__}); "
                                      "start it, or pass --spool to keep the results in the run folder and "
                                      "log them later with `placement log-run DIR`") from None
        if not ok:
            raise TrackingUnavailable(f"MLflow tracking server {uri} is not healthy (/health did not answer 200)")
    elif uri.startswith("sqlite:///"):
        folder = Path(uri[len("sqlite:///"):]).parent
        check_writable(folder, "--tracking-uri")


def check_writable(folder: str | Path, option: str = "--out-dir") -> None:
    """Create ``folder`` if needed and write and remove a probe file in it.

    Raises:
        TrackingUnavailable: not creatable or not writable (one line naming ``option`` and the folder).
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{time.monotonic_ns()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise TrackingUnavailable(f"{option} {folder} is not writable ({exc.strerror or type(exc).__name__})") from None
