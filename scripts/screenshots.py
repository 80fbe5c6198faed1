"""Screenshots of the Prefect UI (the experiment's custom-run form, a flow run, its artifacts, the runs
list) and of the MLflow UI (the runs table and the chart view) for docs/.

Starts a Prefect server with ``placement server start`` (its own ``PLACEMENT_HOME`` and
``PREFECT_HOME`` under ``--work``), runs two experiments against it (rnnlm budget 200, nmt budget
100, both small on k80x2), deploys ``placement-experiment/demo`` from prefect.yaml (a ``process``
work pool, ``prefect deploy``), then an MLflow UI on the runs' store; a headless Chromium takes
each page, and ``placement server stop`` ends the server. Needs ``chromium`` (Debian:
``apt-get install chromium``); everything binds 127.0.0.1.

    python scripts/screenshots.py [--out docs] [--work DIR] [--only prefect-form,mlflow-runs]

The shots (``--only`` takes their names, without ``.png``): ``prefect-form`` (Deployments ->
demo -> Run -> Custom run: the graph source as a choice of kinds, each with its fields, in
Prefect's default UI), ``prefect-flow-run``, ``prefect-table-artifact``, ``prefect-image-artifact``,
``prefect-runs``, ``mlflow-runs`` and ``mlflow-charts``.
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
SHOTS = ("prefect-form", "prefect-flow-run", "prefect-table-artifact", "prefect-image-artifact", "prefect-runs",
         "mlflow-runs", "mlflow-charts")
STARTUP_TIMEOUT_S = 300.0
"""How long to wait for the MLflow UI's /health (seconds; the Prefect server has its own limit)."""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, proc: subprocess.Popen, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Until ``url`` answers below 500 (its handshake), ``proc`` exits, or ``timeout_s`` runs out."""
    import httpx

    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with code {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=5).status_code < 500:
                return
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.5)  # between two checks
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s: {last!r}")


def _shot(browser: str, url: str, path: Path, size: str = "1900,1100", wait_ms: int = 20000) -> None:
    """``url`` in headless Chromium after ``wait_ms`` ms of the page's own (virtual) time: its scripts
    and requests settle first."""
    subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={size}", f"--virtual-time-budget={wait_ms}", f"--screenshot={path}", url],
                   check=True, capture_output=True, timeout=180)
    print(f"{path}: {url}")


class Page:
    """One headless Chromium page driven over the DevTools protocol: open a URL, wait until the page
    says it is ready (a JavaScript condition: a handshake, not a clock), click, take a screenshot."""

    def __init__(self, browser: str, profile: Path, width: int = 1900, height: int = 1100):
        import itertools
        import re

        import httpx
        from websockets.sync.client import connect

        self.proc = subprocess.Popen([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                      "--remote-debugging-port=0", f"--user-data-dir={profile}",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        for line in self.proc.stderr:  # Chromium's first words: where its DevTools listen
            found = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if found:
                break
        else:
            raise RuntimeError(f"{browser} exited with code {self.proc.wait()} before its DevTools listened")
        port = found.group(1)
        target = next(t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=30).json() if t["type"] == "page")
        self.ws = connect(target["webSocketDebuggerUrl"], max_size=None)
        self.ids = itertools.count(1)
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params) -> dict:
        i = next(self.ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def js(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def wait(self, condition: str, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Until the JavaScript ``condition`` holds on the page, at most ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while not self.js(condition):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the page did not get ready within {timeout_s:.0f} s: {condition}")
            time.sleep(0.25)  # between two checks

    def open(self, url: str, ready: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait(ready)

    def shot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        print(f"{path}: {self.js('location.href')}")

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


MLFLOW_ROWS = "document.querySelectorAll('.ag-center-cols-container .ag-row').length"
MLFLOW_ASSISTANT_CLOSE = "[data-component-id=\"mlflow.assistant.chat_panel.close\"]"
MLFLOW_EXPAND = "[data-component-id$=\"runnamecellrenderer.tsx_46\"]"  # a parent run's +, in its name cell


def _mlflow_page(page: Page, url: str, ready: str, expand: bool) -> None:
    """An MLflow UI page at ``url`` once ``ready`` holds, its AI assistant panel (opened on a first
    visit from 127.0.0.1) closed and, with ``expand``, every parent run of the runs table expanded to
    its per-method runs."""
    page.open(url, ready)
    if page.js(f"!!document.querySelector('{MLFLOW_ASSISTANT_CLOSE}')"):
        page.js(f"document.querySelector('{MLFLOW_ASSISTANT_CLOSE}').click()")
        page.wait(f"!document.querySelector('{MLFLOW_ASSISTANT_CLOSE}') && {ready}")
    if expand:
        parents = page.js(f"document.querySelectorAll('{MLFLOW_EXPAND}').length")
        page.js(f"document.querySelectorAll('{MLFLOW_EXPAND}').forEach(b => b.click())")
        page.wait(f"{MLFLOW_ROWS} > {parents}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--only", default=",".join(SHOTS), help="comma-separated shots: " + ", ".join(SHOTS))
    args = ap.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    if not only or set(only) - set(SHOTS):
        sys.exit(f"error: --only {args.only!r}: choose among {', '.join(SHOTS)}")
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        sys.exit("error: no chromium on PATH (apt-get install chromium)")
    work = Path(args.work or tempfile.mkdtemp(prefix="screenshots-"))
    work.mkdir(parents=True, exist_ok=True)
    out_dir = work / "runs"
    prefect_port, mlflow_port = _port(), _port()
    env = {**os.environ, "PLACEMENT_HOME": str(work / "home"), "PREFECT_HOME": str(work / "prefect-home"),
           "PYTHONPATH": str(ROOT), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    placement = [sys.executable, "-m", "cli.main"]
    prefect_cli = [sys.executable, "-m", "prefect"]
    docs = Path(args.out)
    docs.mkdir(parents=True, exist_ok=True)
    mlflow_proc = None
    # one Prefect server for the whole session: the experiments and the deployment use it (tracking.server)
    subprocess.run([*placement, "server", "start", "--port", str(prefect_port)], env=env, check=True, cwd=work)
    try:
        state = json.loads((work / "home" / "prefect-server.json").read_text())
        prefect, api = state["url"], state["api_url"]
        results = []
        for model, budget in (("rnnlm", 200), ("nmt", 100)):
            js = work / f"{model}.json"
            subprocess.run([*placement, "experiment", "--model", model, "--budget", str(budget), "--out-dir", str(out_dir),
                            "--json", str(js)], env=env, check=True, cwd=work)
            results.append(json.loads(js.read_text()))
        import httpx

        if "prefect-form" in only:  # the demo deployment of prefect.yaml, and its custom-run form
            deploy_env = {**env, "PREFECT_API_URL": api}
            subprocess.run([*prefect_cli, "work-pool", "create", "placement", "--type", "process"], env=deploy_env,
                           check=True, cwd=ROOT, capture_output=True)
            subprocess.run([*prefect_cli, "--no-prompt", "deploy", "--name", "demo"], env=deploy_env, check=True,
                           cwd=ROOT, capture_output=True)
            demo = [d for d in httpx.post(f"{api}/deployments/filter", timeout=30, json={}).json() if d["name"] == "demo"]
            page = Page(browser, work / "chromium", 1400, 1500)
            try:  # ready: the source's choice of kinds is drawn
                page.open(f"{prefect}/v2/deployments/deployment/{demo[0]['id']}/run",
                          "[...document.querySelectorAll('button')].some(b => b.innerText.trim() === 'graph_def')")
                page.shot(docs / "prefect-form.png")
            finally:
                page.close()
        run = results[0]["prefect_flow_run_id"]
        if "prefect-flow-run" in only:
            _shot(browser, f"{prefect}/runs/flow-run/{run}", docs / "prefect-flow-run.png")
        arts = httpx.post(f"{api}/artifacts/filter", timeout=30, json={"artifacts": {"flow_run_id": {"any_": [run]}}}).json()
        for kind, name in (("table", "prefect-table-artifact"), ("image", "prefect-image-artifact")):
            chosen = [a for a in arts if a["type"] == kind and (kind != "image" or "timeline" in (a.get("key") or ""))]
            if name in only and chosen:
                _shot(browser, f"{prefect}/artifacts/artifact/{chosen[0]['id']}", docs / f"{name}.png")
        if "prefect-runs" in only:
            _shot(browser, f"{prefect}/runs", docs / "prefect-runs.png")
        if {"mlflow-runs", "mlflow-charts"} & set(only):
            sys.path.insert(0, str(ROOT))
            from tracking import runs_page

            uri = f"sqlite:///{out_dir / 'mlflow.db'}"
            mlflow_proc = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host",
                                            "127.0.0.1", "--port", str(mlflow_port)], env=env,
                                           stdout=(work / "mlflow.log").open("w"), stderr=subprocess.STDOUT)
            mlflow = f"http://127.0.0.1:{mlflow_port}"
            _wait(mlflow + "/health", mlflow_proc)
            page = runs_page(uri, results[-1]["mlflow_run_id"]) or ""
            runs = mlflow + page[page.index("/#/"):]  # the runs table with the key metrics as columns
            page = Page(browser, work / "chromium")
            try:
                if "mlflow-runs" in only:
                    _mlflow_page(page, runs, f"{MLFLOW_ROWS} > 0", expand=True)
                    page.shot(docs / "mlflow-runs.png")
                if "mlflow-charts" in only:
                    _mlflow_page(page, runs + "&compareRunsMode=CHART",
                                 "document.querySelectorAll('.js-plotly-plot').length > 0", expand=False)
                    page.shot(docs / "mlflow-charts.png")
            finally:
                page.close()
    finally:
        if mlflow_proc is not None:
            mlflow_proc.terminate()
            try:
                mlflow_proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                mlflow_proc.kill()
        subprocess.run([*placement, "server", "stop"], env=env, cwd=work)


if __name__ == "__main__":
    main()
