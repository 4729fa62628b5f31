"""Tiny configs keep more relations the architectures need (second set).

Each rule of :mod:`fusion_core.coverage.tiny` (and the synthetic tokenizer's ids) is checked on
the real default config of a type that needs it, and the types it fixes are checked end to end
(``coverage --check``'s verdict and the inputs it ran).
"""

from __future__ import annotations

import pytest

from fusion_core.coverage.checked import FALLBACK, VERIFIED, check_type
from fusion_core.coverage.tiny import read_token_ids, shrink, tiny_configs

FAMILIES = ["patch_embeddings", "patch_embeddings_2d", "qkv", "gate_up"]
VARIANTS = ({}, {"head_size": 128}, {"width": False})


def _default(model_type: str):
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]()


def _configs(model_type: str) -> list:
    return [config for _, config in tiny_configs(model_type)]


@pytest.mark.parametrize(
    ("model_type", "sub", "heads", "groups"),
    [
        ("nemo_speechlm", "text_config", "mamba_num_heads", "n_groups"),
        ("nemotron_h_omni", "text_config", "mamba_num_heads", "n_groups"),
        ("nemotron_h", None, "mamba_num_heads", "n_groups"),
        ("mamba2", None, "num_heads", "n_groups"),
    ],
)
def test_mamba_heads_stay_a_multiple_of_their_groups(model_type, sub, heads, groups) -> None:
    # B and C are repeated heads // groups times: 1 head of 8 groups repeated them 0 times
    for kwargs in VARIANTS:
        d = shrink(_default(model_type).to_dict(), **kwargs)
        d = d[sub] if sub else d
        assert d[heads] % d[groups] == 0, kwargs
        assert d[groups] >= 1


def test_mamba_groups_that_divide_the_heads_are_kept() -> None:
    for model_type in ("falcon_h1", "bamba", "granitemoehybrid"):
        d = shrink(_default(model_type).to_dict())
        assert d["mamba_n_groups"] == 1  # (one group divides any count)
    assert shrink(_default("nemotron_h").to_dict(), width=False)["n_groups"] == 8  # 128 heads: 8 groups divide


@pytest.mark.parametrize("model_type", ["qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"])
def test_token_ids_the_model_reads_get_free_ids(model_type) -> None:
    # get_rope_index reads config.vision_start_token_id; the default thinker config has none
    assert read_token_ids(_default(model_type)) == {(): ["vision_start_token_id"]}
    for config in _configs(model_type):
        vocab = config.text_config.vocab_size
        others = {config.image_token_id, config.video_token_id, config.audio_token_id, config.audio_start_token_id}
        assert 0 < config.vision_start_token_id < vocab
        assert config.vision_start_token_id not in others


def test_token_id_a_sibling_config_names_is_that_id() -> None:
    # Qwen2.5-Omni's thinker lacks vision_start_token_id, its talker names it: the same token, the same id
    assert read_token_ids(_default("qwen2_5_omni")) == {("thinker_config",): ["vision_start_token_id"]}
    for config in _configs("qwen2_5_omni"):
        assert config.thinker_config.vision_start_token_id == config.talker_config.vision_start_token_id
    for config in _configs("pix2struct"):  # the vision model's classes share _shift_right with the text model's
        assert config.vision_config.pad_token_id == config.text_config.pad_token_id


def test_token_ids_read_with_a_fallback_or_present_are_not_set() -> None:
    # BLIP reads decoder_pad_token_id only where hasattr(config, ...) says it is there
    assert read_token_ids(_default("blip")) == {}
    for config in _configs("blip"):
        assert "decoder_pad_token_id" not in config.to_dict()
    # a name a sub-config of it has is read there (Qwen2.5-Omni's image_token_id, its thinker's)
    assert () not in read_token_ids(_default("qwen2_5_omni"))
    assert read_token_ids(_default("llava")) == {}


def test_names_sharing_an_id_share_its_string() -> None:
    from fusion_core.model.tokenizer import synthetic_tokenizer

    config = _configs("csm")[0]
    assert config.pad_token_id == config.audio_token_id  # CSM pads with its audio token
    tok = synthetic_tokenizer(config)
    assert tok.convert_tokens_to_ids(tok.audio_token) == config.audio_token_id
    assert tok.pad_token_id == config.pad_token_id
    # the string a processor writes for one of them is the string of the id
    tok = synthetic_tokenizer(config, {"audio_token": "<|AUDIO|>"})
    assert tok.convert_tokens_to_ids("<|AUDIO|>") == config.audio_token_id == tok.pad_token_id


def test_processor_from_the_config_writes_the_configs_audio_id() -> None:
    from fusion_core.run.processors import processor_for

    config = _configs("csm")[0]
    proc, _ = processor_for(None, config)
    assert proc.audio_token_id == config.audio_token_id
    assert proc.audio_eos_token_id == config.audio_eos_token_id


@pytest.mark.parametrize("model_type", ["pp_doclayout_v2", "d_fine", "deimv2", "pp_doclayout_v3"])
def test_backbone_stage_channels_shrink_alike(model_type) -> None:
    for kwargs in VARIANTS[:2]:
        d = shrink(_default(model_type).to_dict(), **kwargs)
        b = d["backbone_config"]
        assert b["stage_in_channels"][0] == b["stem_channels"][-1]
        assert b["stage_in_channels"][1:] == b["stage_out_channels"][:-1]  # each stage takes the last one's output
        assert b["hidden_sizes"][1:] == b["stage_out_channels"][1:]  # the channels it reports are its outputs
        # the encoder takes the backbone's last outputs (out_indices 2, 3, 4)
        channels = [b["hidden_sizes"][i - 1] for i in b["out_indices"]]
        assert d["encoder_in_channels"] == channels[-len(d["encoder_in_channels"]) :]
        if "x4_feat_dim" in d:  # PP-DocLayoutV3's mask head takes the first stage's output
            assert d["x4_feat_dim"] == b["stage_out_channels"][0]
    # PP-DocLayoutV2's reading-order model is 512 wide: not a stage's 512 channels
    b = shrink(_default("pp_doclayout_v2").to_dict())["backbone_config"]
    assert b["stage_in_channels"] == [48, 16, 64, 128]


def test_stage_channels_of_other_backbones_are_unchanged() -> None:
    b = shrink(_default("pp_lcnet_v4").to_dict())
    assert b["stem_channels"] == [3, 48, 16] and b["stage_out_channels"] == [16, 16, 24, 48]
    d = shrink(_default("rt_detr").to_dict())  # a ResNet backbone: no stage channel lists, its sizes kept
    assert d["backbone_config"]["hidden_sizes"] == _default("rt_detr").backbone_config.hidden_sizes


@pytest.mark.parametrize(
    ("model_type", "kinds"),
    [
        # vision_start_token_id set, which get_rope_index reads
        ("qwen2_5_omni_thinker", ["audio", "image", "text", "video"]),
        ("qwen3_omni_moe_thinker", ["audio", "image", "text", "video"]),
        # the backbone's stage channels and the encoder's inputs shrink alike (HGNetV2)
        ("d_fine", ["image"]),
        ("deimv2", ["image"]),
        ("pp_doclayout_v3", ["image"]),
        # a threshold and an order per class, which its forward reads and its default leaves None
        ("pp_doclayout_v2", ["image"]),
        # one feature level at scale 1 (its default projector has none)
        ("lw_detr", ["image"]),
    ],
)
def test_types_with_kept_relations_run_end_to_end(model_type, kinds) -> None:
    result = check_type(model_type, FAMILIES, 0)
    assert result["status"] == VERIFIED, result["reason"]
    assert result["input_kinds"] == kinds
    assert "tried" not in result  # the first (tiniest) variant


@pytest.mark.parametrize(
    ("model_type", "kinds"),
    [
        ("nemo_speechlm", ["audio", "text"]),  # (its word-timestamp encoder runs in generate only)
        ("csm", ["audio", "text"]),  # (its depth decoder runs in generate only)
    ],
)
def test_types_now_running_end_to_end(model_type, kinds) -> None:
    result = check_type(model_type, FAMILIES, 0)
    assert result["status"] in (VERIFIED, FALLBACK), result["reason"]
    assert result["input_kinds"] == kinds
    assert "end to end not run" not in result["reason"]


def test_lists_the_default_leaves_unset_and_a_necks_last_channels_are_set() -> None:
    """PP-DocLayout-V2's class thresholds and order (None by default) get one entry per class;
    LW-DETR's empty projector scale factors get one level, and what the config class derives
    from them is derived anew; DeepSeek-OCR 2's SAM neck ends at its sibling encoder's width
    (896 beside 4096 by default: its features are concatenated with the encoder's queries)."""
    doc = next(tiny_configs("pp_doclayout_v2"))[1]
    assert doc.class_thresholds == [0.5] * len(doc.id2label) and doc.class_order == list(range(len(doc.id2label)))
    assert _default("pp_doclayout_v2").class_thresholds is None
    detr = next(tiny_configs("lw_detr"))[1]
    assert detr.projector_scale_factors == [1.0] and detr.num_feature_levels == 1
    assert detr.projector_in_channels == [detr.d_model]
    ocr = next(tiny_configs("deepseek_ocr2_vision"))[1]
    assert ocr.sam_config.downsample_channels[-1] == ocr.encoder_config.hidden_size < 896
    default = _default("deepseek_ocr2_vision")
    assert default.sam_config.downsample_channels[-1] != default.encoder_config.hidden_size
