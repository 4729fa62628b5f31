"""The ``qkv`` family on real tiny models: plan, in-place and fused-layout loading, round trip,
one GEMM for self attention, exact cross attention, and its rejections."""

from __future__ import annotations

import copy

import pytest
import torch
from _family_cases import checkpoint, output, write_fused
from torch import nn

from fusion_core import inspect_model
from fusion_core.api import load, load_plain
from fusion_core.families import get_family
from fusion_core.families._linear_group import LinearAlias

FAMILY = "qkv"
# architecture -> attention modules expected to be fused
EXPECTED = {
    "llama": ["model.layers.0.self_attn", "model.layers.1.self_attn"],
    "qwen2": ["model.layers.0.self_attn", "model.layers.1.self_attn"],
    "mistral": ["model.layers.0.self_attn", "model.layers.1.self_attn"],
    "gemma": ["model.layers.0.self_attn", "model.layers.1.self_attn"],
    "bart": [
        "model.decoder.layers.0.encoder_attn",
        "model.decoder.layers.0.self_attn",
        "model.encoder.layers.0.self_attn",
    ],
    "clip_vision": ["encoder.layers.0.self_attn", "encoder.layers.1.self_attn"],
}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("qkv-models")


@pytest.mark.parametrize("arch", sorted(EXPECTED))
def test_plan_previews_concat_without_tensor_data(arch, root):
    folder = checkpoint(arch, root)
    plan = inspect_model(str(folder)).plan({FAMILY: True})
    assert sorted(m.path for m in plan.families[0].discovery.matches) == EXPECTED[arch]
    assert plan.layout == "original"
    rows = [r for r in plan.rows("load") if r["source_key"].endswith("q_proj.weight")]
    assert len(rows) == len(EXPECTED[arch])
    for ct in plan.checkpoint_transforms:
        assert ct.transform.op == "concat" and ct.transform.inverse_op == "split"
        assert [k.rsplit(".", 2)[-2] for k in ct.source_keys] == ["q_proj", "k_proj", "v_proj"]
        assert ct.target_keys[0].rsplit(".", 2)[-2] == "qkv_proj"
        # fused rows = q + k + v rows, same input size
        assert ct.target_shapes[0][0] == sum(s[0] for s in ct.source_shapes)
        assert ct.transform.inverse_shapes(ct.target_shapes) == [tuple(s) for s in ct.source_shapes]


# Outputs (in place and fused layout vs the original) and the bitwise round trip are the
# conformance kit's (test_conformance.py: the demos, BART and Qwen2); here, the structure.
@pytest.mark.parametrize("arch", sorted(EXPECTED))
def test_load_in_place_and_fused_layout_structure(arch, root, tmp_path):
    folder = checkpoint(arch, root)
    result = load(str(folder), {FAMILY: True})
    assert result.layout == "original"
    assert sorted(result.fused_modules) == EXPECTED[arch]
    _assert_fused(result.model, EXPECTED[arch])

    fused_dir = write_fused(folder, tmp_path / "fused", {FAMILY: True})
    built = load(str(fused_dir))  # fused classes constructed via __init__ under scoped patching
    assert built.layout == "fused"
    _assert_fused(built.model, EXPECTED[arch])


def _assert_fused(model: nn.Module, paths: list[str]) -> None:
    keys = model.state_dict()
    for path in paths:
        module = model.get_submodule(path)
        assert type(module).__name__.startswith("Fused") and type(module)._fusion_family == FAMILY
        children = dict(module.named_children())
        assert "qkv_proj" in children and not {"q_proj", "k_proj", "v_proj"} & set(children)
        assert isinstance(module.q_proj, LinearAlias)
        fused = children["qkv_proj"]
        rows = module.q_proj.out_features + module.k_proj.out_features + module.v_proj.out_features
        assert type(fused) is nn.Linear and fused.weight.shape == (rows, fused.in_features)
        assert f"{path}.qkv_proj.weight" in keys and f"{path}.q_proj.weight" not in keys


def test_self_attention_runs_one_gemm_cross_attention_stays_exact(root):
    result = load(str(checkpoint("bart", root)), {FAMILY: True})
    model = result.model
    calls: dict[str, int] = {}
    for path in EXPECTED["bart"]:
        model.get_submodule(f"{path}.qkv_proj").register_forward_hook(
            lambda *_a, p=path: calls.__setitem__(p, calls.get(p, 0) + 1)
        )
    reference = output(load_plain(str(checkpoint("bart", root))), "bart")
    for _ in range(2):  # the second run uses the per-projection path for cross attention
        torch.testing.assert_close(output(model, "bart"), reference, atol=1e-5, rtol=1e-5)
    assert calls["model.encoder.layers.0.self_attn"] == 2  # one GEMM per forward, not three
    assert calls["model.decoder.layers.0.self_attn"] == 2
    cross = model.get_submodule("model.decoder.layers.0.encoder_attn")
    assert cross._fusion_group.split and not model.get_submodule("model.encoder.layers.0.self_attn")._fusion_group.split
    # nothing is cached once the forward has returned
    for path in EXPECTED["bart"]:
        group = model.get_submodule(path)._fusion_group
        assert group.pending == {} and group.input is None


def test_generation_and_gradients_match(root):
    folder = checkpoint("llama", root)
    plain = load_plain(str(folder))
    fused = load(str(folder), {FAMILY: True, "gate_up": True}).model
    ids = torch.tensor([[5, 6, 7, 8]])
    kwargs = {"max_new_tokens": 6, "do_sample": False, "attention_mask": torch.ones_like(ids)}
    assert torch.equal(plain.generate(ids, **kwargs), fused.generate(ids, **kwargs))
    plain.train()
    fused.train()
    plain(ids, labels=ids).loss.backward()
    fused(ids, labels=ids).loss.backward()
    attn_p, attn_f = plain.model.layers[0].self_attn, fused.model.layers[0].self_attn
    grads = torch.cat([attn_p.q_proj.weight.grad, attn_p.k_proj.weight.grad, attn_p.v_proj.weight.grad])
    torch.testing.assert_close(attn_f.qkv_proj.weight.grad, grads, atol=1e-6, rtol=1e-5)


def test_bfloat16_load_matches_within_dtype_tolerance(root):
    folder = checkpoint("qwen2", root)
    reference = output(load_plain(str(folder), dtype="bfloat16"), "qwen2")
    fused = load(str(folder), {FAMILY: True}, dtype="bfloat16").model
    assert fused.model.layers[0].self_attn.qkv_proj.weight.dtype == torch.bfloat16
    torch.testing.assert_close(output(fused, "qwen2"), reference, atol=2e-2, rtol=2e-2)


# -- edge cases on tiny hand-made modules ------------------------------------------------


class _Attention(nn.Module):
    """q, k, v over one input; optionally modifies the input in place between projections."""

    def __init__(self, dims=(8, 8, 8), bias=(True, True, True), outs=(8, 4, 4), in_place=False):
        super().__init__()
        self.q_proj = nn.Linear(dims[0], outs[0], bias=bias[0])
        self.k_proj = nn.Linear(dims[1], outs[1], bias=bias[1])
        self.v_proj = nn.Linear(dims[2], outs[2], bias=bias[2])
        self.in_place = in_place

    def forward(self, x, y=None):
        q = self.q_proj(x)
        if self.in_place:
            x.mul_(2)
        src = x if y is None else y
        return q, self.k_proj(src), self.v_proj(src)


def _fused_copy(module: nn.Module) -> nn.Module:
    copy_ = copy.deepcopy(module)
    get_family(FAMILY).fuse_module(copy_)
    return copy_


def _same(a, b):
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-6)
        assert x.is_contiguous() == y.is_contiguous()


def test_cache_is_keyed_on_tensor_version_and_cleared():
    torch.manual_seed(0)
    attn = _Attention(in_place=True)
    fused = _fused_copy(attn)
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        _same(attn(x.clone()), fused(x.clone()))  # k, v see the doubled input: recomputed
    assert fused._fusion_group.pending == {}
    plain = _Attention()
    plain.load_state_dict(attn.state_dict(), strict=False)
    fused_plain = _fused_copy(plain)
    with torch.no_grad():
        _same(plain(x), fused_plain(x))
        _same(plain(x, x + 1), fused_plain(x, x + 1))  # cross attention
    assert fused_plain._fusion_group.split


def test_aliases_outside_forward_weights_views_dtype_and_deepcopy():
    torch.manual_seed(0)
    attn = _Attention()
    fused = _fused_copy(attn)
    x = torch.randn(4, 8)
    torch.testing.assert_close(fused.k_proj(x), attn.k_proj(x))  # called directly, outside forward
    assert torch.equal(fused.v_proj.weight, attn.v_proj.weight) and torch.equal(fused.q_proj.bias, attn.q_proj.bias)
    assert fused.v_proj.weight.data_ptr() != attn.v_proj.weight.data_ptr()
    assert fused.v_proj.weight.untyped_storage().data_ptr() == fused.qkv_proj.weight.untyped_storage().data_ptr()
    twin = copy.deepcopy(fused)
    assert twin.q_proj._group.owner is twin and twin.qkv_proj is not fused.qkv_proj
    fused.to(torch.bfloat16)
    assert fused.q_proj.weight.dtype == torch.bfloat16
    assert list(dict(fused.named_modules())) == ["", "qkv_proj"]
    assert list(fused.state_dict()) == ["qkv_proj.weight", "qkv_proj.bias"]


@pytest.mark.parametrize(
    ("make", "reason"),
    [  # factories: no module is built at collection time
        (lambda: _Attention(dims=(8, 8, 4), outs=(8, 4, 4)), "different input sizes (q_proj 8, k_proj 8, v_proj 4)"),
        (lambda: _Attention(bias=(True, False, True)), "bias on q_proj, v_proj only (none on k_proj)"),
    ],
    ids=["input-sizes", "partial-bias"],
)
def test_rejections_say_why(make, reason):
    verdict = get_family(FAMILY).judge(make())
    assert not verdict.ok and reason in verdict.reason


class _Int8Linear(nn.Linear):
    """Stands for a quantized layer: a Linear subclass with its own forward."""


def test_rejects_non_linear_missing_and_hooked_projections():
    spec = get_family(FAMILY)
    quant = _Attention()
    quant.k_proj = _Int8Linear(8, 4)
    assert "k_proj is _Int8Linear, not torch.nn.Linear" in spec.judge(quant).reason
    missing = _Attention()
    del missing.v_proj
    assert spec.is_candidate("attn", missing) and "no v_proj" in spec.judge(missing).reason
    hooked = _Attention()
    hooked.q_proj.register_forward_hook(lambda *a: None)
    assert "forward hooks" in spec.judge(hooked).reason
    assert not spec.is_candidate("mlp", nn.Sequential(nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="cannot be fused by 'qkv'"):
        spec.fuse_module(quant)


def test_whisper_rejected_because_k_proj_has_no_bias():
    plan = inspect_model("arch:whisper").plan({FAMILY: True})
    disc = plan.families[0].discovery
    assert not disc.matches and disc.empty_message
    assert any("bias on q_proj, v_proj only (none on k_proj)" in r.reason for r in disc.rejected)


@pytest.mark.parametrize("kind", ["sam2_key_value", "rf_detr_added_positions"])
def test_sample_inputs_for_attention_called_other_ways(kind):
    """SAM 2's attention is called as ``(query, key, value)``, all required; RF-DETR's adds its
    ``position_embeddings`` to the states instead of rotating by them: the family's sample
    inputs run both, and the fused module gives the original's output on them."""
    from fusion_core.families.base import Workload

    torch.manual_seed(0)
    if kind == "sam2_key_value":
        from transformers import Sam2MaskDecoderConfig
        from transformers.models.sam2.modeling_sam2 import Sam2Attention

        config = Sam2MaskDecoderConfig(hidden_size=32, num_attention_heads=4)
        module = Sam2Attention(config).eval()
        expected = "key"
    else:
        from transformers import RfDetrConfig
        from transformers.models.rf_detr.modeling_rf_detr import RfDetrAttention

        config = RfDetrConfig(d_model=32, decoder_self_attention_heads=4)
        module = RfDetrAttention(config, layer_idx=0).eval()
        expected = "position_embeddings"
    spec = get_family("qkv")
    args, kwargs = spec.sample_inputs(module, config, Workload(seed=0))
    assert isinstance(kwargs[expected], torch.Tensor)
    fused = copy.deepcopy(module)
    spec.fuse_module(fused)
    with torch.inference_mode():
        torch.testing.assert_close(fused(*args, **kwargs)[0], module(*args, **kwargs)[0])
