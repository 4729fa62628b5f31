"""Sizes a config or a model folder controls outside the meta device, bounded before allocation.

* :func:`check_config_costs`: label tables and the position tables a few models build in
  numpy, estimated from the config's fields, refused naming the field;
* :func:`side_file_limit`: the size limits of the side files transformers reads whole
  (generation config, processor and tokenizer files).
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .safety import MAX_CONFIG_DEPTH

# --- sizes a config controls outside the meta device -------------------------------------

# id2label is a Python dict built by PretrainedConfig itself (~640 bytes per label):
# 5,000,000 labels take 3.2 GB and a minute. ImageNet-22k has 21,841 classes.
MAX_LABELS = 250_000
# Position tables some models build as Python lists and numpy arrays in their
# constructors, on the CPU whatever the device (~60 bytes per element while built).
MAX_TABLE_ELEMENTS = 8_000_000
_LABEL_KEYS = ("id2label", "label2id")


def check_config_costs(data: dict[str, Any], where: str) -> None:
    """Refuse a config whose sizes would be allocated outside the meta device, before building it.

    Label counts (``num_labels``, ``id2label``, ``label2id``) at any level, and the
    position tables a few models build in numpy (VideoMAE; XLM, FlauBERT and DistilBERT
    with sinusoidal embeddings) are estimated from the config's fields.

    Args:
        data: the parsed ``config.json``.
        where: the file or spec, for messages.

    Raises:
        ConfigError: naming the field and the limit.
    """
    stack: list[tuple[str, Any, int]] = [("", data, 0)]
    while stack:
        prefix, d, level = stack.pop()
        if not isinstance(d, dict) or level > MAX_CONFIG_DEPTH:
            continue
        labels = d.get("num_labels")
        if isinstance(labels, int) and not isinstance(labels, bool) and labels > MAX_LABELS:
            raise ConfigError(
                f"{where}: {prefix}num_labels = {labels} is more than {MAX_LABELS} labels; the label table alone "
                "would take gigabytes. Check the config"
            )
        for key in _LABEL_KEYS:
            value = d.get(key)
            if isinstance(value, (dict, list)) and len(value) > MAX_LABELS:
                raise ConfigError(
                    f"{where}: {prefix}{key} has {len(value)} entries, more than {MAX_LABELS} labels. Check the config"
                )
        elements, field_name = _table_elements(d)
        if elements > MAX_TABLE_ELEMENTS:
            raise ConfigError(
                f"{where}: {prefix}{field_name} makes a position table of {elements:,} values, built outside the "
                f"meta device (more than {MAX_TABLE_ELEMENTS:,}); refused. Check the config"
            )
        for key, v in d.items():
            if isinstance(v, dict) and key not in _LABEL_KEYS:
                stack.append((f"{prefix}{key}.", v, level + 1))


def _pos(d: dict[str, Any], key: str, default: int) -> int:
    v = d.get(key, default)
    if isinstance(v, (list, tuple)) and v:
        v = v[0]
    return v if _positive(v) else default


def _table_elements(d: dict[str, Any]) -> tuple[int, str]:
    """Values of the numpy position table(s) the model of ``d`` builds, and the field that sizes them."""
    model_type = d.get("model_type")
    if model_type == "videomae":
        side = _pos(d, "image_size", 224) // max(_pos(d, "patch_size", 16), 1)
        frames = _pos(d, "num_frames", 16) // max(_pos(d, "tubelet_size", 2), 1)
        width = max(_pos(d, "hidden_size", 768), _pos(d, "decoder_hidden_size", 384))
        return side * side * frames * width, "image_size"
    flag = {"xlm": "sinusoidal_embeddings", "flaubert": "sinusoidal_embeddings", "distilbert": "sinusoidal_pos_embds"}
    if model_type in flag and d.get(flag[model_type]):
        width = _pos(d, "dim" if model_type == "distilbert" else "emb_dim", 2048)
        return _pos(d, "max_position_embeddings", 512) * width, "max_position_embeddings"
    return 0, ""


# --- side files: read by transformers when a model is loaded --------------------------------

# Small JSON files next to the weights; real ones are a few KB.
SMALL_SIDE_FILES = (
    "generation_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
    "feature_extractor_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.json",
    "chat_template.jinja",
    "adapter_config.json",
)
MAX_SMALL_SIDE_FILE = 16 * 1024 * 1024
# Vocabularies and tokenizer models: real ones are up to a few tens of MB.
VOCAB_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)
MAX_VOCAB_FILE = 512 * 1024 * 1024
# SentencePiece models are parsed whole and their pieces cannot be counted from the bytes
# without parsing: the size is the bound (the largest public ones, Gemma 3's and mT5's, are ~5 MB).
SENTENCEPIECE_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
MAX_SENTENCEPIECE_FILE = 64 * 1024 * 1024
GENERATION_CONFIG = "generation_config.json"
MAX_GENERATION_CONFIG = 1024 * 1024


def side_file_limit(name: str) -> int | None:
    """The size limit of a side file transformers may read, ``None`` for other names."""
    if name in SMALL_SIDE_FILES:
        return MAX_GENERATION_CONFIG if name == GENERATION_CONFIG else MAX_SMALL_SIDE_FILE
    if name in SENTENCEPIECE_FILES:
        return MAX_SENTENCEPIECE_FILE
    if name in VOCAB_FILES:
        return MAX_VOCAB_FILE
    return None


def _positive(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


# --- sizes a config or processor file sets for a check's synthetic inputs -------------------

# A check feeds synthetic media of the size the model's config or processor names; a folder
# can name any size (``image_size: 40000``, ``min_pixels: 4e9``, ``num_frames: 1e9``), so the
# sizes are clamped to a workload bound first and the check says so. The bounds are above
# every public processor (SmolVLM's longest edge of 2048 px, Qwen2-VL's 12.8 M max pixels).
MAX_INPUT_SIDE = 2048  # pixels of one side
MAX_INPUT_FRAMES = 64  # video frames
MAX_MIN_PIXELS = 512 * 512  # a processor's lower bound on pixels (it scales images up to it)
MAX_INPUT_PIXELS = 4096 * 4096  # a processor's upper bound on pixels
MAX_SAMPLING_RATE = 384_000  # Hz


def clamped(value: Any, limit: int, what: str, notes: list[str] | None = None) -> Any:
    """``value`` (a size from a config or processor file) at most ``limit``; a note says when it was cut.

    Non-numbers and ``None`` are returned as they are; lists and tuples are clamped item by item.
    """
    if isinstance(value, (list, tuple)):
        return type(value)(clamped(v, limit, what, notes) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= limit:
        return value
    if notes is not None:
        notes.append(
            f"{what} = {value:g} is beyond the {limit:,} a check feeds; synthetic inputs use {limit:,} (a folder's "
            "sizes are bounded)"
        )
    return limit
