"""The ``gate_up`` family on real tiny models: plan, loading both ways, round trip, one GEMM."""

from __future__ import annotations

import pytest
import torch
from _family_cases import checkpoint, output
from torch import nn

from fusion_core import FamilyConflictError, inspect_model
from fusion_core.api import load, load_plain
from fusion_core.families import LinearGroupFusion, get_family, register, unregister

FAMILY = "gate_up"
ARCHS = ["gemma", "llama", "mistral", "qwen2"]
MLPS = ["model.layers.0.mlp", "model.layers.1.mlp"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("gate-up-models")


@pytest.mark.parametrize("arch", ARCHS)
def test_plan_and_one_gemm_per_mlp(arch, root):
    folder = checkpoint(arch, root)
    plan = inspect_model(str(folder)).plan({FAMILY: True})
    assert sorted(m.path for m in plan.families[0].discovery.matches) == MLPS
    (ct, *_rest) = plan.checkpoint_transforms
    assert [k.rsplit(".", 2)[-2] for k in ct.source_keys] == ["gate_proj", "up_proj"]
    assert ct.target_keys[0].endswith("mlp.gate_up_proj.weight") and ct.target_shapes == ((256, 64),)

    reference = output(load_plain(str(folder)), arch)
    fused = load(str(folder), {FAMILY: True}).model
    calls = []
    for path in MLPS:
        mlp = fused.get_submodule(path)
        assert type(mlp)._fusion_family == FAMILY and set(dict(mlp.named_children())) == {
            "gate_up_proj",
            "down_proj",
            "act_fn",
        }
        assert type(mlp.gate_up_proj) is nn.Linear and mlp.gate_up_proj.weight.shape == (256, 64)
        mlp.gate_up_proj.register_forward_hook(lambda *a: calls.append(1))
    torch.testing.assert_close(output(fused, arch), reference, atol=1e-5, rtol=1e-5)
    assert len(calls) == len(MLPS)  # one GEMM per MLP instead of two
    # the fused layout's outputs and the bitwise round trip: the conformance kit (test_conformance.py)


def test_gate_rows_come_first(root):
    folder = checkpoint("llama", root)
    plain = load_plain(str(folder))
    fused = load(str(folder), {FAMILY: True}).model
    a, b = plain.model.layers[1].mlp, fused.model.layers[1].mlp
    assert torch.equal(b.gate_up_proj.weight, torch.cat([a.gate_proj.weight, a.up_proj.weight]))
    assert torch.equal(b.up_proj.weight, a.up_proj.weight)


def test_combined_with_qkv(root):
    folder = checkpoint("mistral", root)
    plan = inspect_model(str(folder)).plan({"qkv": True, FAMILY: True})
    assert len(plan.patch_mapping) == 2 and not plan.messages
    reference = output(load_plain(str(folder)), "mistral")
    torch.testing.assert_close(output(load(str(folder), {"qkv": True, FAMILY: True}).model, "mistral"), reference)


class _MLP(nn.Module):
    def __init__(self, gate_in=8, bias=(False, False)):
        super().__init__()
        self.gate_proj = nn.Linear(gate_in, 16, bias=bias[0])
        self.up_proj = nn.Linear(8, 16, bias=bias[1])
        self.down_proj = nn.Linear(16, 8)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


def test_rejections():
    spec = get_family(FAMILY)
    assert "different input sizes (gate_proj 4, up_proj 8)" in spec.judge(_MLP(gate_in=4)).reason
    assert "bias on up_proj only (none on gate_proj)" in spec.judge(_MLP(bias=(False, True))).reason
    lone = _MLP()
    del lone.up_proj
    assert "has gate_proj but no up_proj" in spec.judge(lone).reason
    ok = _MLP()
    assert spec.judge(ok).ok and "one product" in spec.judge(ok).reason


def test_conflicting_families_fail_fast(root):
    """Two families replacing the same modules: the plan fails before any I/O, naming both."""

    class GateUpTwin(LinearGroupFusion):
        name = "test_gate_up_twin"
        members = ("gate_proj", "up_proj")
        fused_name = "gu_proj"

    register(GateUpTwin(), origin="test")
    try:
        insp = inspect_model(str(checkpoint("llama", root)))
        with pytest.raises(FamilyConflictError, match="'gate_up' and 'test_gate_up_twin' both replace module"):
            insp.plan({FAMILY: True, "test_gate_up_twin": True})
    finally:
        unregister("test_gate_up_twin")


def test_fused_module_runs_on_the_meta_device():
    """Shape tracing on meta tensors (no autocast for that device) goes through the fused path."""
    with torch.device("meta"):
        mlp = _MLP()
    get_family(FAMILY).fuse_module(mlp)
    assert mlp.gate_up_proj.weight.is_meta
    assert mlp(torch.empty(2, 8, device="meta")).shape == (2, 8)


def test_the_halves_are_views_of_the_one_product_and_qkv_copies(root):
    """gate_up hands the MLP views of the fused product's columns (no copy: a copy of a
    512-token bf16 product cost as much as the fusion saved); an attention reshapes its
    projections, so qkv keeps contiguous copies. Both equal the original members."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2)
    x = torch.randn(2, 5, 64)
    for module, family, members in (
        (LlamaMLP(config), "gate_up", ("gate_proj", "up_proj")),
        (LlamaAttention(config, layer_idx=0), "qkv", ("q_proj", "k_proj", "v_proj")),
    ):
        expected = [getattr(module, n)(x) for n in members]
        get_family(family).fuse_module(module)
        group = module._fusion_group
        group.enter()  # inside the owner's forward: the first member computes the one product
        try:
            got = [getattr(module, n)(x) for n in members]
        finally:
            group.exit()
        for e, g in zip(expected, got):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-6)
        storages = {g.untyped_storage().data_ptr() for g in got}
        if family == "gate_up":
            assert len(storages) == 1 and not any(g.is_contiguous() for g in got)
        else:
            assert len(storages) == len(got) and all(g.is_contiguous() for g in got)
