#!/usr/bin/env bash
# Create .venv and install the project (idempotent). torch first, pinned to the local CPU build:
# an unpinned torch would pull GBs of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3.11 -m venv .venv 2>/dev/null || python3 -m venv .venv
fi
. .venv/bin/activate
python -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null \
  || pip install -q torch==2.13.0
# every package at the version the tests last passed with (requirements.lock: bash scripts/lock.sh)
pip install -q -r requirements.lock
pip install -q --no-deps -e .
pip check
