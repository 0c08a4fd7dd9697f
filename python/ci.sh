#!/usr/bin/env bash
# Builds the Python package into a fresh venv with the workspace's dev profile (in target/, so
# a second run recompiles nothing but what changed) and runs its pytest suite, the seeds'
# examples under the launcher included. Usage: ./python/ci.sh (from any directory; needs python3 >= 3.9).
set -euo pipefail
cd "$(dirname "$0")"
venv="${GFLOW_PY_VENV:-$(mktemp -d)/venv}"
python3 -m venv "$venv"
# shellcheck disable=SC1091
source "$venv/bin/activate"
pip install -q --disable-pip-version-check maturin pytest numpy
maturin develop --profile dev
python -m pytest -q tests
