"""Inputs for parts of models and forwards that take more than tokens or pixels (split from
:mod:`.inputs`): vectors for a part saved alone (a decoder, a perceiver), the encoder states a
decoder's cross-attention reads, a segmenter's mask prompt, grid towers' patches in the
layouts they embed, and a forecaster's time series.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..families._sample_inputs import config_value, projection_width
from .inputs import (
    DEFAULT_GRID_IMAGE_SIZE,
    DEFAULT_SEQ_LEN,
    ModelInputs,
    _generator,
    _grid_inputs,
    _max_text,
    _merge,
    _size,
    doc_dims,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ..families.base import Workload


#: what a part of a model (a decoder alone, a perceiver, an encoder behind a projector) takes
#: in place of tokens or pixels: a sequence of vectors (``input_values``, last: those of a speech
#: model without its pre-nets, SpeechT5Model's, when it has no feature encoder to read a waveform)
_STATE_KEYS = (
    "inputs_embeds", "input_embeds", "context", "patch_embeds", "hidden_states", "latents", "input_values",
)  # fmt: skip
#: the endings of other vector inputs a part requires (Molmo2's adapter: ``image_features``, SAM 3's
#: DETR decoder: ``vision_features``, ``text_features`` and ``vision_pos_encoding``; its mask
#: decoder: ``decoder_queries``)
_VECTOR_ENDINGS = ("_embeds", "_features", "_states", "_encoding", "_queries")
#: the endings of index tensors into the vectors made (Molmo2's ``pooled_patches_idx``)
_INDEX_ENDINGS = ("_idx", "_index", "_indices")
#: config widths of the raw features a part's first layer reads (Phi-4's audio encoder: its mel bins)
_INPUT_WIDTH_KEYS = ("input_size", "input_dim", "feature_size", "num_mel_bins")


def states_in_values(entry: nn.Module, params: dict) -> bool:
    """Whether ``entry`` takes hidden states in ``input_values``: a speech model built without its
    pre-nets (SpeechT5Model's) has no convolution to read a waveform with."""
    from torch import nn

    return "input_values" in params and not any(isinstance(m, nn.Conv1d | nn.Conv2d) for m in entry.modules())


def _required(p: inspect.Parameter) -> bool:
    return p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)


def _is_list(p: inspect.Parameter) -> bool:
    """Whether ``p`` takes a list of tensors (SAM 3's DETR encoder: one feature map per level)."""
    return "list[" in str(p.annotation).lower()


def reader_width(entry: nn.Module, name: str) -> int | None:
    """The input size of the Linear named after ``name`` (``patch_embeds``: BLT's
    ``patch_embedding_projection``), the layer that reads it; ``None`` when none is."""
    from torch import nn

    stem = name.removesuffix("s")
    for path, module in entry.named_modules():
        if isinstance(module, nn.Linear) and path.rsplit(".", 1)[-1].startswith(stem):
            return int(module.in_features)
    return None


def _grid_side(config: Any, steps: int) -> int:
    """The side of a square feature map: the config's patches per side, else about ``steps``'s root."""
    import math

    size, patch = _size(config_value(config, "image_size")), _size(config_value(config, "patch_size"))
    if size and patch and 1 < size // patch <= 32:
        return size // patch
    return max(2, math.isqrt(steps))


def _required_extras(
    entry: nn.Module, params: dict, key: str, n: int, steps: int, width: int, gen: Any, float_dtype: Any
) -> tuple[dict[str, Any], list[str]]:
    """What else the forward requires beside ``key``'s vectors: its masks (all kept) and positions,
    a count of the steps made (DeepSeek-OCR 2's ``num_patches``), other vectors (of the width of
    the Linear that reads them, else ``width``) and indices into the steps made."""
    import torch

    kwargs: dict[str, Any] = {}
    notes: list[str] = []
    for name, p in params.items():
        if name == key or not _required(p):
            continue
        if "mask" in name:
            kwargs[name] = torch.ones(n, steps, dtype=torch.long)
        elif name == "position_ids":
            kwargs[name] = torch.arange(steps).expand(n, steps)
        elif p.annotation in (int, "int") and name.startswith("num_"):
            kwargs[name] = steps
            notes.append(f"{name} = {steps}")
        elif name.endswith(_VECTOR_ENDINGS):
            kwargs[name] = _vectors(entry, name, p, n, steps, width, gen, float_dtype)
            notes.append(f"{name} {_shape_of(kwargs[name])}")
        elif name.endswith(_INDEX_ENDINGS):  # groups of 4 steps (one row per group; 2-D unless told)
            dims = doc_dims(entry, name)
            groups = max(1, steps // 4)
            shape = (n * groups, 4) if dims is None or len(dims) == 2 else (n, groups, 4)
            kwargs[name] = torch.randint(0, steps, shape, generator=gen)
            notes.append(f"{name} {tuple(shape)} of step indices")
    return kwargs, notes


def _optional_extras(
    entry: nn.Module, params: dict, key: str, n: int, steps: int, width: int, gen: Any, float_dtype: Any
) -> dict[str, Any]:
    """The optional vectors a part may read beside ``key``'s (the layers that read only them run
    too): its decoder's (SpeechT5Model's ``decoder_input_values``), other ``..._embeds`` (BLT's
    local decoder's ``patch_embeds``), features (SAM 3's mask decoder's ``prompt_features``),
    those it takes as a list beside a list (SAM 3's DETR encoder's ``vision_pos_embeds``) and the
    groups it pools its steps into (:func:`_groups`)."""
    import torch

    names = [f"decoder_{key}"] + [k for k in _STATE_KEYS if k != key and k.endswith("_embeds")]
    names += [k for k, p in params.items() if k != key and k.endswith(_VECTOR_ENDINGS) and _tensor(p)]
    kwargs: dict[str, Any] = {}
    for name in (k for k in dict.fromkeys(names) if k in params and not _required(params[k])):
        if name.startswith("decoder_"):
            kwargs[name] = torch.randn(n, steps, width, generator=gen).to(float_dtype)
        elif not _is_list(params[name]) or _is_list(params[key]):
            kwargs[name] = _vectors(entry, name, params[name], n, steps, width, gen, float_dtype)
    kwargs.update(_groups(params, n, steps))
    return kwargs


def _groups(params: dict, n: int, steps: int) -> dict[str, Any]:
    """A part that pools its steps into groups it is told of by a count and each step's group
    (BLT's local encoder: ``num_patches`` and ``patch_ids``): groups of 4 steps."""
    import torch

    groups = max(1, steps // 4)
    for name, p in params.items():
        if not name.startswith("num_") or p.annotation not in (int, "int", int | None, "int | None"):
            continue
        plural = name.removeprefix("num_")
        stems = (plural.removesuffix("es"), plural.removesuffix("s"))
        ids = next((f"{st}{e}" for st in stems for e in ("_ids", "_idx") if f"{st}{e}" in params), None)
        if ids is not None and not _required(params[ids]):
            return {name: groups, ids: (torch.arange(steps) * groups // steps).expand(n, steps).contiguous()}
    return {}


def _tensor(p: inspect.Parameter) -> bool:
    """Whether ``p`` may take tensors: not a flag (``output_hidden_states``)."""
    return not p.name.startswith(("output_", "return_", "use_")) and "bool" not in str(p.annotation)


def _vectors(
    entry: nn.Module, name: str, p: inspect.Parameter, n: int, steps: int, width: int, gen: Any, float_dtype: Any
) -> Any:
    """Vectors for ``name`` of the width of the Linear that reads them (else ``width``): ``(n,
    steps, width)``, or a list of one square feature map ``(n, width, side, side)`` of about
    ``steps`` positions where ``p`` takes a list."""
    import math

    import torch

    other = reader_width(entry, name) or width
    if _is_list(p):
        side = max(2, math.isqrt(steps))
        return [torch.randn(n, other, side, side, generator=gen).to(float_dtype)]
    return torch.randn(n, steps, other, generator=gen).to(float_dtype)


def _shape_of(value: Any) -> str:
    if isinstance(value, list):
        return f"[{', '.join(str(tuple(v.shape)) for v in value)}]"
    return str(tuple(value.shape)) if hasattr(value, "shape") else f"= {value}"


def state_inputs(entry: nn.Module, params: dict, gen: Any, dtype: Any, workload: Workload) -> Iterator[ModelInputs]:
    """Embeddings ``(batch, steps, width)`` for a part of a model whose forward takes vectors,
    not tokens or pixels: the width from its config, else its first Linear's or LayerNorm's
    input size, else the width of the raw features the config gives (each tried), with the masks,
    positions, counts, indices and other vectors its forward requires; then with the optional
    vectors it may read too first (see :func:`_optional_extras`). A feature map ``(batch, width, side,
    side)`` first where the docstring gives it four dimensions (Unlimited-OCR's ``patch_embeds``)."""
    import torch
    from torch import nn

    from .results import FedInput

    key = next((k for k in _STATE_KEYS if k in params), None)
    if key is None:  # other vectors the part requires first (Molmo2's adapter: image_features)
        key = next((k for k, p in params.items() if _required(p) and k.endswith(_VECTOR_ENDINGS)), None)
    if key is None or (key == "hidden_states" and next(iter(params)) != key):
        return
    widths = [config_value(entry.config, "hidden_size", "d_model", "embed_dim")]
    widths.append(next((m.in_features for m in entry.modules() if isinstance(m, nn.Linear)), None))
    widths.append(next((m.normalized_shape[-1] for m in entry.modules() if isinstance(m, nn.LayerNorm)), None))
    widths.append(config_value(entry.config, *_INPUT_WIDTH_KEYS))
    first_conv = next((m for m in entry.modules() if isinstance(m, nn.Conv1d)), None)
    channels_first = key == "latents" and first_conv is not None  # a codec's decoder: (batch, channels, frames)
    if channels_first:
        widths.insert(0, int(first_conv.in_channels))
    n, steps = max(1, workload.batch), min(workload.seq_len or DEFAULT_SEQ_LEN, _max_text(entry.config))
    dims = doc_dims(entry, key)
    listed = _is_list(params[key])  # one feature map per level: one level made
    side = _grid_side(entry.config, steps) if listed or (dims is not None and len(dims) == 4) else None
    float_dtype = dtype if dtype is not None else torch.float32
    for width in dict.fromkeys(w for w in widths if isinstance(w, int) and w > 0):
        layouts = [(n, width, side, side)] if side else []  # a feature map (batch, channels, height, width)
        if not listed:
            layouts.append((n, width, steps) if channels_first else (n, steps, width))
        for shape in layouts:
            rows = side * side if len(shape) == 4 else steps
            value = torch.randn(*shape, generator=gen).to(float_dtype)
            kwargs: dict[str, Any] = {key: [value] if listed else value}
            extra, notes = _required_extras(entry, params, key, n, rows, width, gen, float_dtype)
            kwargs.update(extra)
            if len(shape) == 4:
                size = f"{width} channels x {side}x{side}"
            else:
                size = f"{width} channels x {steps} frames" if channels_first else f"{steps} x {width}"
            fed = [FedInput("embeddings", "embeddings", n, size, "synthetic")]
            note = f"{n} {'feature map(s)' if len(shape) == 4 else 'sequence(s)'} of {size} embeddings in {key}"
            optional = _optional_extras(entry, params, key, n, rows, width, gen, float_dtype)
            if optional:  # first: the layers that read only those run too
                with_optional = [*notes, *(f"{k} {_shape_of(v)}" for k, v in optional.items())]
                yield ModelInputs("", {**kwargs, **optional}, "embeddings", [note, *with_optional], fed=list(fed))
            yield ModelInputs("", kwargs, "embeddings", [note, *notes], fed=fed)


def with_mask_prompt(
    config: Any, inputs: ModelInputs, key: str, params: dict, seed: int, dtype: Any
) -> ModelInputs | None:
    """``inputs`` with a mask prompt, for a promptable segmenter (SAM's ``input_masks``): one low-
    resolution mask per image, four times the side of its image embedding (patches per side)."""
    import torch

    pixels, patch = inputs.kwargs.get(key), config_value(config, "patch_size")
    if "input_masks" not in params or pixels is None or pixels.dim() != 4 or not isinstance(patch, int) or patch < 1:
        return None
    side = 4 * (int(pixels.shape[-1]) // patch)
    mask = torch.randn(pixels.shape[0], 1, side, side, generator=_generator(seed + 2)).to(dtype)
    notes = [*inputs.notes, f"a mask prompt of {side}x{side} per image"]
    return ModelInputs(inputs.entry, {**inputs.kwargs, "input_masks": mask}, inputs.kind, notes)


def patches_as_images(
    entry: nn.Module, conv: nn.Module, params: dict, gen: torch.Generator, dtype: Any, workload: Workload,
    inputs: ModelInputs,
) -> Iterator[ModelInputs]:  # fmt: skip
    """For a grid model whose Conv2d embeds each patch as a small image (Kimi-K2.5): ``inputs``'
    patches shaped ``(patches, channels, p, p)``, then the same on a square grid (its position
    table may hold only square grids); then both batched per image (PaddleOCR-VL's tower takes
    ``(images, patches, channels, p, p)``)."""
    if len(conv.kernel_size) != 2:
        return
    shape = (int(conv.in_channels), *map(int, conv.kernel_size))
    square = _grid_inputs(entry, conv, params, gen, dtype, _square(workload, inputs, conv))
    for batched in (False, True):
        for made in (inputs, square):
            rows = int(made.kwargs["image_grid_thw"].shape[0]) if batched else None
            pixels = made.kwargs["pixel_values"]
            pixels = pixels.reshape(rows, -1, *shape) if rows else pixels.reshape(-1, *shape)
            kwargs = {**inputs.kwargs, **made.kwargs, "pixel_values": pixels}
            note = "each patch as a small image" + (", batched per image" if batched else "")
            yield ModelInputs(inputs.entry, kwargs, inputs.kind, [*made.notes, note])


def takes_grid(params: dict) -> bool:
    return "grid_thw" in params or "image_grid_thw" in params


def _square(workload: Workload, inputs: ModelInputs, conv: nn.Module) -> Workload:
    """``workload`` with the side of ``inputs``' grid height in pixels: the next grid is square."""
    import dataclasses

    rows = int(inputs.kwargs["image_grid_thw"][0, 1])
    return dataclasses.replace(workload, image_size=rows * int(conv.kernel_size[-1]))


def flat_grid_pixels(
    tower: nn.Module, config: Any, gen: torch.Generator, dtype: Any, workload: Workload, steps: int = 1
) -> Iterator[tuple[Any, Any, str]]:
    """Flattened patches and their grid ``(t, h, w)`` for a vision tower whose patch embedding is
    a Linear over ``channels x temporal x patch x patch`` values (MuseSpark, Inkling2, Kimi-K2.5's
    towers), as ``(pixel_values, grid_thw, what)``: one image of the config's size (square, then
    one merge unit wider than high), for each patch width the config or the first Linear gives;
    ``steps`` > 1: a clip of that many temporal steps."""
    import torch
    from torch import nn

    patch = _size(config_value(config, "patch_size"))
    if not patch:
        return
    merge = _merge(config)
    channels = int(config_value(config, "num_channels", "in_channels") or 3)
    temporal = int(config_value(config, "temporal_patch_size", "patch_temporal") or 1)
    first = next((m.in_features for m in tower.modules() if isinstance(m, nn.Linear)), None)
    widths = [channels * temporal * patch * patch]
    if isinstance(first, int) and first % (patch * patch) == 0:
        widths.append(first)
    size = workload.image_size or min(_size(config_value(config, "image_size")) or DEFAULT_GRID_IMAGE_SIZE, 448)
    h = max(merge, size // patch // merge * merge)
    n = max(1, workload.batch)
    float_dtype = dtype if dtype is not None else torch.float32
    for width in dict.fromkeys(widths):
        for w in dict.fromkeys((h, h + merge)):
            flat = torch.randn(n * steps * h * w, width, generator=gen).to(float_dtype)
            grid = torch.tensor([[steps, h, w]] * n)
            clip = f"{steps * temporal} frames of " if steps > 1 else ""
            yield flat, grid, f"{clip}{h * patch}x{w * patch} px as {steps * h * w} patches of {width} values"
    dims = doc_dims(tower, "pixel_values")
    if merge > 1 and dims is not None and len(dims) == 4 and "merge" in dims[1] and "channels" in dims[-1]:
        # one block of merge x merge patches per language-model token, channels last, and the grid
        # counted in tokens, as the tower's docstring gives them (Inkling2's)
        side, tokens = patch * merge, h // merge
        blocks = torch.randn(n * steps * tokens * tokens, side, side, channels, generator=gen).to(float_dtype)
        grid = torch.tensor([[steps, tokens, tokens]] * n)
        yield blocks, grid, f"{h * patch}x{h * patch} px as {steps * tokens * tokens} blocks of {side}x{side} px"


_CROSS_NAMES = ("encoder_attn", "crossattention", "cross_attn", "cross_attention")


def cross_width(entry: nn.Module) -> int | None:
    """The width of the encoder states a decoder's cross-attention reads (its key projection's
    input size); ``None`` when it has no cross-attention."""
    for path, module in entry.named_modules():
        width = projection_width(module, ("k_proj", "key", "k")) if path.rsplit(".", 1)[-1] in _CROSS_NAMES else None
        if width is not None:
            return width
    return None


MAX_SERIES_STEPS = 512  # a time series' context made here (TimesFM 2.5's default context is 16384 steps)


def series_inputs(entry: nn.Module, params: dict, gen: Any, dtype: Any, workload: Workload) -> Iterator[ModelInputs]:
    """A time series of the config's context length (bounded) for a forecaster's ``past_values``:
    ``(batch, steps, channels)`` first, then ``(batch, steps)`` (PatchTST, TimesFM), with the
    padding and frequency the forward requires."""
    import torch

    from .results import FedInput

    config = entry.config

    def count(*names: str, default: int) -> int:  # a positive integer of the config, else ``default``
        value = config_value(config, *names)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

    patch = count("patch_length", "patch_len", default=1)
    steps = count("context_length", "context_len", default=4 * patch)
    steps = max(patch, min(steps, MAX_SERIES_STEPS) // patch * patch)
    channels = count("num_input_channels", "input_size", default=1)
    n = max(1, workload.batch)
    series = torch.randn(n, steps, channels, generator=gen).to(dtype if dtype is not None else torch.float32)
    for values in (series, series[..., 0]):
        kwargs: dict[str, Any] = {"past_values": values}
        if "past_values_padding" in params:
            kwargs["past_values_padding"] = torch.zeros(n, steps, dtype=values.dtype)
        if "freq" in params:
            kwargs["freq"] = torch.zeros(n, 1, dtype=torch.long)
        size = f"{steps} steps x {channels} channel(s)" if values.dim() == 3 else f"{steps} steps"
        fed = [FedInput("time series", "time series", n, size, "synthetic")]
        yield ModelInputs("", kwargs, "time series", [f"{n} time series of {size}"], fed=fed)
