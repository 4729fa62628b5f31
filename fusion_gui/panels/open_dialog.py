"""Open dialog: a local folder or config.json, a hub id from the local cache, an architecture, a demo."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QSortFilterProxyModel, QStringListModel, Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ..format import plain_tip

if TYPE_CHECKING:
    from ..state import AppState, ModelLists

SpecRole = Qt.ItemDataRole.UserRole + 1
TABS = ("folder", "hub", "arch", "demo")


class OpenDialog(QDialog):
    """Pick a model source; :meth:`spec` is what :func:`fusion_core.resolve` takes."""

    def __init__(self, state: AppState, parent: QWidget | None = None, recent: list[str] | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open model")
        self.resize(640, 480)
        self.state = state
        self.tabs = QTabWidget()

        # folder / config.json
        folder = QWidget()
        self.path_edit = QLineEdit(placeholderText="/path/to/model-folder  or  /path/to/config.json")
        browse_dir = QPushButton("Folder…")
        browse_cfg = QPushButton("config.json…")
        row = QHBoxLayout()
        row.addWidget(self.path_edit, 1)
        row.addWidget(browse_dir)
        row.addWidget(browse_cfg)
        self.recent_list = QListWidget()
        for spec in recent or []:
            self._add(self.recent_list, spec, spec)
        lay = QVBoxLayout(folder)
        lay.addWidget(
            QLabel("A transformers model folder (config.json, safetensors weights optional), or a config.json:")
        )
        lay.addLayout(row)
        lay.addWidget(QLabel("Recent:"))
        lay.addWidget(self.recent_list, 1)
        self.tabs.addTab(folder, "Folder / config.json")

        # hub cache
        hub = QWidget()
        self.hub_edit = QLineEdit(placeholderText="org/name")
        self.hub_list = QListWidget()
        lay = QVBoxLayout(hub)
        lay.addWidget(QLabel("A hub id, read from the local Hugging Face cache:"))
        lay.addWidget(self.hub_edit)
        self.hub_status = QLabel("Looking for cached models…")
        self.hub_status.setProperty("role", "hint")
        lay.addWidget(self.hub_status)
        lay.addWidget(self.hub_list, 1)
        self.tabs.addTab(hub, "Hub cache")

        # architectures
        arch = QWidget()
        self.arch_edit = QLineEdit(placeholderText="search model types, e.g. qwen")
        self.arch_edit.setClearButtonEnabled(True)
        self.arch_model = QStringListModel(self)
        self.arch_proxy = QSortFilterProxyModel(self)
        self.arch_proxy.setSourceModel(self.arch_model)
        self.arch_proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.arch_list = QListView()
        self.arch_list.setModel(self.arch_proxy)
        self.arch_list.setUniformItemSizes(True)
        lay = QVBoxLayout(arch)
        lay.addWidget(QLabel("Any architecture transformers knows, from its default config (no weights):"))
        lay.addWidget(self.arch_edit)
        lay.addWidget(self.arch_list, 1)
        self.tabs.addTab(arch, "Architecture")

        # demos
        demo = QWidget()
        self.demo_list = QListWidget()
        lay = QVBoxLayout(demo)
        lay.addWidget(QLabel("Built-in tiny checkpoints with seeded random weights:"))
        lay.addWidget(self.demo_list, 1)
        self.tabs.addTab(demo, "Demos")

        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.buttons)

        browse_dir.clicked.connect(self._browse_folder)
        browse_cfg.clicked.connect(self._browse_config)
        self.arch_edit.textChanged.connect(self._on_arch_text)
        self.arch_edit.installEventFilter(self)  # Down moves into the list
        self.buttons.accepted.connect(self._on_accepted)
        self.buttons.rejected.connect(self.reject)
        self.recent_list.itemClicked.connect(lambda it: self.path_edit.setText(it.data(SpecRole)))
        self.hub_list.itemClicked.connect(lambda it: self.hub_edit.setText(it.data(SpecRole)))
        for w in (self.recent_list, self.hub_list, self.demo_list):
            w.itemDoubleClicked.connect(self._on_item_double_clicked)
        self.arch_list.doubleClicked.connect(lambda _i: self._on_accepted())
        self.lists_job = state.model_lists()
        self.lists_job.succeeded.connect(self._on_lists_loaded)
        self.lists_job.failed.connect(lambda e: self.hub_status.setText(f"Cannot list models: {e}"))

    @staticmethod
    def _add(widget: QListWidget, text: str, spec: str, tip: str = "") -> None:
        item = QListWidgetItem(text)
        item.setData(SpecRole, spec)
        item.setToolTip(plain_tip(tip or spec))
        widget.addItem(item)

    def _on_lists_loaded(self, lists: ModelLists) -> None:
        for name, description in lists.demos:
            self._add(self.demo_list, f"demo:{name}  —  {description}", f"demo:{name}", description)
        if self.demo_list.count():
            self.demo_list.setCurrentRow(0)
        self.arch_model.setStringList(lists.arch)
        for repo in lists.hub:
            self._add(self.hub_list, repo, repo)
        n = len(lists.hub)
        self.hub_status.setText(f"{n} model(s) in the local cache." if n else "No models in the local cache.")

    def _browse_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Model folder", self.path_edit.text())
        if path:
            self.path_edit.setText(path)

    def _browse_config(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "config.json", self.path_edit.text(), "Config (*.json)")
        if path:
            self.path_edit.setText(path)

    def select_tab(self, name: str) -> None:
        self.tabs.setCurrentIndex(TABS.index(name))

    def _on_arch_text(self, text: str) -> None:
        """Filter, and make a row current: the exact name when typed, else the first match, so
        Enter opens what the list shows first (issue 33: Enter on a typed name did nothing)."""
        self.arch_proxy.setFilterFixedString(text)
        rows = self.arch_proxy.rowCount()
        if not rows:
            return
        wanted = text.strip().lower()
        exact = next((r for r in range(rows) if str(self.arch_proxy.index(r, 0).data()).lower() == wanted), 0)
        self.arch_list.setCurrentIndex(self.arch_proxy.index(exact, 0))

    def eventFilter(self, watched: object, event: QEvent) -> bool:  # Qt override
        down = event.type() == QEvent.Type.KeyPress and event.key() == Qt.Key.Key_Down  # type: ignore[attr-defined]
        if watched is self.arch_edit and down and self.arch_proxy.rowCount():
            if not self.arch_list.currentIndex().isValid():
                self.arch_list.setCurrentIndex(self.arch_proxy.index(0, 0))
            self.arch_list.setFocus()
            return True
        return super().eventFilter(watched, event)

    def spec(self) -> str:
        """The model spec chosen on the current tab ('' if none)."""
        tab = TABS[self.tabs.currentIndex()]
        if tab == "folder":
            return self.path_edit.text().strip()
        if tab == "hub":
            return self.hub_edit.text().strip()
        if tab == "arch":
            index = self.arch_list.currentIndex()
            if not index.isValid() and self.arch_proxy.rowCount() == 1:
                index = self.arch_proxy.index(0, 0)
            return f"arch:{index.data()}" if index.isValid() else ""
        item = self.demo_list.currentItem()
        return item.data(SpecRole) if item is not None else ""

    def _on_item_double_clicked(self, item: QListWidgetItem) -> None:
        if self.tabs.currentIndex() == 0:
            self.path_edit.setText(item.data(SpecRole))
        elif self.tabs.currentIndex() == 1:
            self.hub_edit.setText(item.data(SpecRole))
        self._on_accepted()

    def _on_accepted(self) -> None:
        if self.spec():
            self.accept()


def trust_prompt(parent: QWidget, spec: str, files: list[str]) -> QMessageBox:
    """The question asked before opening a model whose config names custom code.

    Accepting opens the model with the class transformers ships for its model_type: the
    folder's own code is never imported or run (docs/security.md). The box is returned
    unopened; the caller connects ``accepted`` and calls ``open()`` (window-modal).
    """
    shown = "".join(f"<li><code>{html.escape(f)}</code></li>" for f in files) or "<li>auto_map</li>"
    box = QMessageBox(
        QMessageBox.Icon.Warning,
        "Custom code in this model",
        f"<p><b>{html.escape(spec)}</b> asks for custom modeling code:</p><ul>{shown}</ul>"
        "<p>Fusion Inspector never runs a model's own code. It can show this model with the class "
        "transformers ships for its <code>model_type</code> instead, which may differ from the custom "
        "code.</p><p>Open it that way?</p>",
        QMessageBox.StandardButton.Open | QMessageBox.StandardButton.Cancel,
        parent,
    )
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.setTextFormat(Qt.TextFormat.RichText)
    return box
