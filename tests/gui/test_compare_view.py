"""The Diff tab's A-vs-B view: File → Compare with… a second model, rows coloured and filtered by
status, values compared in the engine, rows selecting their module; and File → Save
image/report… writing the tree (SVG, PNG, text) and the comparison (HTML, Markdown)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from safetensors.numpy import load_file, save_file

CHANGED = "model.layers.1.mlp.down_proj.weight"


@pytest.fixture
def variant(llama_dir: Path, tmp_path: Path) -> Path:
    """The demo Llama with one more layer and one tensor changed (numpy: the test process stays torch-free)."""
    sd = load_file(str(llama_dir / "model.safetensors"))
    sd[CHANGED] = sd[CHANGED].copy()
    sd[CHANGED][0, :2] += np.float32(1.5)
    sd.update({k.replace("layers.1.", "layers.2."): v.copy() for k, v in list(sd.items()) if "layers.1." in k})
    out = tmp_path / "llama-b"
    out.mkdir()
    config = json.loads((llama_dir / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (out / "config.json").write_text(json.dumps(config))
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def test_compare_with_shows_a_against_b(qtbot, window, open_model, variant, tmp_path):
    assert window.show_compare_dialog() is None and not window.compare_action.isEnabled()  # nothing open yet
    open_model(window, "demo:llama")
    assert window.compare_action.isEnabled() and window.compare_action.shortcut().toString() == "Ctrl+Shift+O"
    dialog = window.show_compare_dialog()
    assert dialog.windowTitle() == "Compare with…"
    dialog.reject()
    with qtbot.waitSignal(window.state.comparison_changed, timeout=60_000) as blocker:
        window.compare_with(str(variant))
    c = blocker.args[0]
    panel = window.compare
    assert window.diff_stack.currentWidget() is panel and window.tabs.currentIndex() == 3
    assert c.verdict == "different: modules (3 changed, 13 added); keys (9 added)"
    assert "model.layers 0–1: equal; model.layers 2: added" in panel.summary.text()
    # one table with both sides' columns, rows coloured by status, filtered by is:
    qtbot.keyClicks(panel.filter_edit, "is:changed")
    assert [r["module"] for r in panel.rows("modules")] == ["", "model", "model.layers"]
    row = [panel.modules_proxy.index(2, col).data() for col in range(7)]
    assert row == ["changed", "model.layers", "ModuleList", "ModuleList", "73,984", "110,976", "params, children"]
    assert panel.modules_proxy.index(2, 0).data(Qt.ItemDataRole.BackgroundRole).color().name() == "#ffe0b2"
    panel.filter_edit.clear()
    qtbot.keyClicks(panel.filter_edit, "is:added self_attn.q_proj")
    assert [r["name"] for r in panel.rows("keys")] == ["model.layers.2.self_attn.q_proj.weight"]
    assert [r["module"] for r in panel.rows("modules")] == ["model.layers.2.self_attn.q_proj"]
    panel.filter_edit.clear()

    # values, in the engine, with progress; the changed tensor is found
    with qtbot.waitSignal(window.state.comparison_changed, timeout=60_000) as blocker:
        qtbot.mouseClick(panel.values_button, Qt.MouseButton.LeftButton)
    assert blocker.args[0].value_counts() == {"equal": 20, "close": 0, "different": 1, "skipped": 0}
    qtbot.keyClicks(panel.filter_edit, "is:different")
    [row] = panel.rows("keys")
    assert row["name"] == CHANGED and row["max_abs"] == pytest.approx(1.5) and row["differing"] == 2 / 8192
    # selecting the row selects its module in the tree
    with qtbot.waitSignal(window.state.module_selected, timeout=5_000):
        rect = panel.keys_table.visualRect(panel.keys_proxy.index(0, 1))
        qtbot.mouseClick(panel.keys_table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.tree.current_path() == "model.layers.1.mlp.down_proj"

    # share what you see: the tree and the comparison, re-read
    from fusion_gui.panels.save_dialog import save_view

    for name in ("tree.svg", "tree.png", "tree.txt", "report.html", "report.md"):
        save_view(window.state, tmp_path / name)
    root = ET.parse(tmp_path / "tree.svg").getroot()
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "demo:llama" in texts and "0–1 ×2" in texts and "LlamaDecoderLayer" in texts
    image = QImage(str(tmp_path / "tree.png"))
    assert not image.isNull() and image.width() > 500
    assert "    layers  ModuleList" in (tmp_path / "tree.txt").read_text()
    page = (tmp_path / "report.html").read_text()
    assert "<svg" in page and CHANGED in page and "different: modules (3 changed, 13 added)" in page
    assert "1.5" in page and "0.0244%" in page  # max abs and the share of differing elements
    assert "| different | model.layers.1.mlp.down\\_proj.weight |" in (tmp_path / "report.md").read_text()

    # back to original vs fused
    qtbot.mouseClick(panel.close_button, Qt.MouseButton.LeftButton)
    assert window.diff_stack.currentWidget() is window.diff


def test_save_view_says_what_is_missing(window, open_model, tmp_path):
    from fusion_gui.panels.save_dialog import save_view

    with pytest.raises(ValueError, match="no model is open"):
        save_view(window.state, tmp_path / "t.svg")
    open_model(window, "demo:llama")
    with pytest.raises(ValueError, match="no check results"):
        save_view(window.state, tmp_path / "r.html")
    with pytest.raises(ValueError, match=r"save as \.svg"):
        save_view(window.state, tmp_path / "r.pdf")
