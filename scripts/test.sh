#!/usr/bin/env bash
# Set up and run the test suite (what .ci/run calls). Arguments go to pytest, e.g. -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
echo "[test] set-up, then ruff, mypy and pytest (the whole suite in two workers: about 60-70 minutes on 2 cores; -m 'not slow': about 5)"
bash scripts/setup.sh
. .venv/bin/activate
echo "[test] ruff check (pyflakes' checks: an undefined name fails here, not mid-run) ..."
ruff check --quiet .   # pyproject.toml [tool.ruff]
echo "[test] mypy: the core packages placer, baselines, compgraph, cluster (about 30 s) ..."
mypy                   # pyproject.toml [tool.mypy]
# two workers (pytest-xdist): one core sat idle before (load about 1.1 through most of the suite, which
# took about 115 minutes here in one process); tests/conftest.py schedules whole modules (--dist loadfile)
echo "[test] pytest -n 2 --dist loadfile $* ..."
exec python -m pytest -q -n 2 --dist loadfile "$@"
