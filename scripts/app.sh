#!/usr/bin/env bash
# Set up (scripts/setup.sh), then launch the inspector (default: the built-in demo model).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/fusion-inspector "$@"
