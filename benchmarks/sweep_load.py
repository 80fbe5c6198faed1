"""A nightly-sweep-sized load: several ``placement-sweep`` flow runs at once on one MLflow store
and one Prefect server; prints JSON.

``--sweeps`` sweep processes start together (default 3), each the ``placement-sweep`` flow over
``--models`` x ``--clusters`` for its own seed (seed 0, 1, 2, ...), so the default is 3 x 2 x 2 =
12 experiment configurations, 3 running at any time. They share one out-dir: its SQLite MLflow
store (``mlflow.db``), its graph cache and its placement logs; and one Prefect server started
here (:func:`cli.runtime.start_server`). Afterwards it checks what a nightly sweep must leave:

* ``mlflow``: every experiment configuration has exactly one parent run, ``FINISHED``, and no run
  of any kind is left ``RUNNING`` (or ended ``FAILED``/``KILLED``);
* ``placement_logs``: every learner's log has its header and exactly ``--budget`` placements,
  each a whole JSON line;
* ``prefect``: every flow run (the sweeps and their experiment subflows) ``COMPLETED``;
* ``leftover_processes``: no process started here (marked by an environment variable) outlives
  the benchmark, the Prefect server included.

``ok`` is true when all hold. Figures: wall seconds of the whole load and of each sweep, each
experiment's MLflow run duration, SQLite lock errors seen in the sweeps' output, load average.

    python benchmarks/sweep_load.py [--sweeps 3] [--models rnnlm,nmt] [--clusters k80x2,k80x4]
        [--size small] [--budget 100] [--methods single_gpu,expert,m_etf,rl,post] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MARK = "PLACEMENT_SWEEP_LOAD"

CHILD = """
import json, sys
from flows.sweep import placement_sweep
base = {{"source": {{"kind": "benchmark", "size": {size!r}}}, "budget": {budget}, "methods": {methods!r},
        "tracking": {{"out_dir": {out!r}}}}}
rows = placement_sweep(base=base, models={models!r}, clusters={clusters!r}, seeds=[{seed}])
print("ROWS " + json.dumps(rows))
"""


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries ``MARK=mark`` (started by this benchmark)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if f"{MARK}={mark}".encode() in env.split(b"\0") and state != "Z":
            found.append(int(pid))
    return found


def _prefect_states(api_url: str) -> dict[str, int]:
    import httpx

    r = httpx.post(f"{api_url}/flow_runs/filter", json={"limit": 200}, timeout=30)
    r.raise_for_status()
    names: dict[str, int] = {}
    for run in r.json():
        names[run["state_type"]] = names.get(run["state_type"], 0) + 1
    return names


def _mlflow_check(out: Path, configs: list[tuple[str, str, int]], size: str) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id], max_results=5000)]
    statuses: dict[str, int] = {}
    for r in runs:
        statuses[r.info.status] = statuses.get(r.info.status, 0) + 1
    per_config = {}
    durations = []
    for model, cluster, seed in configs:
        name = f"{model}-{size}-{cluster}-sim-seed{seed}"
        mine = [r for r in runs if r.info.run_name == name]
        per_config[name] = sorted(r.info.status for r in mine)
        durations += [(r.info.end_time - r.info.start_time) / 1e3 for r in mine if r.info.end_time]
    once = all(v == ["FINISHED"] for v in per_config.values())
    return {"runs": len(runs), "statuses": statuses, "configs_finished_once": sum(v == ["FINISHED"] for v in per_config.values()),
            "configs": len(configs), "not_once": {k: v for k, v in per_config.items() if v != ["FINISHED"]},
            "experiment_run_s": {"median": round(statistics.median(durations), 1) if durations else None,
                                 "max": round(max(durations), 1) if durations else None},
            "ok": once and set(statuses) == {"FINISHED"}}


def _log_check(out: Path, budget: int, expected: int) -> dict:
    logs = sorted(out.rglob("placement-logs/*.jsonl"))
    bad = []
    for path in logs:
        lines = path.read_text().splitlines()
        try:
            records = [json.loads(line) for line in lines]
        except json.JSONDecodeError as exc:
            bad.append(f"{path.name}: a broken line ({exc})")
            continue
        if len(records) - 1 != budget:
            bad.append(f"{path.name}: {len(records) - 1} placements, not {budget}")
    return {"logs": len(logs), "expected": expected, "incomplete": bad, "ok": not bad and len(logs) == expected}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--models", default="rnnlm,nmt")
    ap.add_argument("--clusters", default="k80x2,k80x4")
    ap.add_argument("--size", default="small")
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--methods", default="single_gpu,expert,m_etf,rl,post")
    ap.add_argument("--out", default=None, help="the shared out-dir (default: a new temporary folder)")
    args = ap.parse_args()
    from cli.runtime import start_server, stop_server
    from placer import LEARNER_NAMES

    models, clusters, methods = args.models.split(","), args.clusters.split(","), args.methods.split(",")
    out = Path(args.out or tempfile.mkdtemp(prefix="sweep-load-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    mark = uuid.uuid4().hex
    os.environ[MARK] = mark  # the server and every sweep inherit it
    os.environ.setdefault("PREFECT_HOME", str(out / "prefect-home"))
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    start = time.perf_counter()
    server, api_url = start_server()
    loads = [os.getloadavg()[0]]
    try:
        env = {**os.environ, "PREFECT_API_URL": api_url, "PYTHONPATH": str(ROOT)}
        procs = []
        for seed in range(args.sweeps):
            code = CHILD.format(models=models, size=args.size, clusters=clusters, seed=seed, budget=args.budget,
                                methods=methods, out=str(out))
            log = (out / f"sweep-{seed}.log").open("w")
            procs.append((seed, subprocess.Popen([sys.executable, "-c", code], env=env, stdout=log,
                                                 stderr=subprocess.STDOUT, cwd=str(out)), log, time.perf_counter()))
        sweeps = []
        pending = list(procs)
        while pending:
            time.sleep(5)
            loads.append(os.getloadavg()[0])
            for item in list(pending):
                seed, proc, log, t0 = item
                if proc.poll() is not None:
                    log.close()
                    text = (out / f"sweep-{seed}.log").read_text()
                    rows = next((json.loads(line[5:]) for line in text.splitlines() if line.startswith("ROWS ")), [])
                    sweeps.append({"seed": seed, "rc": proc.returncode, "wall_s": round(time.perf_counter() - t0, 1),
                                   "experiments": len(rows), "errors": [r["error"][:200] for r in rows if "error" in r],
                                   "sqlite_locked_lines": text.count("database is locked")})
                    pending.remove(item)
        prefect = _prefect_states(api_url)
    finally:
        stop_server(server)
    wall = time.perf_counter() - start
    time.sleep(2)  # let reaped children's /proc entries go
    configs = [(m, c, s) for s in range(args.sweeps) for m in models for c in clusters]
    learners = [m for m in methods if m in LEARNER_NAMES]
    result = {
        "sweeps": args.sweeps, "configurations": len(configs), "at_once": args.sweeps, "size": args.size,
        "budget": args.budget, "methods": methods, "cpus": os.cpu_count(), "wall_s": round(wall, 1),
        "loadavg_1m": {"max": round(max(loads), 1), "mean": round(statistics.mean(loads), 1)},
        "sweep_runs": sorted(sweeps, key=lambda r: r["seed"]),
        "mlflow": _mlflow_check(out, configs, args.size),
        "placement_logs": _log_check(out, args.budget, len(configs) * len(learners)),
        "prefect": {"flow_runs": prefect, "ok": set(prefect) == {"COMPLETED"}
                    and sum(prefect.values()) == args.sweeps + len(configs)},
        "leftover_processes": _marked(mark),
        "out_dir": str(out),
    }
    result["ok"] = (all(s["rc"] == 0 and not s["errors"] for s in sweeps) and result["mlflow"]["ok"]
                    and result["placement_logs"]["ok"] and result["prefect"]["ok"] and not result["leftover_processes"])
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
