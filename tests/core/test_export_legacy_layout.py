"""A source in a legacy layout (DINOv2 SwiGLU: fused ``mlp.weights_in``, ``query/key/value``):
the export says before writing that the layout changes, which keys are renamed and split,
and claims no round trip (issue 22, item 3)."""

from __future__ import annotations

import pytest
from safetensors import safe_open

from fusion_core.export.pipeline import export

FAMILIES = {"patch_embeddings_2d": True, "qkv": True, "gate_up": True}


@pytest.fixture(scope="module")
def dinov2_swiglu(tmp_path_factory):
    import torch
    from transformers import Dinov2Config, Dinov2Model

    config = Dinov2Config(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        image_size=32, patch_size=8, use_swiglu_ffn=True,
    )  # fmt: skip
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("dinov2-swiglu")
    Dinov2Model(config).save_pretrained(folder)
    return folder


def _keys(folder):
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return set(f.keys())


def test_the_export_says_the_layout_changes_before_writing(dinov2_swiglu, tmp_path):
    source_keys = _keys(dinov2_swiglu)
    assert "encoder.layer.0.mlp.weights_in.weight" in source_keys  # the legacy layout, as saved
    seen = []
    result = export(dinov2_swiglu, tmp_path / "fused", FAMILIES, verify_outputs=False, progress=seen.append)
    notes = [m for m in result.messages if m.startswith("layout changes")]
    assert len(notes) == 1
    assert "2 key(s) split (encoder.layer.0.mlp.weights_in.bias -> encoder.layer.0.mlp.gate_proj.bias + " in notes[0]
    assert "renamed" in notes[0] and "attention.attention.query" not in _keys(tmp_path / "fused")
    # said before any tensor byte was written, and no round-trip claim is made
    first_write = next(i for i, p in enumerate(seen) if p.total and p.done)
    assert any(p.message == notes[0] for p in seen[:first_write])
    assert "invert bitwise" not in result.verification.summary
    # back to original: the model's current names, as the note said (not the source's)
    back = export(tmp_path / "fused", tmp_path / "original", layout="original", verify_outputs=False)
    assert back.layout == "original"
    keys = _keys(tmp_path / "original")
    assert "encoder.layer.0.mlp.gate_proj.weight" in keys and keys != source_keys


def test_a_source_in_the_models_own_layout_gets_no_note(tmp_path):
    import torch
    from transformers import Dinov2Config, Dinov2Model

    config = Dinov2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                          image_size=32, patch_size=8)  # fmt: skip
    torch.manual_seed(0)
    Dinov2Model(config).save_pretrained(tmp_path / "plain")
    result = export(tmp_path / "plain", tmp_path / "fused", {"patch_embeddings_2d": True}, verify_outputs=False)
    assert not any(m.startswith("layout changes") for m in result.messages)
    assert "invert bitwise" in result.verification.summary or result.verification.transforms_inverted == 0
