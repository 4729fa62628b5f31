"""``fusion-inspector [MODEL] [--screenshot PATH]``: the QApplication, the excepthook and the arguments.

With no MODEL it opens the built-in demo (``demo:qwen2-vl``). The model is opened on a
worker thread, so the window paints at once; the core (torch, transformers) is imported
there too, never on the GUI thread.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication

from . import _pyside_fix, style
from .settings import APPLICATION, ORGANIZATION

if TYPE_CHECKING:
    from .main_window import MainWindow

DEFAULT_MODEL = "demo:qwen2-vl"
TABS = ("fusions", "mapping", "transforms", "diff", "checks", "log")
log = logging.getLogger("fusion_gui")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fusion-inspector",
        description="Browse a transformers model, toggle fusions, preview mapping and transforms, check and export.",
    )
    p.add_argument(
        "model",
        nargs="?",
        default=DEFAULT_MODEL,
        help=f"folder, config.json, arch:<type>, demo:<name> or org/name (default {DEFAULT_MODEL})",
    )
    p.add_argument("--screenshot", metavar="PATH", help="open MODEL, save a PNG of the window once painted, and exit")
    p.add_argument("--tab", choices=TABS, help="the tab to show")
    p.add_argument("--fusion", action="append", metavar="NAME", help="enable only these families (repeatable)")
    p.add_argument("--select", metavar="MODULE", help="select this module path in the tree")
    p.add_argument("--filter", metavar="TEXT", help="type TEXT into the tree's filter box")
    p.add_argument("--expand-fusable", action="store_true", help="expand the tree to every module to be fused")
    p.add_argument("--run-checks", action="store_true", help="with --screenshot: run the checks before the shot")
    p.add_argument("--size", default="1460x900", help="window size for --screenshot (default 1460x900)")
    p.add_argument(
        "--family-file",
        action="append",
        default=[],
        metavar="PATH",
        help="also register the fusion families defined in this Python file (it is code: trusted files only)",
    )
    p.add_argument("--report-timing", action="store_true", help=argparse.SUPPRESS)
    return p


def create_app(argv: Sequence[str] | None = None) -> QApplication:
    """The QApplication (or the existing one), named and styled."""
    _pyside_fix.apply()
    app = QApplication.instance()
    if app is None:
        app = QApplication(["fusion-inspector", *(argv or [])])
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName("Fusion Inspector")
    app.setStyle("Fusion")
    app.setStyleSheet(style.STYLESHEET)
    app.setWindowIcon(style.app_icon())
    return app


def install_excepthook(window: MainWindow) -> None:
    """Unexpected errors on the GUI thread go to an error dialog (and the log), never lost."""

    def hook(exc_type, exc, tb) -> None:
        details = "".join(traceback.format_exception(exc_type, exc, tb))
        log.error("unexpected error: %s", details)
        try:
            window.show_error("Unexpected error", f"{exc_type.__name__}: {exc}", details)
        except Exception:  # the window may be gone; stderr still gets it
            sys.__excepthook__(exc_type, exc, tb)

    sys.excepthook = hook


class _PaintWatcher(QObject):
    """Records when a widget is first painted after :meth:`arm`."""

    def __init__(self, widget, callback) -> None:
        super().__init__(widget)
        self.callback = callback
        self.armed = False
        widget.installEventFilter(self)

    def arm(self) -> None:
        self.armed = True

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # Qt override
        if self.armed and event.type() == QEvent.Type.Paint:
            self.armed = False
            QTimer.singleShot(0, self.callback)
        return False


class Scripted(QObject):
    """Drives the ``--screenshot`` run: open, optional checks, first paint, grab, exit."""

    def __init__(self, window: MainWindow, args: argparse.Namespace, t0: float) -> None:
        super().__init__(window)
        self.window, self.args, self.t0 = window, args, t0
        self.times: dict[str, float] = {}
        self.exit_code = 0
        state = window.state
        state.opening.connect(lambda _spec: self._mark("open_started"))
        state.model_changed.connect(self._on_model_changed)
        state.preview_ready.connect(self._on_preview_ready)
        state.open_failed.connect(self._on_open_failed)
        state.checks_finished.connect(lambda _r: self._on_ready())
        state.job_ended.connect(self._on_job_ended)
        self._window_paint = _PaintWatcher(window, lambda: self._mark("window_paint"))
        self._window_paint.arm()
        self._tree_paint = _PaintWatcher(window.tree.view.viewport(), self._on_tree_painted)

    def _mark(self, name: str) -> None:
        self.times.setdefault(name, time.time())

    def _on_preview_ready(self, _cached: object) -> None:
        self._mark("preview_ready")
        self._tree_paint.arm()

    def _on_model_changed(self, _insp: object) -> None:
        self._mark("model_ready")
        self.times.setdefault("open_s", self.times["model_ready"] - self.times.get("open_started", self.t0))
        self._tree_paint.arm()
        self.window.tree.view.viewport().update()

    def _on_open_failed(self, spec: str, message: str) -> None:
        print(f"fusion-inspector: cannot open {spec}: {message}", file=sys.stderr)
        self.exit_code = 1
        QTimer.singleShot(0, self._quit)

    def _on_job_ended(self, name: str, outcome: str, message: str) -> None:
        if name == "checks" and outcome != "ok":
            print(f"fusion-inspector: {message}", file=sys.stderr)
            self.exit_code = 1
            QTimer.singleShot(0, self._quit)

    def _on_tree_painted(self) -> None:
        self._mark("tree_paint")  # the first paint with a model in it: from the cache or live
        if "model_ready" not in self.times:
            return  # painted from the cache: the shot waits for the live model
        self._mark("live_tree_paint")
        self._after_plan(self._run_or_ready)

    def _after_plan(self, then) -> bool:
        """Call ``then`` once the engine's plan for the shown fusions has arrived."""
        state = self.window.state
        if state.plan_pending:
            state.plan_changed.connect(lambda _p: self._after_plan(then), Qt.ConnectionType.SingleShotConnection)
            return False
        then()
        return True

    def _run_or_ready(self) -> None:
        if self.args.run_checks:
            self.window.run_checks()
        else:
            self._on_ready()

    def _on_ready(self) -> None:
        if self.window.state.plan_pending:
            self.window.state.plan_changed.connect(lambda _p: self._on_ready(), Qt.ConnectionType.SingleShotConnection)
            return
        diff = self.window.diff
        if diff.pending:  # --tab diff: shoot the diff, not its "Comparing…" line
            diff.diff_ready.connect(lambda _d: self._on_ready(), Qt.ConnectionType.SingleShotConnection)
            return
        # two event-loop turns: the last layout and paint of what just changed happen first
        QTimer.singleShot(50, self._shoot)

    def _shoot(self) -> None:
        if self.args.screenshot:
            path = Path(self.args.screenshot)
            path.parent.mkdir(parents=True, exist_ok=True)
            if not self.window.grab().save(str(path), "PNG"):
                print(f"fusion-inspector: cannot write {path}", file=sys.stderr)
                self.exit_code = 1
        self._quit()

    def _quit(self) -> None:
        if self.args.report_timing:
            print(json.dumps({"t0": self.t0, **self.times}), flush=True)
        self.window.state.shutdown()
        QApplication.instance().exit(self.exit_code)


def apply_view_options(window: MainWindow, args: argparse.Namespace) -> None:
    """--tab, --fusion, --select, --filter, applied once the model is open."""
    state = window.state

    def on_model(_insp: object) -> None:
        state.model_changed.disconnect(on_model)
        if args.fusion is not None:
            unknown = sorted(set(args.fusion) - set(state.family_order))
            if unknown:
                _usage_exit(
                    window, f"unknown fusion family: {', '.join(unknown)} (known: {', '.join(state.family_order)})"
                )
                return
            for name in state.family_order:
                state.set_family_enabled(name, name in args.fusion)
        if args.filter:
            window.tree.filter_edit.setText(args.filter)
            window.tree.apply_filter()
        if args.expand_fusable:
            window.tree.expand_to_fusable()
        if args.select and not window.tree.select_path(args.select):
            _usage_exit(window, f"--select: no module {args.select!r} in {args.model}")

    state.model_changed.connect(on_model)
    if args.tab:
        window.show_tab(args.tab)


def _usage_exit(window: MainWindow, message: str) -> None:
    """A bad argument found once the model is open: say so and exit 2, as argparse does."""
    print(f"fusion-inspector: error: {message}", file=sys.stderr)
    window.state.shutdown()
    QApplication.instance().exit(2)


def parse_window_size(text: str) -> tuple[int, int]:
    """'1460x900' -> (1460, 900).

    Raises:
        ValueError: not WIDTHxHEIGHT with both in 200..10000.
    """
    width, sep, height = text.lower().partition("x")
    if not sep or not width.strip().isdigit() or not height.strip().isdigit():
        raise ValueError(f"--size must be WIDTHxHEIGHT, e.g. 1460x900 (got {text!r})")
    w, h = int(width), int(height)
    if not (200 <= w <= 10_000 and 200 <= h <= 10_000):
        raise ValueError(f"--size: {w}x{h} is out of range (200..10000 each)")
    return w, h


def needs_offscreen(environ: Mapping[str, str], platform: str) -> bool:
    """True when Qt has no display to open and no platform was chosen (Linux and other X11/Wayland systems)."""
    if platform in ("darwin", "win32") or environ.get("QT_QPA_PLATFORM"):
        return False
    return not environ.get("DISPLAY") and not environ.get("WAYLAND_DISPLAY")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``fusion-inspector`` and ``python -m fusion_gui``."""
    t0 = time.time()
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        size = parse_window_size(args.size)
    except ValueError as e:
        parser.error(str(e))  # exit 2 with the usage line
    # The window shows progress itself; keep transformers' tqdm bars ("Loading weights") off the
    # terminal. Set before the engine process starts (it inherits the environment).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if args.screenshot and needs_offscreen(os.environ, sys.platform):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # a picture needs no screen; Qt would abort without one
    app = create_app()
    from .main_window import MainWindow
    from .settings import Settings
    from .state import AppState

    scripted = bool(args.screenshot or args.report_timing)
    settings = Settings(read_only=scripted)  # a scripted run never changes the user's settings
    state = AppState(settings)
    window = MainWindow(state)
    install_excepthook(window)
    driver = None
    if scripted:
        window.resize(*size)
        driver = Scripted(window, args, t0)
    apply_view_options(window, args)
    for path in args.family_file:
        job = state.load_family_file(path)
        job.failed.connect(lambda e, p=path: _usage_exit(window, f"--family-file {p}: {e}"))
    # a model seen before paints from the cache (plain data, no torch) before the engine loads
    if not args.family_file:
        state.show_cached(args.model)
    window.show()
    app.processEvents()
    state.open_model(args.model)  # in the engine process (started with the state, importing torch meanwhile)
    code = app.exec()
    if driver is not None and driver.exit_code:
        return driver.exit_code
    return code
