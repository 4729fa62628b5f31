#!/usr/bin/env bash
# Create .venv inside the repository and install fusion-inspector with its test tools.
# Uses constraints.txt so that the CPU build of torch is installed on the project's machines.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -c constraints.txt -e '.[test]'
    rm -f .venv/.installed-*
    touch "$stamp"
fi
