#!/usr/bin/env bash
# Set up (scripts/setup.sh), then launch the inspector (default: the built-in demo model).
set -euo pipefail
cd "$(dirname "$0")/.."
screenshot=0
for arg in "$@"; do
    case "$arg" in --screenshot | --screenshot=* | -h | --help) screenshot=1 ;; esac
done
# without a display Qt would wait or abort with a cryptic message: say what to do instead
if [[ $screenshot == 0 && "$(uname)" != Darwin && -z "${DISPLAY:-}" && -z "${WAYLAND_DISPLAY:-}" \
    && "${QT_QPA_PLATFORM:-}" != offscreen* ]]; then
    echo "scripts/app.sh: no display (DISPLAY and WAYLAND_DISPLAY are unset)." >&2
    echo "  Run it on a desktop, or save a picture without one:" >&2
    echo "  bash scripts/app.sh ${1:-demo:qwen2-vl} --screenshot window.png" >&2
    exit 2
fi
if [[ -z "${DISPLAY:-}" && -z "${WAYLAND_DISPLAY:-}" && "$(uname)" != Darwin ]]; then
    export QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}"  # --screenshot renders without a display
fi
# Qt's X11 platform needs system libraries a fresh desktop may lack (libxcb-cursor0 since Qt 6.5):
# say which and how to install them before the set-up's minute, and again with the installed Qt
uses_xcb=0
case "${QT_QPA_PLATFORM:-}" in
    xcb*) uses_xcb=1 ;;
    "") [[ "$(uname)" == Linux && -n "${DISPLAY:-}" && -z "${WAYLAND_DISPLAY:-}" ]] && uses_xcb=1 ;;
esac
if [[ $uses_xcb == 1 ]]; then
    bash scripts/qt_libs.sh || exit $?
fi
bash scripts/setup.sh
if [[ $uses_xcb == 1 ]]; then
    bash scripts/qt_libs.sh || exit $?
fi
exec .venv/bin/fusion-inspector "$@"
