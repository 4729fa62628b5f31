"""LoRA adapters across layouts: real PEFT adapters on the tiny Llama, converted both ways.

Each adapter is made here by PEFT itself (``init_lora_weights=False``: B is not zero, so
the adapter changes the outputs). Outputs are compared in process (PEFT on stock
transformers, original layout, vs PEFT on ``fusion_core.load``, fused layout); the
separate-process verification runs once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import fusion_core
from fusion_core.adapter.source import RECORD
from fusion_core.errors import AdapterError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:peft.*", "ignore::FutureWarning")

FUSIONS = {"qkv": True, "gate_up": True}
IDS = torch.tensor([[1, 5, 9, 17, 33, 65, 129, 200, 300, 411]])


def make_adapter(folder: Path, base: Path, *, fused: bool = False, seed: int = 0, **lora: object) -> Path:
    """A PEFT LoRA adapter of ``base`` (original model, or fused by fusion_core), saved by PEFT."""
    from peft import LoraConfig, get_peft_model

    model = fusion_core.load(base, FUSIONS).model if fused else fusion_core.load_plain(base)
    torch.manual_seed(seed)
    get_peft_model(model, LoraConfig(init_lora_weights=False, **lora)).save_pretrained(folder)
    return folder


def logits(base: Path, adapter: Path | None, layout: str) -> torch.Tensor:
    """PEFT's output: on stock loading (original layout) or on fusion_core.load (fused)."""
    from peft import PeftModel

    model = fusion_core.load(base, FUSIONS).model if layout == "fused" else fusion_core.load_plain(base)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter).get_base_model()
    with torch.inference_mode():
        return model.eval()(input_ids=IDS).logits


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(folder / "adapter_model.safetensors"), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118


def same_outputs(base: Path, source: Path, source_layout: str, written: Path, layout: str) -> float:
    want = logits(base, source, source_layout)
    got = logits(base, written, layout)
    bare = logits(base, None, "original")
    assert (want - bare).abs().max() > 1e-3  # the adapter changes the outputs: the comparison means something
    diff = float((want - got).abs().max())
    assert diff <= 1e-5 + 1e-5 * float(want.abs().max())
    return diff


@pytest.fixture(scope="module")
def qv_adapter(llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """q, v, gate, up adapted (k left out), v at its own rank."""
    folder = tmp_path_factory.mktemp("adapters") / "qv"
    return make_adapter(
        folder, llama_dir, r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "gate_proj", "up_proj"],
        rank_pattern={"v_proj": 2},
    )  # fmt: skip


@pytest.mark.smoke
def test_original_to_fused_k_left_out_and_back_bitwise(llama_dir: Path, qv_adapter: Path, tmp_path: Path) -> None:
    res = fusion_core.convert_adapter(
        qv_adapter, tmp_path / "fused", base=llama_dir, fusions=FUSIONS, verify_outputs=False
    )
    assert (res.source_layout, res.layout) == ("original", "fused")
    qkv = next(s for s in res.steps if s.target_modules == ("model.layers.0.self_attn.qkv_proj",))
    assert (qkv.op, qkv.source_ranks, qkv.target_ranks) == ("stack_a_blockdiag_b", (4, 0, 2), (6,))
    assert "k_proj has no adapter: zero block" in qkv.note
    src, out = tensors(qv_adapter), tensors(tmp_path / "fused")
    p = "base_model.model.model.layers.0.self_attn."
    b = out[p + "qkv_proj.lora_B.weight"]
    assert b.shape == (64 + 32 + 32, 6)
    assert torch.equal(b[:64, :4], src[p + "q_proj.lora_B.weight"])
    assert torch.equal(b[64:96], torch.zeros(32, 6))  # k: a zero block
    # v's scale (8/2) differs from q's (8/4): the ratio 2 folded into v's rows of B
    assert torch.equal(b[96:, 4:], src[p + "v_proj.lora_B.weight"] * 2)
    assert torch.equal(
        out[p + "qkv_proj.lora_A.weight"], torch.cat([src[p + "q_proj.lora_A.weight"], src[p + "v_proj.lora_A.weight"]])
    )
    cfg = json.loads((tmp_path / "fused" / "adapter_config.json").read_text())
    assert sorted(cfg["target_modules"]) == ["gate_up_proj", "qkv_proj"]
    assert cfg["rank_pattern"] == {"gate_up_proj": 8, "qkv_proj": 6} and cfg["alpha_pattern"]["qkv_proj"] == 12
    assert res.verification.round_trip == "bitwise"
    same_outputs(llama_dir, qv_adapter, "original", tmp_path / "fused", "fused")
    # back: the families come from what the conversion wrote; the file is the source's, byte for byte
    back = fusion_core.convert_adapter(tmp_path / "fused", tmp_path / "back", base=llama_dir, verify_outputs=False)
    assert {s.op for s in back.steps} == {"split_blocks"} and back.layout == "original"
    name = "adapter_model.safetensors"
    assert (tmp_path / "back" / name).read_bytes() == (qv_adapter / name).read_bytes()


def test_qkvo_rslora_per_module_ranks(llama_dir: Path, tmp_path: Path) -> None:
    adapter = make_adapter(
        tmp_path / "src", llama_dir, seed=1, r=4, lora_alpha=8, use_rslora=True,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], rank_pattern={"v_proj": 8},
    )  # fmt: skip
    res = fusion_core.convert_adapter(
        adapter, tmp_path / "fused", base=llama_dir, fusions=["qkv"], verify_outputs=False
    )
    step = res.steps[0]
    assert step.source_ranks == (4, 4, 8) and step.target_ranks == (16,)
    # rslora: scale alpha / sqrt(r) is kept: the fused alpha gives q's scale at rank 16
    assert step.target_alphas[0] / 16**0.5 == 8 / 4**0.5
    assert "scale" in step.note  # v's scale 8/sqrt(8) differs: folded into B, not a power of two
    assert res.verification.round_trip.startswith("exact to rounding")
    cfg = json.loads((tmp_path / "fused" / "adapter_config.json").read_text())
    assert sorted(cfg["target_modules"]) == ["o_proj", "qkv_proj"]  # o_proj copied bitwise
    assert torch.equal(
        tensors(tmp_path / "fused")["base_model.model.model.layers.1.self_attn.o_proj.lora_B.weight"],
        tensors(adapter)["base_model.model.model.layers.1.self_attn.o_proj.lora_B.weight"],
    )
    same_outputs(llama_dir, adapter, "original", tmp_path / "fused", "fused")


def test_adapter_trained_on_fused_model_to_original(llama_dir: Path, tmp_path: Path) -> None:
    adapter = make_adapter(
        tmp_path / "src", llama_dir, fused=True, seed=2, r=4, lora_alpha=16, target_modules=["qkv_proj", "gate_up_proj"]
    )
    res = fusion_core.convert_adapter(
        adapter, tmp_path / "orig", base=llama_dir, fusions=list(FUSIONS), verify_outputs=False
    )
    assert (res.source_layout, res.layout) == ("fused", "original")
    assert {s.op for s in res.steps} == {"share_a_split_b"}
    cfg = json.loads((tmp_path / "orig" / "adapter_config.json").read_text())
    assert sorted(cfg["target_modules"]) == ["gate_proj", "k_proj", "q_proj", "up_proj", "v_proj"]
    src, out = tensors(adapter), tensors(tmp_path / "orig")
    p = "base_model.model.model.layers.0.self_attn."
    assert torch.equal(out[p + "k_proj.lora_A.weight"], src[p + "qkv_proj.lora_A.weight"])
    assert torch.equal(out[p + "k_proj.lora_B.weight"], src[p + "qkv_proj.lora_B.weight"][64:96])
    assert res.verification.round_trip == "bitwise"
    same_outputs(llama_dir, adapter, "fused", tmp_path / "orig", "original")


def _edited(src: Path, dst: Path, **changes: object) -> Path:
    import shutil

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "adapter_config.json").read_text())
    cfg.update(changes)
    (dst / "adapter_config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"peft_type": "IA3"}, "is not LORA"),
        ({"r": 8, "rank_pattern": {}}, "ranks disagreeing with the config are refused"),
        ({"modules_to_save": ["q_proj"]}, "modules_to_save names q_proj"),
    ],
)
def test_refusals(llama_dir: Path, qv_adapter: Path, tmp_path: Path, changes: dict, expected: str) -> None:
    bad = _edited(qv_adapter, tmp_path / "bad", **changes)
    with pytest.raises(AdapterError, match=expected) as info:
        fusion_core.convert_adapter(bad, tmp_path / "out", base=llama_dir, fusions=list(FUSIONS), verify_outputs=False)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_dora_all_members_exact_partial_refused(llama_dir: Path, qv_adapter: Path, tmp_path: Path) -> None:
    qkv = ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"]
    dora = make_adapter(tmp_path / "dora", llama_dir, seed=3, r=2, lora_alpha=4, target_modules=qkv, use_dora=True)
    res = fusion_core.convert_adapter(
        dora, tmp_path / "fused", base=llama_dir, fusions=list(FUSIONS), verify_outputs=False
    )
    key = "base_model.model.model.layers.0.self_attn.qkv_proj.lora_magnitude_vector"
    assert key in res.transformed and res.verification.round_trip == "bitwise"
    same_outputs(llama_dir, dora, "original", tmp_path / "fused", "fused")
    back = fusion_core.convert_adapter(tmp_path / "fused", tmp_path / "back", base=llama_dir, verify_outputs=False)
    name = "adapter_model.safetensors"
    assert back.layout == "original" and (tmp_path / "back" / name).read_bytes() == (dora / name).read_bytes()
    partial = make_adapter(tmp_path / "partial", llama_dir, r=2, lora_alpha=4, target_modules=["q_proj"], use_dora=True)
    with pytest.raises(AdapterError, match=r"DoRA on .*k_proj, .*v_proj has no adapter"):
        fusion_core.convert_adapter(partial, tmp_path / "out", base=llama_dir, fusions=["qkv"], verify_outputs=False)
    with pytest.raises(AdapterError, match="already in the original layout"):
        fusion_core.convert_adapter(
            qv_adapter, tmp_path / "o", base=llama_dir, fusions=list(FUSIONS), layout="original", verify_outputs=False
        )


VL = {"patch_embeddings": True, "qkv": True}
PATCH = "base_model.model.model.visual.patch_embed."


@pytest.fixture(scope="module")
def vl_inputs(qwen2_vl_dir: Path) -> dict:
    """Image and text inputs of the tiny Qwen2-VL (a vision grid: the patch embedding runs)."""
    from fusion_core.export.verify import pick_inputs

    with torch.inference_mode():
        found = pick_inputs(fusion_core.load_plain(qwen2_vl_dir).eval(), ["model.visual.patch_embed"])
    assert found is not None and {"pixel_values", "image_grid_thw", "input_ids"} <= set(found[0].kwargs)
    return found[0].kwargs


def vl_logits(base: Path, adapter: Path | None, fusions: dict | None, inputs: dict) -> torch.Tensor:
    from peft import PeftModel

    model = fusion_core.load(base, fusions).model if fusions else fusion_core.load_plain(base)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter).get_base_model()
    with torch.inference_mode():
        return model.eval()(**inputs).logits


@pytest.mark.smoke
def test_patch_embedding_lora_to_fused_verified_and_back_bitwise(
    qwen2_vl_dir: Path, vl_inputs: dict, tmp_path: Path
) -> None:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(4)
    lora = LoraConfig(
        r=2, lora_alpha=4, target_modules=["patch_embed.proj", "q_proj", "v_proj"], init_lora_weights=False
    )
    get_peft_model(fusion_core.load_plain(qwen2_vl_dir), lora).save_pretrained(tmp_path / "src")
    # verified in a child process: PEFT on fusion_core.load, on the model's image + text inputs
    res = fusion_core.convert_adapter(tmp_path / "src", tmp_path / "fused", base=qwen2_vl_dir, fusions=VL)
    step = next(s for s in res.steps if s.family == "patch_embeddings")
    assert (step.op, step.target_modules) == ("conv_to_linear", ("model.visual.patch_embed.linear_proj",))
    assert step.source_shapes == ((2, 3, 2, 14, 14), (32, 2, 1, 1, 1)) and step.target_shapes == ((2, 1176), (32, 2))
    src, out = tensors(tmp_path / "src"), tensors(tmp_path / "fused")
    for k in ("lora_A.weight", "lora_B.weight"):  # a reshape, nothing else
        assert torch.equal(
            out[f"{PATCH}linear_proj.{k}"], src[f"{PATCH}proj.{k}"].reshape(out[f"{PATCH}linear_proj.{k}"].shape)
        )
    cfg = json.loads((tmp_path / "fused" / "adapter_config.json").read_text())
    assert sorted(cfg["target_modules"]) == ["linear_proj", "qkv_proj"]
    v = res.verification
    assert v.round_trip == "bitwise" and v.outputs["input_kind"] == "vision-grid" and v.outputs["passed"]
    assert v.merged["passed"] and {c.status for c in res.consumers if "fused layout" in c.name} == {"loads exactly"}
    # in process too, the patch LoRA alone: PEFT's Linear LoRA on the PatchLinear is fed flattened patches
    get_peft_model(
        fusion_core.load_plain(qwen2_vl_dir),
        LoraConfig(r=2, target_modules=["patch_embed.proj"], init_lora_weights=False),
    ).save_pretrained(tmp_path / "patch")
    fusion_core.convert_adapter(
        tmp_path / "patch", tmp_path / "patch-fused", base=qwen2_vl_dir, fusions=VL, verify_outputs=False
    )
    want = vl_logits(qwen2_vl_dir, tmp_path / "patch", None, vl_inputs)
    got = vl_logits(qwen2_vl_dir, tmp_path / "patch-fused", VL, vl_inputs)
    assert (want - vl_logits(qwen2_vl_dir, None, None, vl_inputs)).abs().max() > 1e-3
    assert float((want - got).abs().max()) <= 1e-5 + 1e-5 * float(want.abs().max())
    back = fusion_core.convert_adapter(tmp_path / "fused", tmp_path / "back", base=qwen2_vl_dir, verify_outputs=False)
    assert "linear_to_conv" in {s.op for s in back.steps}
    name = "adapter_model.safetensors"
    assert (tmp_path / "back" / name).read_bytes() == (tmp_path / "src" / name).read_bytes()


def test_patch_embedding_lora_trained_on_fused_model_to_original(
    qwen2_vl_dir: Path, vl_inputs: dict, tmp_path: Path
) -> None:
    from peft import LoraConfig, PeftModel, get_peft_model

    fusions = {"patch_embeddings": True}
    torch.manual_seed(5)
    lora = LoraConfig(r=3, lora_alpha=6, target_modules=["linear_proj"], init_lora_weights=False)
    get_peft_model(fusion_core.load(qwen2_vl_dir, fusions).model, lora).save_pretrained(tmp_path / "src")
    res = fusion_core.convert_adapter(
        tmp_path / "src", tmp_path / "orig", base=qwen2_vl_dir, fusions=list(fusions), verify_outputs=False
    )
    [step] = res.steps
    assert (step.op, step.target_shapes) == ("linear_to_conv", ((3, 3, 2, 14, 14), (32, 3, 1, 1, 1)))
    from fusion_core.adapter.convert import plan_adapter

    plan = fusion_core.inspect_model(str(qwen2_vl_dir)).plan(fusions)
    rows = plan_adapter(plan, tmp_path / "src").plan.rows()  # what `plan --adapter` lists
    assert [(r["source_key"], r["source_shape"], r["target_key"], r["target_shape"], r["op"]) for r in rows] == [
        (
            f"{PATCH}linear_proj.lora_A.weight",
            [3, 1176],
            f"{PATCH}proj.lora_A.weight",
            [3, 3, 2, 14, 14],
            "linear_to_conv",
        ),
        (
            f"{PATCH}linear_proj.lora_B.weight",
            [32, 3],
            f"{PATCH}proj.lora_B.weight",
            [32, 3, 1, 1, 1],
            "linear_to_conv",
        ),
    ]
    assert res.verification.round_trip == "bitwise"
    cfg = json.loads((tmp_path / "orig" / "adapter_config.json").read_text())
    assert cfg["target_modules"] == ["model.visual.patch_embed.proj"]  # a leaf "proj" would adapt attn.proj too
    want = vl_logits(qwen2_vl_dir, tmp_path / "src", fusions, vl_inputs)
    got = vl_logits(qwen2_vl_dir, tmp_path / "orig", None, vl_inputs)
    assert (want - vl_logits(qwen2_vl_dir, None, None, vl_inputs)).abs().max() > 1e-3
    assert float((want - got).abs().max()) <= 1e-5 + 1e-5 * float(want.abs().max())
    merged = [
        PeftModel.from_pretrained(model, tmp_path / folder).merge_and_unload().model.visual.patch_embed
        for model, folder in (
            (fusion_core.load(qwen2_vl_dir, fusions).model, "src"),
            (fusion_core.load_plain(qwen2_vl_dir), "orig"),
        )
    ]
    torch.testing.assert_close(merged[0].linear_proj.weight, merged[1].proj.weight.reshape(32, -1), atol=1e-6, rtol=0)


def test_patch_embedding_dora_converts_both_ways(qwen2_vl_dir: Path, vl_inputs: dict, tmp_path: Path) -> None:
    """DoRA: the magnitude is per output channel, ``(1, out, 1, 1, 1)`` on the Conv and ``(out,)`` on the
    Linear, and both of PEFT's DoRA layers divide by the same row norms of ``W + s B A``."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(6)
    dora = LoraConfig(r=2, lora_alpha=4, target_modules=["patch_embed.proj"], use_dora=True, init_lora_weights=False)
    get_peft_model(fusion_core.load_plain(qwen2_vl_dir), dora).save_pretrained(tmp_path / "src")
    fusions = {"patch_embeddings": True}
    res = fusion_core.convert_adapter(
        tmp_path / "src", tmp_path / "fused", base=qwen2_vl_dir, fusions=fusions, verify_outputs=False
    )
    [step] = res.steps
    assert step.source_shapes[2] == (1, 32, 1, 1, 1) and step.target_shapes[2] == (32,)
    assert step.target_keys[2] == f"{PATCH}linear_proj.lora_magnitude_vector"
    want = vl_logits(qwen2_vl_dir, tmp_path / "src", None, vl_inputs)
    got = vl_logits(qwen2_vl_dir, tmp_path / "fused", fusions, vl_inputs)
    assert (want - vl_logits(qwen2_vl_dir, None, None, vl_inputs)).abs().max() > 1e-3
    assert float((want - got).abs().max()) <= 1e-5 + 1e-5 * float(want.abs().max())
    fusion_core.convert_adapter(tmp_path / "fused", tmp_path / "back", base=qwen2_vl_dir, verify_outputs=False)
    name = "adapter_model.safetensors"
    assert (tmp_path / "back" / name).read_bytes() == (tmp_path / "src" / name).read_bytes()


def test_patch_conv_held_in_a_container_refused(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import ViTConfig, ViTModel

    from fusion_core.adapter.convert import plan_adapter
    from fusion_core.model.sources import resolve
    from fusion_core.model.tree import module_tree
    from fusion_core.plan.discovery import clear_cache
    from fusion_core.plan.fusion_plan import Inspection

    # the Sequential calls the PatchLinear itself with Conv-shaped inputs, which a Linear LoRA cannot take.
    # Its own config (patch 4): discovery is cached per (class, config), and this structure is not the class's
    cfg = ViTConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, image_size=16, patch_size=4
    )

    def held() -> ViTModel:
        vit = ViTModel(cfg, add_pooling_layer=False)
        pe = vit.embeddings.patch_embeddings
        pe.projection = torch.nn.Sequential(pe.projection)
        return vit

    held().save_pretrained(tmp_path / "vit")
    lora = LoraConfig(r=2, target_modules=["projection.0"], init_lora_weights=False)
    get_peft_model(held(), lora).save_pretrained(tmp_path / "held")
    vit = held()
    plan = Inspection(resolve(str(tmp_path / "vit")), vit, module_tree(vit), 0.0).plan({"patch_embeddings_2d": True})
    assert plan.families[0].discovery.matched_paths == ["embeddings.patch_embeddings"]
    try:
        with pytest.raises(AdapterError, match="held in a Sequential, which calls the fused PatchLinear with Conv-sh"):
            plan_adapter(plan, tmp_path / "held")
    finally:
        clear_cache()


def test_conv2d_patch_lora_with_lora_bias_many_patches(tmp_path: Path) -> None:
    """A ViT's Conv2d projection (a bias on the base, 4 patches per image), LoRA with ``lora_bias``."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, image_size=16, patch_size=8
    )
    torch.manual_seed(0)
    ViTModel(cfg).save_pretrained(tmp_path / "vit")
    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["projection"], lora_bias=True, init_lora_weights=False)
    torch.manual_seed(1)
    get_peft_model(fusion_core.load_plain(tmp_path / "vit"), lora).save_pretrained(tmp_path / "src")
    fusions = {"patch_embeddings_2d": True}
    res = fusion_core.convert_adapter(
        tmp_path / "src", tmp_path / "fused", base=tmp_path / "vit", fusions=fusions, verify_outputs=False
    )
    [step] = res.steps
    assert step.target_shapes == ((2, 192), (16, 2), (16,)) and step.target_keys[2].endswith("lora_B.bias")
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    outs = []
    for folder, model in (
        ("src", fusion_core.load_plain(tmp_path / "vit")),
        ("fused", fusion_core.load(tmp_path / "vit", fusions).model),
        (None, fusion_core.load_plain(tmp_path / "vit")),
    ):
        peft_model = PeftModel.from_pretrained(model, tmp_path / folder).get_base_model() if folder else model
        with torch.inference_mode():
            outs.append(peft_model.eval()(pixel_values=pixels).last_hidden_state)
    assert (outs[0] - outs[2]).abs().max() > 1e-3
    assert float((outs[0] - outs[1]).abs().max()) <= 1e-5 + 1e-5 * float(outs[0].abs().max())
    back = fusion_core.convert_adapter(
        tmp_path / "fused", tmp_path / "back", base=tmp_path / "vit", verify_outputs=False
    )
    assert [s.op for s in back.steps] == ["linear_to_conv"]
    name = "adapter_model.safetensors"
    assert (tmp_path / "back" / name).read_bytes() == (tmp_path / "src" / name).read_bytes()


def test_qwen2_vl_language_model_lora(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    """The language model's attention of the same model converts (q, v with bias on the base; k left out)."""
    from peft import LoraConfig, PeftModel, get_peft_model

    lm = get_peft_model(
        fusion_core.load_plain(qwen2_vl_dir),
        LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    lm.save_pretrained(tmp_path / "lm")
    res = fusion_core.convert_adapter(
        tmp_path / "lm", tmp_path / "lm-fused", base=qwen2_vl_dir, fusions=["qkv"], verify_outputs=False
    )
    assert res.steps and res.verification.round_trip == "bitwise"
    ids = torch.tensor([[3, 7, 11, 19, 23]])
    outs = []
    for adapter, model in (
        (tmp_path / "lm", fusion_core.load_plain(qwen2_vl_dir)),
        (tmp_path / "lm-fused", fusion_core.load(qwen2_vl_dir, {"qkv": True}).model),
    ):
        with torch.inference_mode():
            outs.append(PeftModel.from_pretrained(model, adapter).get_base_model().eval()(input_ids=ids).logits)
    assert float((outs[0] - outs[1]).abs().max()) <= 1e-5 + 1e-5 * float(outs[0].abs().max())


@pytest.mark.slow
def test_verified_in_a_child_process_with_consumers(llama_dir: Path, qv_adapter: Path, tmp_path: Path) -> None:
    from fusion_core.boundary.convert import to_plain

    res = fusion_core.convert_adapter(qv_adapter, tmp_path / "fused", base=llama_dir, fusions=FUSIONS)
    v = res.verification
    assert v.outputs_checked and v.outputs["passed"] and v.outputs["adapter_effect"] > 1e-3
    assert v.merged["passed"] and v.merged["tensors"] > 0
    status = {c.name.rsplit("(", 1)[-1].rstrip(")"): c.status for c in res.consumers}
    assert status == {"fused layout": "loads exactly", "original layout": "refuses to load"}
    plain = to_plain(res)
    assert list(plain) == list(type(res).PLAIN_KEYS)
    assert list(plain["verification"]) == list(type(v).PLAIN_KEYS)
    assert sorted((tmp_path / "fused").iterdir()) == sorted((tmp_path / "fused").iterdir())
    assert json.loads((tmp_path / "fused" / RECORD).read_text())["fusion_config"] == {"qkv": True, "gate_up": True}


@pytest.mark.smoke
def test_cli_plan_and_adapter_json(
    llama_dir: Path, qv_adapter: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fusion_core.cli.main import main

    assert main(["plan", str(llama_dir), "--fusion", "qkv", "--adapter", str(qv_adapter), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = data["adapter"]["rows"]
    assert data["adapter"]["layout"] == "fused" and len(rows) == 2 * 2 * 2  # 2 layers x (q, v) x (A, B)
    first = rows[0]
    assert first["source_key"] == "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    assert (first["target_key"], first["target_shape"], first["op"], first["rank"]) == (
        "base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight", [6, 64], "stack_a_blockdiag_b", 6
    )  # fmt: skip
    out = tmp_path / "o"
    argv = [
        "adapter",
        str(qv_adapter),
        str(out),
        "--base",
        str(llama_dir),
        "--fusion",
        "qkv",
        "--no-verify-outputs",
        "--json",
    ]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["layout"], res["verification"]["round_trip"], res["consumers"]) == ("fused", "bitwise", [])
    assert res["steps"][0]["source_ranks"] == [4, 0, 2]
    assert main(argv) == 1  # OUT exists now: refused, one line
    assert "not empty" in capsys.readouterr().err


def test_cancel_mid_write_leaves_nothing(llama_dir: Path, qv_adapter: Path, tmp_path: Path) -> None:
    from fusion_core.progress import CancelToken

    token = CancelToken()
    seen = []

    def progress(p: object) -> None:
        seen.append(p)
        if "adapter_model.safetensors" in getattr(p, "message", ""):
            token.cancel()  # once the first tensor is written

    with pytest.raises(fusion_core.Cancelled):
        fusion_core.convert_adapter(
            qv_adapter, tmp_path / "out", base=llama_dir, fusions=list(FUSIONS), verify_outputs=False,
            progress=progress, cancel=token,
        )  # fmt: skip
    assert any("adapter_model.safetensors" in p.message for p in seen)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no output, no temporary sibling
