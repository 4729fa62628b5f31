"""The Diff tab: original against fused for the plan on show, computed in the background when shown."""

from __future__ import annotations

from PySide6.QtCore import Qt

from fusion_core import inspect_model
from fusion_core.boundary.convert import to_plain
from fusion_core.plan.diff import diff_plan

ATTN = "model.layers.0.self_attn"


def test_diff_tab_rows_follow_the_fusions(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:llama")
    only_fusions(window, "qkv")
    panel = window.diff
    assert panel.diff is None  # not computed while the tab is hidden
    with qtbot.waitSignal(panel.diff_ready, timeout=60_000) as blocker:
        window.show_tab("diff")
    # the same diff, computed here in the test process on the same model and fusions
    expected = to_plain(diff_plan(inspect_model("demo:llama").plan(window.state.plan.fusion_config)))
    assert to_plain(blocker.args[0]) == expected
    assert panel.rows("modules") == expected["modules"]
    assert [r["module"] for r in panel.rows("modules")] == [ATTN, "model.layers.1.self_attn"]
    assert panel.rows("keys") == expected["keys"]
    assert "state dict 21 → 17 keys (15 unchanged; 6 removed, 2 added, 0 renamed" in panel.summary.text()
    first = panel.modules_proxy.index(0, 4).data()
    assert first == "12,288" and panel.modules_proxy.index(0, 6).data() == "yes"

    # toggling a family while the tab is shown recomputes it
    with qtbot.waitSignal(panel.diff_ready, timeout=60_000) as blocker:
        only_fusions(window, "qkv", "gate_up")
    assert blocker.args[0].counts() == {"removed": 10, "added": 4, "renamed": 0, "reshaped": 0}
    qtbot.keyClicks(panel.filter_edit, "gate_proj")
    assert {r["key"] for r in panel.rows("keys")} == {
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.1.mlp.gate_proj.weight",
    }
    assert panel.rows("modules") == []
    panel.filter_edit.clear()

    with qtbot.waitSignal(panel.diff_ready, timeout=10_000) as blocker:
        only_fusions(window)
    assert blocker.args[0] is None and panel.rows("keys") == []
    assert "No module is fused" in panel.summary.text()


def test_double_click_selects_the_module_in_the_tree(qtbot, window, open_model, only_fusions):
    open_model(window, "demo:qwen2-vl")
    only_fusions(window, "patch_embeddings")
    panel = window.diff
    with qtbot.waitSignal(panel.diff_ready, timeout=60_000):
        window.show_tab("diff")
    [row] = panel.rows("keys")
    assert (row["change"], row["key"], row["fused_key"]) == (
        "renamed",
        "model.visual.patch_embed.proj.weight",
        "model.visual.patch_embed.linear_proj.weight",
    )
    shown = [panel.keys_proxy.index(0, c).data() for c in range(7)]
    assert shown == [
        "renamed",
        "model.visual.patch_embed",
        "proj.weight",
        "32×3×2×14×14",
        "conv3d_to_linear",
        "linear_proj.weight",
        "32×1176",
    ]
    rect = panel.keys_table.visualRect(panel.keys_proxy.index(0, 2))
    with qtbot.waitSignal(window.state.module_selected, timeout=5_000):
        qtbot.mouseClick(panel.keys_table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        qtbot.mouseDClick(panel.keys_table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.tree.current_path() == "model.visual.patch_embed"


def test_diff_tab_on_full_size_omni(qtbot, window, open_model, only_fusions):
    open_model(window, "arch:qwen2_5_omni")  # meta only: no weights
    only_fusions(window, "patch_embeddings", "qkv", "gate_up")
    panel = window.diff
    with qtbot.waitSignal(panel.diff_ready, timeout=120_000) as blocker:
        window.show_tab("diff")
    diff = blocker.args[0]
    assert diff.params_equal and not diff.unexplained
    assert len(panel.rows("modules")) == len(window.state.plan.matched) == 145
    assert len(panel.rows("keys")) == sum(diff.counts().values())
    assert all(r["params_equal"] for r in panel.rows("modules"))
    assert "(equal)" in panel.summary.text()
