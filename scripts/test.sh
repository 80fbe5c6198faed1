#!/usr/bin/env bash
# Set up and run the test suite (what .ci/run calls). Arguments go to pytest, e.g. -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
echo "[test] set-up, then ruff, mypy and pytest (the whole suite: about 25-35 minutes on 2 cores; -m 'not slow': about 5)"
bash scripts/setup.sh
. .venv/bin/activate
echo "[test] ruff check (pyflakes' checks: an undefined name fails here, not mid-run) ..."
ruff check --quiet .   # pyproject.toml [tool.ruff]
echo "[test] mypy: the core packages placer, baselines, compgraph, cluster (about 30 s) ..."
mypy                   # pyproject.toml [tool.mypy]
echo "[test] pytest $* ..."
exec python -m pytest -q "$@"
