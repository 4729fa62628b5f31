#!/usr/bin/env bash
# The smoke subset (pytest -m smoke: open, plan, check, export and adapter on the demos) against
# the oldest transformers pyproject.toml admits, pinned in constraints-oldest.txt. It runs in its
# own .venv-oldest inside the repository, set up like scripts/setup.sh sets up .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv-oldest/bin/python ]; then
    "$PY" -m venv .venv-oldest
fi
stamp=.venv-oldest/.installed-$(cat pyproject.toml constraints-oldest.txt | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
    .venv-oldest/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv-oldest/bin/python -m pip install -q -c constraints-oldest.txt -e '.[test]'
    rm -f .venv-oldest/.installed-*
    touch "$stamp"
fi
export QT_QPA_PLATFORM=offscreen
export PYTHONDONTWRITEBYTECODE=1
export HF_HUB_OFFLINE=1
.venv-oldest/bin/python -c 'import torch, transformers; print(f"smoke run: torch {torch.__version__}, transformers {transformers.__version__}")'
.venv-oldest/bin/python -m pytest -q -p no:xdist -m smoke tests/core "$@"
