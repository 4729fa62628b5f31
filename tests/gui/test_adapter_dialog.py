"""LoRA adapters in the window: opened next to the model, marked on the tree, converted in the engine."""

from __future__ import annotations

import json
from pathlib import Path

import _forked
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from fusion_gui.models.tree_model import NAME, PathRole

JOB_TIMEOUT_MS = 240_000
_MAKE = """
import sys, torch, fusion_core
from peft import LoraConfig, get_peft_model
for base, out, targets in zip(*[iter(sys.argv[1:])] * 3):
    model = fusion_core.load_plain(base)
    torch.manual_seed(0)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=targets.split(","), init_lora_weights=False)
    get_peft_model(model, cfg).save_pretrained(out)
"""


@pytest.fixture(scope="module")
def adapters(llama_dir: Path, qwen2_vl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real PEFT adapters, made in one other process (the window's process never imports torch):
    q and v of the tiny Llama, the patch embedding of the tiny Qwen2-VL."""
    root = str(Path(__file__).resolve().parents[2])
    folder = tmp_path_factory.mktemp("gui-adapters")
    made = {"llama": (llama_dir, "q_proj,v_proj"), "qwen2-vl": (qwen2_vl_dir, "patch_embed.proj")}
    argv = []
    for name, (base, targets) in made.items():
        argv += [str(base), str(folder / name), targets]
    done = _forked.run(argv, code=_MAKE, cwd=root, timeout=300)  # forked with the imports done
    assert done.returncode == 0, done.stderr[-2000:]
    return {name: folder / name for name in made}


def _row_text(window, path: str) -> str:
    model = window.tree.model
    stack = [model.index(0, 0)]
    while stack:
        index = stack.pop()
        if model.data(index, PathRole) == path:
            return model.data(index.siblingAtColumn(NAME), Qt.ItemDataRole.DisplayRole)
        if model.canFetchMore(index):
            model.fetchMore(index)
        stack += [model.index(r, 0, index) for r in range(model.rowCount(index))]
    return ""


def test_open_mark_and_convert_an_adapter(qtbot, window, open_model, only_fusions, llama_dir, adapters, tmp_path):
    adapter = adapters["llama"]
    open_model(window, str(llama_dir))
    only_fusions(window, "qkv")
    with qtbot.waitSignal(window.state.adapter_changed, timeout=60_000) as sig:
        window.state.open_adapter(adapter)
    plan = sig.args[0]
    assert plan is not None and plan.layout == "fused"
    assert window.adapter_action.isEnabled()
    q = _row_text(window, "model.layers.0.self_attn.q_proj")
    assert q.endswith("[LoRA r=4 α=8]")
    attn = _row_text(window, "model.layers.0.self_attn")
    assert "qkv_proj: fused LoRA rank 8 (partial: k_proj not adapted, zero block)" in attn
    dialog = window.show_adapter_dialog()
    qtbot.addWidget(dialog)
    assert "stack_a_blockdiag_b" in dialog.summary.text()
    dialog.dest_edit.setText(str(tmp_path / "fused"))
    dialog.verify_box.setChecked(False)  # the child-process verification has its own test in tests/core
    with qtbot.waitSignal(window.state.adapter_finished, timeout=JOB_TIMEOUT_MS) as done:
        dialog.convert_button.click()
    result = done.args[0]
    qtbot.waitUntil(lambda: dialog.job is None, timeout=10_000)
    assert result.verification.round_trip == "bitwise" and "Converted" in dialog.status.text()
    cfg = json.loads((tmp_path / "fused" / "adapter_config.json").read_text())
    assert cfg["target_modules"] == ["qkv_proj"] and cfg["rank_pattern"] == {"qkv_proj": 8}
    dialog.close()


def test_patch_embedding_adapter_marked_and_converted(
    qtbot, window, open_model, only_fusions, qwen2_vl_dir, adapters, tmp_path
):
    adapter = adapters["qwen2-vl"]
    open_model(window, str(qwen2_vl_dir))
    only_fusions(window, "patch_embeddings")
    with qtbot.waitSignal(window.state.adapter_changed, timeout=60_000) as sig:
        window.state.open_adapter(adapter)
    assert sig.args[0] is not None and sig.args[0].layout == "fused"
    assert "linear_proj: fused LoRA rank 4" in _row_text(window, "model.visual.patch_embed")
    dialog = window.show_adapter_dialog()
    qtbot.addWidget(dialog)
    assert "conv_to_linear" in dialog.summary.text()
    dialog.dest_edit.setText(str(tmp_path / "fused"))
    dialog.verify_box.setChecked(False)  # PEFT's outputs on image inputs: tests/core/test_adapter.py
    with qtbot.waitSignal(window.state.adapter_finished, timeout=JOB_TIMEOUT_MS) as done:
        dialog.convert_button.click()
    qtbot.waitUntil(lambda: dialog.job is None, timeout=10_000)
    assert done.args[0].verification.round_trip == "bitwise" and "Converted" in dialog.status.text()
    cfg = json.loads((tmp_path / "fused" / "adapter_config.json").read_text())
    assert cfg["target_modules"] == ["linear_proj"]
    dialog.close()


def test_a_dropped_refused_adapter_is_one_error_box(qtbot, window, open_model, only_fusions, llama_dir, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text(json.dumps({"peft_type": "IA3"}))
    open_model(window, str(llama_dir))
    only_fusions(window, "qkv")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(bad))])
    drop = QDropEvent(
        QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    with qtbot.waitSignal(window.error_shown, timeout=60_000) as sig:
        window.dropEvent(drop)  # a folder with adapter_config.json, dropped on an open model: opened as its adapter
    assert "is not LORA" in sig.args[1]
    assert window.state.adapter_plan is None and not window.adapter_action.isEnabled()
    assert window.state.spec == str(llama_dir)  # the model stays open


def test_opening_an_adapter_is_confirmed(qtbot, window, open_model, only_fusions, llama_dir, adapters):
    """Issue 33: opening an adapter gave no confirmation; the status bar says what opened, once."""
    open_model(window, str(llama_dir))
    only_fusions(window, "qkv")
    with qtbot.waitSignal(window.state.adapter_changed, timeout=60_000):
        window.state.open_adapter(adapters["llama"])
    said = window.statusBar().currentMessage()
    assert said.startswith(f"Adapter {Path(adapters['llama']).name} opened: ") and "marked in the tree" in said
    window.statusBar().clearMessage()
    with qtbot.waitSignal(window.state.adapter_changed, timeout=60_000):
        only_fusions(window, "qkv", "gate_up")  # the same adapter planned again: not said again
    assert window.statusBar().currentMessage() == ""
