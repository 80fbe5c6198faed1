#!/usr/bin/env bash
# Create .venv and install the project into it, with uv (idempotent: a second run checks and installs
# nothing). Steps: uv itself (from PyPI if missing), the venv, PyTorch's CPU build, every package of
# requirements.lock at its pinned version and hash, the project (editable), `uv pip check`.
# If uv cannot be had, pip does the same steps (slower), and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

T0=$SECONDS
say() { printf '[setup %4ss] %s\n' "$((SECONDS - T0))" "$*"; }
say "setting up .venv (uv, Python 3.11, PyTorch 2.13.0 CPU build, requirements.lock): under a minute the first time (about 1 GB to download), seconds after"

UV_VERSION=0.13.8
TORCH_PIN="torch==2.13.0+cpu"
# PyTorch's CPU wheel index: the CPU build of torch (the default index's torch is a CUDA build of several GB).
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
# Machines that reach no index but PyPI keep that same wheel on disk; when it is there it is used instead.
LOCAL_WHEELS=/opt/wheels
export UV_PYTHON_DOWNLOADS=never   # use the machine's Python 3.11; never download one
LOCK=requirements.lock
SITE=.venv/lib/python3.11/site-packages

# While a long step runs with no terminal (CI, a log file), print a line every 20 s so the screen never goes quiet.
# The ticker stops itself once its flag file is gone (no kill, no wait: bash would warn about a reaped job).
heartbeat_flag=""
start_heartbeat() {
  [ -t 1 ] && return 0
  local t=$SECONDS
  heartbeat_flag=$(mktemp)
  ( flag=$heartbeat_flag; n=0
    while sleep 1 && [ -e "$flag" ]; do
      n=$((n + 1)); [ $((n % 20)) -eq 0 ] && say "  ... still running ($((SECONDS - t)) s)"
    done ) &
}
stop_heartbeat() {
  if [ -n "$heartbeat_flag" ]; then rm -f "$heartbeat_flag"; fi
  heartbeat_flag=""
}
trap stop_heartbeat EXIT
step() {  # step "what" command...: one line before, the command's own output, one line after with the seconds
  local label=$1 t=$SECONDS
  shift
  say "$label ..."
  start_heartbeat
  if "$@"; then stop_heartbeat; say "$label: done in $((SECONDS - t)) s"; else
    local rc=$?; stop_heartbeat; say "$label: FAILED (exit $rc)"; return "$rc"; fi
}

# The lock's entries, torch's apart: torch comes from PyTorch's CPU index (or the local copy of its wheel).
lock_without_torch=$(mktemp)
torch_req=$(mktemp)
trap 'stop_heartbeat; rm -f "$lock_without_torch" "$torch_req"' EXIT
awk -v out="$torch_req" '/^[^ #]/ { in_torch = ($0 ~ /^torch==/) } { if (in_torch) print > out; else print }' \
  "$LOCK" > "$lock_without_torch"
local_torch=$(ls "$LOCAL_WHEELS"/torch-2.13.0+cpu-cp311-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$local_torch" ]; then
  torch_source=(--no-index --find-links "$LOCAL_WHEELS")
  torch_where="the CPU wheel on this machine, $LOCAL_WHEELS"
else
  torch_source=(--index-url "$TORCH_CPU_INDEX")
  torch_where="PyTorch's CPU wheel index, $TORCH_CPU_INDEX"
fi
have_torch() { [ -d "$SITE/torch-2.13.0+cpu.dist-info" ]; }

# 1. uv
UV=()
if command -v uv >/dev/null 2>&1; then
  UV=(uv)
elif python3 -m uv --version >/dev/null 2>&1; then
  UV=(python3 -m uv)
else
  say "uv is not installed: python3 -m pip install uv==$UV_VERSION (from PyPI)"
  if python3 -m pip install --disable-pip-version-check "uv==$UV_VERSION"; then
    UV=(python3 -m uv)
  else
    say "could not install uv: pip does every step instead (slower; the same versions and hashes)"
  fi
fi
[ ${#UV[@]} -gt 0 ] && say "using $("${UV[@]}" --version)"

# 2. the venv (seeded with pip, so that `pip` works in it as in any venv)
if [ -x .venv/bin/python ]; then
  say ".venv exists: $(.venv/bin/python --version)"
else
  py=$(command -v python3.11 || command -v python3)
  if [ ${#UV[@]} -gt 0 ]; then
    step "creating .venv with $py" "${UV[@]}" venv --seed --python "$py" .venv
  else
    step "creating .venv with $py" "$py" -m venv .venv
  fi
fi
export VIRTUAL_ENV="$PWD/.venv"
# uv run as `python3 -m uv` targets the Python that ran it (the system's), not $VIRTUAL_ENV: name the venv.
VENV_PY=(--python "$PWD/.venv/bin/python")

# pip_install WHAT ARGS...: uv pip install ARGS, or pip install ARGS when uv is missing or fails (the
# arguments mean the same to both).
pip_install() {
  local label=$1
  shift
  if [ ${#UV[@]} -gt 0 ]; then
    step "$label" "${UV[@]}" pip install "${VENV_PY[@]}" "$@" && return 0
    say "uv could not do it: trying pip instead (slower)"
  fi
  step "$label (pip)" .venv/bin/python -m pip install --disable-pip-version-check "$@"
}

# 3. torch, CPU build, first: nothing after it may pull another build
if have_torch; then
  say "$TORCH_PIN is installed"
else
  pip_install "installing $TORCH_PIN (about 190 MB) from $torch_where" \
    --no-deps --require-hashes "${torch_source[@]}" -r "$torch_req"
fi
# 4. the lock: every package at its pinned version, checked against its hashes; --no-deps because the
# lock is the whole closure (uv pip compile's output)
pip_install "installing requirements.lock from PyPI ($(grep -c '^[a-z0-9]' "$LOCK") packages, about 1 GB to download and 3.3 GB installed; TensorFlow is the largest)" \
  --no-deps --require-hashes -r "$lock_without_torch"
# 5. the project itself, editable: the `placement` command (again only when pyproject.toml changed)
project_installed() {
  local d
  d=$(ls -d "$SITE"/device_placement-*.dist-info 2>/dev/null | head -n 1)
  [ -n "$d" ] && [ -x .venv/bin/placement ] && [ "$d" -nt pyproject.toml ] \
    && tr -d ' ' < "$d/direct_url.json" | grep -q "\"url\":\"file://$PWD\""
}
if project_installed; then
  say "the project is installed (editable, from $PWD)"
else
  pip_install "installing the project (editable)" --no-deps -e .
fi
if [ ${#UV[@]} -gt 0 ]; then
  step "checking the installed requirements" "${UV[@]}" pip check "${VENV_PY[@]}"
else
  step "checking the installed requirements" .venv/bin/python -m pip check
fi
say "ready in $((SECONDS - T0)) s: '. .venv/bin/activate' puts the 'placement' command on the path"
