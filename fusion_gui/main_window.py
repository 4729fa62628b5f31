"""The main window: menus, toolbar, status bar, splitters and tabs. Wiring only."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, Qt, QUrl, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDesktopServices, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import (
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QWidget,
)

from . import style
from .format import bounded, human_count, plain_tip, printable, rich
from .panels.adapter_dialog import AdapterDialog
from .panels.checks import ChecksPanel
from .panels.compare import ComparePanel
from .panels.details import DetailsPanel
from .panels.diff import DiffPanel
from .panels.export_dialog import ExportDialog
from .panels.fusions import FusionsPanel
from .panels.help_dialog import ShortcutsDialog, collect_shortcuts, doc_paths
from .panels.log_panel import LogPanel
from .panels.mapping import MappingPanel
from .panels.open_dialog import OpenDialog, trust_prompt
from .panels.save_dialog import save_dialog
from .panels.transforms import TransformsPanel
from .panels.tree_panel import TreePanel
from .state import AppState

MAX_MESSAGE_CHARS = 2_000  # an error box's text (names in it come from model folders)
MAX_DETAILS_CHARS = 100_000  # its details (a traceback)


def _html(text: str) -> str:
    """Text from a model folder inside a rich-text label: escaped and cut, never markup."""
    return rich(bounded(text, 200))


if TYPE_CHECKING:
    from fusion_core.adapter.result import AdapterPlan
    from fusion_core.plan.view import InspectionView

TAB_NAMES = ("fusions", "mapping", "transforms", "diff", "checks", "log")


class MainWindow(QMainWindow):
    """Fusion Inspector's window. ``state`` holds everything the panels share."""

    error_shown = Signal(str, str)  # title, message (for tests and the screenshot mode)

    def __init__(self, state: AppState | None = None) -> None:
        super().__init__()
        self.state = state or AppState(parent=self)
        self.setWindowTitle("Fusion Inspector")
        self.setWindowIcon(style.app_icon())
        self.setAcceptDrops(True)
        self.error_boxes: list[QMessageBox] = []
        self.trust_box: QMessageBox | None = None
        self.dialog: QWidget | None = None

        self.log_panel = LogPanel()
        self.log_panel.handler.install()
        self.tree = TreePanel(self.state)
        self.details = DetailsPanel(self.state)
        self.fusions = FusionsPanel(self.state)
        self.mapping = MappingPanel(self.state)
        self.transforms = TransformsPanel(self.state)
        self.diff = DiffPanel(self.state)
        self.compare = ComparePanel(self.state)
        # the Diff tab: the original against the fused model, or A against B once compared
        self.diff_stack = QStackedWidget()
        self.diff_stack.addWidget(self.diff)
        self.diff_stack.addWidget(self.compare)
        self.checks = ChecksPanel(self.state)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        for widget, title in (
            (self.fusions, "Fusions"),
            (self.mapping, "Patch mapping"),
            (self.transforms, "Weight transforms"),
            (self.diff_stack, "Diff"),
            (self.checks, "Checks"),
            (self.log_panel, "Log"),
        ):
            self.tabs.addTab(widget, title)
        self.right = QSplitter(Qt.Orientation.Vertical)
        self.right.addWidget(self.details)
        self.right.addWidget(self.tabs)
        self.right.setStretchFactor(1, 3)
        self.right.setSizes([220, 560])
        self._details_size: list[int] | None = None
        self.checks.workload_shown.connect(self._room_for_workload)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.tree)
        self.splitter.addWidget(self.right)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([730, 730])
        self.setCentralWidget(self.splitter)

        self._make_actions()
        self._make_status_bar()
        self._restore_settings()

        s = self.state
        s.model_changed.connect(self._on_model_changed)
        s.preview_ready.connect(self._on_preview_ready)
        s.preview_cleared.connect(self._on_preview_cleared)
        s.error_raised.connect(self._on_error_raised)
        s.trust_requested.connect(self._on_trust_requested)
        s.job_started.connect(self._on_job_started)
        s.job_progressed.connect(self._on_job_progressed)
        s.job_ended.connect(self._on_job_ended)
        s.recent_changed.connect(self._on_recent_changed)
        s.busy_changed.connect(lambda _busy: self._update_actions())
        s.checks_finished.connect(lambda _r: self.show_tab("checks"))
        s.checks_finished.connect(lambda _r: self._update_actions())
        s.checks_cleared.connect(self._update_actions)
        s.plan_changed.connect(lambda _p: self._update_actions())
        s.tab_requested.connect(self.show_tab)
        s.check_requested.connect(self._on_check_requested)
        s.adapter_changed.connect(lambda _a: self._update_actions())
        s.adapter_changed.connect(self._say_adapter)
        self._adapter_said = ""
        s.comparison_changed.connect(self._on_comparison_changed)
        self.compare.closed.connect(lambda: self.diff_stack.setCurrentWidget(self.diff))
        self._on_recent_changed(s.settings.recent_models())
        self._update_actions()

    # construction ----------------------------------------------------------------------
    def _action(self, text: str, slot, shortcut: QKeySequence | str | None = None, tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.setStatusTip(tip or text)
        action.setToolTip(f"{tip or text} ({action.shortcut().toString()})" if shortcut else tip or text)
        action.triggered.connect(slot)
        return action

    def _room_for_workload(self, on: bool) -> None:
        """The Checks tab's workload panel opened: the details pane above gives up its room (it
        keeps a few lines), so the results table and chart keep theirs; closed: back as it was."""
        sizes = self.right.sizes()
        if on:
            self._details_size = sizes
            give = max(0, min(sizes[0] - 40, self.checks.WORKLOAD_MAX_HEIGHT + 30))
            self.right.setSizes([sizes[0] - give, sizes[1] + give])
        elif self._details_size is not None:
            self.right.setSizes(self._details_size)
            self._details_size = None

    def _make_actions(self) -> None:
        self.open_action = self._action("&Open…", self.show_open_dialog, QKeySequence.StandardKey.Open, "Open a model")
        self.export_action = self._action(
            "&Export…", self.show_export_dialog, "Ctrl+E", "Export a converted checkpoint"
        )
        self.open_adapter_action = self._action(
            "Open &adapter…", self.show_open_adapter_dialog, None, "Open a PEFT LoRA adapter of the model"
        )
        self.adapter_action = self._action(
            "Convert a&dapter…", self.show_adapter_dialog, None, "Convert the opened adapter to the other layout"
        )
        self.quit_action = self._action("&Quit", self.close, "Ctrl+Q", "Quit Fusion Inspector")
        self.find_action = self._action("&Find module", self.tree.focus_filter, "Ctrl+F", "Filter the module tree")
        self.expand_action = self._action(
            "Expand to &fusable", self.tree.expand_to_fusable, "Ctrl+J", "Jump to the next module to be fused"
        )
        self.checks_action = self._action(
            "&Run checks", self.run_checks, "Ctrl+R", "Fused load + checks, in the background"
        )
        self.cancel_action = self._action("&Cancel job", self.state.cancel_job, None, "Cancel the running job")
        self.save_checks_action = self._action("&Save check results…", self.checks.save_json_dialog)
        self.compare_action = self._action(
            "Compare &with…", self.show_compare_dialog, "Ctrl+Shift+O", "Compare the open model with another one"
        )
        self.save_view_action = self._action(
            "Save &image/report…", self.show_save_dialog, "Ctrl+Shift+S",
            "Save the module tree (SVG, PNG, text) or the check/comparison report (HTML, Markdown)",
        )  # fmt: skip
        self.save_plan_action = self._action(
            "Save &plan…", self.save_plan_dialog, None,
            "Save the plan on show (families, the modules they fuse, the model's identity) for `check --plan`",
        )  # fmt: skip
        self.open_plan_action = self._action(
            "Open p&lan…", self.open_plan_dialog, None,
            "Open a saved plan: its model, checked unchanged, with exactly its families",
        )  # fmt: skip
        self.recent_menu = QMenu("Open &Recent", self)

        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        file_menu.addAction(self.open_action)
        file_menu.addMenu(self.recent_menu)
        file_menu.addAction(self.open_adapter_action)
        file_menu.addAction(self.compare_action)
        file_menu.addAction(self.open_plan_action)
        file_menu.addAction(self.save_plan_action)
        file_menu.addSeparator()
        file_menu.addAction(self.export_action)
        file_menu.addAction(self.adapter_action)
        file_menu.addAction(self.save_checks_action)
        file_menu.addAction(self.save_view_action)
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)
        view_menu = bar.addMenu("&View")
        view_menu.addAction(self.find_action)
        view_menu.addAction(self.expand_action)
        view_menu.addSeparator()
        for i, name in enumerate(TAB_NAMES):
            tab_action = self._action(self.tabs.tabText(i), lambda _c=False, n=name: self.show_tab(n), f"Alt+{i + 1}")
            tab_action.setWhatsThis(f"Show the {self.tabs.tabText(i)} tab")  # its line in Help → Keyboard shortcuts
            view_menu.addAction(tab_action)
        tools_menu = bar.addMenu("&Tools")
        tools_menu.addAction(self.checks_action)
        tools_menu.addAction(self.cancel_action)
        help_menu = bar.addMenu("&Help")
        self.shortcuts_action = self._action(
            "&Keyboard shortcuts", self.show_shortcuts, None, "List the window's keyboard shortcuts"
        )
        self.readme_action = self._doc_action("&Documentation (README)", "readme")
        self.docs_action = self._doc_action("Documentation &folder (docs/)", "docs")
        help_menu.addAction(self.shortcuts_action)
        help_menu.addAction(self.readme_action)
        help_menu.addAction(self.docs_action)
        help_menu.addSeparator()
        help_menu.addAction(self._action("&About Fusion Inspector", self.show_about))

        toolbar = self.addToolBar("Main")
        toolbar.setObjectName("main-toolbar")
        toolbar.setMovable(False)
        toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        # "Expand to fusable" sits once, above the tree it acts on (and in the View menu, Ctrl+J)
        for action in (self.open_action, None, self.find_action, None):
            toolbar.addAction(action) if action else toolbar.addSeparator()
        for action in (self.checks_action, self.cancel_action, self.export_action):
            toolbar.addAction(action)

    def _make_status_bar(self) -> None:
        bar = self.statusBar()
        self.model_label = QLabel("No model")
        self.params_label = QLabel("")
        self.job_label = QLabel("Ready")
        self.job_label.setTextFormat(Qt.TextFormat.PlainText)  # job messages quote specs and names
        self.params_label.setTextFormat(Qt.TextFormat.PlainText)
        self.job_progress = QProgressBar()
        self.job_progress.setMaximumWidth(160)
        self.job_progress.setMaximumHeight(14)
        self.job_progress.setTextVisible(False)
        self.job_progress.hide()
        bar.addWidget(self.model_label)
        bar.addWidget(self.params_label)
        bar.addPermanentWidget(self.job_label)
        bar.addPermanentWidget(self.job_progress)

    # settings --------------------------------------------------------------------------
    def _restore_settings(self) -> None:
        st = self.state.settings
        geometry = st.state("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1460, 900)
        for key, splitter in (("splitter", self.splitter), ("right_splitter", self.right)):
            saved = st.state(key)
            if saved is not None:
                splitter.restoreState(saved)
        tab = st.text("window/tab")
        if tab in TAB_NAMES:
            self.show_tab(tab)

    def save_settings(self) -> None:
        st = self.state.settings
        st.set_state("geometry", QByteArray(self.saveGeometry()))
        st.set_state("splitter", QByteArray(self.splitter.saveState()))
        st.set_state("right_splitter", QByteArray(self.right.saveState()))
        st.set_text("window/tab", TAB_NAMES[self.tabs.currentIndex()])
        st.set_fusions(self.state.family_order, self.state.enabled) if self.state.family_order else None
        st.sync()

    def closeEvent(self, event: QCloseEvent) -> None:  # Qt override
        self.save_settings()
        self.state.shutdown()
        self.log_panel.handler.uninstall()
        super().closeEvent(event)

    # actions ---------------------------------------------------------------------------
    def show_tab(self, name: str) -> None:
        self.tabs.setCurrentIndex(TAB_NAMES.index(name))

    def open_model(self, spec: str) -> None:
        self.state.open_model(spec)

    def show_open_dialog(self) -> OpenDialog:
        dialog = OpenDialog(self.state, self, self.state.settings.recent_models())
        dialog.accepted.connect(lambda: self.open_model(dialog.spec()))
        dialog.open()  # window-modal, never blocks the event loop
        self.dialog = dialog
        return dialog

    def show_compare_dialog(self) -> OpenDialog | None:
        """Choose a second model (B) to compare the open one (A) with; the Diff tab shows them."""
        if self.state.inspection is None:
            return None
        dialog = OpenDialog(self.state, self, self.state.settings.recent_models())
        dialog.setWindowTitle("Compare with…")
        dialog.accepted.connect(lambda: self.compare_with(dialog.spec()))
        dialog.open()
        self.dialog = dialog
        return dialog

    def compare_with(self, spec: str, values: bool = False) -> None:
        self.show_tab("diff")
        self.diff_stack.setCurrentWidget(self.compare)
        self.state.compare_with(spec, values=values)

    def _on_comparison_changed(self, comparison) -> None:
        self.diff_stack.setCurrentWidget(self.compare if comparison is not None else self.diff)
        self._update_actions()

    def show_save_dialog(self):
        dialog = save_dialog(self, self.state, lambda title, message: self.show_error(title, message))
        self.dialog = dialog
        return dialog

    def show_export_dialog(self) -> ExportDialog | None:
        if self.state.inspection is None:
            return None
        dialog = ExportDialog(self.state, self)
        dialog.open()
        self.dialog = dialog
        return dialog

    def _say_adapter(self, plan: AdapterPlan | None) -> None:
        """Confirm an adapter that opened, once per folder (issue 33: opening one said nothing)."""
        path = self.state.adapter_path or ""
        if plan is None or path == self._adapter_said:
            return
        self._adapter_said = path
        text = printable(bounded(
            f"Adapter {Path(path).name} opened: {len(plan.modules)} adapted module(s), {len(plan.steps)} to convert "
            f"({plan.source_layout} layout); marked in the tree", 300,
        ))  # fmt: skip
        self.statusBar().showMessage(text, 10_000)
        logging.getLogger("fusion_gui").info("%s", text)

    def show_open_adapter_dialog(self) -> None:
        from PySide6.QtWidgets import QFileDialog

        path = QFileDialog.getExistingDirectory(self, "Open a PEFT LoRA adapter (folder with adapter_config.json)")
        if path:
            self.state.open_adapter(path)

    def show_adapter_dialog(self) -> AdapterDialog | None:
        if self.state.inspection is None:
            return None
        dialog = AdapterDialog(self.state, self)
        dialog.open()
        self.dialog = dialog
        return dialog

    def run_checks(self) -> None:
        self.show_tab("checks")
        self.checks.run()

    def _doc_action(self, text: str, key: str) -> QAction:
        path = doc_paths()[key]
        action = self._action(text, lambda _c=False, k=key: self.open_doc(k), None, f"Open {path}")
        if not path.exists():  # an installed (not editable) package has no source tree
            action.setEnabled(False)
            action.setToolTip(f"Not available: {path} is not there (the documentation ships with the source tree)")
            action.setStatusTip(action.toolTip())
        return action

    def doc_url(self, key: str) -> QUrl:
        """The URL Help → Documentation opens for ``key`` (``readme`` or ``docs``)."""
        return QUrl.fromLocalFile(str(doc_paths()[key]))

    def open_doc(self, key: str) -> bool:
        return QDesktopServices.openUrl(self.doc_url(key))

    def show_shortcuts(self) -> ShortcutsDialog:
        dialog = ShortcutsDialog(collect_shortcuts(self), self)
        dialog.open()
        self.dialog = dialog
        return dialog

    def show_about(self) -> None:
        box = QMessageBox(QMessageBox.Icon.Information, "About Fusion Inspector", "", parent=self)
        box.setText(
            "<b>Fusion Inspector</b><br>Browse a transformers model, see which modules each fusion family "
            "replaces, preview the patch mapping and weight transforms, check fused against original, and "
            "export converted checkpoints."
        )
        box.open()

    def show_error(self, title: str, message: str, details: str = "") -> QMessageBox:
        """Show an error without blocking: a window-modal box, kept in ``error_boxes``.

        The text is plain (a message quotes names from model folders: never markup) and cut
        to a bounded length, so no folder can make the box render HTML or lay out megabytes.
        """
        message, details = bounded(message, MAX_MESSAGE_CHARS), bounded(details, MAX_DETAILS_CHARS)
        box = QMessageBox(QMessageBox.Icon.Critical, bounded(title, 200), "", QMessageBox.StandardButton.Close, self)
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setText(message)
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        if details:
            box.setDetailedText(details)
        box.finished.connect(lambda _r: self.error_boxes.remove(box) if box in self.error_boxes else None)
        self.error_boxes.append(box)
        box.open()
        self.error_shown.emit(title, message)
        return box

    # state -> window -------------------------------------------------------------------
    def _on_error_raised(self, title: str, message: str, details: str) -> None:
        self.show_error(title, message, details)

    def _on_trust_requested(self, spec: str, files: list[str]) -> None:
        self.trust_box = trust_prompt(self, spec, files)
        self.trust_box.accepted.connect(lambda: self.state.open_model(spec, trust_remote_code=True))
        self.trust_box.open()

    def _on_model_changed(self, insp: InspectionView) -> None:
        weights = f"{insp.checkpoint_tensors} tensors" if insp.has_checkpoint else "config only"
        self.setWindowTitle(f"{printable(bounded(insp.name, 120))} — Fusion Inspector")
        self.model_label.setText(f"<b>{_html(insp.name)}</b> · {_html(insp.model_class)} · {weights}")
        self.model_label.setToolTip(plain_tip("\n".join([insp.describe, *insp.notes])))
        self.params_label.setText(f"{human_count(insp.tree.total_params)} parameters · {len(insp.tree)} modules")
        self.tree.fit_columns()
        self._update_actions()

    def _on_preview_cleared(self) -> None:
        """The cached picture was withdrawn (the model failed to open): nothing of it stays on show."""
        self.tree.model.set_tree(None)
        self.tree.view.hide()
        self.tree.placeholder.show()
        self.setWindowTitle("Fusion Inspector")
        self.model_label.setText("No model")
        self.params_label.setText("")

    def _on_preview_ready(self, cached) -> None:
        """A model seen before, from the cache: its tree now, the rest when the engine has opened it."""
        self.tree._on_model_changed(cached)  # the tree panel reads only `.tree` of what it shows
        self.setWindowTitle(f"{printable(bounded(cached.name, 120))} — Fusion Inspector")
        self.model_label.setText(
            f"<b>{_html(cached.name)}</b> · {_html(cached.model_class)} · from the cache, loading the engine…"
        )
        self.params_label.setText(f"{human_count(cached.tree.total_params)} parameters · {len(cached.tree)} modules")
        self.tree.fit_columns()

    def _on_job_started(self, name: str) -> None:
        self.job_progress.setRange(0, 0)
        self.job_progress.show()
        self._update_actions()

    def _on_job_progressed(self, name: str, done: int, total: int, message: str) -> None:
        if total:
            self.job_progress.setRange(0, total)
            self.job_progress.setValue(done)
        else:
            self.job_progress.setRange(0, 0)
        self.job_label.setText(f"{name}: {message}" if message else name)

    def _on_job_ended(self, name: str, outcome: str, message: str) -> None:
        self.job_progress.hide()
        self.job_label.setText(message)
        self._update_actions()

    def _on_recent_changed(self, recent: list[str]) -> None:
        self.recent_menu.clear()
        for spec in recent:
            self.recent_menu.addAction(spec, lambda s=spec: self.open_model(s))
        self.recent_menu.setEnabled(bool(recent))

    def _update_actions(self) -> None:
        busy = self.state.busy
        self.open_action.setEnabled(not busy)
        self.recent_menu.setEnabled(not busy and not self.recent_menu.isEmpty())
        # enabled only when they can work; the reason is the tooltip and the status tip
        for action, blocker, tip in (
            (self.checks_action, self.state.check_blocker(), "Fused load + checks, in the background (Ctrl+R)"),
            (self.export_action, self.state.export_blocker(), "Export a converted checkpoint (Ctrl+E)"),
            (
                self.save_checks_action,
                "" if self.state.check_result is not None else "no check results yet: run the checks first",
                "Save the last check results as JSON",
            ),
        ):
            action.setEnabled(not blocker)
            action.setToolTip(f"{action.text().replace('&', '').rstrip('…')}: {blocker}" if blocker else tip)
            action.setStatusTip(action.toolTip())
        self.cancel_action.setEnabled(busy)
        self.open_adapter_action.setEnabled(self.state.inspection is not None and not busy)
        self.adapter_action.setEnabled(self.state.adapter_plan is not None and not busy)
        self.compare_action.setEnabled(not busy and self.state.inspection is not None)
        self.save_view_action.setEnabled(self.state.shown is not None)
        self.open_plan_action.setEnabled(not busy)
        self.save_plan_action.setEnabled(not busy and self.state.plan is not None and not self.state.plan_pending)

    def save_plan_dialog(self) -> None:
        """File → Save plan…: the plan on show, as ``fusion-core plan --json`` writes it."""
        from PySide6.QtWidgets import QFileDialog

        path, _ = QFileDialog.getSaveFileName(self, "Save plan", "plan.json", "Plan (*.json)")
        if path:
            self.state.save_plan(Path(path))

    def open_plan_dialog(self) -> None:
        """File → Open plan…: a saved plan's model (checked unchanged) with exactly its families."""
        from PySide6.QtWidgets import QFileDialog

        path, _ = QFileDialog.getOpenFileName(self, "Open plan", "", "Plan (*.json)")
        if path:
            self.state.open_plan(Path(path))

    def _on_check_requested(self, path: str) -> None:
        self.show_tab("checks")
        if self.state.check_result is not None:
            self.checks.select_module(path)
        elif not self.state.check_blocker():
            self.run_checks()

    # drag and drop ---------------------------------------------------------------------
    @staticmethod
    def _dropped_spec(event: QDragEnterEvent | QDropEvent) -> str:
        urls = event.mimeData().urls() if event.mimeData().hasUrls() else []
        for url in urls:
            if url.isLocalFile():
                path = Path(url.toLocalFile())
                if path.is_dir() or path.name == "config.json":
                    return str(path)
        return ""

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # Qt override
        if self._dropped_spec(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # Qt override
        spec = self._dropped_spec(event)
        if spec:
            event.acceptProposedAction()
            # holding Shift compares the dropped model with the open one instead of opening it
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier and self.state.inspection is not None:
                self.compare_with(spec)
                return
            if (Path(spec) / "adapter_config.json").is_file() and self.state.inspection is not None:
                self.state.open_adapter(spec)  # a LoRA adapter folder, next to the open model
                return
            self.open_model(spec)
