"""``coverage --check``: tiny random models of real architectures, checked end to end (issue 34).

The shrinker is judged on the models it builds (transformers' own classes, real weights);
the command on a small fixed sample of types, in worker processes, with a hang and a crash
among them; the statuses against what the check itself reports.
"""

from __future__ import annotations

import json

import pytest

import fusion_core.coverage.check_run as check_run
import fusion_core.coverage.pool as coverage_pool
from fusion_core.cli.main import main
from fusion_core.coverage.checked import FAILED, FALLBACK, NOT_BUILT, VERIFIED, check_type
from fusion_core.coverage.tiny import MAX_LAYERS, VOCAB, shrink, tiny_configs


def _built(model_type: str):
    """The first shrunk config of ``model_type`` and its model with real (random) weights."""
    import torch

    from fusion_core.model.classes import resolve_model_class

    how, config = next(tiny_configs(model_type))
    torch.manual_seed(0)
    return how, config, resolve_model_class(config)[0](config)


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# -- the shrinker ---------------------------------------------------------------------------------


def test_a_decoder_is_shrunk_keeping_its_grouping() -> None:
    """Llama 7B's default: 32 heads over 32 key/value heads, 4096 wide, 32 layers, 32000 tokens."""
    from transformers import LlamaConfig

    default = LlamaConfig()
    how, config, model = _built("llama")
    assert how == "tiny"
    assert config.num_hidden_layers == MAX_LAYERS < default.num_hidden_layers
    assert config.num_attention_heads == 4 and config.num_key_value_heads == 4  # MHA stays MHA
    assert config.hidden_size == 64 and config.hidden_size % config.num_attention_heads == 0
    # the feed-forward keeps its ratio to the width (11008 / 4096), rounded up to 8
    assert config.intermediate_size == 176 >= 64 * default.intermediate_size / default.hidden_size
    assert config.vocab_size == VOCAB
    assert _params(model) < 1_000_000
    import torch

    out = model(input_ids=torch.tensor([[1, 2, 3]]))
    assert out.last_hidden_state.shape == (1, 3, 64)


def test_grouped_query_attention_still_divides() -> None:
    """Mistral: 32 query heads over 8 key/value heads; the tiny one groups 4 over 2."""
    _, config, _ = _built("mistral")
    assert config.num_attention_heads % config.num_key_value_heads == 0
    assert config.num_key_value_heads < config.num_attention_heads


def test_a_vision_language_model_keeps_its_cross_config_widths() -> None:
    """Qwen2-VL: the vision merger's output width is the language model's width (its default
    config quotes 3584 against a text width of 8192: the tiny one makes them agree), and the
    special token ids move inside the small vocabulary, the same id everywhere."""
    from transformers import Qwen2VLConfig

    default = Qwen2VLConfig()
    _, config, model = _built("qwen2_vl")
    assert config.vision_config.hidden_size == config.text_config.hidden_size
    assert config.vision_config.embed_dim < default.vision_config.embed_dim
    ids = [config.image_token_id, config.video_token_id, config.vision_start_token_id]
    assert len(set(ids)) == 3 and all(i < config.text_config.vocab_size == VOCAB for i in ids)
    assert _params(model) < 100_000_000


def test_a_backbone_keeps_distinct_outputs() -> None:
    """DPT-style heads read four distinct backbone stages; a shallower backbone still gives four."""
    from transformers import DepthAnythingConfig

    _, config, _ = _built("depth_anything")
    out = config.backbone_config.out_indices
    assert len(out) == len(DepthAnythingConfig().backbone_config.out_indices) == len(set(out))
    assert max(out) <= config.backbone_config.num_hidden_layers


def test_per_layer_lists_keep_every_kind_of_layer() -> None:
    """A hybrid layout: the cut list keeps one layer of each kind, and the count matches."""
    data = {"num_hidden_layers": 6, "layer_types": ["conv", "conv", "attention", "conv", "moe", "conv"]}
    out = shrink(data, width=False)
    assert sorted(set(out["layer_types"])) == ["attention", "conv", "moe"]
    assert out["num_hidden_layers"] == len(out["layer_types"]) == 3


def test_layer_indices_follow_the_new_depth() -> None:
    data = {"num_hidden_layers": 24, "vision_feature_layer": [-2, 23], "intermediate_layers_indices": [3, 7, 15, 23]}
    out = shrink(data, width=False)
    assert out["num_hidden_layers"] == 2
    assert out["vision_feature_layer"] == [-2, 1]
    # as many as before (a projector's input width counts them), in order, all inside the model
    moved = out["intermediate_layers_indices"]
    assert len(moved) == 4 and moved == sorted(moved) and set(moved) == {0, 1}


def test_layer_indices_are_not_sizes_and_concatenated_widths_follow() -> None:
    """Mllama's vision tower takes the hidden states of ``intermediate_layers_indices`` (an
    "intermediate" name that is no FFN size) and concatenates them with its output into
    ``vision_output_dim`` = 6 x 1280: every variant keeps the indices inside its layers, its
    global layers few, and the concatenated width 6 x the new one."""
    for how, config in tiny_configs("mllama"):
        vision = config.vision_config
        indices = vision.intermediate_layers_indices
        assert all(0 <= i < vision.num_hidden_layers for i in indices), how
        assert vision.num_global_layers <= vision.num_hidden_layers, how
        assert vision.vision_output_dim == (len(indices) + 1) * vision.hidden_size, how


def test_a_layer_index_below_a_list_of_them_stays_below() -> None:
    """SegGPT asserts its ``merge_index`` (2) is below every ``intermediate_hidden_state_indices``
    ([5, 11, 17, 23]): the tiny config keeps enough layers for both to stay apart, and builds."""
    from transformers import SegGptConfig

    for how, config in tiny_configs("seggpt"):
        assert config.merge_index < min(config.intermediate_hidden_state_indices), how
        assert max(config.intermediate_hidden_state_indices) < config.num_hidden_layers, how
        assert len(set(config.intermediate_hidden_state_indices)) == 4, how
    assert SegGptConfig().merge_index == 2


@pytest.mark.parametrize("model_type", ["minicpmv4_6_vision", "minicpmv4_6"])
def test_the_layer_a_merger_runs_after_is_moved_into_the_new_depth(model_type) -> None:
    """MiniCPM-V's tower runs its merger after layer ``insert_layer_id`` (6 of 12): kept at 6 in
    a 2-layer tower, the merger would never run. The full model hands its own value down to the
    tower's config, so both move."""
    from transformers import CONFIG_MAPPING

    assert CONFIG_MAPPING[model_type]().insert_layer_id == 6
    for how, config in tiny_configs(model_type):
        tower = getattr(config, "vision_config", None) or config
        assert tower.insert_layer_id < tower.num_hidden_layers, how
        assert config.insert_layer_id == tower.insert_layer_id, how


def test_a_list_of_every_layer_and_unset_router_counts() -> None:
    """Mistral Large 4 lists every layer as its own key/value source (72 entries): the tiny
    config lists every one of its layers. DeepSeek-V2's default leaves ``num_experts_per_tok``
    unset (its checkpoints name 6): the tiny config routes each token to 2 experts."""
    how, config = next(tiny_configs("mistral_large4_text"))
    assert list(config.kv_source_layers) == list(range(config.num_hidden_layers)), how
    _, config = next(tiny_configs("deepseek_v2"))
    assert config.num_experts_per_tok == 2 and config.n_routed_experts > 2


@pytest.mark.parametrize("model_type", ["gemma3n_text", "gemma4_unified_assistant"])
def test_layers_that_reuse_caches_keep_a_producer_of_each_kind(model_type) -> None:
    """Gemma 3n's last 15 of 35 layers reuse the caches of earlier layers of their kind: the tiny
    config has a producer of each kind, then a consumer of each. Gemma 4's assistant shares
    every layer: all its tiny layers share."""
    from transformers import CONFIG_MAPPING

    default = CONFIG_MAPPING[model_type]().get_text_config()
    _, tiny = next(tiny_configs(model_type))
    config = tiny.get_text_config()
    kinds = list(dict.fromkeys(config.layer_types))
    if default.num_kv_shared_layers == default.num_hidden_layers:
        assert config.num_kv_shared_layers == config.num_hidden_layers
    else:
        producers = config.layer_types[: config.num_hidden_layers - config.num_kv_shared_layers]
        assert set(producers) == set(kinds) and config.num_kv_shared_layers > 0
    assert len(config.kv_sharing_modes) == config.num_hidden_layers  # what transformers validates


def test_a_pixel_shuffle_gets_a_patch_grid_it_divides() -> None:
    """Idefics3's default config: 224 / 32 = 7 patches a side, shuffled by 2; every variant gets
    8 a side (256 px), and a grid that already divides is left as it is."""
    from transformers import Idefics3Config

    for how, config in tiny_configs("idefics3"):
        vision = config.vision_config
        assert (vision.image_size // vision.patch_size) % config.scale_factor == 0, how
        assert vision.image_size == 256, how
    kept = shrink({"scale_factor": 2, "vision_config": {"image_size": 512, "patch_size": 16}}, width=False)
    assert kept["vision_config"]["image_size"] == 512
    assert Idefics3Config().vision_config.image_size == 224  # the default still has the odd grid


def test_a_pixel_shuffle_factor_by_its_other_name_gets_a_grid_it_divides() -> None:
    """ModernVBERT's default config: 224 / 16 = 14 patches a side, shuffled by
    ``pixel_shuffle_factor`` 4 (no image runs on stock transformers): 16 a side (256 px)."""
    from transformers import ModernVBertConfig

    for how, config in tiny_configs("modernvbert"):
        vision = config.vision_config
        assert vision.image_size == 256 and (vision.image_size // vision.patch_size) % 4 == 0, how
    assert ModernVBertConfig().vision_config.image_size == 224


def test_stage_widths_and_the_channels_that_quote_them_shrink_alike() -> None:
    """SAM 2's Hiera widens by stage (96, 192, 384, 768) and its FPN neck lists the same widths,
    last first: both follow the first stage's new width in proportion. A channel count no 8
    divides is no convolution's width (SuperPoint's 65 = 8 x 8 cells and a dustbin) and stays."""
    config = next(tiny_configs("sam2"))[1]
    stages = config.vision_config.backbone_config.embed_dim_per_stage
    assert stages[0] == config.vision_config.backbone_config.hidden_size < 96
    assert [w // stages[0] for w in stages] == [1, 2, 4, 8]
    assert config.vision_config.backbone_channel_list == stages[::-1]
    lightglue = next(tiny_configs("lightglue"))[1]
    assert lightglue.keypoint_detector_config.keypoint_decoder_dim == 65
    assert lightglue.keypoint_detector_config.descriptor_decoder_dim == lightglue.descriptor_dim < 256


def test_a_second_stacks_layer_count_under_a_prefix_is_cut_too() -> None:
    """V-JEPA 2's predictor (pred_num_hidden_layers 12, over 8192 tokens of a 64-frame clip) made its
    tiny check run past any limit; ViT-MAE's decoder and Moonshine's encoder and decoder are cut alike."""
    from transformers import CONFIG_MAPPING

    for model_type, key in [
        ("vjepa2", "pred_num_hidden_layers"),
        ("vit_mae", "decoder_num_hidden_layers"),
        ("moonshine", "encoder_num_hidden_layers"),
    ]:
        default = getattr(CONFIG_MAPPING[model_type](), key)
        assert default > MAX_LAYERS
        assert getattr(next(tiny_configs(model_type))[1], key) == MAX_LAYERS, model_type


def test_hook_ids_into_a_towers_layers_follow_its_depth_and_images_fit_the_smallest_scale() -> None:
    """Depth Pro hooks layers 11 and 5 of its 24-layer patch encoder and patches 384 px crops of its
    image scaled by a quarter: the tiny config hooks layers of its 2, and the image made for it is
    1536 px (384 / 0.25), not its patch encoder's 384 (too small for the quarter scale)."""
    import torch

    from fusion_core.run.candidates import candidate_inputs

    _, config, model = _built("depth_pro")
    assert config.intermediate_hook_ids == [1, 0] and config.image_model_config.num_hidden_layers == 2
    first = next(candidate_inputs(model.eval(), ["encoder.patch_encoder.model.embeddings.patch_embeddings"]))
    assert first.kwargs["pixel_values"].shape == (1, 3, 1536, 1536)
    with torch.inference_mode():
        model(**first.kwargs)


def test_a_pooling_projector_gets_a_token_grid_the_patch_grid_divides() -> None:
    """Gemma 3 pools 64 x 64 patches to 16 x 16 tokens; its default config's tower has 224 / 16 =
    14 patches a side, so 256 tokens make a pooling kernel of 0 (no image runs on stock
    transformers): every tiny config pools 14 to 7 a side (49 tokens), and a grid that already
    divides is left as it is."""
    from transformers import Gemma3Config

    for how, config in tiny_configs("gemma3"):
        grid = config.vision_config.image_size // config.vision_config.patch_size
        side = round(config.mm_tokens_per_image**0.5)
        assert side**2 == config.mm_tokens_per_image and grid % side == 0 and grid // side >= 2, how
    assert next(tiny_configs("gemma3"))[1].mm_tokens_per_image == 49
    kept = shrink({"mm_tokens_per_image": 16, "vision_config": {"image_size": 64, "patch_size": 8}}, width=False)
    assert kept["mm_tokens_per_image"] == 16  # 8 patches a side pooled to 4
    assert Gemma3Config().mm_tokens_per_image == 256


def test_an_unset_sliding_window_the_layers_name_is_set_wider_than_any_input() -> None:
    """Step3.7 builds a sliding-window mask for every config, and its default leaves the window
    unset (no input runs on stock transformers): the tiny config sets one no input reaches."""
    from fusion_core.coverage.tiny import UNSET_WINDOW

    config = next(tiny_configs("step3p7"))[1]
    assert config.text_config.sliding_window == UNSET_WINDOW
    assert shrink({"sliding_window": None}, width=False)["sliding_window"] is None  # no layer types: as it was
    assert shrink({"sliding_window": 8, "layer_types": ["full_attention"]}, width=False)["sliding_window"] == 8


def test_rotary_sections_the_code_defaults_are_fitted_to_the_head() -> None:
    """GLM-4V's code defaults its sections to [8, 12, 12] (32 frequencies: a head of 128, half
    rotated) while its default config rotates whole heads: the tiny model's rotary module makes
    8 frequencies, so no input ran. The sections set in the config cover them, in proportion."""
    import torch

    from fusion_core.coverage.tiny import fit_rotary_sections
    from fusion_core.model.classes import resolve_model_class

    _, config = next(tiny_configs("glm4v"))
    cls = resolve_model_class(config)[0]
    with torch.device("meta"):
        model = cls(config)
    rotary = next(m for m in model.modules() if hasattr(m, "mrope_section"))
    frequencies = rotary.inv_freq.shape[-1]
    assert sum(rotary.mrope_section) != frequencies
    assert fit_rotary_sections(model)
    sections = config.text_config.rope_parameters["mrope_section"]
    assert sum(sections) == frequencies and len(sections) == 3 and sections[0] <= sections[1] == sections[2]
    with torch.device("meta"):
        rebuilt = cls(config)
    assert not fit_rotary_sections(rebuilt)  # fitted once, nothing left to fit


def test_a_refused_config_says_why() -> None:
    """Every variant refused by the config class: the first refusal is raised, not swallowed."""
    with pytest.raises(Exception, match="n_input_layers"):
        list(tiny_configs("dory"))


# -- one type checked, in this process -------------------------------------------------------------


def test_a_type_no_family_fuses_is_not_built_with_its_reason() -> None:
    result = check_type("whisper", ["qkv", "gate_up"], 0)
    assert result["status"] == NOT_BUILT
    assert result["reason"] == "no family fuses a module of the tiny model"


@pytest.mark.filterwarnings(
    "ignore:Initializing zero-element tensors"
)  # its empty projector, as transformers builds it
def test_a_tiny_model_that_runs_nothing_unfused_is_not_built_not_failed() -> None:
    """Muse-Glimmer's assistant reads a layer's context states, which no input made here gives:
    the unfused model raises on every input, and its attention is verified on no sample input
    either, so nothing can be compared. That is the tiny build's failure, said with the original's error, never
    a failed fusion. JEV's forward requires marks, option counts and question types no input
    made here gives: its original runs on none either, but its fused modules are verified on
    sample inputs, which is a fallback, with both reasons."""
    result = check_type("muse_glimmer_assistant", ["qkv", "gate_up"], 0)
    assert result["status"] == NOT_BUILT
    assert result["reason"].startswith(
        "the tiny model runs on no input made for it, unfused included (MuseGlimmerAssistantModel: "
    )
    result = check_type("jev", ["qkv", "gate_up"], 0)
    assert result["status"] == FALLBACK
    assert result["reason"].startswith("end to end not run (not run: JevForDecision: no input it accepts (")
    assert "missing 3 required positional arguments: 'marks', 'num_options'" in result["reason"]
    assert result["reason"].endswith("verified on module sample inputs only")


@pytest.mark.parametrize(
    ("model_type", "kinds", "made"),
    [
        # a video processor needs torchvision: a clip of the tower's size, as many video tokens as features
        ("llava_next_video", ["image", "text", "video"], "video+text: video of 4 frames of"),
        # the only image processor needs torchvision: pictures of the tower's size
        ("cohere2_vision", ["image", "text"], "image+text: image of 512x512 px made from the config"),
        # the processor writes ``pixel_values_images``, the model takes ``pixel_values``
        ("video_llava", ["image", "text", "video"], "image+text: synthetic image (224x224 px) through"),
        # no feature extractor here: mel features of the encoder's shape, as many audio tokens as features
        ("audioflamingo3", ["audio", "text"], "audio+text: audio made from the config"),
    ],
)
def test_media_a_processor_cannot_make_here_are_made_from_the_config(model_type, kinds, made, tmp_path) -> None:
    """Each run is named by what it fed, and says how its inputs were made; the status is the
    coverage command's own classification of that result."""
    from fusion_core.api import check
    from fusion_core.coverage.checked import classify
    from fusion_core.plan.fusion_plan import inspect_model

    _, _, model = _built(model_type)
    model.save_pretrained(tmp_path)
    ins = inspect_model(str(tmp_path))
    families = [f for f in ("patch_embeddings_2d", "qkv", "gate_up") if ins.discovery(f).matches]
    result = check(ins.plan(dict.fromkeys(families, True)), upstream=False, repeats=1, time_budget=0, threads=1)
    row = classify(model_type, result, families)
    assert row["status"] == VERIFIED, row["reason"]
    assert row["input_kinds"] == kinds
    assert any(n.startswith(made) for n in result.end_to_end.notes), result.end_to_end.notes


def test_a_medium_whose_tower_the_config_leaves_out_is_not_taken() -> None:
    """EmbeddingGemma 2's forward takes pixels and audio, its default config has neither tower
    (``vision_config`` / ``audio_config`` None): the check runs text, with no "not run" line
    for media the model cannot take."""
    import inspect

    from fusion_core.run.modal import modality_keys, taken_modalities

    _, config, model = _built("embedding_gemma2")
    assert config.vision_config is None and config.audio_config is None
    assert set(modality_keys(inspect.signature(model.forward).parameters)) >= {"image", "audio"}
    assert taken_modalities(model) == []
    _, _, gemma3 = _built("gemma3")
    assert taken_modalities(gemma3) == ["image"]


def test_no_run_feeds_a_medium_whose_tower_the_config_leaves_out() -> None:
    """Nemotron-H Omni's forward takes audio features, its default config has no audio tower
    (``audio_config`` None): the config's audio inputs are not run in place of another medium's
    (its forward ignores them), so no run says it fed audio."""
    result = check_type("nemotron_h_omni", ["patch_embeddings", "patch_embeddings_2d", "qkv", "gate_up"], 0)
    assert "audio" not in result["input_kinds"] and "text" in result["input_kinds"]


@pytest.mark.parametrize("model_type", ["patchtst", "timesfm2_5"])
def test_a_forecaster_is_fed_a_time_series_of_its_context(model_type) -> None:
    """PatchTST takes ``past_values`` as (batch, steps, channels), TimesFM 2.5 as (batch, steps)
    with a context of 16384 steps by default (bounded here): both run end to end on a series."""
    result = check_type(model_type, ["qkv"], 0)
    assert result["status"] == VERIFIED, result["reason"]
    assert result["input_kinds"] == ["time series"]


@pytest.mark.parametrize(
    ("model_type", "kinds"),
    [
        # a vision tower alone takes flattened patches and their grid: an image, named so
        ("qwen2_vl_vision", ["image"]),
        ("idefics2_vision", ["image"]),
        # a decoder alone gets encoder states of its cross-attention's width, so that runs too
        ("canary_decoder", ["text"]),
    ],
)
def test_a_part_saved_alone_is_opened_and_checked_end_to_end(model_type, kinds) -> None:
    """Classes transformers does not export (a vision tower, a decoder) are still what a user
    saves alone; they open through their config's own modeling module and run end to end."""
    result = check_type(model_type, ["patch_embeddings", "patch_embeddings_2d", "qkv", "gate_up"], 0)
    assert result["status"] == VERIFIED, result["reason"]
    assert result["input_kinds"] == kinds


@pytest.mark.parametrize(
    ("model_type", "kinds"),
    [
        # the processor writes image_grid_thw, the tower alone takes grid_thw
        ("cosmos3_edge_vision", ["image"]),
        # no processor here, a Linear patch embedding: flattened patches of the config's size and their grid
        ("muse_glimmer_vision", ["image"]),
        # a Conv2d over each patch, a position table of square grids: patches as small images, a square grid
        ("kimi_k25_vision", ["image"]),
        # ViLT reads its patch Conv's weight shape: the fused host's old name gives the Conv's shape
        ("vilt", ["image", "text"]),
        # no image processor here, flat patches of a Linear tower for images and clips, a 3 s waveform
        ("muse_spark", ["audio", "image", "text", "video"]),
        # video told from image tokens by the video start and end tokens around them
        ("glm5_next", ["image", "text", "video"]),
        # image and video merge sizes; patches batched per image
        ("video_llama_3", ["image", "text", "video"]),
        ("colqwen2", ["image", "text"]),
        # its pixels are named image
        ("bridgetower_vision_model", ["image"]),
        # a codec's decoder alone: latents, channels first
        ("mimi_decoder", ["embeddings"]),
        # each patch a small image, batched per image
        ("paddleocr_vl_vision", ["image"]),
        # a decoder alone over a sequence of vectors, and a perceiver's (context, attention_mask)
        ("blt_global_transformer", ["embeddings"]),
        ("idefics2_perceiver", ["embeddings"]),
        # one row of tokens per codebook, and encoder states for its cross-attention
        ("musicgen_decoder", ["text"]),
        # the default config projects audio to 3584 for a 2048-wide text model: the tiny one follows the text
        ("qwen3_asr", ["audio", "text"]),
        # images on an images axis, (batch, images, C, H, W), no processor here
        ("modernvbert", ["image", "text"]),
        # an image-to-text encoder-decoder: pixels and the decoder's first tokens
        ("vision-encoder-decoder", ["image"]),
        # the pixels go to the 3-channel Hiera stem, not the only fused conv (its 1-channel mask prompt's)
        ("sam2", ["image"]),
        # the image's embeddings at the positions a mask marks, one per latent query
        ("kosmos-2", ["image", "text"]),
        # images with their patch grids; a clip packed as one row of patches, one grid per frame
        ("minicpmv4_6", ["image", "text", "video"]),
        # a clip in pixel_values (the config names no frame count), a video token per query per frame
        ("instructblipvideo", ["text", "video"]),
        # pairs of images (a keypoint matcher)
        ("lightglue", ["image"]),
        # the prompt image and mask its forward requires, square images of the canvas' shorter side
        ("seggpt", ["image"]),
        # a clip as one batch of frames (X-CLIP's vision tower alone)
        ("xclip_vision_model", ["video"]),
        # a text model that takes only embeddings although its forward names input_ids
        ("qwen3_omni_moe_talker_code_predictor", ["embeddings"]),
        # counted clips: patches as small images (Kimi-K2.5's temporal merge), a newline token per row (HY-V4-VL)
        ("kimi_k25", ["image", "text", "video"]),
        ("hy_v4_vl", ["image", "text", "video"]),
        # images with their sizes in pixels (get_image_features requires image_sizes)
        ("apertus1p5", ["audio", "image", "text"]),
        # an image of the config's input_size beside the text's boxes
        ("layoutlmv3", ["image", "text"]),
        # NaFlex patches with their spatial shapes and mask; patches flattened into one batch of vectors
        ("lfm2_vl", ["image", "text"]),
        ("neomme", ["image", "text"]),
        # a tower over flattened patches with a fixed count (its position table), no grid (Molmo2's)
        ("molmo2_vision", ["image"]),
        # blocks of merge x merge patches per token, channels last, as the tower's docstring gives them
        ("inkling2_vision", ["image"]),
        ("inkling2", ["image", "text"]),
        # the video tokens in one span per frame (a grid per step, one patch grid per frame)
        ("cosmos3_edge", ["image", "text", "video"]),
        ("minicpmv4_7", ["image", "text", "video"]),
        # the task tokens its forward requires beside the image, as long as the config's task sequence
        ("oneformer", ["image"]),
    ],
)
def test_parts_and_odd_inputs_run_end_to_end(model_type, kinds) -> None:
    result = check_type(model_type, ["patch_embeddings", "patch_embeddings_2d", "qkv", "gate_up"], 0)
    assert result["status"] == VERIFIED, result["reason"]
    assert result["input_kinds"] == kinds


@pytest.mark.parametrize(
    ("model_type", "path", "given"),
    [
        # rotations as complex numbers, a required argument (Llama 4's vision attention)
        ("llama4_vision_model", "model.layers.0.self_attn", "freqs_ci"),
        # called as (key_value_states, hidden_states): the queries second (Aria's projector)
        ("aria", "multi_modal_projector.cross_attn", "hidden_states"),
        # the other sequence optional in the signature, read in the body (Mllama's text cross-attention)
        ("mllama_text_model", "layers.0.cross_attn", "cross_attention_states"),
    ],
)
def test_attention_sample_inputs_give_what_the_forward_reads(model_type, path, given) -> None:
    import torch

    from fusion_core.boundary.options import Workload
    from fusion_core.families import get_family

    _, config, model = _built(model_type)
    module = model.get_submodule(path)
    args, kwargs = get_family("qkv").sample_inputs(module, config, Workload())
    assert given in kwargs
    with torch.inference_mode():
        module(*args, **kwargs)


def test_a_media_token_the_default_config_leaves_unset_is_named() -> None:
    """Voxtral's default config has an audio tower and ``audio_token_id`` None (its checkpoints
    name one): the tiny config names a free token, and the check runs audio and text."""
    from transformers import CONFIG_MAPPING

    assert CONFIG_MAPPING["voxtral"]().audio_token_id is None
    _, config, _ = _built("voxtral")
    assert 0 < config.audio_token_id < config.get_text_config().vocab_size
    result = check_type("instructblip", ["patch_embeddings_2d", "qkv", "gate_up"], 0)
    assert result["status"] == VERIFIED, result["reason"]  # and its Q-Former gets the instruction
    assert result["input_kinds"] == ["image", "text"]


def test_a_text_run_reaches_what_the_speech_runs_do_not() -> None:
    """SeamlessM4T takes speech or text, never both: its text encoder is verified end to end by
    the synthetic-text run, which runs because the speech run does not reach it (its
    text-to-unit model runs only in generate: verified on sample inputs, a fallback)."""
    result = check_type("seamless_m4t", ["qkv"], 0)
    assert result["status"] == FALLBACK and result["reason"].startswith("t2u_model."), result["reason"]
    assert result["input_kinds"] == ["audio", "text"]


@pytest.mark.filterwarnings("ignore:At least one mel filter has all zero values")  # AST's default filter bank
def test_an_audio_model_with_no_processor_class_gets_its_feature_extractor() -> None:
    """transformers maps no processor to AST, only a feature extractor: the synthetic waveform
    goes through it (the config-made mel frames are not what AST's patch grid takes)."""
    from fusion_core.run.processors import processor_from_config

    _, config, _ = _built("audio-spectrogram-transformer")
    proc, note = processor_from_config(config)
    assert type(proc).__name__ == "ASTFeatureExtractor" and "no processor is mapped" in note
    result = check_type("audio-spectrogram-transformer", ["patch_embeddings_2d", "qkv"], 0)
    assert result["status"] == VERIFIED, result["reason"]
    assert result["input_kinds"] == ["audio"]


def test_config_values_a_heterogeneous_config_refuses_are_unset() -> None:
    """Gemma 4's assistant raises on a global read of a per-layer attribute (``head_dim``): the
    sample maker reads it as unset instead of failing the check."""
    from fusion_core.families._sample_inputs import config_value

    _, config = next(tiny_configs("gemma4_unified_assistant"))
    with pytest.raises(Exception, match="per-layer attribute"):
        _ = config.get_text_config().head_dim
    assert config_value(config, "head_dim") is None
    assert check_type("gemma4_unified_assistant", ["gate_up"], 0)["status"] == FALLBACK


def test_a_segmenters_mask_prompt_runs_its_mask_embedding() -> None:
    """SAM takes a low-resolution mask prompt (four times its image embedding's side): the first
    image run gives one, so ``prompt_encoder.mask_embed`` is called end to end."""
    import torch
    from transformers import SamConfig, SamModel

    from fusion_core.run.candidates import candidate_inputs

    config = SamConfig(
        vision_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 64,
                       "output_channels": 16, "mlp_dim": 64, "global_attn_indexes": [0], "window_size": 2,
                       "num_pos_feats": 8},
        prompt_encoder_config={"hidden_size": 16, "image_size": 64, "image_embedding_size": 4},
        mask_decoder_config={"hidden_size": 16, "num_attention_heads": 2, "mlp_dim": 32, "iou_head_hidden_dim": 16},
    )  # fmt: skip
    torch.manual_seed(0)
    model = SamModel(config).eval()
    first = next(candidate_inputs(model, ["vision_encoder.patch_embed", "prompt_encoder.mask_embed"]))
    assert tuple(first.kwargs["input_masks"].shape) == (1, 1, 16, 16)
    called = []
    model.prompt_encoder.mask_embed.register_forward_hook(lambda *_: called.append(True))
    with torch.inference_mode():
        model(**first.kwargs)
    assert called


def test_a_wrong_fusion_is_failed_with_the_module_named() -> None:
    from _wrong_family import wrong_family

    with wrong_family() as name:
        result = check_type("qwen2_vl", [name], 0)
    assert result["status"] == FAILED
    assert result["reason"].startswith("visual.patch_embed (test_wrong_patch): max abs diff")


# -- the command, in worker processes ---------------------------------------------------------------


@pytest.fixture
def results_file(tmp_path, monkeypatch):
    path = tmp_path / "coverage-check.json"
    monkeypatch.setattr(check_run, "results_file", lambda: path)
    return path


def test_coverage_check_over_a_sample(results_file, capsys, tmp_path) -> None:
    """The CI sample: a decoder, a ViT, a vision-language model and a type no family fuses,
    one worker. Then ``--resume`` takes every answer from the results file and builds nothing."""
    page = tmp_path / "coverage.md"
    argv = ["coverage", "--check", "--types", "llama,vit,qwen2_vl,whisper", "--workers", "1", "--json"]
    assert main([*argv, "--markdown", str(page)]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["model_type"]: r for r in data["checked"]}
    assert rows["llama"]["status"] == VERIFIED and rows["llama"]["input_kinds"] == ["text"]
    assert rows["llama"]["families"] == ["qkv", "gate_up"]
    assert rows["vit"]["status"] == VERIFIED and rows["vit"]["input_kinds"] == ["image"]
    assert rows["qwen2_vl"]["status"] == VERIFIED
    assert rows["qwen2_vl"]["input_kinds"] == ["image", "text", "video"]
    assert rows["whisper"]["status"] == NOT_BUILT
    assert data["counts"] == {VERIFIED: 3, FALLBACK: 0, FAILED: 0, NOT_BUILT: 1}
    assert all(r["seconds"] > 0 for r in data["checked"])
    saved = json.loads(results_file.read_text())
    assert sorted(saved) == ["llama", "qwen2_vl", "vit", "whisper"]
    text = page.read_text()
    assert "| qwen2_vl | verified end to end | image+text+video |" in text
    assert "Verified end to end: 3 of 3 built (100.0%)." in text

    assert main([*argv, "--resume"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["resumed"] == 4
    assert again["checked"] == data["checked"]


def test_a_hang_and_a_crash_are_one_row_each(results_file, capsys, monkeypatch) -> None:
    """A type that hangs is ended by its alarm, one that kills its worker is reported as a
    crash; the others are checked all the same."""
    from _coverage_faults import CRASH, HOOK, SLOW

    monkeypatch.setattr(coverage_pool, "_fault_hook", HOOK)
    argv = ["coverage", "--check", "--types", f"llama,{SLOW},{CRASH}", "--workers", "1", "--timeout", "20"]
    assert main([*argv, "--json"]) == 0
    rows = {r["model_type"]: r for r in json.loads(capsys.readouterr().out)["checked"]}
    assert rows["llama"]["status"] == VERIFIED
    assert rows[SLOW]["status"] == FAILED and rows[SLOW]["reason"] == "took longer than 20 s"
    assert rows[CRASH]["status"] == FAILED and "died" in rows[CRASH]["reason"]


def test_usage_errors() -> None:
    assert main(["coverage", "--resume"]) == 2
    assert main(["coverage", "--check", "--family", "qkv"]) == 2
    assert main(["coverage", "--check", "--types", "no_such_type"]) == 2
