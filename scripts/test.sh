#!/usr/bin/env bash
# Set up and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check --quiet .   # pyflakes' checks (pyproject.toml [tool.ruff]): an undefined name fails here, not mid-run
mypy                   # types of the core packages (pyproject.toml [tool.mypy]: placer, baselines, compgraph, cluster)
exec python -m pytest -q "$@"
