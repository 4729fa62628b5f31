"""Classes of architectures that once made ``fusion-core check`` fail on valid inputs (issue 34).

Each test uses a tiny real model of an architecture that shows the class (seeded, built from
its transformers config class and ``save_pretrained``), never the named checkpoint itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _check_models import _save

from fusion_core.cli.main import main

CLI_FAST = ["--no-upstream", "--repeats", "1", "--time-budget", "0"]


def _tiny(model_type: str, folder: Path) -> tuple[Path, type, Any]:
    """The first shrunk config of ``model_type`` (coverage --check's), its model seeded and saved:
    (folder, model class, config)."""
    import torch

    from fusion_core.coverage.tiny import tiny_configs
    from fusion_core.model.classes import resolve_model_class

    _, config = next(tiny_configs(model_type))
    cls = resolve_model_class(config)[0]
    torch.manual_seed(0)
    return _save(cls(config).eval(), folder), cls, config


def falcon_h1(folder: Path) -> Path:
    """Falcon-H1: its default ``time_step_limit=(0, inf)`` is saved as ``{"__float__": "Infinity"}``."""
    import torch
    from transformers import FalconH1Config, FalconH1ForCausalLM

    torch.manual_seed(0)
    config = FalconH1Config(
        vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, mamba_d_ssm=32, mamba_n_heads=2, mamba_d_head=16, mamba_n_groups=1,
        mamba_d_state=8, mamba_chunk_size=8, max_position_embeddings=64,
    )  # fmt: skip
    return _save(FalconH1ForCausalLM(config).eval(), folder)


@pytest.fixture(scope="module")
def falcon_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return falcon_h1(tmp_path_factory.mktemp("falcon_h1") / "model")


# -- 1. a config transformers saved with an infinite value ------------------------------------


def test_infinity_in_a_saved_config_loads(falcon_dir: Path, capsys) -> None:
    """``{"__float__": "Infinity"}`` reads back as transformers' own loader reads it: plan, tree and check run."""
    assert "__float__" in (falcon_dir / "config.json").read_text()
    from fusion_core.model.sources import config_from_dict

    config = config_from_dict(json.loads((falcon_dir / "config.json").read_text()), "config.json")
    assert tuple(config.time_step_limit) == (0.0, float("inf"))
    assert main(["plan", str(falcon_dir), "--fusion", "qkv"]) == 0
    assert main(["tree", str(falcon_dir)]) == 0
    capsys.readouterr()
    assert main(["check", str(falcon_dir), "--fusion", "qkv", "--fusion", "gate_up", *CLI_FAST]) == 0
    assert "PASSED" in capsys.readouterr().out


def test_a_rejected_config_value_keeps_its_reason(falcon_dir: Path, tmp_path: Path, capsys) -> None:
    """A value the config class truly refuses: the message says why (bounded), not only which field."""
    data = json.loads((falcon_dir / "config.json").read_text())
    data["time_step_limit"] = "soon"
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert main(["plan", str(tmp_path / "config.json"), "--fusion", "qkv"]) == 1
    err = capsys.readouterr().err.strip()
    assert "config values rejected by 'falcon_h1'" in err and "time_step_limit" in err
    reason = err.split("Validation error for field 'time_step_limit':", 1)[1]
    assert "soon" in reason and len(err) < 1_000, err


def llava_next_video(folder: Path, *, video_file: bool = False) -> Path:
    """LLaVA-NeXT-Video with its processor files but no ``video_preprocessor_config.json``: without
    torchvision, ``AutoProcessor`` recurses until ``RecursionError`` (not an ImportError)."""
    import torch
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaNextVideoConfig, LlavaNextVideoForConditionalGeneration

    from fusion_core.run.processors import processor_from_config

    torch.manual_seed(0)
    config = LlavaNextVideoConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2, image_size=28,
            patch_size=7, projection_dim=16,
        ),
        text_config=LlamaConfig(
            hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2, vocab_size=120,
            num_key_value_heads=2,
        ),
        image_token_index=110, video_token_index=111, vision_feature_layer=-1, image_grid_pinpoints=[[28, 28]],
    )  # fmt: skip
    _save(LlavaNextVideoForConditionalGeneration(config).eval(), folder)
    proc, _ = processor_from_config(config)  # its image processor and a tokenizer, saved as files
    proc.image_processor.save_pretrained(folder)
    proc.tokenizer.save_pretrained(folder)
    processor = {
        "processor_class": "LlavaNextVideoProcessor",
        "patch_size": 7,
        "vision_feature_select_strategy": "default",
    }
    (folder / "processor_config.json").write_text(json.dumps(processor))
    return folder


def _png(path: Path) -> Path:
    import numpy as np
    from PIL import Image

    Image.fromarray((np.random.default_rng(0).random((40, 48, 3)) * 255).astype("uint8")).save(path)
    return path


# -- 2. a checkpoint processor that fails with something other than ImportError ----------------


def test_any_processor_failure_falls_back_with_its_reason(tmp_path: Path, capsys) -> None:
    folder = llava_next_video(tmp_path / "model")
    photo = _png(tmp_path / "photo.png")
    code = main(["check", str(folder), "--fusion", "qkv", "--image", str(photo), *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    notes = " ".join(result["end_to_end"]["notes"])
    assert "the checkpoint's AutoProcessor failed (RecursionError" in notes, notes
    assert ("image+text", "image", "photo.png") in [
        (f["run"], f["modality"], f["source"]) for f in result["end_to_end"]["inputs"]
    ]


def video_llava(folder: Path) -> Path:
    """Video-LLaVA: its forward takes pixels as ``pixel_values_images`` and ``pixel_values_videos``."""
    import torch
    from transformers import CLIPVisionConfig, LlamaConfig, VideoLlavaConfig, VideoLlavaForConditionalGeneration

    torch.manual_seed(0)
    config = VideoLlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2, image_size=28,
            patch_size=7, projection_dim=16,
        ),
        text_config=LlamaConfig(
            hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2, vocab_size=120,
            num_key_value_heads=2, max_position_embeddings=512,
        ),
        image_token_index=110, video_token_index=111, vision_feature_layer=-1,
    )  # fmt: skip
    return _save(VideoLlavaForConditionalGeneration(config).eval(), folder)


@pytest.fixture(scope="module")
def video_llava_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return video_llava(tmp_path_factory.mktemp("video_llava") / "model")


# -- 3. media inputs under other names ---------------------------------------------------------


def test_media_input_names_come_from_the_forward(video_llava_dir: Path, tmp_path: Path, capsys) -> None:
    """Video-LLaVA's processor returns ``pixel_values_images``: taken, and labelled an image run."""
    photo = _png(tmp_path / "photo.png")
    code = main(["check", str(video_llava_dir), "--fusion", "qkv", "--image", str(photo), *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    e = json.loads(captured.out)["end_to_end"]
    assert "pixel_values_images" in e["input_shapes"], e["input_shapes"]
    assert ("image", "photo.png") in [(f["modality"], f["source"]) for f in e["inputs"]]
    code = main(["check", str(video_llava_dir), "--fusion", "qkv", *CLI_FAST, "--json"])
    e = json.loads(capsys.readouterr().out)["end_to_end"]
    assert code == 0 and e["input_kind"].split(", ")[0] == "image+text", e["input_kind"]
    assert not any("made no image inputs" in n for n in e["notes"]), e["notes"]
    import inspect

    from transformers import VideoLlavaForConditionalGeneration

    from fusion_core.run.modal import modality_keys

    keys = modality_keys(inspect.signature(VideoLlavaForConditionalGeneration.forward).parameters)
    assert "pixel_values_images" in keys["image"] and keys["video"] == ("pixel_values_videos",)


def florence2(folder: Path) -> Path:
    """Florence-2 with its processor files: ``Florence2Processor`` writes its own ``<image>`` before each prompt."""
    import torch
    from PIL import Image
    from transformers import BartConfig, Florence2Config, Florence2ForConditionalGeneration, Florence2VisionConfig

    from fusion_core.run.processors import processor_from_config

    torch.manual_seed(0)
    vision = Florence2VisionConfig(
        depths=(1, 1), patch_size=(7, 3), patch_stride=(4, 2), patch_padding=(3, 1), patch_prenorm=(False, True),
        embed_dim=(16, 32), num_heads=(2, 2), num_groups=(2, 2), window_size=2, projection_dim=32,
        max_temporal_embeddings=4, max_position_embeddings=8, drop_path_rate=0.0,
    )  # fmt: skip
    text = BartConfig(
        vocab_size=120, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=128,
    )  # fmt: skip
    config = Florence2Config(vision_config=vision, text_config=text, image_token_id=110)
    model = Florence2ForConditionalGeneration(config).eval()
    _save(model, folder)
    proc, _ = processor_from_config(config)  # its image processor and a tokenizer, saved as files
    image_proc = proc.image_processor
    image_proc.size = image_proc.crop_size = {"height": 32, "width": 32}
    pixels = image_proc(images=[Image.new("RGB", (32, 32))], return_tensors="pt")["pixel_values"]
    with torch.inference_mode():
        features = model.model.get_image_features(pixel_values=pixels)
    image_proc.image_seq_length = int(getattr(features, "pooler_output", features).shape[1])
    image_proc.save_pretrained(folder)
    proc.tokenizer.save_pretrained(folder)
    (folder / "processor_config.json").write_text(json.dumps({"processor_class": "Florence2Processor"}))
    return folder


# -- 4. a processor that inserts its own image tokens ------------------------------------------


def test_a_processor_writing_its_own_image_token_gets_no_second(tmp_path: Path, capsys) -> None:
    folder = florence2(tmp_path / "model")
    photo = _png(tmp_path / "photo.png")
    code = main(["check", str(folder), "--fusion", "qkv", "--image", str(photo), *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    e = json.loads(captured.out)["end_to_end"]
    assert "pixel_values" in e["input_shapes"] and e["passed"], e
    assert any("the processor inserts its own image tokens" in n for n in e["notes"]), e["notes"]
    code = main(["check", str(folder), "--fusion", "qkv", *CLI_FAST, "--json"])
    e = json.loads(capsys.readouterr().out)["end_to_end"]
    assert code == 0 and any("through the checkpoint's own Florence2Processor" in n for n in e["notes"]), e["notes"]


# -- 5. labels say what was fed ----------------------------------------------------------------


def test_labels_name_what_was_fed_and_each_modality_not_run(video_llava_dir: Path, tmp_path: Path, capsys) -> None:
    """``input_kind`` names the modalities fed (a run on the user's image is ``image+text``), and the
    video Video-LLaVA takes, which got no run, has a "not run" line with its reason (CLI and JSON);
    without files, each medium's run says how its inputs were made."""
    photo = _png(tmp_path / "photo.png")
    code = main(["check", str(video_llava_dir), "--fusion", "qkv", "--image", str(photo), *CLI_FAST, "--json"])
    e = json.loads(capsys.readouterr().out)["end_to_end"]
    assert code == 0 and e["input_kind"] == "image+text", e["input_kind"]
    assert "video: not run (only the given files are run: --image)" in e["notes"], e["notes"]
    code = main(["check", str(video_llava_dir), "--fusion", "qkv", *CLI_FAST])
    out = capsys.readouterr().out
    # without files, the video its processor cannot make here (torchvision) is made from the config
    assert code == 0 and "inputs: video+text: video of 4 frames of 28x28 px made from the config" in out, out
    assert "verified by image+text, video+text inputs" in out, out


# -- a video classifier patching each frame with a Conv2d, without processor files ------------


def test_a_per_frame_video_classifier_gets_a_clip_from_its_config(tmp_path: Path, capsys) -> None:
    """TimeSformer's forward wants 5-D clips although its patch embedding is a Conv2d: a clip of the
    config's ``num_frames`` runs end to end, labelled video."""
    import torch
    from transformers import TimesformerConfig, TimesformerForVideoClassification

    torch.manual_seed(0)
    config = TimesformerConfig(
        image_size=32, patch_size=8, num_frames=4, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=37, num_labels=3,
    )  # fmt: skip
    folder = _save(TimesformerForVideoClassification(config).eval(), tmp_path / "model")
    code = main(["check", str(folder), "--fusion", "patch_embeddings_2d", *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err + captured.out[-2000:]
    e = json.loads(captured.out)["end_to_end"]
    assert e["input_kind"] == "video" and e["input_shapes"]["pixel_values"] == [1, 4, 3, 32, 32], e


# -- a model that counts a video's features by its image token ---------------------------------


def test_glm4v_video_runs_with_the_tokens_the_model_counts(tmp_path: Path, capsys) -> None:
    """GLM-4V counts video features by the image token, one run per temporal step: its video runs."""
    import torch
    from transformers import Glm4vConfig, Glm4vForConditionalGeneration

    torch.manual_seed(0)
    rope = {"rope_type": "default", "mrope_section": [1, 1, 2], "partial_rotary_factor": 0.5, "rope_theta": 10000.0}
    config = Glm4vConfig(
        text_config=dict(
            vocab_size=160, hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, rope_parameters=rope,
        ),
        vision_config=dict(
            depth=1, hidden_size=32, intermediate_size=37, num_heads=2, out_hidden_size=32, patch_size=14,
            spatial_merge_size=2, temporal_patch_size=2, image_size=56,
        ),
        image_token_id=150, video_token_id=151, image_start_token_id=152, image_end_token_id=153,
        video_start_token_id=154, video_end_token_id=155,
    )  # fmt: skip
    folder = _save(Glm4vForConditionalGeneration(config).eval(), tmp_path / "model")
    code = main(["check", str(folder), "--fusion", "patch_embeddings", "--fusion", "qkv", *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    e = json.loads(captured.out)["end_to_end"]
    assert e["input_kind"] == "image+text, video+text" and "pixel_values_videos" in e["input_shapes"], e
    assert not any("not run" in n for n in e["notes"]), e["notes"]


# -- a generation class whose image features live on its base model ----------------------------


def deepseek_vl(folder: Path, *, hybrid: bool = False) -> Path:
    """DeepSeek-VL (-Hybrid): ``get_image_features`` is on ``model.model`` only, and the processor built
    from the config writes its default 576 image tokens; the hybrid's second (SAM) tower has its own size."""
    import torch
    from transformers import (
        DeepseekVLConfig,
        DeepseekVLForConditionalGeneration,
        DeepseekVLHybridConfig,
        DeepseekVLHybridForConditionalGeneration,
    )

    torch.manual_seed(0)
    towers = dict(
        vision_config=dict(
            model_type="siglip_vision_model", hidden_size=32, intermediate_size=37, num_attention_heads=4,
            num_hidden_layers=1, image_size=32, patch_size=4,
        ),
        text_config=dict(
            model_type="llama", hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=1,
            vocab_size=120, num_key_value_heads=2,
        ),
        image_token_id=110,
    )  # fmt: skip
    if not hybrid:
        return _save(DeepseekVLForConditionalGeneration(DeepseekVLConfig(**towers)).eval(), folder)
    sam = dict(
        model_type="sam_vision_model", hidden_size=32, output_channels=8, num_hidden_layers=2, num_attention_heads=2,
        image_size=64, patch_size=8, mlp_dim=37, global_attn_indexes=[1], window_size=4,
    )  # fmt: skip
    config = DeepseekVLHybridConfig(**towers, high_res_vision_config=sam)
    return _save(DeepseekVLHybridForConditionalGeneration(config).eval(), folder)


@pytest.mark.parametrize("hybrid", [False, True], ids=["deepseek_vl", "deepseek_vl_hybrid"])
def test_image_tokens_are_counted_by_the_base_models_image_features(hybrid: bool, tmp_path: Path, capsys) -> None:
    """The image+text run gets as many image tokens as ``model.model.get_image_features`` makes rows
    (not the config-built processor's 576), and each tower its own image size: it runs, not text only."""
    folder = deepseek_vl(tmp_path / "model", hybrid=hybrid)
    fusions = ["--fusion", "qkv", "--fusion", "gate_up", "--fusion", "patch_embeddings_2d"]
    code = main(["check", str(folder), *fusions, *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    e = json.loads(captured.out)["end_to_end"]
    assert e["passed"] and e["input_kind"] == "image+text", (e["input_kind"], e["notes"])
    assert e["input_shapes"]["input_ids"][1] > 64, e["input_shapes"]  # 8 x 8 patches, then the text
    if hybrid:
        assert e["input_shapes"]["high_res_pixel_values"] == [1, 3, 64, 64], e["input_shapes"]


# -- a fused model root keeps transformers' output capture ------------------------------------


def mistral3(folder: Path) -> Path:
    """Mistral-3 over a Pixtral tower: ``patch_conv`` is hosted by the tower's root, ``PixtralVisionModel``,
    whose hidden states transformers records by class (``_can_record_outputs``)."""
    import torch
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    torch.manual_seed(0)
    config = Mistral3Config(
        vision_config=dict(
            model_type="pixtral", hidden_size=32, intermediate_size=37, num_attention_heads=2, num_hidden_layers=2,
            image_size=32, patch_size=4, head_dim=16,
        ),
        text_config=dict(
            model_type="mistral", hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=1,
            vocab_size=120, num_key_value_heads=2, head_dim=8,
        ),
        image_token_index=110, spatial_merge_size=2, vision_feature_layer=-1,
    )  # fmt: skip
    return _save(Mistral3ForConditionalGeneration(config).eval(), folder)


def test_a_fused_model_root_still_records_its_hidden_states(tmp_path: Path, capsys) -> None:
    """The fused ``PixtralVisionModel`` returns the hidden states the original does (not ``None``), and
    the Mistral-3 check runs image+text instead of ending in an internal TypeError."""
    import torch
    from transformers import Mistral3ForConditionalGeneration

    from fusion_core.families.registry import get_family
    from fusion_core.run.switch import fused_twin

    folder = mistral3(tmp_path / "model")
    tower = Mistral3ForConditionalGeneration.from_pretrained(folder).eval().model.vision_tower
    pixels = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    twin = fused_twin(get_family("patch_embeddings_2d"), tower)
    assert type(twin).__name__ == "FusedPixtralVisionModel"
    with torch.inference_mode():
        want = tower(pixels, output_hidden_states=True).hidden_states
        got = twin(pixels, output_hidden_states=True).hidden_states
    assert got is not None and len(got) == len(want) == 3
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    fusions = ["--fusion", "qkv", "--fusion", "gate_up", "--fusion", "patch_embeddings_2d"]
    code = main(["check", str(folder), *fusions, *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    e = json.loads(captured.out)["end_to_end"]
    assert e["passed"] and e["input_kind"] == "image+text", (e["input_kind"], e["notes"])


# -- an audio model whose processor takes audio only through its chat template ----------------


def voxtral(folder: Path) -> Path:
    """Voxtral: ``VoxtralProcessor.__call__`` tokenizes text only (audio goes through its chat template)."""
    import torch
    from transformers import VoxtralConfig, VoxtralForConditionalGeneration

    torch.manual_seed(0)
    config = VoxtralConfig(
        audio_config=dict(
            model_type="voxtral_encoder", hidden_size=32, intermediate_size=128, num_hidden_layers=1,
            num_attention_heads=2, num_mel_bins=16, max_source_positions=20, vocab_size=99,
        ),
        text_config=dict(
            model_type="llama", hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=1,
            vocab_size=120, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
        ),
        audio_token_id=110,
    )  # fmt: skip
    return _save(VoxtralForConditionalGeneration(config).eval(), folder)


def test_audio_from_the_config_runs_with_the_tokens_the_model_counts(tmp_path: Path, capsys) -> None:
    """Mel features of the encoder's shape (mel bins x 2 x positions) and one audio token per feature
    ``get_audio_features`` makes: the audio+text run runs, and no note says config inputs that were not made."""
    folder = voxtral(tmp_path / "model")
    code = main(["check", str(folder), "--fusion", "qkv", "--fusion", "gate_up", *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    e = json.loads(captured.out)["end_to_end"]
    assert e["passed"] and e["input_kind"] == "audio+text", (e["input_kind"], e["notes"])
    assert e["input_shapes"]["input_features"] == [1, 16, 40], e["input_shapes"]
    assert not any("not run" in n for n in e["notes"]), e["notes"]
    assert any("as many audio tokens as its audio features" in n for n in e["notes"]), e["notes"]


# -- an export whose families stock transformers does not fuse ---------------------------------


def test_exports_refusal_by_transformers_says_why(falcon_dir: Path, tmp_path: Path, capsys) -> None:
    """A fused-layout ``qkv`` export: transformers refuses ``fusion_config: {"qkv": true}`` (it fuses only its
    own registry's families); the refusal says so and what loads it, and the original layout loads in both."""
    code = main(["export", str(falcon_dir), str(tmp_path / "fused"), "--fusion", "qkv", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    stock = json.loads(captured.out)["consumers"][1]
    assert stock["status"] == "refuses to load" and "Unknown fusion type: qkv (" in stock["detail"], stock
    assert "fusion_core.load reads it; an export in the original layout is one stock" in stock["detail"], stock
    code = main(
        ["export", str(falcon_dir), str(tmp_path / "plain"), "--fusion", "qkv", "--layout", "original", "--json"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert [c["status"] for c in json.loads(captured.out)["consumers"]] == ["loads exactly"] * 2


# -- a model that is itself the fused host ------------------------------------------------------


def test_a_model_whose_root_is_fused_is_checked_end_to_end(tmp_path: Path, capsys) -> None:
    """A vision tower whose own class holds the patch convolution (GLM-5-Next's vision model):
    the matched path is the root "", whose fused form must be what the end-to-end run sees,
    while the module's own original run stays original."""

    from fusion_core.plan.fusion_plan import inspect_model
    from fusion_core.run.switch import Switch

    folder, cls, _ = _tiny("glm5_next_vision", tmp_path / "model")
    plan = inspect_model(folder).plan({"patch_embeddings_2d": True})
    assert "" in plan.matched_paths
    code = main(["check", str(folder), "--fusion", "patch_embeddings_2d", *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    root = next(m for m in result["modules"] if m["module"] == "")
    assert root["verified_by"] == "end-to-end inputs" and root["fused_class"].startswith("Fused")
    # the switch: one object changes state; the original's own view stays original
    model = cls.from_pretrained(folder).eval()
    original_class = type(model)
    switch = Switch(model, plan, [""])
    switch.use(True)
    assert type(model).__name__.startswith("Fused") and type(switch.original[""]) is original_class
    assert type(switch.fused[""]) is type(model)
    switch.use(False)
    assert type(model) is original_class


# -- float32 rounding amplified end to end --------------------------------------------------------


def test_float32_rounding_amplified_end_to_end_is_judged_against_its_floor(tmp_path: Path, capsys) -> None:
    """A tiny Phi-4 vision tower with random weights amplifies the fused patch embedding's
    rounding (4.5e-6 at the module) to 7.5e-4 at its output, beyond the float32 tolerance.
    Every module passed, so the end-to-end difference is judged against how far the original
    moves with the embedding computed in float64; a wrong embedding still fails."""

    import fusion_core.families as families
    from fusion_core.families.patch_embeddings_2d import PatchEmbeddings2dFusion

    folder = _tiny("phi4_multimodal_vision", tmp_path / "model")[0]
    code = main(["check", str(folder), "--fusion", "patch_embeddings_2d", *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    e2e = json.loads(captured.out)["end_to_end"]["comparison"]
    assert e2e["max_abs_diff"] > 1e-5 * (1 + e2e["max_original"])  # beyond the plain float32 limit
    assert e2e["floor"] > 0 and "within 2x the rounding floor" in e2e["note"] and "float64" in e2e["note"]

    class Off(PatchEmbeddings2dFusion):
        name = "test_off_2d"

        def make_fused_class(self, original_cls: type) -> type:
            fused = super().make_fused_class(original_cls)

            def forward(module, *args, **kwargs):
                return fused.forward(module, *args, **kwargs) * 1.001

            return type(fused.__name__, (fused,), {"forward": forward, "__module__": fused.__module__})

    families.register(Off(), origin="test")
    try:
        assert main(["check", str(folder), "--fusion", "test_off_2d", *CLI_FAST]) == 1
        assert "FAILED" in capsys.readouterr().out
    finally:
        families.unregister("test_off_2d")


# -- an audio encoder alone -------------------------------------------------------------------


def test_an_audio_encoder_without_a_processor_runs_on_audio_from_its_config(tmp_path: Path, capsys) -> None:
    """Qwen3-ASR's encoder: no processor maps to it, and its forward takes ``input_features`` and
    a mask over the frames. Audio is made from its config (its mel bins) and the run says so."""

    folder, _, config = _tiny("qwen3_asr_encoder", tmp_path / "model")
    code = main(["check", str(folder), "--fusion", "qkv", *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    e2e = json.loads(captured.out)["end_to_end"]
    assert e2e["input_kind"] == "audio"
    mels = config.num_mel_bins
    assert e2e["input_shapes"]["input_features"][:2] == [1, mels]
    assert [(f["modality"], f["source"]) for f in e2e["inputs"]] == [("audio", "synthetic")]
    assert any(n.startswith("audio made from the config: ") and f"{mels} mel bins" in n for n in e2e["notes"])


def _audio_e2e(folder: Path, capsys) -> dict[str, Any]:
    code = main(["check", str(folder), "--fusion", "qkv", *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads(captured.out)
    assert all(m["verified_by"] == "end-to-end inputs" for m in data["modules"]), data["modules"]
    return data["end_to_end"]


def test_a_transducer_gets_its_decoders_first_token_beside_the_audio(tmp_path: Path, capsys) -> None:
    """Parakeet-TDT: the forward runs one decoder step and needs ``decoder_input_ids`` (batch, 1)
    beside the mel features; without it the run raised and nothing was verified end to end."""
    folder, _, _config = _tiny("parakeet_tdt", tmp_path / "model")
    e2e = _audio_e2e(folder, capsys)
    assert e2e["input_kind"] == "audio"
    assert e2e["input_shapes"]["decoder_input_ids"] == [1, 1]
    assert any(n.startswith("audio made from the config: ") and ", decoder from token " in n for n in e2e["notes"])


def test_stacked_mel_frames_take_the_width_of_the_encoders_first_layer(tmp_path: Path, capsys) -> None:
    """Granite Speech 5's encoder takes mel frames delta-expanded and stacked (4 x mels wide): the
    width comes from its first layer, a multiple of the config's mel bins."""
    folder, _, config = _tiny("granite_speech5_ctc", tmp_path / "model")
    e2e = _audio_e2e(folder, capsys)
    mels = config.encoder_config.num_mel_bins
    assert e2e["input_shapes"]["input_features"][-1] == 4 * mels


def test_a_padding_mask_marks_no_frame_as_padding(tmp_path: Path, capsys) -> None:
    """Gemma 3n's audio encoder takes ``audio_mel`` and ``audio_mel_mask``, True where a frame is
    padding: the mask made is all False, so every frame reaches the fused attention."""
    folder, _, config = _tiny("gemma3n_audio", tmp_path / "model")
    e2e = _audio_e2e(folder, capsys)
    assert e2e["input_kind"] == "audio"
    assert e2e["input_shapes"]["audio_mel"][-1] == config.input_feat_size
    assert "audio_mel_mask" in e2e["input_shapes"]


def test_audio_and_text_towers_run_side_by_side(tmp_path: Path, capsys) -> None:
    """CLAP takes text and a one-channel spectrogram together; text alone raises, so audio+text
    from the config runs, and the audio tower's fused patch embedding is verified by it."""
    from fusion_core.coverage.checked import VERIFIED, check_type

    row = check_type("clap", ["patch_embeddings_2d"], 240)
    assert row["status"] == VERIFIED, row
    assert row["input_kinds"] == ["audio", "text"]


def test_a_pixel_shuffle_vlm_runs_its_image_through_the_fused_embedding() -> None:
    """Idefics3: 5-D pixels and a patch mask from its image processor, as many image tokens as its
    (pixel-shuffled) image features; the fused patch embedding is verified end to end."""
    from fusion_core.coverage.checked import VERIFIED, check_type

    row = check_type("idefics3", ["patch_embeddings_2d"], 240)
    assert row["status"] == VERIFIED, row
    assert row["input_kinds"] == ["image", "text"]


# -- a grid video whose tokens come in one span per temporal step ------------------------------


def test_qwen3_vl_video_tokens_in_one_span_per_step(tmp_path: Path, capsys) -> None:
    """Qwen3-VL counts each temporal step of a clip as its own video (a vision start per step):
    the one-span layout of Qwen2-VL fails its positions, the per-step layout runs."""

    folder = _tiny("qwen3_vl", tmp_path / "model")[0]
    code = main(["check", str(folder), "--fusion", "patch_embeddings", *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    e2e = json.loads(captured.out)["end_to_end"]
    assert "video+text" in e2e["input_kind"]
    assert any("the video tokens in 2 spans, one per step" in n for n in e2e["notes"])
    assert not any("not run" in n for n in e2e["notes"])


# -- a model that draws noise in its forward --------------------------------------------------


def test_a_model_that_draws_noise_gets_the_same_noise_original_and_fused(tmp_path: Path, capsys) -> None:
    """ViT-MAE masks a random subset of patches in every forward: the original's and the fused
    run must draw the same mask (seeded alike), else the comparison measures the mask."""
    import torch
    from transformers import ViTMAEConfig, ViTMAEModel

    torch.manual_seed(0)
    config = ViTMAEConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8
    )
    folder = _save(ViTMAEModel(config).eval(), tmp_path / "model")
    code = main(["check", str(folder), "--fusion", "patch_embeddings_2d", "--fusion", "qkv", *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    e2e = json.loads(captured.out)["end_to_end"]["comparison"]
    assert e2e["passed"] and e2e["max_abs_diff"] < 1e-4


def test_a_fused_model_that_raises_where_the_original_runs_fails_with_why(tmp_path: Path, capsys) -> None:
    """ViLT's embeddings read the patch convolution's 4-D weight shape from the parent. Our
    family gives that shape under the Conv's old name, and the check passes; a family that
    gives the Linear's 2-D weight there passes module by module, but the fused model raises.
    The check fails and says why, instead of ending in an internal error."""
    from _wrong_family import flat_weight_2d

    folder = _tiny("vilt", tmp_path / "model")[0]
    code = main(["check", str(folder), "--fusion", "patch_embeddings_2d", *CLI_FAST, "--json"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    with flat_weight_2d() as name:
        code = main(["check", str(folder), "--fusion", name, *CLI_FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    result = json.loads(captured.out)
    assert all(m["comparison"]["passed"] for m in result["modules"])
    e2e = result["end_to_end"]["comparison"]
    assert not e2e["passed"]
    assert e2e["note"].startswith("the fused model raised where the original ran (ValueError: not enough values")
