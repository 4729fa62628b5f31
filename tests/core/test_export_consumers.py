"""Export consumers, established by loading: stock transformers and fusion_core.load, in a child process.

Tiny real models (seeded random weights, ``save_pretrained``): each consumer status below was
found by the export actually loading what it wrote; the tests also load it again here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from fusion_core import export, load
from fusion_core.errors import ExportError
from fusion_core.model.checkpoint import read_index

_TEXT = {"vocab_size": 99, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}
_TEXT |= {"num_attention_heads": 2, "max_position_embeddings": 32}
_VISION = {"image_size": 32, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64}
_VISION |= {"num_hidden_layers": 1, "num_attention_heads": 2}


def _build(name: str) -> tuple[Any, type]:
    import transformers as tf

    if name == "videomae":
        return tf.VideoMAEConfig(
            image_size=32, patch_size=8, num_frames=4, tubelet_size=2, hidden_size=32, num_hidden_layers=1,
            num_attention_heads=2, intermediate_size=64,
        ), tf.VideoMAEModel  # fmt: skip
    if name == "vjepa2":
        return tf.VJEPA2Config(
            crop_size=32, patch_size=8, frames_per_clip=4, tubelet_size=2, hidden_size=32, num_hidden_layers=1,
            num_attention_heads=2, mlp_ratio=2, pred_hidden_size=32, pred_num_hidden_layers=1,
            pred_num_attention_heads=2,
        ), tf.VJEPA2Model  # fmt: skip
    if name == "clip":
        return tf.CLIPConfig(text_config=_TEXT, vision_config=_VISION, projection_dim=16), tf.CLIPModel
    if name == "siglip":
        return tf.SiglipConfig(text_config=_TEXT, vision_config=_VISION), tf.SiglipModel
    if name == "gte":
        return tf.GteConfig(**_TEXT), tf.GteModel
    if name == "nomic":
        return tf.NomicBertConfig(**_TEXT), tf.NomicBertModel
    if name == "zamba2":
        return tf.Zamba2Config(
            vocab_size=99, hidden_size=32, num_hidden_layers=4, layers_block_type=["mamba", "hybrid"] * 2,
            num_attention_heads=2, num_key_value_heads=2, mamba_d_state=8, mamba_headdim=8, n_mamba_heads=8,
            num_mem_blocks=1, intermediate_size=64, max_position_embeddings=64, adapter_rank=4,
            attention_head_dim=16,
        ), tf.Zamba2ForCausalLM  # fmt: skip
    assert name == "llama"
    return tf.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128,
    ), tf.LlamaForCausalLM  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            config, cls = _build(name)
            torch.manual_seed(0)
            folder = tmp_path_factory.mktemp("consumers") / name
            cls(config).eval().save_pretrained(folder)
            made[name] = folder
        return made[name]

    return get


def _statuses(result: Any) -> dict[str, str]:
    return {c.name.split()[0]: c.status for c in result.consumers}


def _config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text())


def _stock_load(folder: Path, cls_name: str) -> Any:
    import transformers

    return getattr(transformers, cls_name).from_pretrained(folder, output_loading_info=True)


@pytest.mark.parametrize("name", ["videomae", "vjepa2"])
def test_patch_embeddings_transformers_would_load_wrong_is_guarded(tiny, tmp_path: Path, name: str) -> None:
    result = export(tiny(name), tmp_path / "out", {"patch_embeddings": True})
    assert _statuses(result) == {"fusion_core": "loads exactly", "transformers": "refuses to load"}
    assert result.guarded and any("loaded the export wrong" in n for n in result.verification.notes)
    assert _config(tmp_path / "out")["fusion_config"] == {"fusion_core:patch_embeddings": True}
    cls = "VideoMAEModel" if name == "videomae" else "VJEPA2Model"
    with pytest.raises(ValueError, match="Unknown fusion type: fusion_core:patch_embeddings"):
        _stock_load(tmp_path / "out", cls)
    loaded = load(tmp_path / "out")
    assert loaded.layout == "fused" and loaded.fused_modules


def test_refuse_option_writes_nothing(tiny, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"stock transformers would load this export wrong.*missing keys"):
        export(tiny("videomae"), tmp_path / "out", {"patch_embeddings": True}, on_wrong_load="refuse")
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_dual_tower_exports_and_verifies(tiny, tmp_path: Path, name: str) -> None:
    result = export(tiny(name), tmp_path / "out", {"qkv": True, "patch_embeddings_2d": True})
    assert result.verification.outputs is not None and result.verification.outputs["passed"]
    outputs = result.verification.outputs
    assert outputs["input_kind"] == "image+text"
    assert outputs["compared"] == f"image+text: {outputs['output']}, vision tower"
    assert {c.compared for c in result.consumers} == {"", outputs["compared"]}  # transformers refuses: nothing ran
    assert _statuses(result) == {"fusion_core": "loads exactly", "transformers": "refuses to load"}
    assert list(_config(tmp_path / "out")["fusion_config"]) == ["qkv", "patch_embeddings_2d"]
    back = export(tmp_path / "out", tmp_path / "back", layout="original")  # no fusion named: its own
    assert _statuses(back) == {"fusion_core": "loads exactly", "transformers": "loads exactly"}
    assert sorted(read_index(tmp_path / "back").tensors) == sorted(read_index(tiny(name)).tensors)


def test_llama_qkv_then_gate_up_then_original(tiny, tmp_path: Path) -> None:
    src = tiny("llama")
    # user's order kept; a family that matches nothing is not recorded
    first = export(src, tmp_path / "qkv", {"qkv": True, "patch_embeddings": True})
    assert first.messages == []  # the plan as given
    assert _config(tmp_path / "qkv")["fusion_config"] == {"qkv": True}
    assert _statuses(first) == {"fusion_core": "loads exactly", "transformers": "refuses to load"}
    assert "Unknown fusion type: qkv" in first.consumers[1].detail
    # fused -> more fused: the checkpoint keeps its own family and gains gate_up
    more = export(tmp_path / "qkv", tmp_path / "both", {"gate_up": True})
    assert more.source_layout == "mixed" and more.fusion_config == {"qkv": True, "gate_up": True}
    assert more.messages == [  # the wider plan is a step of its own, and said
        "the checkpoint is already fused with 'qkv': the export's plan includes it (families: qkv, gate_up)"
    ]
    assert _config(tmp_path / "both")["fusion_config"] == {"qkv": True, "gate_up": True}
    keys = set(read_index(tmp_path / "both").tensors)
    assert "model.layers.0.self_attn.qkv_proj.weight" in keys and "model.layers.0.mlp.gate_up_proj.weight" in keys
    ours = load(tmp_path / "both").model
    plain = load(src).model
    ids = torch.tensor([[5, 7, 9, 11]])
    with torch.inference_mode():
        torch.testing.assert_close(ours(input_ids=ids).logits, plain(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
    # back to original naming one family only, unverified: the checkpoint's other family goes too
    back = export(tmp_path / "both", tmp_path / "orig", {"qkv": True}, layout="original", verify_outputs=False)
    assert back.consumers == [] and back.messages[0].startswith("the checkpoint is already fused with 'gate_up'")
    assert sorted(read_index(tmp_path / "orig").tensors) == sorted(read_index(src).tensors)
    assert "fusion_config" not in _config(tmp_path / "orig")
    _model, info = _stock_load(tmp_path / "orig", "LlamaForCausalLM")
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_original_layout_refuses_leftover_fused_keys(tiny, tmp_path: Path) -> None:
    export(tiny("llama"), tmp_path / "both", {"qkv": True, "gate_up": True}, verify_outputs=False)
    config = _config(tmp_path / "both")
    config["fusion_config"] = {"qkv": True}  # a config that names fewer families than the weights hold
    (tmp_path / "both" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError, match=r"still holds fused keys: model\.layers\.0\.mlp\.gate_up_proj\.weight"):
        export(tmp_path / "both", tmp_path / "orig", layout="original", verify_outputs=False)
    assert not (tmp_path / "orig").exists()


def test_unverified_fused_export_guards_names_transformers_knows(tiny, tmp_path: Path) -> None:
    result = export(tiny("videomae"), tmp_path / "out", {"patch_embeddings": True}, verify_outputs=False)
    assert result.guarded and result.consumers == []
    assert _config(tmp_path / "out")["fusion_config"] == {"fusion_core:patch_embeddings": True}
    assert load(tmp_path / "out").layout == "fused"


def test_mixed_dtype_group_is_refused_before_writing(tiny, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    src = tmp_path / "src"
    import shutil

    shutil.copytree(tiny("llama"), src)
    tensors = load_file(src / "model.safetensors")
    tensors["model.layers.0.self_attn.k_proj.weight"] = tensors["model.layers.0.self_attn.k_proj.weight"].half()
    save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ExportError, match=r"different dtypes.*k_proj\.weight F16"):
        export(src, tmp_path / "out", {"qkv": True}, verify_outputs=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "fusion"), [("gte", {"qkv": True}), ("nomic", {"qkv": True, "gate_up": True})])
def test_legacy_fused_checkpoint_loads_checks_and_exports(tiny, tmp_path: Path, name: str, fusion: dict) -> None:
    """The checkpoint stores fused projections transformers splits at load: load plainly, then fuse."""
    from fusion_core import check, load_plain

    src = tiny(name)
    assert any(k.endswith(("qkv_proj.weight", "Wqkv.weight")) for k in read_index(src).tensors)
    loaded = load(src, fusion)
    assert loaded.fused_modules and any("legacy fused checkpoint" in m for m in loaded.messages)
    assert check(src, fusion, repeats=1, time_budget=0, upstream=False).passed
    result = export(src, tmp_path / "fused", fusion)
    assert _statuses(result) == {"fusion_core": "loads exactly", "transformers": "refuses to load"}
    assert result.verification.outputs is not None and result.verification.outputs["passed"]
    back = export(tmp_path / "fused", tmp_path / "orig", layout="original")
    assert _statuses(back) == {"fusion_core": "loads exactly", "transformers": "loads exactly"}
    ids = torch.tensor([[5, 7, 9, 11]])
    with torch.inference_mode():
        want = load_plain(src)(input_ids=ids).last_hidden_state
        got = load_plain(tmp_path / "orig")(input_ids=ids).last_hidden_state
    assert torch.equal(want, got)


def test_zamba2_tied_attention_is_refused_with_the_reason(tiny, tmp_path: Path) -> None:
    """Zamba2's shared attention is one set of tensors in several layers: discovery rejects it
    with the reason, so nothing is fused (and nothing is written)."""
    from fusion_core import inspect_model
    from fusion_core.errors import ExportError

    found = inspect_model(tiny("zamba2")).discovery("qkv")
    assert not found.matches
    assert any(re.search(r"shared_transformer\.self_attn\.q_proj\.weight is tied to", r.reason) for r in found.rejected)
    with pytest.raises(ExportError, match="nothing to fuse"):
        export(tiny("zamba2"), tmp_path / "out", {"qkv": True})
    assert not (tmp_path / "out").exists()


def test_cli_plan_and_export_read_the_checkpoint_own_fusion_config(tiny, tmp_path: Path, capsys) -> None:
    from fusion_core.cli.main import main

    src = tiny("llama")
    assert main(["export", str(src), str(tmp_path / "fused"), "--fusion", "gate_up", "--fusion", "qkv"]) == 0
    out = capsys.readouterr().out
    assert "refuses to load" in out and "Unknown fusion type: gate_up" in out
    assert main(["plan", str(tmp_path / "fused"), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["fusion_config"] == {"gate_up": True, "qkv": True} and plan["checkpoint_layout"] == "fused"
    argv = ["export", str(tmp_path / "fused"), str(tmp_path / "orig"), "--layout", "original", "--no-verify-outputs"]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["written_fusion_config"] is None and result["consumers"] == []
    assert sorted(read_index(tmp_path / "orig").tensors) == sorted(read_index(src).tensors)
    assert main(["export", str(src), str(tmp_path / "none")]) == 2
    assert "no fusion_config to reuse" in capsys.readouterr().err


def _probe_run(probe: Any, written: Path) -> Any:
    try:
        return probe.run(written, written)
    finally:
        probe.close()


def test_forced_bfloat16_comparison_loads_exactly_and_says_so(tiny, tmp_path: Path) -> None:
    """The consumers' child loads the source and each consumer at the dtype asked, and says so."""
    from fusion_core.export.consumers import ConsumerProbe

    src = tiny("llama")
    export(src, tmp_path / "out", {"qkv": True}, verify_outputs=False)
    paths = ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    answer = _probe_run(ConsumerProbe(src, paths, dtype="bfloat16"), tmp_path / "out")
    ours = answer.consumers[0]
    assert ours.status == "loads exactly", ours.detail
    note = "compared in bfloat16 (asked), bfloat16 tolerance"
    assert ours.detail.endswith(f" ({note}))")
    # the bfloat16 comparison also measures its rounding floor (the fused modules' originals in float32)
    tolerance = answer.outputs["tolerance"]
    assert tolerance.startswith("|diff| <= 0.01 * min(1, max|ref|) + 0.02 * max|ref| or 2x the rounding floor (up to ")
    assert tolerance.endswith(f") ({note})")
    assert answer.outputs["passed"]
    # what the child does, here: the source is run in bfloat16 (its outputs are the reference)
    from fusion_core.export.consumers import ConsumersSourceParams, _prepare

    first = ConsumersSourceParams(str(src), paths, dtype="bfloat16")
    _cls, runs, _trust, comparison = _prepare(first)
    assert comparison.dtype == "bfloat16" and runs
    assert {t.dtype for r in runs for t in r.outputs.values()} == {torch.bfloat16}


def test_comparison_dtype_is_the_checkpoint_own_when_float32_does_not_fit(tmp_path: Path, monkeypatch) -> None:
    import transformers

    from fusion_core.export.consumers import comparison_dtype
    from fusion_core.run import modules

    config, cls = _build("llama")
    torch.manual_seed(0)
    cls(config).to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    assert transformers.AutoConfig.from_pretrained(tmp_path / "bf16").dtype == torch.bfloat16
    assert comparison_dtype(tmp_path / "bf16").dtype == "float32"  # a tiny model fits here
    monkeypatch.setattr(modules, "available_bytes", lambda: 1000)  # less than the float32 weights
    got = comparison_dtype(tmp_path / "bf16")
    assert got.dtype == "bfloat16" and re.fullmatch(r"float32 would need \d+ MiB, 0 MiB available", got.why)
    assert got.nbytes == sum(p.numel() * 2 for p in cls(config).parameters())


def test_consumers_child_killed_by_sigkill_says_out_of_memory(tiny, tmp_path: Path) -> None:
    import os
    import signal

    from fusion_core.cli.main import _message
    from fusion_core.export.consumers import ConsumerProbe

    probe = ConsumerProbe(tiny("llama"), [])
    proc = probe._child.proc
    pid = proc.wait_forked(120) if hasattr(proc, "wait_forked") else proc.pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ExportError) as caught:
        _probe_run(probe, tmp_path / "out")
    text = str(caught.value)
    assert text.startswith("out of memory: the consumers' child (loading the source model llama")
    assert " at float32, about " in text and "no output" not in text
    assert text.endswith(
        "was killed by signal 9 (SIGKILL, the kernel's out-of-memory killer?); nothing was written; "
        "skip the output check (verify_outputs) or use a machine with more memory"
    )
    assert "skip the output check (--no-verify-outputs)" in _message(caught.value, "export")
