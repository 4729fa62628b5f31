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
)

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ..families.base import Workload


#: what a part of a model (a decoder alone, a perceiver, an encoder behind a projector) takes
#: in place of tokens or pixels: a sequence of vectors
_STATE_KEYS = ("inputs_embeds", "input_embeds", "context", "patch_embeds", "hidden_states", "latents")


def state_inputs(entry: nn.Module, params: dict, gen: Any, dtype: Any, workload: Workload) -> Iterator[ModelInputs]:
    """Embeddings ``(batch, steps, width)`` for a part of a model whose forward takes vectors,
    not tokens or pixels: the width from its config, else its first Linear's or LayerNorm's
    input size (each tried), with the masks and positions its forward requires."""
    import torch
    from torch import nn

    from .results import FedInput

    key = next((k for k in _STATE_KEYS if k in params), None)
    if key is None or (key == "hidden_states" and next(iter(params)) != key):
        return
    widths = [config_value(entry.config, "hidden_size", "d_model", "embed_dim")]
    widths.append(next((m.in_features for m in entry.modules() if isinstance(m, nn.Linear)), None))
    widths.append(next((m.normalized_shape[-1] for m in entry.modules() if isinstance(m, nn.LayerNorm)), None))
    first_conv = next((m for m in entry.modules() if isinstance(m, nn.Conv1d)), None)
    channels_first = key == "latents" and first_conv is not None  # a codec's decoder: (batch, channels, frames)
    if channels_first:
        widths.insert(0, int(first_conv.in_channels))
    n, steps = max(1, workload.batch), min(workload.seq_len or DEFAULT_SEQ_LEN, _max_text(entry.config))
    float_dtype = dtype if dtype is not None else torch.float32
    for width in dict.fromkeys(w for w in widths if isinstance(w, int) and w > 0):
        shape = (n, width, steps) if channels_first else (n, steps, width)
        kwargs: dict[str, Any] = {key: torch.randn(*shape, generator=gen).to(float_dtype)}
        for name, p in params.items():
            if name == key or p.default is not inspect.Parameter.empty:
                continue
            if "mask" in name:
                kwargs[name] = torch.ones(n, steps, dtype=torch.long)
            elif name == "position_ids":
                kwargs[name] = torch.arange(steps).expand(n, steps)
        size = f"{width} channels x {steps} frames" if channels_first else f"{steps} x {width}"
        fed = [FedInput("embeddings", "embeddings", n, size, "synthetic")]
        yield ModelInputs("", kwargs, "embeddings", [f"{n} sequence(s) of {size} embeddings in {key}"], fed=fed)


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
