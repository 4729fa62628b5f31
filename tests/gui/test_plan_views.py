"""Patch mapping and weight transforms tabs follow the chosen fusions."""

from __future__ import annotations

import json
import shutil

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

PATCH = "model.visual.patch_embed"


def test_patch_mapping_rows_and_click_selects_in_tree(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "patch_embeddings")
    assert window.mapping.rows() == [("PatchEmbed", "FusedPatchEmbed", "patch_embeddings", [PATCH])]
    child = window.mapping.table.topLevelItem(0).child(0)
    rect = window.mapping.table.visualItemRect(child)
    window.show_tab("mapping")
    with qtbot.waitSignal(window.state.module_selected, timeout=5_000):
        qtbot.mouseClick(window.mapping.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.tree.current_path() == PATCH

    only_fusions(window)
    assert window.mapping.rows() == []
    assert "No fusion enabled" in window.mapping.summary.text()


def test_weight_transforms_rows_shapes_direction_filter_copy(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "patch_embeddings")
    panel = window.transforms
    rows = panel.visible_rows()
    assert [(r["source_key"], r["source_shape"], r["target_key"], r["target_shape"], r["op"]) for r in rows] == [
        (
            "visual.patch_embed.proj.weight",
            [32, 3, 2, 14, 14],
            "visual.patch_embed.linear_proj.weight",
            [32, 1176],
            "conv3d_to_linear",
        )
    ]
    assert rows[0]["dtype"] == "F32"
    # grouped by module: the module path (tree name) above its checkpoint keys
    assert rows[0]["module"] == PATCH
    group = panel.table.model().index(0, 0)
    assert group.data().startswith(f"{PATCH}  ") and "patch_embeddings" in group.data()
    assert panel.table.isExpanded(group) and panel.table.isFirstColumnSpanned(0, group.parent())
    assert panel.table.model().index(0, 0, group).data() == "visual.patch_embed.proj.weight"
    assert panel.table.model().index(0, 1, group).data() == "32×3×2×14×14"
    assert "Checkpoint layout: <b>original</b>" in panel.info.text()

    panel.save_button.click()
    rows = panel.visible_rows()
    assert rows[0]["source_key"] == "visual.patch_embed.linear_proj.weight"
    assert rows[0]["source_shape"] == [32, 1176] and rows[0]["target_shape"] == [32, 3, 2, 14, 14]
    panel.load_button.click()

    only_fusions(window, "patch_embeddings", "qkv", "gate_up")
    n = len(panel.visible_rows())
    assert n > 1
    qtbot.keyClicks(panel.filter_edit, "linear_proj")
    assert len(panel.visible_rows()) == 1
    text = panel.copy_json()
    assert QGuiApplication.clipboard().text() == text
    data = json.loads(text)
    assert data["direction"] == "load" and len(data["transforms"]) == 1


def test_config_only_source_says_no_checkpoint(qtbot, window, open_model, only_fusions, qwen2_vl_dir, tmp_path):
    folder = tmp_path / "config-only"
    folder.mkdir()
    shutil.copy(qwen2_vl_dir / "config.json", folder / "config.json")
    open_model(window, str(folder))
    only_fusions(window, "patch_embeddings")
    panel = window.transforms
    assert "No checkpoint attached" in panel.info.text()
    rows = panel.visible_rows()
    assert len(rows) == 1
    assert rows[0]["source_shape"] == [32, 3, 2, 14, 14] and rows[0]["target_shape"] == [32, 1176]
    dialog = window.show_export_dialog()
    qtbot.addWidget(dialog)
    assert not dialog.export_button.isEnabled() and "no weights" in dialog.note.text()
    dialog.reject()


def test_fusions_tab_counts_order_and_messages(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:llama")
    panel = window.fusions
    only_fusions(window, "patch_embeddings")
    item = panel.item("patch_embeddings")
    assert "0 module(s)" in item.data(Qt.ItemDataRole.UserRole + 2)
    assert panel.message.isVisible() or panel.message.text()
    assert "no module" in panel.message.text().lower()
    order = panel.order()
    panel.list.setCurrentRow(len(order) - 1)
    panel.up.click()
    expected = [*order[:-2], order[-1], order[-2]]
    assert window.state.family_order == expected and panel.order() == expected
