"""Inference checks on real tiny checkpoints: pass, fail (a deliberately wrong family),
nothing to fuse, dtypes, JSON, and upstream parity (one run, separate process)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import _wrong_family as _wrong
import pytest
import torch

from fusion_core import check, inspect_model
from fusion_core.boundary.convert import to_plain
from fusion_core.boundary.options import DTYPE_TOLERANCES, CheckOptions
from fusion_core.families import REGISTRY
from fusion_core.run.checks import iter_check

PE = {"patch_embeddings": True}


@pytest.fixture
def wrong_family() -> Iterator[str]:
    with _wrong.wrong_family() as name:
        yield name


@pytest.mark.smoke
def test_check_demo_passes_float32(qwen2_vl_dir: Path) -> None:
    result = check(qwen2_vl_dir, PE, repeats=2, upstream=False)
    assert result.passed and not result.nothing_to_fuse
    (module,) = result.modules
    assert module.path == "model.visual.patch_embed"
    assert (module.original_class, module.fused_class) == ("PatchEmbed", "FusedPatchEmbed")
    assert module.input_shapes == [[16 * 18, 3 * 2 * 14 * 14]]  # 224 px by default, one merge unit wider
    assert module.comparison.max_abs_diff <= 1e-5
    assert module.timing.original_ms > 0 and module.timing.fused_ms > 0 and module.timing.repeats >= 2
    e2e = result.end_to_end
    assert e2e.output == "logits" and e2e.input_kind == "image+text, video+text" and e2e.passed
    assert e2e.comparison.max_abs_diff <= 1e-5
    assert set(e2e.input_shapes) >= {"pixel_values", "image_grid_thw", "input_ids"}
    data = json.loads(json.dumps(to_plain(result)))
    assert data["passed"] is True and data["tolerance"]["atol"] == DTYPE_TOLERANCES["float32"][0]
    assert data["load"]["fused_modules"][0]["module"] == "model.visual.patch_embed"
    assert data["upstream"] is None


def test_check_is_deterministic(qwen2_vl_dir: Path) -> None:
    a = check(qwen2_vl_dir, PE, repeats=1, upstream=False, time_budget=0)  # comparisons, not timings
    b = check(qwen2_vl_dir, PE, repeats=1, upstream=False, time_budget=0)
    assert a.end_to_end.comparison.max_abs_diff == b.end_to_end.comparison.max_abs_diff
    assert a.modules[0].comparison.max_abs_diff == b.modules[0].comparison.max_abs_diff


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_check_half_dtypes(qwen2_vl_dir: Path, dtype: str) -> None:
    result = check(qwen2_vl_dir, PE, dtype=dtype, repeats=1, upstream=False, time_budget=0)
    assert result.passed and result.dtype == dtype
    assert result.tolerance.rtol == DTYPE_TOLERANCES[dtype][1] > DTYPE_TOLERANCES["float32"][1]


def test_wrong_fusion_fails(qwen2_vl_dir: Path, wrong_family: str) -> None:
    result = check(qwen2_vl_dir, {wrong_family: True}, repeats=1, upstream=False, time_budget=0)
    assert not result.passed
    assert not result.modules[0].passed  # the tiny model may damp 0.1% below the end-to-end tolerance
    assert result.modules[0].comparison.max_rel_diff == pytest.approx(1e-3, rel=0.05)


@pytest.mark.smoke
def test_nothing_to_check_is_not_a_pass(llama_dir: Path) -> None:
    result = check(llama_dir, PE, upstream=True)
    assert not result.passed and result.nothing_to_fuse
    assert result.modules == [] and result.end_to_end is None and result.upstream is None
    assert "nothing to check: no module of LlamaForCausalLM matches patch_embeddings" in result.messages
    none = check(llama_dir, {}, upstream=False)
    assert not none.passed and none.nothing_to_fuse
    assert "nothing to check: no family enabled" in none.messages


def _cancelled_at(folder: Path, prefix: str, **settings) -> list[str]:
    """The progress messages of a check cancelled at its first message starting with ``prefix``
    (it must end in Cancelled)."""
    from fusion_core import Cancelled, CancelToken

    token = CancelToken()
    messages: list[str] = []

    def on_step(step) -> None:
        messages.append(step.message)
        if step.message.startswith(prefix):
            token.cancel()

    with pytest.raises(Cancelled):
        check(folder, PE, upstream=False, progress=on_step, cancel=token, **settings)
    return messages


def test_progress_and_cancel(qwen2_vl_dir: Path) -> None:
    messages = _cancelled_at(qwen2_vl_dir, "checking", repeats=1, time_budget=0)
    assert any(m.startswith("loading the model once") for m in messages)
    assert "running the original model end to end" in messages
    plan = inspect_model(str(qwen2_vl_dir)).plan(PE)
    steps = list(_steps(iter_check(plan, CheckOptions.build(repeats=1, upstream=False, time_budget=0))))
    assert steps[-1].done == steps[-1].total


def _steps(gen):
    while True:
        try:
            yield next(gen)
        except StopIteration:
            return


@pytest.mark.slow  # upstream parity runs transformers' own fusion in a subprocess
@pytest.mark.skipif(os.environ.get("FUSION_SKIP_UPSTREAM") == "1", reason="FUSION_SKIP_UPSTREAM=1")
def test_upstream_matches_where_it_is_right(tmp_path: Path) -> None:
    """Qwen3-VL: upstream fuses correctly (it leaks, though); our result matches it."""
    import transformers
    from _fusable_families import tiny_config

    if not hasattr(transformers, "Qwen3VLForConditionalGeneration"):
        pytest.skip("this transformers has no Qwen3-VL")
    from fusion_core.run.upstream import upstream_knows

    if not upstream_knows("patch_embeddings")[0]:
        pytest.skip(upstream_knows("patch_embeddings")[1])
    torch.manual_seed(0)
    model = transformers.Qwen3VLForConditionalGeneration(tiny_config("qwen3_vl"))
    model.save_pretrained(tmp_path / "qwen3vl")
    # qkv is on too (as in the GUI's default): transformers has no such family, which must
    # neither stop the comparison nor turn it into "differs"
    result = check(tmp_path / "qwen3vl", {**PE, "qkv": True}, repeats=1, time_budget=0.1)
    up = result.upstream
    assert result.passed and up.available and not up.error
    assert [(f.name, f.status) for f in up.families] == [
        ("patch_embeddings", "agrees"),
        ("qkv", "not available upstream"),
    ]
    assert up.matches_ours, up.summary
    # the class upstream loaded, and no key of the family's modules missing or unexpected (it would be listed)
    assert up.families[0].detail == "upstream loaded FusedQwen3VLVisionPatchEmbed"
    assert up.max_abs_diff < 1e-5 and result.end_to_end.comparison.max_abs_diff < 1e-5
    assert "matches ours" in up.summary


@pytest.mark.smoke
def test_several_families_at_once(qwen2_vl_dir: Path) -> None:
    """Qwen2-VL's legacy text keys (``model.layers.*``) map onto ``model.language_model.layers.*``."""
    fusion = {name: True for name in ("patch_embeddings", "qkv", "gate_up")}
    missing = [name for name in fusion if name not in REGISTRY]
    assert not missing, f"built-in families not registered: {missing}"
    result = check(qwen2_vl_dir, fusion, repeats=1, upstream=False, time_budget=0)
    assert result.passed, to_plain(result)
    assert {m.family for m in result.modules} == set(fusion)
    assert "model.language_model.layers.0.self_attn" in [m.path for m in result.modules]


@pytest.mark.smoke
def test_image_model_with_conv2d_patches() -> None:
    assert "patch_embeddings_2d" in REGISTRY, "the built-in patch_embeddings_2d family is not registered"
    result = check("demo:vit", {"patch_embeddings_2d": True}, repeats=1, upstream=False, time_budget=0)
    assert result.passed and result.end_to_end.input_kind == "image"


def test_timing_rounds_report_progress_and_cancel_inside_a_timing(qwen2_vl_dir: Path) -> None:
    """A timing cannot yield: each of its rounds reports through the driven operation
    (progress.heartbeat), and a cancel set during one ends the check at the next round."""
    messages = _cancelled_at(qwen2_vl_dir, "timing: round 2", repeats=50, time_budget=30)
    assert any(m.startswith("warming up: round") for m in messages)
    assert any(m.startswith("running the original on ") for m in messages)
    assert messages[-1].startswith("timing: round 2"), messages[-3:]  # nothing ran after the cancel
