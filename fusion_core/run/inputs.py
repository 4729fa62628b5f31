"""Synthetic, seeded inputs of the right kind for a model, derived from its signature and config.

Checks run the original model end to end on these inputs (capturing each fused module's
real inputs on the way). What a model needs is read from its ``forward`` signature, the
config (searched through nested sub-configs such as ``thinker_config``), and the fused
modules themselves (a Conv3d's channels and kernel give the patch size, whatever the
config calls it):

* Qwen-VL-like models (``pixel_values`` + ``image_grid_thw``): flattened patches of one
  image, a text sequence with the right number of image tokens between the vision
  start/end tokens, ``mm_token_type_ids`` and ``attention_mask`` when accepted;
* video models (``pixel_values`` / ``pixel_values_videos`` without a grid): one clip of
  ``num_frames`` x ``image_size`` (both layouts, frames-first tried first); image models
  (a Conv2d patch embedding): one ``image_size`` image;
* a vision tower alone (``hidden_states`` + ``grid_thw``): flattened patches and their grid;
* language models: ``input_ids``.

:func:`fusion_core.run.candidates.candidate_inputs` returns the candidates in order; the
caller keeps the first one the original model accepts. Audio is made in :mod:`.audio_inputs`;
what parts of models and forwards that take more than tokens or pixels are fed (vectors,
encoder states, mask prompts, a time series), in :mod:`.part_inputs`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..families._sample_inputs import config_value, patch_grids
from ..model.limits import MAX_INPUT_FRAMES, MAX_INPUT_SIDE
from .results import FedInput

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ..families.base import Workload

_PIXEL_KEYS = ("pixel_values", "pixel_values_videos", "image")  # "image": BridgeTower's vision model
DEFAULT_SEQ_LEN = 128  # text tokens when neither the workload nor a prompt says
CLIP_FRAMES = 4  # a synthetic clip's frames when the config names no count (media.DEFAULT_FRAMES for files)
DEFAULT_GRID_IMAGE_SIZE = 224  # Qwen-VL-like models state no image size; their processors take any
_SPECIAL_TOKEN_NAMES = ("token_id", "token_index")


@dataclass
class ModelInputs:
    """Keyword arguments for ``entry``'s forward, and what they are."""

    entry: str  # module path whose forward is called ("" = the model itself)
    kwargs: dict[str, Any]
    kind: str  # "vision-grid" | "vision-tower" | "video" | "image" | "text" | "processor"
    notes: list[str] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)  # fused path -> times it ran in one forward
    fed: list[Any] = field(default_factory=list)  # FedInput rows: what this run feeds

    def shapes(self) -> dict[str, list[int]]:
        return {k: list(v.shape) for k, v in self.kwargs.items() if hasattr(v, "shape")}


def has_own_forward(module: nn.Module) -> bool:
    from torch import nn

    return type(module).forward is not nn.Module.forward


def entry_module(model: nn.Module, paths: list[str]) -> str:
    """The module to run end to end: the model, or (when it has no ``forward``, like the omni
    top-level classes) its largest submodule with a ``forward`` that holds every fused path."""
    if has_own_forward(model) or not paths:
        return ""
    best = ""
    for name, module in model.named_modules():
        if not name or not has_own_forward(module):
            continue
        if all(p.startswith(name + ".") for p in paths) and (not best or len(name) < len(best)):
            best = name
    return best


def special_token_ids(config: Any) -> set[int]:
    from transformers import PretrainedConfig

    ids: set[int] = set()
    stack = [config]
    while stack:
        cfg = stack.pop()
        for key, value in vars(cfg).items():
            if isinstance(value, PretrainedConfig):
                stack.append(value)
            elif key.endswith(_SPECIAL_TOKEN_NAMES) and isinstance(value, int) and not isinstance(value, bool):
                ids.add(value)
    return ids


def patch_conv(module: nn.Module) -> nn.Module | None:
    """The Conv child of a (fused or original) patch embedding: the Conv or its PatchLinear."""
    for child in module.children():
        if hasattr(child, "kernel_size") and hasattr(child, "in_channels"):
            return child
    return None


def pixel_conv(model: nn.Module, fused_paths: list[str]) -> nn.Module | None:
    """The convolution that takes the model's pixels: a fused patch embedding's, else the
    first image-channel one in the model (a fused mid-network convolution, GLM-4V's
    ``downsample`` or SegFormer's spatial reduction, takes feature maps, not pixels)."""
    fused = [c for p in fused_paths if (c := patch_conv(model.get_submodule(p))) is not None]
    fused = [c for c in fused if int(c.in_channels) <= _PIXEL_CHANNELS]
    channels = config_value(getattr(model, "config", None), "num_channels")
    if fused and (not isinstance(channels, int) or any(c.in_channels == channels for c in fused)):
        return next((c for c in fused if c.in_channels == channels), fused[0])
    if not fused_paths:
        return None
    from torch import nn

    for module in model.modules():  # a 2-D or 3-D convolution on few channels (not an audio codec's Conv1d)
        if isinstance(module, (nn.Conv2d, nn.Conv3d)) and module.in_channels <= _PIXEL_CHANNELS:
            # of the image's channels where the config says (SAM 2 fuses its 1-channel mask prompt's conv only)
            if fused and module.in_channels != channels:
                continue
            return module
    return fused[0] if fused else None


_PIXEL_CHANNELS = 4  # RGB, RGBA, a depth or mask channel added
CNN_IMAGE_SIDE = 256  # a synthetic image for a model whose config gives no size and whose stem is no patch embedding


def _generator(seed: int) -> torch.Generator:
    import torch

    return torch.Generator().manual_seed(seed)


def _text_ids(config: Any, count: int, gen: torch.Generator, vocab: int | None = None) -> list[int]:
    """``count`` seeded token ids below the text vocabulary (or ``vocab``, where smaller: the
    rows of the embedding that reads them), none of them a special token."""
    import torch

    vocab = min(text_vocab_size(config), vocab) if vocab else text_vocab_size(config)
    specials = special_token_ids(config)
    pool = [i for i in range(3, min(vocab, 4096)) if i not in specials] or list(range(vocab))
    picks = torch.randint(0, len(pool), (count,), generator=gen).tolist()
    return [pool[i] for i in picks]


def text_vocab_size(config: Any) -> int:
    """The language model's vocabulary: its text config's (a top-level ``vocab_size`` may be a default
    that the embedding does not have, e.g. PaliGemma's 257152 over a 300-token text model)."""
    getter = getattr(config, "get_text_config", None)
    text = getter() if callable(getter) else None
    value = getattr(text, "vocab_size", None)
    if isinstance(value, int) and value > 0:
        return value
    return int(config_value(config, "vocab_size") or 1000)


def input_vocab(entry: nn.Module) -> int | None:
    """The rows of the embedding that reads ``entry``'s ``input_ids``: its input embedding's, else
    (a model that names none, Dia's) its encoder's largest embedding (an encoder-decoder's ids
    go to the encoder, whose vocabulary may be smaller than the decoder's: Dia's 256 bytes);
    ``None`` where no plain embedding says."""
    from torch import nn

    try:
        embedding = entry.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        embedding = None
    if isinstance(embedding, nn.Embedding):
        return int(embedding.num_embeddings)
    encoder = getattr(entry, "encoder", None)
    if not isinstance(encoder, nn.Module) or embedding is not None:
        return None
    sizes = [int(m.num_embeddings) for m in encoder.modules() if isinstance(m, nn.Embedding)]
    return max(sizes) if sizes else None


def code_columns(entry: nn.Module) -> int | None:
    """The code columns a decoder reads per step where its ``input_ids`` are ``(batch, steps,
    columns)`` (the forward's docstring says three dimensions; Dia's audio codes, one column per
    channel): the config's count of the last dimension's name, else the rows of its largest
    embedding over the vocabulary (one table for every column, each at its own offset);
    ``None`` for ids of two dimensions."""
    from torch import nn

    dims = doc_dims(entry, "input_ids")
    if not dims or len(dims) != 3:
        return None
    config = getattr(entry, "config", None)
    count = config_value(config, dims[-1])
    if isinstance(count, int) and not isinstance(count, bool) and count >= 1:
        return count
    vocab = text_vocab_size(config)
    sizes = [int(m.num_embeddings) for m in entry.modules() if isinstance(m, nn.Embedding)]
    rows = max(sizes, default=0)
    return rows // vocab if rows > vocab and rows % vocab == 0 else None


def flat_patch_inputs(
    entry: nn.Module, params: dict, gen: torch.Generator, dtype: Any, workload: Workload
) -> Iterator[ModelInputs]:
    """Images as ``flattened_patches`` (Pix2Struct, Kosmos-2.5: one row per patch of [row id,
    column id, the patch's values], ids from 1), of the width the layer that reads them takes;
    with text (one placeholder per query and the position mask, :func:`_with_queries`) where the
    forward takes ``input_ids``, then with decoder tokens where it takes those instead."""
    import torch

    config = entry.config
    width = _patch_row_width(entry)
    if width is None:
        return
    channels = config_value(config, "num_channels")
    channels = channels if isinstance(channels, int) and channels in (1, 3, 4) and width % channels == 0 else 3
    patch = math.isqrt(width // channels) if width % channels == 0 else 0
    patch = patch if patch and patch * patch * channels == width else 0
    limit = config_value(config, "max_num_patches", "max_patches")
    side = (workload.image_size // patch if workload.image_size and patch else 0) or FLAT_PATCH_SIDE
    if isinstance(limit, int) and limit > 1:
        side = max(1, min(side, math.isqrt(limit - 1)))  # ids from 1: the row and column tables hold ``limit``
    n = max(1, workload.batch)
    rows = torch.arange(1, side + 1).repeat_interleave(side)
    cols = torch.arange(1, side + 1).repeat(side)
    values = torch.randn(n, side * side, width, generator=gen)
    ids = torch.stack([rows, cols], dim=-1).to(values.dtype).expand(n, -1, -1)
    patches = torch.cat([ids, values], dim=-1).to(dtype)
    px = f"{side * patch}x{side * patch} px as " if patch else ""
    what = f"{px}{side * side} patches of {width} values"
    note = f"{n} image(s) of {what}, flattened with their row and column ids"
    size = f"{px}{side * side} patches"
    fed = [FedInput("image", "image", n, size, "synthetic")]
    kwargs: dict[str, Any] = {"flattened_patches": patches}
    if "input_ids" in params:
        text = torch.tensor([_text_ids(config, min(workload.seq_len or 8, _max_text(config)), gen)] * n)
        extra = {"input_ids": text, **({"attention_mask": torch.ones_like(text)} if "attention_mask" in params else {})}
        for made in (_with_queries(extra, config, params, 1, "image"), extra):
            if made is not None:
                tokens = made["input_ids"].shape[1]
                both = [
                    FedInput("image+text", "image", n, size, "synthetic"),
                    FedInput("image+text", "text", n, f"{tokens} tokens", "synthetic"),
                ]
                yield ModelInputs("", {**kwargs, **made}, "image", [f"{note}, {tokens} text tokens"], fed=both)
        return
    yield ModelInputs("", kwargs, "image", [note], fed=list(fed))
    if "decoder_input_ids" in params:  # an image-to-text encoder-decoder (Pix2Struct)
        decoder, tokens = first_decoder_ids(config, n, gen)
        yield ModelInputs("", {**kwargs, "decoder_input_ids": decoder}, "image", [note, tokens], fed=list(fed))


FLAT_PATCH_SIDE = 4  # patches a side of a synthetic image given as flattened patches


def _patch_row_width(entry: nn.Module) -> int | None:
    """The values per patch of ``flattened_patches``: the input of the first Linear in the module
    that reads them (its forward names them; Kosmos-2.5's ``patch_projection``), else the config's
    ``patch_embed_hidden_size``."""
    from torch import nn

    for module in entry.modules():
        if module is entry or not has_own_forward(module) or "flattened_patches" not in _signature(module):
            continue
        if any(isinstance(c, nn.Linear) for c in module.children()):
            return int(next(c for c in module.children() if isinstance(c, nn.Linear)).in_features)
    value = config_value(getattr(entry, "config", None), "patch_embed_hidden_size")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _signature(module: nn.Module) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(module.forward).parameters)


def _grid_inputs(
    entry: nn.Module, conv: nn.Module, params: dict, gen: torch.Generator, dtype: Any, workload: Workload
) -> ModelInputs:
    import torch

    config = entry.config
    kernel = tuple(conv.kernel_size)
    channels = int(conv.in_channels)
    merge = _merge(config)
    size = workload.image_size or _size(config_value(config, "image_size")) or DEFAULT_GRID_IMAGE_SIZE
    h = max(merge, size // kernel[-1] // merge * merge)
    # without an explicit size, one merge unit wider than high: a swapped (h, w) layout shows
    w = h if workload.image_size else h + merge
    t, n = 1, max(1, workload.batch)
    pixel_values = torch.randn(n * t * h * w, channels * math.prod(kernel), generator=gen).to(dtype)
    kwargs: dict[str, Any] = {"pixel_values": pixel_values, "image_grid_thw": torch.tensor([[t, h, w]] * n)}
    if "image_merge_sizes" in params:  # each image's spatial merge (VideoLLaMA 3)
        kwargs["image_merge_sizes"] = torch.tensor([merge] * n)
    notes = [
        f"{n} image(s) of {h * kernel[-2]}x{w * kernel[-1]} px: grid (t, h, w) = ({t}, {h}, {w}), "
        f"{t * h * w} patches of {channels}x{'x'.join(map(str, kernel))} each"
    ]
    if "input_ids" in params:
        image_id = config_value(config, "image_token_id", "image_token_index")
        if image_id is None:
            raise ValueError("the config names no image token (image_token_id / image_token_index)")
        start = config_value(config, "vision_start_token_id", "image_start_token_id")
        end = config_value(config, "vision_end_token_id", "image_end_token_id")
        n_image = t * h * w // (merge * merge)
        text = max(8, (workload.seq_len or 8)) // 2
        before, after = _text_ids(config, text, gen), _text_ids(config, text, gen)
        ids = before + ([start] if start is not None else []) + [image_id] * n_image
        ids += ([end] if end is not None else []) + after
        input_ids = torch.tensor([ids] * n)
        kwargs["input_ids"] = input_ids
        if "mm_token_type_ids" in params:
            kwargs["mm_token_type_ids"] = token_types(input_ids, image_id, "image")
        if "attention_mask" in params:
            kwargs["attention_mask"] = torch.ones_like(input_ids)
        notes.append(f"{len(ids)} tokens per row, {n_image} of them image tokens")
    return ModelInputs("", kwargs, "vision-grid", notes)


def video_grid_inputs(
    entry: nn.Module,
    conv: nn.Module,
    params: dict,
    workload: Workload,
    frames: list | None = None,
    text_ids: list[int] | None = None,
    per_frame: bool = False,
) -> ModelInputs:
    """A clip for a Qwen-VL-like grid model (``pixel_values_videos`` + ``video_grid_thw``).

    ``frames`` (H x W x 3 uint8 arrays, a user's video) are resized to the grid and cut into
    tubelets in the order of the model's video processor (which needs torchvision here);
    without them the tubelets are seeded noise. The video tokens are one span between the
    vision start and end tokens, or with ``per_frame`` one span per temporal step (the
    layout of Qwen3-VL's processor, whose positions count each step as its own video).
    """
    import numpy as np
    import torch

    config = entry.config
    kernel = tuple(conv.kernel_size)
    channels, (tps, ps) = int(conv.in_channels), (kernel[0], kernel[-1])
    merge = _merge(config)
    dtype = next((p.dtype for p in entry.parameters() if p.is_floating_point()), None)
    n = max(1, workload.batch)
    unit = ps * merge
    if frames is not None:
        h0, w0 = frames[0].shape[:2]
        scale = min(1.0, 448 / max(h0, w0))
        hp = max(unit, round(h0 * scale / unit) * unit)
        wp = max(unit, round(w0 * scale / unit) * unit)
        from PIL import Image

        count = max(tps, len(frames) // tps * tps)
        clip = [np.asarray(Image.fromarray(f).resize((wp, hp), Image.BICUBIC), dtype=np.float32) for f in frames]
        clip = (clip + [clip[-1]] * count)[:count]
        mean = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)  # the CLIP mean and std
        std = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
        arr = ((np.stack(clip) / 255.0 - mean) / std).transpose(0, 3, 1, 2)  # T, C, H, W
        t, h, w = count // tps, hp // ps, wp // ps
        arr = arr.reshape(t, tps, channels, h // merge, merge, ps, w // merge, merge, ps)
        arr = arr.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(t * h * w, channels * tps * ps * ps)
        patches = torch.from_numpy(np.ascontiguousarray(arr)).repeat(n, 1)
    else:
        size = workload.image_size or 56
        h = w = max(merge, size // ps // merge * merge)
        t = max(1, (workload.frames or min(config_value(config, "num_frames") or 2 * tps, MAX_INPUT_FRAMES)) // tps)
        gen = _generator(workload.seed)
        patches = torch.randn(n * t * h * w, channels * math.prod(kernel), generator=gen)
    kwargs: dict[str, Any] = {
        "pixel_values_videos": patches.to(dtype) if dtype is not None else patches,
        "video_grid_thw": torch.tensor([[t, h, w]] * n),
    }
    notes = [f"{n} clip(s): grid (t, h, w) = ({t}, {h}, {w}), {t * tps} frames of {h * ps}x{w * ps} px"]
    if "input_ids" in params:
        video_id = config_value(config, "video_token_id", "video_token_index")
        if video_id is None:
            raise ValueError("the config names no video token (video_token_id / video_token_index)")
        start = config_value(config, "vision_start_token_id")
        end = config_value(config, "vision_end_token_id")
        gen = _generator(workload.seed + 1)
        text = text_ids if text_ids is not None else _text_ids(config, max(4, (workload.seq_len or 8) // 2), gen)
        spans = t if per_frame else 1
        span = ([start] if start is not None else []) + [video_id] * (t * h * w // (merge * merge) // spans)
        ids = (span + ([end] if end is not None else [])) * spans + text
        input_ids = torch.tensor([ids] * n)
        kwargs["input_ids"] = input_ids
        if "mm_token_type_ids" in params:
            kwargs["mm_token_type_ids"] = token_types(input_ids, video_id, "video")
        if "attention_mask" in params:
            kwargs["attention_mask"] = torch.ones_like(input_ids)
        notes.append(
            f"{len(ids)} tokens per row" + (f", the video tokens in {spans} spans, one per step" if per_frame else "")
        )
    if "video_second_per_grid" in params:  # the omni thinkers' time positions: one grid step a second
        kwargs["video_second_per_grid"] = torch.ones(n)
    if "video_merge_sizes" in params:  # each clip's spatial merge (VideoLLaMA 3)
        kwargs["video_merge_sizes"] = torch.tensor([merge] * n)
    return ModelInputs("", kwargs, "video", notes)


def _size(value: Any) -> int | None:
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    if isinstance(value, dict):
        value = value.get("height", value.get("shortest_edge"))
    return int(min(value, MAX_INPUT_SIDE)) if isinstance(value, (int, float)) and value > 0 else None  # issue 32


def _pixel_inputs(
    entry: nn.Module, conv: nn.Module, key: str, params: dict, gen: torch.Generator, dtype: Any, workload: Workload
) -> Iterator[ModelInputs]:
    """Images (Conv2d patches) or video clips (Conv3d tubelets) at the workload's or config's size.

    A model that also takes ``input_ids`` (CLIP, SigLIP: two towers) gets text next to the
    pixels first, then pixels alone.
    """
    import torch

    config = entry.config
    kernel = tuple(conv.kernel_size)
    channels = int(conv.in_channels)
    size = config_value(config, "image_size", "crop_size", "input_size")  # (LayoutLMv3: input_size)
    if workload.image_size:
        height = width = int(workload.image_size)
    elif isinstance(size, (list, tuple)):
        height, width = (int(min(v, MAX_INPUT_SIDE)) for v in (size[0], size[-1]))
    else:
        side = kernel[-2 if len(kernel) > 1 else -1]
        patches = tuple(conv.stride) == kernel  # a patch embedding: two patches a side are enough
        # a convolutional stem (a detector's backbone) halves the image five or six times:
        # a side its strides divide keeps every feature map whole
        height = width = _size(size) or (2 * side if patches else CNN_IMAGE_SIDE)
    ratios, patch = config_value(config, "scaled_images_ratios"), config_value(config, "patch_size")
    if not workload.image_size and isinstance(ratios, (list, tuple)) and ratios and isinstance(patch, int):
        # an image its smallest scale still patches whole (Depth Pro: 384 px patches of a quarter: 1536 px)
        height = width = max(height, min(math.ceil(patch / min(ratios)), MAX_INPUT_SIDE))
    n = max(1, workload.batch)
    extras: list[dict[str, Any]] = []
    if "input_ids" in params:
        ids = torch.tensor([_text_ids(config, min(workload.seq_len or 8, _max_text(config)), gen)] * n)
        extras.append(
            {"input_ids": ids, **({"attention_mask": torch.ones_like(ids)} if "attention_mask" in params else {})}
        )
        if "qformer_input_ids" in params:  # InstructBLIP's Q-Former reads the instruction too
            extras[-1].update(qformer_input_ids=ids, qformer_attention_mask=torch.ones_like(ids))
    required = [p for p, v in params.items() if v.default is inspect.Parameter.empty and p != key]
    if "input_ids" not in required:
        extras.append({})
    if workload.image_size and "interpolate_pos_encoding" in params:
        extras = [{**e, "interpolate_pos_encoding": True} for e in extras]
    clip_frames = config_value(config, "num_frames")
    if clip_frames is None and len(kernel) == 2 and "Video" in type(entry).__name__:
        # a video model whose config names no frame count (InstructBLIP-Video's clips of 4 frames)
        clip_frames = CLIP_FRAMES
    if len(kernel) == 2 and isinstance(clip_frames, int) and clip_frames >= 1 and not isinstance(clip_frames, bool):
        # a video model patching each frame with a Conv2d (TimeSformer): a clip of its frames first
        frames = int(workload.frames or min(clip_frames, MAX_INPUT_FRAMES))
        clip = torch.randn(n, frames, channels, height, width, generator=gen).to(dtype)
        for extra in extras:
            note = f"{n} clip(s) of {frames} frames, {channels} channels, {height}x{width} (frames first)"
            for made in (_with_queries(extra, config, params, frames, "video"), extra):
                if made is not None:
                    yield ModelInputs("", {key: clip, **made}, "video", [note])
        for extra in extras:  # then its frames as one batch of images (X-CLIP's vision tower alone)
            note = f"{n} clip(s) of {frames} frames, {channels} channels, {height}x{width}, the frames as a batch"
            fed = [FedInput("video", "video", n, f"{frames} frames of {width}x{height} px", "synthetic")]
            flat = clip.flatten(0, 1)
            yield ModelInputs("", {key: flat, **extra}, "video", [note], fed=fed if "input_ids" not in extra else [])
    if len(kernel) == 2:
        base = extras
        # other images the forward requires, of the same shape (SegGPT's prompt image and its mask)
        shaped = [p for p in required if "pixel_values" in p or p.endswith("masks")]
        # then square images of the shorter side (SegGPT's config states its canvas, 896 x 448: an
        # image and its prompt stacked)
        for h, w in dict.fromkeys([(height, width), (min(height, width),) * 2]):
            image = torch.randn(n, channels, h, w, generator=gen).to(dtype)
            prompts = {p: torch.randn(image.shape, generator=gen).to(dtype) for p in shaped}
            for name in (p for p in required if p.endswith("_inputs") and p not in shaped):
                # the tokens of a task the forward requires beside the image (OneFormer's task_inputs),
                # as long as the config's sequence for them
                length = config_value(config, f"{name.removesuffix('_inputs')}_seq_len")
                length = int(length) if isinstance(length, int) and 0 < length <= 512 else 8
                prompts[name] = torch.tensor([_text_ids(config, length, gen)] * n)
            grids = patch_grids(params, n, h // int(kernel[0]), w // int(kernel[1]))  # MiniCPM-V's towers
            extras = [{**e, **prompts, **grids} for e in base]
            for extra in extras:
                for made in (_with_queries(extra, config, params, 1, "image"), extra):
                    if made is None:
                        continue
                    text = f", {made['input_ids'].shape[1]} text tokens" if "input_ids" in made else ""
                    note = f"{n} image(s), {channels} channels, {h}x{w}{text}"
                    note += "".join(f", {k} {tuple(v.shape)}" for k, v in prompts.items())  # (what else it requires)
                    yield ModelInputs("", {key: image, **made}, "image", [note])
            if not shaped and h == height and w == width:
                break  # (only a model that takes several images is tried at the square size)
        extras = base
        # last, pairs of images (a keypoint matcher's (batch, 2, C, H, W): LightGlue, EfficientLoFTR)
        pairs = torch.randn(n, 2, channels, height, width, generator=gen).to(dtype)
        for extra in extras:
            note = f"{n} pair(s) of images, {channels} channels, {height}x{width}"
            yield ModelInputs("", {key: pairs, **extra}, "image", [note])
        return
    frames = int(
        workload.frames or min(config_value(config, "num_frames", "frames_per_clip") or 2 * kernel[0], MAX_INPUT_FRAMES)
    )
    clip = torch.randn(n, frames, channels, height, width, generator=gen).to(dtype)
    note = f"{n} clip(s) of {frames} frames, {channels} channels, {height}x{width}"
    for extra in extras:
        yield ModelInputs("", {key: clip, **extra}, "video", [note + " (frames first)"])
        yield ModelInputs("", {key: clip.transpose(1, 2).contiguous(), **extra}, "video", [note + " (channels first)"])


def _with_queries(extra: dict[str, Any], config: Any, params: Any, items: int, kind: str) -> dict[str, Any] | None:
    """``extra``'s text with one placeholder per query output the model puts in it (BLIP-2-like
    Q-Formers' ``num_query_tokens``, Kosmos-2's ``latent_query_num``; per frame of a clip), after
    its first token; ``None`` where the config names no such count or token. Without them the
    model's media features reach no output (InstructBLIP-Video scatters them into none)."""
    import torch

    ids = extra.get("input_ids")
    queries = config_value(config, "num_query_tokens", "latent_query_num")
    if ids is None or not isinstance(queries, int) or isinstance(queries, bool) or queries < 1:
        return None
    count = queries * items
    marked = "image_embeds_position_mask" in params  # Kosmos-2: a mask marks the positions, any token
    token = int(ids[0, -1]) if marked else config_value(config, f"{kind}_token_id", f"{kind}_token_index")
    if kind == "video" and token is None:
        token = config_value(config, "image_token_id", "image_token_index")
    if not isinstance(token, int) or isinstance(token, bool):
        return None
    ids = torch.cat([ids[:, :1], ids.new_full((ids.shape[0], count), token), ids[:, 1:]], dim=1)
    made = {**extra, "input_ids": ids}
    if "attention_mask" in extra:
        made["attention_mask"] = torch.ones_like(ids)
    if marked:
        made["image_embeds_position_mask"] = torch.zeros_like(ids)
        made["image_embeds_position_mask"][:, 1 : 1 + count] = 1
    return made


def _frames_as_images(config: Any, video: ModelInputs, spanned: bool = False) -> ModelInputs | None:
    """``video`` laid out as a model that counts a video's features by its *image* token wants it
    (GLM-4.1V, GLM-4.5V: each temporal step one run of image tokens between the image start and
    end tokens, as its processor writes them); ``None`` where the two tokens are one. ``spanned``:
    the runs between the video start and end tokens too (GLM-5-Next tells video from image
    tokens by that span alone); ``None`` where the config names no such tokens."""
    import torch

    video_id = config_value(config, "video_token_id", "video_token_index")
    image_id = config_value(config, "image_token_id", "image_token_index")
    ids, grid = video.kwargs.get("input_ids"), video.kwargs.get("video_grid_thw")
    if ids is None or grid is None or not isinstance(image_id, int) or image_id == video_id:
        return None
    start = config_value(config, "image_start_token_id")
    end = config_value(config, "image_end_token_id")
    span = [config_value(config, "video_start_token_id"), config_value(config, "video_end_token_id")]
    if spanned and not all(isinstance(t, int) for t in span):
        return None
    steps = int(grid[0][0])
    rows, types = [], []
    for row in ids.tolist():
        placeholders = [i for i, t in enumerate(row) if t == video_id]
        if not placeholders or len(placeholders) % steps:
            return None
        per_step = len(placeholders) // steps
        frames: list[int] = []
        for _ in range(steps):
            frames += (
                ([start] if start is not None else []) + [image_id] * per_step + ([end] if end is not None else [])
            )
        if spanned:
            frames = [span[0], *frames, span[1]]
        new = row[: placeholders[0]] + frames + row[placeholders[-1] + 1 :]
        rows.append(new)
        types.append([2 if t == image_id else 0 for t in new])
    kwargs = dict(video.kwargs)
    kwargs["input_ids"] = torch.tensor(rows, dtype=ids.dtype)
    if "mm_token_type_ids" in kwargs:
        kwargs["mm_token_type_ids"] = torch.tensor(types, dtype=kwargs["mm_token_type_ids"].dtype)
    if "attention_mask" in kwargs:
        kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
    note = f"video placeholders written as image tokens, {steps} run(s) of {per_step} (the model counts video by them)"
    note += ", between the video start and end tokens" if spanned else ""
    notes = [n for n in video.notes if not n.endswith(" tokens per row")]
    notes += [f"{len(rows[0])} tokens per row", note]
    return ModelInputs(video.entry, kwargs, video.kind, notes, fed=list(video.fed))


def _max_text(config: Any) -> int:
    return int(config_value(config, "max_position_embeddings") or 512)


_NOT_MEDIA = ("_mask", "_masks", "_lengths", "_sizes", "_thw")
_AUDIO_PREFIXES = (
    "input_features", "input_values", "input_audio", "audio_values", "audio_features", "audio_input", "audio_mel",
)  # fmt: skip
#: masks that mark padding (True: not a frame), where every other mask marks the frames kept (Gemma 3n's)
_PADDING_MASKS = ("audio_mel_mask",)


def key_modality(name: str) -> str | None:
    """The medium an input named ``name`` carries, read from the name as models spell it:
    ``pixel_values`` / ``pixel_values_images`` -> image, ``pixel_values_videos`` -> video,
    ``input_features`` / ``input_values`` -> audio; ``None`` for anything else (masks, sizes)."""
    if name.endswith(_NOT_MEDIA):
        return None
    if name.startswith("pixel_values"):
        return "video" if "video" in name else "image"
    if name in ("image", "flattened_patches"):  # BridgeTower's vision model; Kosmos-2.5's and Pix2Struct's patches
        return "image"
    if name.startswith(_AUDIO_PREFIXES):
        return "audio"
    return None


def token_types(ids: torch.Tensor, token_id: int, kind: str) -> torch.Tensor:
    """``mm_token_type_ids`` for ``ids``: 1 at each image token, 2 at each video token, 0 elsewhere
    (the multimodal rotary positions of Qwen-VL, GLM-4V, MiniCPM-V)."""
    import torch

    return (ids == token_id).to(torch.int32) * (2 if kind == "video" else 1)


def decoder_ids(ids: torch.Tensor, config: Any) -> tuple[torch.Tensor, int]:
    """A few decoder tokens after the decoder's start token (the start, then up to 7 of ``ids``),
    for an encoder-decoder that does not derive them itself; and the start token."""
    import torch

    start = _decoder_start(config)
    return torch.cat([torch.full_like(ids[:, :1], start), ids[:, : max(1, min(7, ids.shape[1] - 1))]], dim=1), start


def first_decoder_ids(config: Any, rows: int, gen: torch.Generator) -> tuple[torch.Tensor, str]:
    """Decoder tokens for ``rows`` inputs that give no text of their own (an image-to-text
    encoder-decoder's pixels): the start token and a few seeded ids after it, and a note."""
    import torch

    decoder, start = decoder_ids(torch.tensor([_text_ids(config, 8, gen)] * rows), config)
    return decoder, f"{decoder.shape[1]} decoder tokens from token {start}"


def _decoder_start(config: Any) -> int:
    """The token a decoder starts from: the config's ``decoder_start_token_id``, else its bos/pad, else 0."""
    for key in ("decoder_start_token_id", "bos_token_id", "pad_token_id"):
        value = config_value(config, key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


def _merge(config: Any) -> int:
    """Patches merged per side into one token (``spatial_merge_size``; Kimi-K2.5's ``merge_kernel_size`` [2, 2])."""
    merge = config_value(config, "spatial_merge_size", "merge_kernel_size")
    merge = merge[0] if isinstance(merge, (list, tuple)) and merge else merge
    return int(merge) if isinstance(merge, int) and merge > 0 else 1


def doc_dims(entry: nn.Module, name: str) -> list[str] | None:
    """The dimensions the forward's docstring gives ``name`` (`` name (`torch.Tensor` of shape
    `(batch_size, hidden_size, grid_height, grid_width)`)``), else ``None``."""
    import re

    doc = inspect.getdoc(entry.forward) or ""
    found = re.search(rf"^\s*{re.escape(name)}\s*\(`[^`]*`\s*of shape\s*`\(([^`]*)\)`", doc, re.MULTILINE)
    return [d.strip() for d in found.group(1).split(",") if d.strip()] if found else None
