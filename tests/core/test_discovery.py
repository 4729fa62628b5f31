"""Discovery: every instance of a class is checked; results cached per (family, class, config)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from fusion_core import discover, get_family, inspect_model, resolve
from fusion_core.model.tree import build_meta_model
from fusion_core.plan.discovery import clear_cache


class TubeletEmbed(nn.Module):
    """A Conv3d patch embedding whose stride is a constructor argument."""

    def __init__(self, stride: int = 2) -> None:
        super().__init__()
        self.proj = nn.Conv3d(3, 8, kernel_size=(2, 2, 2), stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class Tower(nn.Module):
    def __init__(self, stride: int = 2) -> None:
        super().__init__()
        self.patch_embed = TubeletEmbed(stride)


class TwoTowers(nn.Module):
    """Two towers sharing the TubeletEmbed class; ``b``'s instance overlaps its patches."""

    def __init__(self, b_stride: int = 1, extra_stride: int | None = None) -> None:
        super().__init__()
        self.a = Tower(2)
        self.b = Tower(b_stride)
        if extra_stride is not None:  # an instance whose name no pattern selects
            self.helper = TubeletEmbed(extra_stride)


def _save_config(folder, **vision):
    """A tiny Qwen2-VL config.json (no weights) with the given vision settings."""
    from fusion_core.model.demo import DEMOS

    config, _cls = DEMOS["qwen2-vl"].build()
    data = config.to_dict()
    data["vision_config"].update(vision)
    data["architectures"] = ["Qwen2VLForConditionalGeneration"]
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def test_demo_patch_embedding_is_found_with_reason(qwen2_vl_dir):
    found = inspect_model(str(qwen2_vl_dir)).discovery("patch_embeddings")
    assert [(m.path, m.original_class.__name__, m.fused_class.__name__) for m in found.matches] == [
        ("model.visual.patch_embed", "PatchEmbed", "FusedPatchEmbed")
    ]
    assert "stride" in found.matches[0].reason or "kernel" in found.matches[0].reason
    assert found.transforms[0].sources == ("model.visual.patch_embed.proj.weight",)
    assert not found.empty_message


def test_one_unfusable_instance_keeps_the_class_unpatched():
    found = discover(TwoTowers(b_stride=1), get_family("patch_embeddings"))
    assert not found.matches
    assert found.transforms == []
    reasons = {r.path: r.reason for r in found.rejected}
    assert set(reasons) == {"a.patch_embed", "b.patch_embed"}
    assert "stride (1, 1, 1) != kernel (2, 2, 2)" in reasons["b.patch_embed"]
    # the fusable instance is rejected too, and its reason names the culprit
    assert "b.patch_embed" in reasons["a.patch_embed"]
    assert "TubeletEmbed" in reasons["a.patch_embed"]
    assert found.empty_message


def test_all_instances_fusable_gives_one_fused_class():
    found = discover(TwoTowers(b_stride=2), get_family("patch_embeddings"))
    assert [m.path for m in found.matches] == ["a.patch_embed", "b.patch_embed"]
    assert len(found.patch_mapping) == 1
    assert found.patch_mapping[TubeletEmbed].__name__ == "FusedTubeletEmbed"
    assert {k for t in found.transforms for k in t.sources} == {
        "a.patch_embed.proj.weight",
        "b.patch_embed.proj.weight",
    }


def test_instances_outside_the_patterns_are_checked_too():
    # class patching would also replace ``helper``: it must be fusable as well
    bad = discover(TwoTowers(b_stride=2, extra_stride=1), get_family("patch_embeddings"))
    assert not bad.matches
    assert "helper" in {r.path for r in bad.rejected}
    assert all("helper" in r.reason for r in bad.rejected if r.path != "helper")
    good = discover(TwoTowers(b_stride=2, extra_stride=2), get_family("patch_embeddings"))
    assert [m.path for m in good.matches] == ["a.patch_embed", "b.patch_embed", "helper"]


def test_cache_is_per_config_not_per_class(tmp_path):
    clear_cache()
    small = resolve(str(_save_config(tmp_path / "small", embed_dim=32)))
    wide = resolve(str(_save_config(tmp_path / "wide", embed_dim=48, temporal_patch_size=1)))
    assert small.model_class is wide.model_class
    assert small.fingerprint != wide.fingerprint
    spec = get_family("patch_embeddings")
    results = []
    for source in (small, wide):
        model = build_meta_model(source)
        results.append(discover(model, spec, config=source.config, fingerprint=source.fingerprint))
    shapes = [(t.source_shape, t.target_shape) for d in results for t in d.transforms if t.op == "conv3d_to_linear"]
    assert shapes == [((32, 3, 2, 14, 14), (32, 1176)), ((48, 3, 1, 14, 14), (48, 588))]
    # the same fingerprint is a cache hit: the very same result object
    again = discover(build_meta_model(small), spec, config=small.config, fingerprint=small.fingerprint)
    assert again is results[0]
    clear_cache()
    fresh = discover(build_meta_model(small), spec, config=small.config, fingerprint=small.fingerprint)
    assert fresh is not results[0]


def test_plain_decoder_has_nothing_to_fuse(llama_dir):
    found = inspect_model(str(llama_dir)).discovery("patch_embeddings")
    assert not found
    assert found.matches == [] and found.rejected == []
    assert "LlamaForCausalLM" in found.empty_message and "patch_embeddings" in found.empty_message


@pytest.mark.parametrize("stride", [1, 2])
def test_named_modules_can_be_shared_between_families(stride):
    model = TwoTowers(b_stride=stride)
    named = list(model.named_modules())
    spec = get_family("patch_embeddings")
    assert discover(model, spec, named_modules=named).matched_paths == discover(model, spec).matched_paths
