"""The model's own processor, built offline: from the checkpoint's files, or from its config.

A checkpoint folder with processor or tokenizer files gets ``AutoProcessor`` /
``AutoTokenizer`` on them (``local_files_only=True``, ``trust_remote_code=False``: data
only). Without them (an ``arch:`` config, a bare checkpoint) the processor class
transformers maps to the model type is built from the config:

* the image processor (its Pillow backend: torchvision is not needed) gets the vision
  config's image size, patch size, merge size, tiles;
* the feature extractor gets the audio config's mel bins and window;
* the tokenizer is made here with the ``tokenizers`` library: one token per character,
  plus each special token the config names (``image_token_index`` -> ``image_token``) at
  its id, under the name the processor looks for;
* the processor's own arguments (patch size, image sequence length, feature select
  strategy) come from the config too.

A video processor needs torchvision in transformers 5.24; where none can be built the
processor gets none, and video inputs are made from the config
(:mod:`fusion_core.run.inputs`).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from ..families._sample_inputs import config_value
from ..model.limits import MAX_INPUT_PIXELS, MAX_INPUT_SIDE, MAX_MIN_PIXELS, MAX_SAMPLING_RATE, clamped
from ..model.side_files import pinned_side_files
from ..model.tokenizer import special_tokens, synthetic_tokenizer

__all__ = [
    "bound_sizes",
    "processor_for",
    "processor_from_config",
    "special_tokens",
    "synthetic_tokenizer",
    "tokenizer_for",
]

if TYPE_CHECKING:
    from pathlib import Path

PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
#: the processor's own arguments, read from these config keys (first found, nested configs searched)
_PROCESSOR_ARGS = {
    "patch_size": ("patch_size",),
    "vision_feature_select_strategy": ("vision_feature_select_strategy",),
    "image_seq_length": ("mm_tokens_per_image", "image_seq_length"),
    "spatial_merge_size": ("spatial_merge_size",),
}


def folder_has(folder: Path | None, names: tuple[str, ...]) -> bool:
    return folder is not None and any((folder / n).is_file() for n in names)


def _model_type(config: Any) -> str:
    kind = str(getattr(config, "model_type", "") or "")
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    if kind not in PROCESSOR_MAPPING_NAMES:  # e.g. qwen2_5_omni_thinker -> qwen2_5_omni
        for suffix in ("_thinker", "_text", "_vision_model", "_vision"):
            if kind.endswith(suffix) and kind[: -len(suffix)] in PROCESSOR_MAPPING_NAMES:
                return kind[: -len(suffix)]
    return kind


def _sized(default: Any, side: int, scale: float = 1.0) -> dict[str, int] | None:
    """The image processor's size (a ``SizeDict`` or dict) set to ``side`` pixels, its keys kept."""
    if default is None:
        return None
    items = dict(default) if isinstance(default, dict) else {k: getattr(default, k) for k in vars(default)}
    items = {k: v for k, v in items.items() if v is not None}
    if {"height", "width"} <= set(items):
        return {"height": side, "width": side}
    if "shortest_edge" in items and "longest_edge" not in items:
        return {"shortest_edge": side}
    if "longest_edge" in items and "shortest_edge" not in items:
        return {"longest_edge": int(side * scale)}
    return None  # min/max pixels (Qwen-VL): any size within them is taken as it is


def _image_processor(model_type: str, config: Any) -> Any:
    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type)
    name = names.get("pil") if isinstance(names, dict) else None
    if not name:
        return None
    cls = getattr(transformers, name)
    default = cls()
    kwargs: dict[str, Any] = {}
    for key, config_key in (
        ("patch_size", "patch_size"),
        ("temporal_patch_size", "temporal_patch_size"),
        ("merge_size", "spatial_merge_size"),
        ("max_image_tiles", "max_num_tiles"),
        ("image_grid_pinpoints", "image_grid_pinpoints"),
    ):
        value = config_value(config, config_key)
        if value is not None and hasattr(default, key):
            kwargs[key] = value if isinstance(value, (list, tuple)) else int(value)
    side = config_value(config, "image_size")
    side = int(side[0] if isinstance(side, (list, tuple)) else side) if side else None
    if side:
        side = min(side, MAX_INPUT_SIDE)  # a config's size, bounded (issue 32)
        max_size = getattr(default, "max_image_size", None)
        scale = 1.0
        if isinstance(max_size, dict) and max_size.get("longest_edge"):  # SmolVLM: tiles of the tower's size
            scale = (getattr(default.size, "longest_edge", None) or max_size["longest_edge"]) / max_size["longest_edge"]
            kwargs["max_image_size"] = {"longest_edge": side}
        for key, how in (("size", scale), ("crop_size", 1.0)):
            sized = _sized(getattr(default, key, None), side, how)
            if sized is not None:
                kwargs[key] = sized
    for key in [k for k in dir(default) if k.endswith("_size") and k not in ("size", "crop_size")]:
        # a second tower's images (DeepSeek-VL-Hybrid: ``high_res_size`` for ``high_res_vision_config``)
        tower = getattr(config, f"{key[: -len('_size')]}_vision_config", None)
        tower_side = _size_of(getattr(tower, "image_size", None))
        sized = _sized(getattr(default, key, None), min(tower_side, MAX_INPUT_SIDE), 1.0) if tower_side else None
        if sized is not None:
            kwargs[key] = sized
    return cls(**kwargs)


def _size_of(value: Any) -> int | None:
    value = value[0] if isinstance(value, (list, tuple)) and value else value
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1 else None


def _no_video_processor(image_processor: Any) -> Any:
    """A stand-in where the processor wants a video processor that needs torchvision: it takes no
    video (video inputs are made from the config), but lends the processor the sizes it reads."""
    from transformers.video_processing_utils import BaseVideoProcessor

    stand_in = object.__new__(type("NoVideoProcessor", (BaseVideoProcessor,), {}))
    for key in ("merge_size", "temporal_patch_size", "patch_size"):
        if hasattr(image_processor, key):
            setattr(stand_in, key, getattr(image_processor, key))
    stand_in.model_input_names = ["pixel_values_videos", "video_grid_thw"]
    return stand_in


def _feature_extractor(model_type: str, config: Any) -> Any:
    import transformers
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES

    name = FEATURE_EXTRACTOR_MAPPING_NAMES.get(model_type)
    if not name:
        return None
    cls = getattr(transformers, name)
    params = inspect.signature(cls.__init__).parameters
    kwargs: dict[str, Any] = {}
    mels = config_value(config, "num_mel_bins")
    if mels is not None and "feature_size" in params:
        kwargs["feature_size"] = int(mels)
    positions = config_value(config, "max_source_positions")
    if positions is not None and "chunk_length" in params:  # mel frames = 2 x positions, hop 160 at 16 kHz
        hop = params["hop_length"].default if "hop_length" in params else 160
        rate = params["sampling_rate"].default if "sampling_rate" in params else 16000
        kwargs["chunk_length"] = min(max(1, int(positions) * 2 * int(hop) // int(rate)), MAX_AUDIO_CHUNK_S)
    return cls(**kwargs)


def processor_from_config(config: Any, folder: Path | None = None) -> tuple[Any, str]:
    """The processor class transformers maps to ``config``'s model type, built from the config.

    Args:
        config: the model config.
        folder: a checkpoint folder whose image processor, feature extractor and tokenizer
            files, where present, are loaded instead of built (a processor whose video
            processor cannot load here).

    Returns:
        (processor or ``None``, what was built or why not)
    """
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    model_type = _model_type(config)
    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    cls = getattr(transformers, name, None) if name else None
    if cls is None:
        why = f"transformers maps no processor to model type {model_type!r}"
        try:  # an audio model with no processor class (AST): its feature extractor alone
            extractor = _feature_extractor(model_type, config)
        except Exception as e:  # X-Codec 2's needs torchaudio
            from ..errors import one_line

            return None, f"{why}, and its feature extractor cannot be built ({one_line(e, first=True, limit=160)})"
        if extractor is not None:
            return extractor, f"{type(extractor).__name__} built from the config (no processor is mapped to the type)"
        return None, why
    wanted = list(cls.get_attributes())
    parts: dict[str, Any] = {}
    loaded: list[str] = []
    for attr in wanted:
        if attr in ("image_processor", "feature_extractor") and folder_has(folder, ("preprocessor_config.json",)):
            from transformers import AutoFeatureExtractor, AutoImageProcessor

            auto = AutoImageProcessor if attr == "image_processor" else AutoFeatureExtractor
            with pinned_side_files(folder) as pinned:
                parts[attr] = auto.from_pretrained(str(pinned), trust_remote_code=False, local_files_only=True)
            loaded.append(attr)
        elif attr == "image_processor":
            parts[attr] = _image_processor(model_type, config)
        elif attr == "feature_extractor":
            parts[attr] = _feature_extractor(model_type, config)
        elif attr == "video_processor":  # transformers 5.24's video processors need torchvision
            parts[attr] = _no_video_processor(parts.get("image_processor"))
    sized = [note for part in parts.values() for note in bound_sizes(part)]
    if "video_processor" in parts:
        cls = _without_video_check(cls)
    params = inspect.signature(cls.__init__).parameters
    extra: dict[str, Any] = {}
    for arg, keys in _PROCESSOR_ARGS.items():
        value = config_value(config, *keys) if arg in params else None
        if value is not None:
            extra[arg] = value
    if "num_additional_image_tokens" in params:
        extra["num_additional_image_tokens"] = _additional_tokens(config)
    if "image_seq_len" in params:  # SmolVLM / Idefics3: patches per tile after the pixel shuffle
        side, patch = config_value(config, "image_size"), config_value(config, "patch_size")
        factor = config_value(config, "scale_factor") or 1
        if side and patch:
            extra["image_seq_len"] = int((int(side) // int(patch)) ** 2 / (int(factor) ** 2))
    strings: dict[str, str] = {}
    own_tokenizer = folder_has(folder, TOKENIZER_FILES)
    for _ in range(2):  # once with our token strings, again with those the processor writes itself
        if own_tokenizer:
            parts["tokenizer"] = tokenizer_for(folder, config)[0]
            loaded.append("tokenizer")
        else:
            parts["tokenizer"] = synthetic_tokenizer(config, strings)
        try:
            proc = cls(**parts, **extra)
        except Exception as e:  # a processor that cannot be built from the config: say why
            from ..errors import one_line

            return None, f"{name} cannot be built from the config ({one_line(e, first=True, named=True, limit=200)})"
        own = _written_tokens(proc, parts["tokenizer"])
        if own_tokenizer or not own or own.items() <= strings.items():
            break
        strings.update(own)
    if not own_tokenizer:
        proc.chat_template = None  # a template in the class's code writes the real tokenizer's token strings
    if sized:
        proc.fusion_size_notes = sized
    built = ", ".join(type(p).__name__ for p in parts.values() if p is not None)
    if loaded:
        return proc, f"{name} from the checkpoint's files ({built}; no video processor: it needs torchvision)"
    return proc, f"{name} built from the config ({built}; a tokenizer of characters and the config's special tokens)"


def _without_video_check(cls: type) -> type:
    """``cls`` taking the video stand-in: transformers checks a video processor's class through a
    mapping that has no entries without torchvision."""

    def check(self: Any, name: str, argument: Any) -> Any:
        return None if name == "video_processor" else cls.check_argument_for_proper_class(self, name, argument)

    return type(cls.__name__, (cls,), {"check_argument_for_proper_class": check, "__module__": cls.__module__})


def _written_tokens(proc: Any, tokenizer: Any) -> dict[str, str]:
    """The processor's token strings (``proc.image_token``...) that our tokenizer does not know as tokens."""
    vocab = tokenizer.get_vocab()
    own = {}
    for key, value in vars(proc).items():
        if key.endswith("_token") and isinstance(value, str) and value and value not in vocab:
            own[key] = value
    return own


def _additional_tokens(config: Any) -> int:
    """Positions beyond the patches (a CLS token) in a CLIP-like tower: the features the processor counts."""
    vision = getattr(config, "vision_config", None)
    kind = str(getattr(vision, "model_type", ""))
    return 1 if "clip" in kind else 0


def tokenizer_for(folder: Path | None, config: Any) -> tuple[Any, str]:
    """The checkpoint's tokenizer, or one made from the config: (tokenizer, where it came from)."""
    if folder_has(folder, TOKENIZER_FILES):
        from transformers import AutoTokenizer

        with pinned_side_files(folder) as pinned:  # the files checked, and no other (issue 32)
            tok = AutoTokenizer.from_pretrained(str(pinned), trust_remote_code=False, local_files_only=True)
        return tok, "the checkpoint's own tokenizer"
    return synthetic_tokenizer(config), "a tokenizer made from the config (characters and its special tokens)"


def processor_for(folder: Path | None, config: Any) -> tuple[Any, str]:
    """The checkpoint's processor (its files), else the one built from the config.

    Returns:
        (processor or ``None``, where it came from or why there is none)

    Raises:
        Exception: the checkpoint's processor files do not load (the caller says why).
    """
    if folder_has(folder, PROCESSOR_FILES):
        from transformers import AutoProcessor

        try:
            with pinned_side_files(folder) as pinned:  # the files checked, and no other (issue 32)
                proc = AutoProcessor.from_pretrained(str(pinned), trust_remote_code=False, local_files_only=True)
        except Exception as e:  # any failure falls back (a video processor that needs torchvision:
            # ImportError, or RecursionError where its config file is absent): the other
            # parts from the files, the rest from the config, and why in the note
            from ..errors import one_line

            why = one_line(e, first=True, named=True, limit=200)
            proc, note = processor_from_config(config, folder)
            return proc, f"{note}; the checkpoint's AutoProcessor failed ({why})"
        bound_sizes(proc)
        return proc, f"the checkpoint's own {type(proc).__name__}"
    if folder_has(folder, TOKENIZER_FILES):
        return processor_from_config(config, folder)
    return processor_from_config(config)


def image_processor_for(folder: Path | None, config: Any) -> Any:
    """The model's image processor alone (its Pillow backend), for a processor that cannot be built whole."""
    if folder_has(folder, ("preprocessor_config.json",)):
        from transformers import AutoImageProcessor

        with pinned_side_files(folder) as pinned:
            image_proc = AutoImageProcessor.from_pretrained(str(pinned), trust_remote_code=False, local_files_only=True)
    else:
        image_proc = _image_processor(_model_type(config), config)
    if image_proc is not None:
        bound_sizes(image_proc)
    return image_proc


MAX_AUDIO_CHUNK_S = 600
MAX_TILES = 64  # tiles of one image (Mllama: 4, InternVL: 12, Llama 4: 16)
_TILE_ATTRS = ("max_image_tiles", "max_num_tiles", "max_dynamic_patch")
MAX_PADDED_SAMPLES = 600 * 16_000  # samples a feature extractor pads a clip to: 10 minutes at 16 kHz
_SIDE_ATTRS = ("size", "crop_size", "max_image_size", "pad_size")
_SIDE_KEYS = ("shortest_edge", "longest_edge", "height", "width", "max_height", "max_width")


def bound_sizes(proc: Any) -> list[str]:
    """Clamp the sizes a processor's files set (image sides, pixel counts, sampling rate) to a workload bound.

    A processor file can name any size (``size: {"shortest_edge": 40000}``, ``min_pixels: 4e9``)
    and the processor then makes inputs of that size from any picture: each is clamped
    (:mod:`fusion_core.model.limits`), in place. Processors with ``min_pixels`` / ``max_pixels``
    (Qwen-VL) keep pixel counts under ``size`` too.

    Returns:
        One note per value clamped (also kept on ``proc`` as ``fusion_size_notes``).
    """
    notes: list[str] = []
    seen: set[int] = set()
    parts = [proc] + [getattr(proc, a, None) for a in ("image_processor", "video_processor", "feature_extractor")]
    for part in parts:
        if part is None or id(part) in seen or isinstance(part, (str, int, float)):
            continue
        seen.add(id(part))
        name = type(part).__name__
        # Qwen-VL-like grid processors (patches merged in time and space) keep pixel counts in ``size``
        pixels = any(hasattr(part, k) for k in ("min_pixels", "max_pixels")) or all(
            hasattr(part, k) for k in ("temporal_patch_size", "merge_size")
        )
        for attr, limit in (("min_pixels", MAX_MIN_PIXELS), ("max_pixels", MAX_INPUT_PIXELS)):
            value = getattr(part, attr, None)
            cut = clamped(value, limit, f"{name}.{attr}", notes)
            if cut is not value:
                setattr(part, attr, cut)
        rate = getattr(part, "sampling_rate", None)
        cut = clamped(rate, MAX_SAMPLING_RATE, f"{name}.sampling_rate", notes)
        if cut is not rate:
            part.sampling_rate = cut
        pinpoints = getattr(part, "image_grid_pinpoints", None)  # LLaVA-NeXT: the resolutions it tiles to
        if isinstance(pinpoints, list):
            cut = clamped(pinpoints, MAX_INPUT_SIDE, f"{name}.image_grid_pinpoints", notes)
            if cut != pinpoints:
                part.image_grid_pinpoints = [list(p) if isinstance(p, tuple) else p for p in cut]
        for attr in _TILE_ATTRS:  # how many tiles of the tower's size an image is cut into
            tiles = getattr(part, attr, None)
            cut = clamped(tiles, MAX_TILES, f"{name}.{attr}", notes)
            if cut is not tiles:
                setattr(part, attr, cut)
        chunk = getattr(part, "chunk_length", None)  # seconds a feature extractor pads audio to (Whisper: 30)
        rate = int(getattr(part, "sampling_rate", 16000) or 16000)
        cut = clamped(chunk, max(1, min(MAX_AUDIO_CHUNK_S, MAX_PADDED_SAMPLES // rate)), f"{name}.chunk_length", notes)
        if cut is not chunk:
            part.chunk_length = cut
            if isinstance(getattr(part, "n_samples", None), int):
                part.n_samples = cut * rate
            if isinstance(getattr(part, "nb_max_frames", None), int) and getattr(part, "hop_length", None):
                part.nb_max_frames = cut * rate // int(part.hop_length)
        for attr in _SIDE_ATTRS:
            size = getattr(part, attr, None)
            if size is None or isinstance(size, (str, bool)):
                continue
            if isinstance(size, (int, float)):
                cut = clamped(size, MAX_INPUT_SIDE, f"{name}.{attr}", notes)
                if cut is not size:
                    setattr(part, attr, cut)
                continue
            for key in (*_SIDE_KEYS, "min_pixels", "max_pixels"):
                value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
                limit = MAX_INPUT_SIDE
                if key in ("min_pixels", "max_pixels") or (pixels and key in ("shortest_edge", "longest_edge")):
                    limit = MAX_MIN_PIXELS if key in ("shortest_edge", "min_pixels") else MAX_INPUT_PIXELS
                cut = clamped(value, limit, f"{name}.{attr}.{key}", notes)
                if cut is value:
                    continue
                if isinstance(size, dict):
                    size[key] = cut
                else:
                    setattr(size, key, cut)
    if notes:
        try:
            proc.fusion_size_notes = notes
        except AttributeError:
            pass
    return notes
