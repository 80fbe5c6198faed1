#!/usr/bin/env bash
# Regenerate requirements.lock: every package of the project and its tests, pinned to the versions
# installed in .venv (the ones the test suite last passed with), resolved by uv from pyproject.toml.
# torch is the local CPU build (torch==2.13.0+cpu: /opt/wheels here; elsewhere
# https://download.pytorch.org/whl/cpu).  Usage: bash scripts/lock.sh  (needs uv: python3 -m pip install uv==0.13.8)
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
tested=$(mktemp)
trap 'rm -f "$tested"' EXIT
pip freeze --exclude-editable | grep -v -E '^(uv|pip|setuptools|wheel)==' > "$tested"
# --generate-hashes: scripts/setup.sh installs with --require-hashes. 3.11.7: this machine's Python
# (pymdown-extensions, of the docs extra, needs 3.11.5 or newer).
uv pip compile pyproject.toml --extra test --extra docs -c "$tested" --find-links /opt/wheels --python-version 3.11.7 \
  --python-platform x86_64-manylinux_2_28 --no-annotate --generate-hashes --custom-compile-command "bash scripts/lock.sh" \
  -o requirements.lock
