#!/usr/bin/env bash
# Does Qt's X11 platform (xcb) find every system library it needs? If not, print the line that
# installs them and exit 3, in a second, instead of Qt aborting after start-up with
# "xcb-cursor0 or libxcb-cursor0 is needed".
#
#   bash scripts/qt_libs.sh [PLUGIN]
#
# PLUGIN: the platform plugin to inspect with ldd (default: PySide6's libqxcb.so in .venv).
# Before set-up has installed PySide6, the libraries Qt 6.5+ links to are looked up with
# ldconfig instead. Exit 0: all found (or not Linux); 3: some missing.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ "$(uname)" == Linux ]] || exit 0

# what libqxcb.so (PySide6 6.5+) and its Qt libraries link to, outside the wheel
QT_XCB_SONAMES="libxcb-cursor.so.0 libxcb-icccm.so.4 libxcb-image.so.0 libxcb-keysyms.so.1 libxcb-randr.so.0
libxcb-render-util.so.0 libxcb-render.so.0 libxcb-shape.so.0 libxcb-shm.so.0 libxcb-sync.so.1 libxcb-util.so.1
libxcb-xfixes.so.0 libxcb-xkb.so.1 libxcb.so.1 libxkbcommon-x11.so.0 libxkbcommon.so.0 libX11-xcb.so.1 libX11.so.6
libEGL.so.1 libGL.so.1 libfontconfig.so.1 libfreetype.so.6 libdbus-1.so.3 libglib-2.0.so.0"

plugin=${1:-}
if [[ -z "$plugin" ]]; then
    plugin=$(ls .venv/lib/python3*/site-packages/PySide6/Qt/plugins/platforms/libqxcb.so 2>/dev/null | head -n 1)
fi
if [[ -n "$plugin" ]]; then
    if [[ ! -f "$plugin" ]]; then
        echo "scripts/qt_libs.sh: no such plugin: $plugin" >&2
        exit 2
    fi
    missing=$(LC_ALL=C ldd "$plugin" 2>/dev/null | awk '/=> not found/ {print $1}' | sort -u)
else
    known=$(ldconfig -p 2>/dev/null | awk '{print $1}')
    missing=$(for so in $QT_XCB_SONAMES; do grep -qxF "$so" <<<"$known" || echo "$so"; done)
fi
[[ -z "$missing" ]] && exit 0

# the distribution's package for a library: Debian/Ubuntu name them after the soname
# (libxcb-cursor.so.0 -> libxcb-cursor0, libdbus-1.so.3 -> libdbus-1-3); Fedora and Arch by project
debian_pkg() {
    local base=${1%%.so.*} ver=${1##*.so.}
    case "$base" in
        libglib-2.0) echo "libglib2.0-0" ;;
        *[0-9]) echo "${base,,}-${ver%%.*}" ;;
        *) echo "${base,,}${ver%%.*}" ;;
    esac
}
fedora_pkg() {
    case "$1" in
        libxcb-cursor.*) echo xcb-util-cursor ;;
        libxcb-icccm.*) echo xcb-util-wm ;;
        libxcb-image.*) echo xcb-util-image ;;
        libxcb-keysyms.*) echo xcb-util-keysyms ;;
        libxcb-render-util.*) echo xcb-util-renderutil ;;
        libxcb-util.*) echo xcb-util ;;
        libxkbcommon-x11.*) echo libxkbcommon-x11 ;;
        libxcb*) echo libxcb ;;
        libEGL.* | libGL.*) echo libglvnd-egl libglvnd-glx ;;
        *) echo "${1%%.so.*}" ;;
    esac
}
arch_pkg() {
    case "$1" in
        libxcb-cursor.*) echo xcb-util-cursor ;;
        libxcb-icccm.*) echo xcb-util-wm ;;
        libxcb-image.*) echo xcb-util-image ;;
        libxcb-keysyms.*) echo xcb-util-keysyms ;;
        libxcb-render-util.*) echo xcb-util-renderutil ;;
        libxcb-util.*) echo xcb-util ;;
        libxkbcommon*) echo libxkbcommon-x11 ;;
        libxcb*) echo libxcb ;;
        libEGL.* | libGL.*) echo libglvnd ;;
        *) echo "${1%%.so.*}" ;;
    esac
}

family=debian
if [[ -r /etc/os-release ]]; then
    ids=$(. /etc/os-release; echo "${ID:-} ${ID_LIKE:-}")
    case " $ids " in
        *" debian "* | *" ubuntu "*) family=debian ;;
        *" fedora "* | *" rhel "* | *" centos "*) family=fedora ;;
        *" arch "*) family=arch ;;
        *) family=other ;;
    esac
fi
pkgs=$(for so in $missing; do
    case "$family" in
        fedora) fedora_pkg "$so" ;;
        arch) arch_pkg "$so" ;;
        *) debian_pkg "$so" ;;
    esac
done | tr ' ' '\n' | sort -u | tr '\n' ' ')
pkgs=${pkgs% }

echo "Qt cannot open a window here: its X11 platform needs system libraries that are missing:" >&2
echo "  $(echo $missing)" >&2
case "$family" in
    debian) echo "Install them with:  sudo apt-get install $pkgs" >&2 ;;
    fedora) echo "Install them with:  sudo dnf install $pkgs" >&2 ;;
    arch) echo "Install them with:  sudo pacman -S $pkgs" >&2 ;;
    *) echo "Install your distribution's packages that provide them (on Debian/Ubuntu: $pkgs)." >&2 ;;
esac
echo "Then run the same command again. (A picture without a window: QT_QPA_PLATFORM=offscreen" >&2
echo "bash scripts/app.sh MODEL --screenshot window.png)" >&2
exit 3
