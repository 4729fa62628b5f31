"""File → Save plan… and Open plan… (issue 31): the app writes the file ``plan --json`` writes,
and opening one restores its model with exactly its families, after checking the model is
the one it was made from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fusion_core.model.checkpoint import read_header
from fusion_core.plan.plan_file import plan_from_file

JOB_TIMEOUT_MS = 120_000


def _save(qtbot, window, path: Path) -> dict:
    with qtbot.waitSignal(window.state.job_ended, timeout=JOB_TIMEOUT_MS) as ended:
        assert window.state.save_plan(path) is not None
    assert ended.args[:2] == ["save plan", "ok"], ended.args
    return json.loads(path.read_text())


def test_a_saved_plan_is_the_clis_plan_and_opens_with_its_families(qtbot, window, open_model, only_fusions, tmp_path):
    open_model(window, "demo:llama")
    only_fusions(window, "gate_up", "qkv")
    assert window.save_plan_action.isEnabled()
    path = tmp_path / "plan.json"
    doc = _save(qtbot, window, path)
    expected = {f"model.layers.{i}.{m}": f for i in (0, 1) for m, f in (("self_attn", "qkv"), ("mlp", "gate_up"))}
    assert doc["matched"] == expected and doc["identity"]["spec"] == "demo:llama"
    plan = plan_from_file(path)  # what `fusion-core check --plan` runs
    assert dict(plan.matched_paths) == expected
    # the user changes the families, then opens the plan: exactly its families come back
    only_fusions(window, "qkv")
    with qtbot.waitSignal(window.state.job_ended, timeout=JOB_TIMEOUT_MS) as ended:
        assert window.state.open_plan(path) is not None
    assert ended.args[:2] == ["open plan", "ok"]
    qtbot.waitUntil(
        lambda: window.state.enabled == {"qkv", "gate_up"} and not window.state.plan_pending, timeout=30_000
    )
    assert window.state.family_order[:2] == list(doc["fusion_config"])
    assert dict(window.state.plan.fusion_config) == doc["fusion_config"]


def test_a_plan_of_a_changed_model_is_refused_naming_the_file(qtbot, window, open_model, only_fusions, tmp_path,
                                                              llama_dir):  # fmt: skip
    folder = tmp_path / "model"
    shutil.copytree(llama_dir, folder)
    open_model(window, str(folder))
    only_fusions(window, "qkv")
    path = tmp_path / "plan.json"
    _save(qtbot, window, path)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[read_header(weights).data_start + 10] ^= 0x01  # one byte of one tensor
    weights.write_bytes(bytes(data))
    with qtbot.waitSignal(window.state.error_raised, timeout=JOB_TIMEOUT_MS) as raised:
        window.state.open_plan(path)
    title, message = raised.args[:2]
    assert title == "Cannot open the plan plan.json"
    assert "model.safetensors changed since the plan (its SHA-256 differs)" in message


def test_the_check_runs_the_plan_on_show_and_refuses_it_once_the_weights_changed(
    qtbot, window, open_model, only_fusions, tmp_path, llama_dir
):
    """The window sends the plan it shows (PlanData); the engine resolves it on its model and
    refuses it, naming the file, when the weights are no longer those it was made from."""
    from fusion_core.boundary.options import CheckOptions, TimingOptions

    folder = tmp_path / "model"
    shutil.copytree(llama_dir, folder)
    open_model(window, str(folder))
    only_fusions(window, "qkv")
    size = (folder / "model.safetensors").stat().st_size
    with (folder / "model.safetensors").open("ab") as f:
        f.write(b"\0")  # after the plan was made
    with qtbot.waitSignal(window.state.error_raised, timeout=JOB_TIMEOUT_MS) as raised:
        assert window.state.run_checks(CheckOptions(upstream=False, timing=TimingOptions(budget_s=0))) is not None
    title, message = raised.args[:2]
    assert title == "Checks failed"
    assert f"model.safetensors changed since the plan ({size:,} bytes then, {size + 1:,} now)" in message
