"""Start-up of the Prefect API for a flow run: Prefect's own temporary server vs :func:`cli.runtime.prefect_api`.

Runs N processes at once on one fresh ``PREFECT_HOME`` (the case that raced in the database
migration), each running a trivial flow, and prints JSON: per mode, the exit codes, the
seconds each took, the first error line, and whether any server process outlived its run.

    python benchmarks/prefect_startup.py [--n 2] [--timeout 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = {
    "prefect": "from prefect import flow\n@flow\ndef f(): return 1\nassert f() == 1\n",
    "placement": ("from cli.runtime import prefect_api\nfrom prefect import flow\n@flow\ndef f(): return 1\n"
                  "with prefect_api():\n    assert f() == 1\n"),
}


def _servers(home: str) -> int:
    """uvicorn servers still running with this PREFECT_HOME in their environment."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if b"uvicorn" in cmd and f"PREFECT_HOME={home}".encode() in env:
            n += 1
    return n


def run(mode: str, n: int, timeout: float) -> dict:
    home = tempfile.mkdtemp(prefix=f"prefect-{mode}-")
    env = {**os.environ, "PREFECT_HOME": home, "PYTHONPATH": str(ROOT),
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": str(int(timeout)), "PREFECT_LOGGING_LEVEL": "WARNING"}
    env.pop("PREFECT_API_URL", None)
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD[mode]], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(n)]
    rows = []
    for p in procs:
        out, _ = p.communicate()
        errors = [line for line in out.splitlines() if "Error" in line or "error" in line]
        rows.append({"rc": p.returncode, "seconds": round(time.perf_counter() - start, 1),
                     "error": errors[-1][:200] if errors else None})
    time.sleep(1)
    return {"mode": mode, "processes": n, "startup_timeout_s": timeout, "runs": rows, "servers_left": _servers(home)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0, help="PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS")
    ap.add_argument("--modes", default="prefect,placement")
    args = ap.parse_args()
    load = os.getloadavg()
    out = [run(m, args.n, args.timeout) for m in args.modes.split(",")]
    print(json.dumps({"loadavg_1m": load[0], "cpus": os.cpu_count(), "results": out}, indent=1))


if __name__ == "__main__":
    main()
