"""Checkpoints whose keys transformers renames on load (ViT, DINOv2): plan rows on the real
key names, fused loading, export to the fused layout and back (bitwise), refusals where a
transformers conversion computes the keys a family wants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _export_helpers import raw_bytes_of
from _family_cases import inputs
from safetensors import safe_open

from fusion_core import export, inspect_model
from fusion_core.api import load, load_plain
from fusion_core.plan.key_names import KeyMatcher, prefix_swap, translate

QKV = {"qkv": True}


def _vit(cls_name: str = "ViTModel", **extra):
    import transformers

    config = transformers.ViTConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8
    )
    for k, v in extra.items():
        setattr(config, k, v)
    return config, getattr(transformers, cls_name)


def _dinov2(**extra):
    from transformers import Dinov2Config, Dinov2Model

    config = Dinov2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
        **extra,
    )
    return config, Dinov2Model


# name -> (build, model key of layer 0's fused qkv weight: the name in a fused checkpoint)
CASES = {
    "vit": (_vit, "layers.0.attention.qkv_proj.weight"),
    "vit_classifier": (
        lambda: _vit("ViTForImageClassification", num_labels=3),
        "vit.layers.0.attention.qkv_proj.weight",
    ),
    "dinov2": (_dinov2, "encoder.layer.0.attention.qkv_proj.weight"),
}
_saved: dict[str, Path] = {}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("renamed-models")


def saved(name: str, root: Path, build=None) -> Path:
    """A tiny model of case ``name`` with seeded weights, saved with save_pretrained (once)."""
    if name in _saved:
        return _saved[name]
    config, cls = (build or CASES[name][0])()
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        model = cls(config)
    finally:
        torch.random.set_rng_state(state)
    model.save_pretrained(root / name)
    _saved[name] = root / name
    return root / name


def keys_of(folder: Path) -> list[str]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return sorted(f.keys())


def run(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        out = model.eval()(**inputs("vit"))  # 2 images of 3x32x32
    logits = getattr(out, "logits", None)
    return logits if logits is not None else out.last_hidden_state


@pytest.mark.parametrize("name", sorted(CASES))
def test_save_pretrained_writes_the_legacy_names(name, root):
    # transformers 5.24 reverts its load-time renamings on save: the files keep the old names
    keys = keys_of(saved(name, root))
    assert any(k.endswith("layer.0.attention.attention.query.weight") for k in keys)
    assert not any("q_proj" in k or "qkv_proj" in k for k in keys)


@pytest.mark.smoke
@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_rows_name_the_checkpoint_keys_with_their_shapes(name, root):
    folder = saved(name, root)
    plan = inspect_model(str(folder)).plan(QKV)
    assert plan.layout == "original" and not plan.messages
    ckpt = plan.checkpoint_transforms
    assert len(ckpt) == 4  # weight and bias of 2 layers
    stored = set(keys_of(folder))
    for ct in ckpt:
        assert set(ct.source_keys) <= stored
        assert [k.rsplit(".", 2)[-2] for k in ct.source_keys] == ["query", "key", "value"]
        assert ct.source_shapes in (((32, 32),) * 3, ((32,),) * 3)
        assert ct.target_shapes in (((96, 32),), ((96,),))
        assert ct.target_keys[0] not in stored and ct.dtype == "F32"
    first = next(ct for ct in ckpt if ct.source_keys[0].endswith("layer.0.attention.attention.query.weight"))
    assert first.target_keys == (CASES[name][1],)  # the model's own naming (see fusion_core.plan.key_names)
    rows = plan.rows("load")
    assert rows[0]["source_key"] == first.source_keys[0] and rows[0]["source_shape"] == [32, 32]
    assert rows[0]["target_key"] == CASES[name][1] and rows[0]["target_shape"] == [96, 32]
    back = [r["target_key"] for r in plan.rows("save") if r["source_key"] == CASES[name][1]]
    assert tuple(back) == first.source_keys  # fused -> original: the checkpoint's own names


@pytest.mark.smoke
@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_load_matches_the_plain_model(name, root):
    folder = saved(name, root)
    reference = run(load_plain(str(folder)))
    result = load(str(folder), QKV)
    assert result.layout == "original" and len(result.fused_modules) == 2
    assert all(type(result.model.get_submodule(p)).__name__.startswith("Fused") for p in result.fused_modules)
    torch.testing.assert_close(run(result.model), reference, atol=1e-5, rtol=1e-5)


@pytest.mark.smoke
@pytest.mark.parametrize("name", sorted(CASES))
def test_export_to_fused_and_back_is_bitwise(name, root, tmp_path):
    folder = saved(name, root)
    reference = run(load_plain(str(folder)))
    fused = export(str(folder), tmp_path / "fused", QKV, layout="fused")
    assert fused.verification.outputs_checked and fused.verification.transforms_inverted == 4
    keys = keys_of(tmp_path / "fused")
    assert CASES[name][1] in keys  # the fused key, in the model's own naming
    assert not any(".attention.attention." in k for k in keys)  # q, k, v are gone
    assert any(k.endswith("layer.0.attention.output.dense.weight") for k in keys)  # the rest kept as saved
    assert json.loads((tmp_path / "fused" / "config.json").read_text())["fusion_config"] == QKV

    # the fused checkpoint: recognized, loaded into the fused skeleton through transformers' renamings
    plan = inspect_model(str(tmp_path / "fused")).plan(QKV)
    assert plan.layout == "fused"
    assert {k for ct in plan.checkpoint_transforms for k in ct.source_keys} <= set(keys_of(folder))
    built = load(str(tmp_path / "fused"))
    assert built.layout == "fused" and len(built.fused_modules) == 2
    torch.testing.assert_close(run(built.model), reference, atol=1e-5, rtol=1e-5)
    assert torch.equal(run(load_plain(str(tmp_path / "fused"))), reference)

    export(str(tmp_path / "fused"), tmp_path / "original", QKV, layout="original")
    assert raw_bytes_of(tmp_path / "original") == raw_bytes_of(folder)  # same keys, same bytes
    assert torch.equal(run(load_plain(str(tmp_path / "original"))), reference)


def test_a_checkpoint_already_in_the_model_naming_keeps_it(root, tmp_path):
    # the same ViT written with the model's own key names (as another tool might write it)
    from safetensors.torch import save_file

    config, cls = _vit()
    torch.manual_seed(0)
    model = cls(config)
    folder = tmp_path / "model-names"
    config.save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, folder / "model.safetensors")
    plan = inspect_model(str(folder)).plan(QKV)
    assert plan.layout == "original" and not inspect_model(str(folder)).key_matcher().legacy_names
    first = plan.checkpoint_transforms[0]
    assert first.source_keys[0] == "layers.0.attention.q_proj.weight"
    assert first.target_keys == ("layers.0.attention.qkv_proj.weight",)
    export(str(folder), tmp_path / "fused", QKV, layout="fused")
    back = inspect_model(str(tmp_path / "fused")).plan(QKV)
    assert back.layout == "fused" and back.checkpoint_transforms[0].source_keys[0] == "layers.0.attention.q_proj.weight"
    export(str(tmp_path / "fused"), tmp_path / "original", QKV, layout="original")
    assert raw_bytes_of(tmp_path / "original") == raw_bytes_of(folder)


def test_keys_a_conversion_computes_load_through_that_conversion(root):
    # DINOv2 with SwiGLU stores one mlp.weights_in tensor that transformers chunks into
    # gate_proj and up_proj on load: a legacy fused checkpoint. Its bytes are not streamed
    # (gate_up would have to guess how they were stored): it loads through transformers'
    # own conversion, then is fused in place
    folder = saved("dinov2_swiglu", root, lambda: _dinov2(use_swiglu_ffn=True))
    assert "encoder.layer.0.mlp.weights_in.weight" in keys_of(folder)
    insp = inspect_model(str(folder))
    plan = insp.plan({"gate_up": True})
    assert [m.path for m in plan.families[0].discovery.matches] == ["encoder.layer.0.mlp", "encoder.layer.1.mlp"]
    assert plan.layout == "missing"
    note = plan.checkpoint_transforms[0].note
    assert "encoder.layer.0.mlp.gate_proj.weight" in note and "encoder.layer.0.mlp.weights_in.weight" in note
    assert "Chunk" in note and "refused" in note
    assert plan.legacy_fused
    assert any("'gate_up': legacy fused checkpoint" in m and "Chunk" in m for m in plan.messages)
    loaded = load(str(folder), {"gate_up": True})
    assert loaded.fused_modules == ["encoder.layer.0.mlp", "encoder.layer.1.mlp"]
    # the refusal is per family: qkv on the same checkpoint is fine
    assert insp.plan(QKV).layout == "original"


def test_matcher_follows_renames_and_keeps_the_suffix_fallback(root, qwen2_vl_dir):
    insp = inspect_model(str(saved("vit", root)))
    matcher = KeyMatcher(insp.source.checkpoint.tensors, insp.model)
    assert matcher.legacy_names
    hit = matcher.lookup("layers.1.attention.v_proj.bias")
    assert hit.key == "encoder.layer.1.attention.attention.value.bias"
    assert hit.renamed == "layers.1.attention.v_proj.bias"
    assert matcher.lookup("layers.1.mlp.fc1.weight").key == "encoder.layer.1.intermediate.dense.weight"
    assert matcher.loads_into("layers.0.attention.qkv_proj.weight", "layers.0.attention.qkv_proj.weight")
    # a name that the renamings would move elsewhere is not a valid fused name
    assert not matcher.loads_into("encoder.layer.0.attention.attention.qkv.weight", "layers.0.attention.qkv.weight")
    # without the model, only the names: the renamed key is not found
    assert KeyMatcher(insp.source.checkpoint.tensors).lookup("layers.1.attention.v_proj.bias") is None

    # Qwen2-VL: visual. and model.layers. legacy prefixes, found by renaming, same names as before
    qwen = inspect_model(str(qwen2_vl_dir))
    matcher = qwen.key_matcher()
    assert matcher.find("model.visual.patch_embed.proj.weight") == ("visual.patch_embed.proj.weight", "model.", "")
    hit = matcher.lookup("model.language_model.layers.0.self_attn.q_proj.weight")
    assert hit.key == "model.layers.0.self_attn.q_proj.weight"
    # a task prefix no renaming covers still matches by suffix
    suffix_only = KeyMatcher(["model.layers.0.self_attn.q_proj.weight"])
    assert suffix_only.find("layers.0.self_attn.q_proj.weight") == (
        "model.layers.0.self_attn.q_proj.weight",
        "",
        "model.",
    )


def test_prefix_swap_and_translate():
    swap = prefix_swap("model.language_model.layers.0.q_proj.weight", "model.layers.0.q_proj.weight")
    assert swap == ("model.language_model.", "model.")
    assert translate("model.language_model.layers.0.qkv_proj.weight", *swap) == "model.layers.0.qkv_proj.weight"
    assert prefix_swap("a.b", "a.b") == ("", "")
