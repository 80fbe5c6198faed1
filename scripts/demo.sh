#!/usr/bin/env bash
# Set up and run the main job with its defaults: Prefect without a server, MLflow in placement-runs/mlflow.db.
# Arguments go to `placement experiment` (e.g. --budget 200; --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "[demo] set-up, then placement experiment $* (the default run: 1-2 minutes on 2 cores)"
bash scripts/setup.sh
. .venv/bin/activate
exec placement experiment "$@"
