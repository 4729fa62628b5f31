#!/usr/bin/env bash
# Run every benchmark, one after the other, and print their ratio tables.
# Usage: bash benchmarks/run_all.sh [--quick]   (--quick: smaller checkpoints, fewer runs)
# Checkpoints the benchmarks generate are cached under benchmarks/.bench (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
PY=.venv/bin/python
quick=()
[ "${1:-}" = "--quick" ] && quick=(--quick)
run() { echo; echo "=== $*"; "$PY" "$@"; }
run benchmarks/bench_plan.py
run benchmarks/bench_coverage.py
run benchmarks/bench_patch_embeddings.py "${quick[@]}"
run benchmarks/bench_families.py "${quick[@]}"
run benchmarks/bench_load.py "${quick[@]}"
run benchmarks/bench_export.py "${quick[@]}"
run benchmarks/bench_gui.py
run benchmarks/bench_answer.py
run benchmarks/bench_coverage_check.py --resume
