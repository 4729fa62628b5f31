"""Checks on architectures the demos do not cover: every fused module verified (end to end
or on its family's sample inputs), dual towers, out-of-vocabulary image tokens, workloads."""

from __future__ import annotations

import json
from pathlib import Path

import _check_models as models
import pytest
import torch

from fusion_core import check
from fusion_core.families.base import Workload
from fusion_core.families.patch_embeddings import PatchEmbeddingsFusion
from fusion_core.families.registry import get_family
from fusion_core.run.results import compare

ALL2D = {"patch_embeddings_2d": True, "qkv": True, "gate_up": True}
FAST = {"repeats": 2, "time_budget": 0.05, "upstream": False}


def _all_verified(result) -> None:
    assert result.passed, [(m.path, m.error) for m in result.modules]
    for m in result.modules:
        assert m.verified_by in ("end-to-end inputs", "module sample inputs"), m
        assert m.comparison is not None and m.comparison.passed and m.timing is not None


@pytest.mark.parametrize("build", [models.clip, models.siglip], ids=["clip", "siglip"])
def test_dual_tower_runs_end_to_end(tmp_path: Path, build) -> None:
    """CLIPModel / SiglipModel need pixel values and input ids together."""
    result = check(build(tmp_path / "m"), {"patch_embeddings_2d": True, "qkv": True}, **FAST)
    _all_verified(result)
    e = result.end_to_end
    assert e.ran and e.input_kind == "image+text" and "input_ids" in e.input_shapes
    assert all(m.verified_by == "end-to-end inputs" for m in result.modules)
    assert {m.path.split(".")[0] for m in result.modules} == {"text_model", "vision_model"}
    shares = [m.share_of_end_to_end for m in result.modules]
    assert all(s is not None and 0 < s < 1 for s in shares) and sum(shares) <= 1.0
    assert e.projected_speedup is not None and e.projected_speedup > 0


def test_out_of_vocabulary_image_tokens(tmp_path: Path) -> None:
    """Qwen2.5-VL whose image token ids exceed its vocabulary: the vision input fails end to
    end, the patch embedding is verified on its own flattened patches."""
    folder = models.qwen25_vl_oov(tmp_path / "q")
    result = check(folder, {"patch_embeddings": True, "gate_up": True}, image_size=56, **FAST)
    _all_verified(result)
    embed = next(m for m in result.modules if m.path == "model.visual.patch_embed")
    assert embed.verified_by == "module sample inputs"
    assert embed.input_shapes == [[4 * 4, 3 * 2 * 14 * 14]]  # 56 px: a 4 x 4 grid of 14 px patches
    assert result.end_to_end.ran and result.end_to_end.input_kind == "text"


def test_sample_inputs_follow_the_workload(tmp_path: Path) -> None:
    from transformers import CLIPModel

    model = CLIPModel.from_pretrained(models.clip(tmp_path / "c")).eval()
    spec = get_family("patch_embeddings_2d")
    embed = model.vision_model.embeddings
    args, kwargs = spec.sample_inputs(embed, model.config, Workload(batch=2, image_size=45, seed=3))
    assert args[0].shape == (2, 3, 45, 45) and kwargs == {"interpolate_pos_encoding": True}
    again, _ = spec.sample_inputs(embed, model.config, Workload(batch=2, image_size=45, seed=3))
    assert torch.equal(args[0], again[0])  # seeded
    attn = model.text_model.encoder.layers[0].self_attn
    (hidden,), _ = get_family("qkv").sample_inputs(attn, model.config, Workload(batch=3, seq_len=7))
    assert hidden.shape == (3, 7, 32)
    fused = type(attn).__new__(type(attn))
    fused.__dict__ = dict(attn.__dict__)
    fused._modules = dict(attn._modules)
    get_family("qkv").fuse_module(fused)
    with torch.inference_mode():
        assert compare(attn(hidden), fused(hidden), "float32").passed


def test_no_sample_inputs_is_a_concrete_error(tmp_path: Path) -> None:
    """A module no input can be made for fails its row with the reason: never a silent pass."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(models.qwen25_vl_oov(tmp_path / "q"))
    embed = model.model.visual.patch_embed
    embed.in_channels = 5  # its forward now views patches as 5 channels: nothing fits
    with pytest.raises(ValueError, match=r"no sample input Qwen2_5_VisionPatchEmbed accepts .*shape '\[-1, 5, 2"):
        get_family("patch_embeddings").sample_inputs(embed, model.config, Workload(image_size=28))


class _NoSamples(PatchEmbeddingsFusion):
    name = "test_no_samples"

    def sample_inputs(self, module, config, workload):
        raise ValueError("no inputs for this made-up reason")


def test_unverified_module_fails_the_check(tmp_path: Path, capsys) -> None:
    """End to end does not reach the vision tower (its image tokens lie outside the vocabulary)
    and the family makes no inputs: the row fails with both reasons and the CLI exits 1."""
    from fusion_core.cli.main import main
    from fusion_core.families import register, unregister

    folder = models.qwen25_vl_oov(tmp_path / "q")
    register(_NoSamples(), origin="test")
    try:
        result = check(folder, {"test_no_samples": True}, **FAST)
        code = main(["check", str(folder), "--fusion", "test_no_samples", "--no-upstream", "--time-budget", "0"])
    finally:
        unregister("test_no_samples")
    (row,) = result.modules
    assert not result.passed and row.verified_by == "" and row.comparison is None
    assert row.error == (
        "not verified: the end-to-end run did not call it, and no sample inputs: no inputs for this made-up reason"
    )
    out = capsys.readouterr().out
    assert code == 1 and out.rstrip().endswith("FAILED") and "made-up reason" in out


def test_workload_in_json_and_cli(qwen2_vl_dir: Path, capsys) -> None:
    from fusion_core.cli.main import main

    code = main(
        ["check", str(qwen2_vl_dir), "--fusion", "patch_embeddings", "--image-size", "56", "--batch", "2",
         "--seq-len", "12", "--threads", "1", "--repeats", "2", "--time-budget", "0.05", "--no-upstream", "--json"]
    )  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["passed"]
    machine = ("torch_version", "load_before", "load_after", "cpu")
    workload = {k: v for k, v in data["workload"].items() if k not in machine}
    assert workload == {"batch": 2, "seq_len": 12, "image_size": 56, "frames": None, "seed": 0, "threads": 1,
                        "device": "cpu", "dtype": "float32", "time_budget": 0.05, "max_memory": None,
                        "generate": 0}  # fmt: skip
    assert data["workload"]["cpu"]  # the CPU and its class: speedups differ by CPU class
    assert data["workload"]["torch_version"] == torch.__version__
    (module,) = data["modules"]
    assert module["input_shapes"] == [[2 * 4 * 4, 1176]] and module["verified_by"] == "end-to-end inputs"
    t = module["timing"]
    assert t["speedup_low"] <= t["speedup"] <= t["speedup_high"]
    assert t["verdict"] in ("faster", "slower", "same", "undetermined")  # 2 rounds, 0.05 s: maybe fewer than 5
    assert module["comparison"]["limit"] == pytest.approx(1e-5 + 1e-5 * module["comparison"]["max_original"])
    assert data["end_to_end"]["input_shapes"]["image_grid_thw"] == [2, 3]
    assert [v["name"] for v in data["family_verdicts"]] == ["patch_embeddings"]


@pytest.mark.parametrize("arg", ["--device=bogus", "--device=cuda:7", "--batch=0", "--image=/no/such.png"])
def test_bad_workload_is_usage_error(qwen2_vl_dir: Path, capsys, arg: str) -> None:
    from fusion_core.cli.main import main

    code = main(["check", str(qwen2_vl_dir), "--fusion", "patch_embeddings", "--no-upstream", arg])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "internal error" not in err


def test_prompt_without_tokenizer_files_uses_one_made_from_the_config(llama_dir: Path) -> None:
    """No tokenizer files: the prompt goes through a tokenizer made from the config (one token a
    character), never replaced by synthetic text."""
    result = check(llama_dir, {"qkv": True}, prompt="a cat", **FAST)
    e = result.end_to_end
    assert result.passed and e.input_kind == "text" and e.input_shapes["input_ids"] == [1, 5]
    assert e.notes[0].startswith("text: a prompt through a tokenizer made from the config")
    assert [(f.run, f.modality, f.size, f.source) for f in e.inputs] == [("text", "text", "5 tokens", "prompt")]


def test_prompt_through_the_checkpoints_own_tokenizer(llama_dir: Path, tmp_path: Path) -> None:
    """A folder with tokenizer files: the prompt is tokenized by them (data only) and runs end to end."""
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path / "llama"
    shutil.copytree(llama_dir, folder)
    vocab = {"[UNK]": 0, "a": 5, "cat": 6, "sat": 7}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    result = check(folder, {"qkv": True}, prompt="a cat sat", **FAST)
    e = result.end_to_end
    assert result.passed and e.input_kind == "text" and e.input_shapes["input_ids"] == [1, 3]
    assert e.notes[0] == "text: a prompt through the checkpoint's own tokenizer"
    assert all(m.verified_by == "end-to-end inputs" for m in result.modules)
