#!/usr/bin/env bash
# Set up and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec python -m pytest -q "$@"
