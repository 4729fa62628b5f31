"""The Fusions tab shows the options a family accepts (a plugin family that declares one)."""

from __future__ import annotations

from pathlib import Path

KV_FILE = Path(__file__).resolve().parents[1] / "plugin_example" / "fi_kv_family" / "kv_family.py"


def test_tooltip_lists_the_family_options(qtbot, window, open_model, engine_family):
    [kv_family] = engine_family(window, KV_FILE)  # registered in the engine, where discovery runs
    open_model(window, "demo:llama")
    panel = window.fusions
    tip = panel.item(kv_family).toolTip()
    assert "Options (fusion_config):" in tip
    assert "min_in_features: int, default 0: leave projections with fewer input features unfused" in tip
    qkv_tip = panel.item("qkv").toolTip()
    assert "Options" not in qkv_tip and qkv_tip.startswith("Attention q_proj")
