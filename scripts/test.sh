#!/usr/bin/env bash
# Set up (scripts/setup.sh), then lint, check the layer contract, and run the whole test suite;
# then, on a whole run (no arguments), the smoke subset against the oldest transformers (scripts/test_oldest.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export QT_QPA_PLATFORM=offscreen
export PYTHONDONTWRITEBYTECODE=1
# Tests never reach a model hub.
export HF_HUB_OFFLINE=1
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports
# In parallel (pytest-xdist): each worker is its own process with its own engine process,
# demo cache and settings (tests/conftest.py); FUSION_TEST_WORKERS=0 runs in one process.
.venv/bin/python -m pytest -q -n "${FUSION_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder --durations=15 "$@"
if [ $# -eq 0 ]; then
    bash scripts/test_oldest.sh
fi
