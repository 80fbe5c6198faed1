#!/usr/bin/env bash
# Set up and run the test suite (what .ci/run calls). Arguments go to pytest, e.g. -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
echo "[test] set-up, then ruff, mypy and pytest (the whole suite: about 115 minutes on 2 cores; -m 'not slow': about 10)"
bash scripts/setup.sh
. .venv/bin/activate
echo "[test] ruff check (pyflakes' checks: an undefined name fails here, not mid-run) ..."
ruff check --quiet .   # pyproject.toml [tool.ruff]
echo "[test] mypy: the core packages placer, baselines, compgraph, cluster (about 30 s) ..."
mypy                   # pyproject.toml [tool.mypy]
# CI (CI=true) has 90 minutes; the whole suite takes 57-115 min here, CPU-bound, by the load: under CI the slow tests
# not begun after 60 minutes are skipped, each saying so (tests/conftest.py BUDGET_S); outside CI none is
if [ "${CI:-}" = "true" ]; then export PLACEMENT_TEST_BUDGET_S="${PLACEMENT_TEST_BUDGET_S:-3600}"; fi
echo "[test] pytest $* (time budget for the slow tests: ${PLACEMENT_TEST_BUDGET_S:-none} s) ..."
exec python -m pytest -q "$@"
