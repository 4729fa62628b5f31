"""Fused loading on real tiny checkpoints: exactness, layouts, dtypes, sharding, key errors,
no process-wide state left behind, cancel, and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from fusion_core import Cancelled, CancelToken, LoadError, inspect_model, load, load_plain
from fusion_core.boundary.convert import to_plain
from fusion_core.errors import CheckpointError
from fusion_core.run.loading import iter_load

PE = {"patch_embeddings": True}
PATH = "model.visual.patch_embed"


def _pixels(model: torch.nn.Module) -> torch.Tensor:
    conv = model.get_submodule(PATH).proj
    gen = torch.Generator().manual_seed(1)
    return torch.randn(24, conv.in_channels * 2 * 14 * 14, generator=gen)


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _is_pristine(model: torch.nn.Module) -> bool:
    return not any(type(m).__name__.startswith("Fused") for m in model.modules())


@pytest.fixture(scope="module")
def fused_layout_dir(qwen2_vl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo in fused layout, written by hand: fused state dict + config with fusion_config."""
    folder = tmp_path_factory.mktemp("fused-layout")
    result = load(qwen2_vl_dir, PE)
    state = {k: v.contiguous() for k, v in result.model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((qwen2_vl_dir / "config.json").read_text())
    config["fusion_config"] = PE
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.smoke
def test_fused_load_is_exact_and_shares_weights(qwen2_vl_dir: Path) -> None:
    result = load(qwen2_vl_dir, PE)
    plain = load_plain(qwen2_vl_dir)
    assert result.layout == "original"
    assert result.fused_modules == [PATH]
    assert result.model.config.fusion_config == PE
    assert not hasattr(plain.config, "fusion_config")
    fused_pe, plain_pe = result.model.get_submodule(PATH), plain.get_submodule(PATH)
    assert type(fused_pe).__name__ == "FusedPatchEmbed" and _is_pristine(plain)
    assert fused_pe.linear_proj.weight.shape == (32, 3 * 2 * 14 * 14)
    x = _pixels(plain)
    with torch.inference_mode():
        diff = (fused_pe(x) - plain_pe(x)).abs().max().item()
    assert diff <= 1e-5
    # every other weight identical; the fused one is the same numbers, reshaped
    fused_state, plain_state = result.model.state_dict(), plain.state_dict()
    for key, value in plain_state.items():
        if key.endswith("patch_embed.proj.weight"):
            torch.testing.assert_close(fused_state[key.replace("proj", "linear_proj")], value.reshape(32, -1))
        else:
            assert torch.equal(fused_state[key], value), key
    assert result.missing_keys == [] and result.unexpected_keys == []  # what from_pretrained reported
    report = to_plain(result.report())
    json.dumps(report)
    assert report["missing_keys"] == [] and report["unexpected_keys"] == []
    assert report["transforms"][0]["source_key"] == "visual.patch_embed.proj.weight"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_dtypes(qwen2_vl_dir: Path, dtype: str) -> None:
    result = load(qwen2_vl_dir, PE, dtype=dtype)
    plain = load_plain(qwen2_vl_dir, dtype=dtype)
    assert result.dtype == dtype
    want = getattr(torch, dtype)
    assert result.model.get_submodule(PATH).linear_proj.weight.dtype == want
    x = _pixels(plain).to(want)
    with torch.inference_mode():
        a = result.model.get_submodule(PATH)(x).float()
        b = plain.get_submodule(PATH)(x).float()
    assert (a - b).abs().max().item() <= 2e-2 * b.abs().max().item()


@pytest.mark.smoke
def test_fused_layout_checkpoint(qwen2_vl_dir: Path, fused_layout_dir: Path) -> None:
    result = load(fused_layout_dir)  # the config's own fusion_config is honoured
    assert result.layout == "fused" and result.fused_modules == [PATH]
    assert result.model.config.fusion_config == PE
    original = load_plain(qwen2_vl_dir)
    restored = load_plain(fused_layout_dir)  # back to the original layout, exactly
    assert _is_pristine(restored)
    for key, value in original.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key
    x = _pixels(original)
    with torch.inference_mode():
        diff = (result.model.get_submodule(PATH)(x) - original.get_submodule(PATH)(x)).abs().max().item()
    assert diff <= 1e-5


def test_fused_layout_without_fusion_lists_keys(fused_layout_dir: Path) -> None:
    with pytest.raises(LoadError) as err:
        load(fused_layout_dir, {"patch_embeddings": False})
    text = str(err.value)
    assert "missing keys" in text and "model.visual.patch_embed.proj.weight" in text
    assert "unexpected keys" in text and "linear_proj.weight" in text


def test_config_fusion_config_is_overridden_by_caller(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    folder = _copy(qwen2_vl_dir, tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["fusion_config"] = PE
    (folder / "config.json").write_text(json.dumps(config))
    assert load(folder).fused_modules == [PATH]
    plain = load(folder, {})
    assert plain.fused_modules == [] and plain.layout == "none" and _is_pristine(plain.model)
    assert getattr(plain.model.config, "fusion_config", None) is None


@pytest.mark.smoke
def test_sharded_checkpoint(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    model = load_plain(qwen2_vl_dir)
    folder = tmp_path / "sharded"
    model.save_pretrained(folder, max_shard_size="200KB")
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    result = load(folder, PE)
    assert result.fused_modules == [PATH]
    x = _pixels(model)
    with torch.inference_mode():
        diff = (result.model.get_submodule(PATH)(x) - model.get_submodule(PATH)(x)).abs().max().item()
    assert diff <= 1e-5


def test_missing_and_unexpected_keys_are_listed_sorted(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    folder = _copy(qwen2_vl_dir, tmp_path / "m")
    state = load_file(str(folder / "model.safetensors"))
    del state["visual.blocks.1.norm2.bias"], state["visual.blocks.0.norm1.bias"]
    state["extra.zzz"] = torch.zeros(2)
    state["extra.aaa"] = torch.zeros(2)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(LoadError) as err:
        load(folder, PE)
    text = str(err.value)
    assert "model.visual.blocks.0.norm1.bias, model.visual.blocks.1.norm2.bias" in text
    assert "extra.aaa, extra.zzz" in text


def test_no_state_left_behind_same_checkpoint(qwen2_vl_dir: Path, fused_layout_dir: Path) -> None:
    from transformers import Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl import modeling_qwen2_vl

    original_cls = modeling_qwen2_vl.PatchEmbed
    expected = load_file(str(qwen2_vl_dir / "model.safetensors"))
    load(qwen2_vl_dir, PE)
    load(fused_layout_dir)  # the scoped-patch path
    assert modeling_qwen2_vl.PatchEmbed is original_cls
    plain = Qwen2VLForConditionalGeneration.from_pretrained(qwen2_vl_dir)
    assert _is_pristine(plain)
    assert type(plain.get_submodule(PATH)) is original_cls
    state = plain.state_dict()
    for key, value in expected.items():
        # Qwen2-VL's legacy names: visual.* -> model.visual.*, model.* -> model.language_model.*
        names = [key, "model." + key, key.replace("model.", "model.language_model.", 1)]
        assert torch.equal(state[next(n for n in names if n in state)], value), key


def test_no_state_left_behind_other_families(qwen2_vl_dir: Path, fused_layout_dir: Path, tmp_path: Path) -> None:
    import transformers
    from _fusable_families import tiny_config

    load(qwen2_vl_dir, PE)
    load(fused_layout_dir)
    for model_type, name in [
        ("qwen3_vl", "Qwen3VLForConditionalGeneration"),
        ("glm4v", "Glm4vForConditionalGeneration"),
        ("videomae", "VideoMAEForVideoClassification"),
    ]:
        cls = getattr(transformers, name)
        torch.manual_seed(0)
        model = cls(tiny_config(model_type))
        folder = tmp_path / name
        model.save_pretrained(folder)
        reloaded = cls.from_pretrained(folder)
        assert _is_pristine(reloaded), name
        for key, value in model.state_dict().items():
            assert torch.equal(reloaded.state_dict()[key], value), (name, key)


def test_cancel_mid_load(qwen2_vl_dir: Path, fused_layout_dir: Path) -> None:
    from transformers.models.qwen2_vl import modeling_qwen2_vl

    original_cls = modeling_qwen2_vl.PatchEmbed
    for folder in (qwen2_vl_dir, fused_layout_dir):
        token = CancelToken()
        seen: list[str] = []

        def on_step(step, token=token, seen=seen) -> None:
            seen.append(step.message)
            if step.message.startswith("fusing"):
                token.cancel()

        with pytest.raises(Cancelled):
            load(folder, PE, progress=on_step, cancel=token)
        assert any(m.startswith("loading weights") for m in seen)
        assert modeling_qwen2_vl.PatchEmbed is original_cls
    assert load(qwen2_vl_dir, PE).fused_modules == [PATH]


def test_progress_steps(qwen2_vl_dir: Path) -> None:
    gen = iter_load(inspect_model(str(qwen2_vl_dir)).plan(PE))
    steps = []
    try:
        while True:
            steps.append(next(gen))
    except StopIteration as stop:
        result = stop.value
    assert result.fused_modules == [PATH]
    assert steps[-1].done == steps[-1].total and steps[-1].message == "loaded"
    assert [s.done for s in steps] == sorted(s.done for s in steps)


# -- bad input ---------------------------------------------------------------------------


def test_truncated_shard(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    folder = _copy(qwen2_vl_dir, tmp_path / "m")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*(truncated|past the end)"):
        load(folder, PE)


def test_corrupt_shard_header(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    folder = _copy(qwen2_vl_dir, tmp_path / "m")
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[8:20] = b"\xff" * 12
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        load(folder, PE)


def test_index_names_missing_shard(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    load_plain(qwen2_vl_dir).save_pretrained(folder, max_shard_size="200KB")
    shard = sorted(folder.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(CheckpointError, match=shard.name):
        load(folder, PE)


def test_shapes_not_matching_config(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    folder = _copy(qwen2_vl_dir, tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["vision_config"]["patch_size"] = 16  # the checkpoint holds 14x14 kernels
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(LoadError) as err:
        load(folder, PE)
    text = str(err.value)
    assert "visual.patch_embed.proj.weight has shape [32, 3, 2, 14, 14]" in text
    assert "config expects [32, 3, 2, 16, 16]" in text


def test_checkpoint_in_neither_layout(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    folder = _copy(qwen2_vl_dir, tmp_path / "m")
    state = load_file(str(folder / "model.safetensors"))
    state["visual.patch_embed.conv.weight"] = state.pop("visual.patch_embed.proj.weight")
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(LoadError, match="neither the original nor the fused layout") as err:
        load(folder, PE)
    assert "visual.patch_embed.proj.weight (original)" in str(err.value)
    assert "visual.patch_embed.linear_proj.weight (fused)" in str(err.value)


def test_config_only_source_is_refused() -> None:
    with pytest.raises(LoadError, match="no weights"):
        load("arch:qwen2_vl", PE)
