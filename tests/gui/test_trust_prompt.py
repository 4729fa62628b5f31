"""Issue 13: the trust prompt docs/security.md describes, for configs with custom code (auto_map).

Opening such a folder asks first, naming the files; accepting opens it with the class
transformers ships, and the folder's code never runs (its module writes a marker file
when imported: the marker must stay absent).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox

from fusion_gui.main_window import MainWindow

OPEN_TIMEOUT_MS = 120_000


@pytest.fixture
def remote(tmp_path: Path) -> tuple[Path, Path]:
    from fusion_core.model.demo import demo_path

    folder = tmp_path / "remote"
    shutil.copytree(demo_path("llama"), folder)
    marker = tmp_path / "EXECUTED"
    (folder / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (folder / "config.json").write_text(json.dumps(config))
    return folder, marker


def _prompt(qtbot, window: MainWindow, folder: Path) -> QMessageBox:
    with qtbot.waitSignal(window.state.trust_requested, timeout=OPEN_TIMEOUT_MS) as blocker:
        window.state.open_model(str(folder))
    assert blocker.args[1] == ["modeling_evil.py"]
    box = window.trust_box
    assert box is not None and box.isVisible()
    assert "modeling_evil.py" in box.text() and "never runs" in box.text()
    assert window.error_boxes == []  # a question, not an error
    qtbot.waitUntil(lambda: not window.state.busy, timeout=OPEN_TIMEOUT_MS)  # the failed open has ended
    return box


def test_accepting_opens_with_the_shipped_class(qtbot, window: MainWindow, remote) -> None:
    folder, marker = remote
    box = _prompt(qtbot, window, folder)
    with qtbot.waitSignal(window.state.model_changed, timeout=OPEN_TIMEOUT_MS):
        box.button(QMessageBox.StandardButton.Open).click()
    insp = window.state.inspection
    assert insp is not None and insp.tree.root.module_name.startswith("transformers.")
    assert any("was not run" in note for note in insp.notes)
    assert not marker.exists()


def test_cancelling_opens_nothing(qtbot, window: MainWindow, remote) -> None:
    folder, marker = remote
    box = _prompt(qtbot, window, folder)
    with qtbot.waitSignal(box.finished, timeout=5_000):
        box.button(QMessageBox.StandardButton.Cancel).click()
    assert window.state.inspection is None
    assert not window.state.busy
    assert not marker.exists()
