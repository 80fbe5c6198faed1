"""Screenshots of the Prefect flow-run page and the MLflow runs table and chart view for docs/.

Starts a Prefect server and, after two experiments ran against it (rnnlm budget 200, nmt budget
100, both small on k80x2), an MLflow UI on their store; then a headless Chromium takes each
page. Needs ``chromium`` (Debian: ``apt-get install chromium``); everything binds 127.0.0.1.

    python scripts/screenshots.py [--out docs] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, timeout_s: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=5).status_code < 500:
                return
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(1)
    raise RuntimeError(f"{url} did not answer within {timeout_s} s: {last!r}")


def _shot(browser: str, url: str, path: Path, size: str = "1900,1100", wait_ms: int = 20000) -> None:
    subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={size}", f"--virtual-time-budget={wait_ms}", f"--screenshot={path}", url],
                   check=True, capture_output=True, timeout=180)
    print(f"{path}: {url}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs"))
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        sys.exit("error: no chromium on PATH (apt-get install chromium)")
    work = Path(args.work or tempfile.mkdtemp(prefix="screenshots-"))
    work.mkdir(parents=True, exist_ok=True)
    out_dir = work / "runs"
    prefect_port, mlflow_port = _port(), _port()
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect-home"), "PREFECT_SERVER_API_PORT": str(prefect_port),
           "PREFECT_API_URL": f"http://127.0.0.1:{prefect_port}/api", "PYTHONPATH": str(ROOT)}
    procs = []
    try:
        procs.append(subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                                       "--port", str(prefect_port)], env=env, stdout=(work / "prefect.log").open("w"),
                                      stderr=subprocess.STDOUT))
        _wait(f"http://127.0.0.1:{prefect_port}/api/health")
        results = []
        for model, budget in (("rnnlm", 200), ("nmt", 100)):
            js = work / f"{model}.json"
            subprocess.run([sys.executable, "-m", "cli.main", "experiment", "--model", model, "--budget", str(budget),
                            "--out-dir", str(out_dir), "--json", str(js)], env=env, check=True, cwd=work)
            results.append(json.loads(js.read_text()))
        procs.append(subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), "ui", "--backend-store-uri",
                                       f"sqlite:///{out_dir / 'mlflow.db'}", "--host", "127.0.0.1", "--port",
                                       str(mlflow_port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        mlflow = f"http://127.0.0.1:{mlflow_port}"
        _wait(mlflow + "/health")
        from mlflow.tracking import MlflowClient

        exp = MlflowClient(tracking_uri=f"sqlite:///{out_dir / 'mlflow.db'}").get_experiment_by_name("placement-experiment")
        docs = Path(args.out)
        docs.mkdir(parents=True, exist_ok=True)
        prefect = f"http://127.0.0.1:{prefect_port}"
        _shot(browser, f"{prefect}/runs/flow-run/{results[0]['prefect_flow_run_id']}", docs / "prefect-flow-run.png")
        import httpx

        arts = httpx.post(f"{prefect}/api/artifacts/filter", timeout=30, json={"artifacts": {
            "flow_run_id": {"any_": [results[0]["prefect_flow_run_id"]]}}}).json()
        for kind, name in (("table", "prefect-table-artifact.png"), ("image", "prefect-image-artifact.png")):
            chosen = [a for a in arts if a["type"] == kind and (kind != "image" or "timeline" in (a.get("key") or ""))]
            if chosen:
                _shot(browser, f"{prefect}/artifacts/artifact/{chosen[0]['id']}", docs / name)
        _shot(browser, f"{prefect}/runs", docs / "prefect-runs.png")
        runs = f"{mlflow}/#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning"
        _shot(browser, runs, docs / "mlflow-runs.png")
        _shot(browser, runs + "&compareRunsMode=CHART", docs / "mlflow-charts.png")
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
