#!/usr/bin/env bash
# Set up and run the main job with its defaults: Prefect without a server, MLflow in placement-runs/mlflow.db.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec placement experiment "$@"
