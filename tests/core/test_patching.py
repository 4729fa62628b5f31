"""Scoped patching: fused classes only inside the block; everything restored, also on error."""

from __future__ import annotations

import threading

import pytest
import torch
from transformers import Qwen2MoeConfig
from transformers.models.qwen2_moe import modeling_qwen2_moe as moe
from transformers.models.qwen2_vl import modeling_qwen2_vl as qvl

from fusion_core import inspect_model, scoped_patch
from fusion_core.model.tree import build_meta_model


class _Boom(Exception):
    pass


def _patch_embed_class(model: torch.nn.Module) -> type:
    return type(model.model.visual.patch_embed)


def test_fused_inside_plain_after(qwen2_vl_dir):
    insp = inspect_model(str(qwen2_vl_dir))
    mapping = insp.plan({"patch_embeddings": True}).patch_mapping
    [(original, fused)] = mapping.items()
    assert qvl.PatchEmbed is original
    with scoped_patch(mapping):
        assert qvl.PatchEmbed is fused
        inside = build_meta_model(insp.source)
    after = build_meta_model(insp.source)
    assert _patch_embed_class(inside) is fused
    assert _patch_embed_class(after) is original
    assert qvl.PatchEmbed is original
    assert "proj" in dict(after.model.visual.patch_embed.named_children())


def test_plain_from_pretrained_after_a_patch_is_unfused_and_exact(qwen2_vl_dir):
    from transformers import Qwen2VLForConditionalGeneration

    mapping = inspect_model(str(qwen2_vl_dir)).plan({"patch_embeddings": True}).patch_mapping
    with scoped_patch(mapping):
        pass
    model, info = Qwen2VLForConditionalGeneration.from_pretrained(qwen2_vl_dir, output_loading_info=True)
    assert type(model.model.visual.patch_embed) is qvl.PatchEmbed
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_restored_on_error(qwen2_vl_dir):
    mapping = inspect_model(str(qwen2_vl_dir)).plan({"patch_embeddings": True}).patch_mapping
    [(original, _fused)] = mapping.items()
    with pytest.raises(_Boom), scoped_patch(mapping):
        raise _Boom()
    assert qvl.PatchEmbed is original
    # the lock was released: another patch can be taken at once
    with scoped_patch(mapping):
        pass


def test_class_level_output_recorders_are_restored():
    """transformers' own recorder patching mutates class attributes in place; we undo it."""
    from transformers.monkey_patching import patch_output_recorders, register_patch_mapping, unregister_patch_mapping

    config = Qwen2MoeConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=32,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_experts=2,
        num_experts_per_tok=1,
    )
    recorders = moe.Qwen2MoeModel._can_record_outputs
    before = dict(recorders)
    router_recorder = recorders["router_logits"]
    assert router_recorder.target_class is moe.Qwen2MoeTopKRouter
    fused_router = type("FusedRouter", (moe.Qwen2MoeTopKRouter,), {"__module__": moe.__name__})
    fused_attention = type("FusedAttention", (moe.Qwen2MoeAttention,), {"__module__": moe.__name__})
    mapping = {moe.Qwen2MoeTopKRouter: fused_router, moe.Qwen2MoeAttention: fused_attention}
    with scoped_patch(mapping):
        with torch.device("meta"):
            model = moe.Qwen2MoeModel(config)
        assert type(model.layers[0].self_attn) is fused_attention
        register_patch_mapping({"Qwen2MoeTopKRouter": fused_router, "Qwen2MoeAttention": fused_attention})
        try:
            patch_output_recorders(model)
        finally:
            unregister_patch_mapping(["Qwen2MoeTopKRouter", "Qwen2MoeAttention"])
        assert router_recorder.target_class is fused_router  # mutated in place by transformers
        assert moe.Qwen2MoeModel._can_record_outputs["attentions"] is fused_attention
        moe.Qwen2MoeDecoderLayer._can_record_outputs = {"hidden_states": fused_attention}  # a new class attribute
    assert moe.Qwen2MoeModel._can_record_outputs is recorders
    assert recorders == before
    assert router_recorder.target_class is moe.Qwen2MoeTopKRouter
    assert "_can_record_outputs" not in vars(moe.Qwen2MoeDecoderLayer)
    assert [moe.Qwen2MoeTopKRouter, moe.Qwen2MoeAttention] == list(mapping)


def test_a_plain_build_in_another_thread_waits_for_the_patch(qwen2_vl_dir):
    insp = inspect_model(str(qwen2_vl_dir))
    mapping = insp.plan({"patch_embeddings": True}).patch_mapping
    started, built = threading.Event(), {}

    def plain_build() -> None:
        started.set()
        built["model"] = build_meta_model(insp.source)

    with scoped_patch(mapping):
        worker = threading.Thread(target=plain_build)
        worker.start()
        assert started.wait(30)
    worker.join(60)
    assert _patch_embed_class(built["model"]) is qvl.PatchEmbed


def test_mapping_must_hold_classes():
    with pytest.raises(TypeError), scoped_patch({"PatchEmbed": qvl.PatchEmbed}):  # type: ignore[dict-item]
        pass
