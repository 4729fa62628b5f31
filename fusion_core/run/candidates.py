"""The candidate inputs of a check's end-to-end run: what :mod:`.inputs`, :mod:`.audio_inputs`
and :mod:`.part_inputs` make for a model, in order of likelihood (split from :mod:`.inputs`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..families._sample_inputs import config_value
from ..model.limits import MAX_INPUT_SIDE
from .audio_inputs import audio_inputs
from .inputs import (
    _PIXEL_KEYS,
    DEFAULT_SEQ_LEN,
    ModelInputs,
    _frames_as_images,
    _generator,
    _grid_inputs,
    _max_text,
    _pixel_inputs,
    _signature,
    _size,
    _text_ids,
    code_columns,
    decoder_ids,
    entry_module,
    first_decoder_ids,
    flat_patch_inputs,
    input_vocab,
    key_modality,
    pixel_conv,
    video_grid_inputs,
)
from .part_inputs import (
    cross_width,
    flat_grid_pixels,
    patches_as_images,
    series_inputs,
    state_inputs,
    states_in_values,
    takes_grid,
    with_mask_prompt,
)
from .results import FedInput

if TYPE_CHECKING:
    from torch import nn

    from ..families.base import Workload


def candidate_inputs(
    model: nn.Module, fused_paths: list[str], *, seed: int = 0, dtype: Any = None, workload: Workload | None = None
) -> Iterator[ModelInputs]:
    """Candidate inputs for ``model`` in order of likelihood (seeded: same seed, same tensors).

    Args:
        model: the original (unfused) model.
        fused_paths: the module paths to be fused (their Conv tells the patch shape).
        seed: the random seed.
        dtype: floating inputs are cast to it (default: the model's dtype).
        workload: batch, text length, image size and frames (``None``: the model's own sizes).

    Raises:
        ValueError: no kind of input fits this model's forward.
    """
    from ..families.base import Workload

    workload = workload or Workload(seed=seed)
    entry_path = entry_module(model, fused_paths)
    entry = model.get_submodule(entry_path) if entry_path else model
    params = _signature(entry)
    if dtype is None:
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    conv = pixel_conv(model, fused_paths)
    found = False
    common: dict[str, Any] = {}
    if "use_cache" in params:
        common["use_cache"] = False
    if "return_dict" in params:
        common["return_dict"] = True
    gen = _generator(seed)
    if conv is not None and "pixel_values" in params and "image_grid_thw" in params:
        found = True
        inputs = _grid_inputs(entry, conv, params, gen, dtype, workload)
        inputs.entry = entry_path
        inputs.kwargs.update(common)
        yield inputs
        yield from patches_as_images(entry, conv, params, gen, dtype, workload, inputs)
        flat, rows = inputs.kwargs["pixel_values"], inputs.kwargs["image_grid_thw"].shape[0]
        batched = {**inputs.kwargs, "pixel_values": flat.reshape(rows, -1, flat.shape[-1])}
        yield ModelInputs(entry_path, batched, inputs.kind, [*inputs.notes, "patches batched per image"])  # ColQwen2
        if "pixel_values_videos" in params and "video_grid_thw" in params:
            try:
                video = video_grid_inputs(entry, conv, params, workload)
            except ValueError:
                video = None
            if video is not None:
                video.entry = entry_path
                video.kwargs.update(common)
                yield video
                steps = int(video.kwargs["video_grid_thw"][0, 0])
                if "input_ids" in params and steps > 1:  # the other token layout, one span per step
                    spans = video_grid_inputs(entry, conv, params, workload, per_frame=True)
                    spans.entry = entry_path
                    spans.kwargs.update(common)
                    yield spans
                for spanned in (False, True):  # a model that counts video frames by its image token (GLM-4V)
                    other = _frames_as_images(entry.config, video, spanned)
                    if other is not None:
                        yield other
    elif conv is not None and "grid_thw" in params and ("hidden_states" in params or "pixel_values" in params):
        found = True  # a vision tower alone: flattened patches and their grid
        inputs = _grid_inputs(entry, conv, {}, gen, dtype, workload)
        key = "hidden_states" if "hidden_states" in params else "pixel_values"
        kwargs = {key: inputs.kwargs["pixel_values"], "grid_thw": inputs.kwargs["image_grid_thw"]}
        yield ModelInputs(entry_path, kwargs, "vision-tower", inputs.notes)
        for made in patches_as_images(entry, conv, {}, gen, dtype, workload, inputs):
            shaped = {key: made.kwargs["pixel_values"], "grid_thw": made.kwargs["image_grid_thw"]}
            yield ModelInputs(entry_path, shaped, "vision-tower", made.notes)
    elif conv is None and "pixel_values" in params and "input_ids" not in params and takes_grid(params):
        found = True  # a vision tower alone whose patch embedding is a Linear: flattened patches and their grid
        key = "grid_thw" if "grid_thw" in params else "image_grid_thw"
        for flat, grid, what in flat_grid_pixels(entry, entry.config, gen, dtype, workload):
            note = f"{grid.shape[0]} image(s) of {what}"
            yield ModelInputs(entry_path, {"pixel_values": flat, key: grid, **common}, "vision-tower", [note])
    elif conv is not None and len(conv.kernel_size) in (2, 3) and any(k in params for k in _PIXEL_KEYS):
        found = True
        key = next(k for k in _PIXEL_KEYS if k in params)
        for inputs in _pixel_inputs(entry, conv, key, params, _generator(seed), dtype, workload):
            inputs.entry = entry_path
            inputs.kwargs.update(common)
            masked = with_mask_prompt(entry.config, inputs, key, params, seed, dtype)
            if masked is not None:  # a segmenter's mask prompt first: its mask embedding runs too
                yield masked
            yield inputs
            if "decoder_input_ids" in params and "input_ids" not in params:  # an image-to-text encoder-decoder
                rows = inputs.kwargs[key].shape[0]
                decoder, note = first_decoder_ids(entry.config, rows, _generator(seed))
                yield ModelInputs(
                    entry_path, {**inputs.kwargs, "decoder_input_ids": decoder}, inputs.kind, [*inputs.notes, note]
                )
    if "flattened_patches" in params and not found:  # images as rows of patches (Kosmos-2.5, Pix2Struct)
        for inputs in flat_patch_inputs(entry, params, _generator(seed), dtype, workload):
            found = True
            inputs.entry = entry_path
            inputs.kwargs.update(common)
            yield inputs
    for inputs in audio_inputs(entry, params, gen, dtype, workload):
        found = True
        inputs.entry = entry_path
        inputs.kwargs.update(common)
        yield inputs
    if "input_ids" in params:
        import torch

        found = True
        length = min(workload.seq_len or DEFAULT_SEQ_LEN, _max_text(entry.config))
        columns = code_columns(entry)  # a decoder of code columns (Dia's audio codes): (batch, steps, columns)
        vocab = input_vocab(entry)  # below the rows of the embedding that reads them (Dia's byte encoder)
        ids = torch.tensor(
            [_text_ids(entry.config, length * (columns or 1), _generator(seed), vocab)] * max(1, workload.batch)
        )
        if columns:
            ids = ids.reshape(ids.shape[0], length, columns)
        kwargs: dict[str, Any] = {"input_ids": ids, **common}
        if "attention_mask" in params:
            kwargs["attention_mask"] = torch.ones_like(ids[..., 0] if columns else ids)
        tokens = f"{ids.shape[0]} x {ids.shape[1]} text tokens"
        rows = [(kwargs, tokens + (f" in each of {columns} code columns" if columns else ""))]
        books = config_value(entry.config, "num_codebooks")
        if isinstance(books, int) and books > 1 and "decoder_input_ids" not in params and not columns:
            # a codebook decoder alone takes one row per codebook (MusicGen's), tried first
            coded = {**kwargs, "input_ids": ids.repeat_interleave(books, dim=0)}
            rows.insert(0, (coded, f"{ids.shape[0]} x {ids.shape[1]} tokens in each of {books} codebooks"))
        other = next((k for k in ("encoder_hidden_states", "cross_attention_states") if k in params), None)
        width = cross_width(entry) if other else None
        # code columns: what was fed said per step (the last dimension is no count of tokens)
        fed = (
            [FedInput("text", "text", ids.shape[0], f"{length} steps of {columns} codes", "synthetic")]
            if columns
            else []
        )
        for row, note in rows:
            if width is not None:  # a decoder alone: what its cross-attention reads, or that is never run
                states = torch.randn(ids.shape[0], max(1, length // 2), width, generator=_generator(seed + 1))
                with_states = {**row, other: states.to(dtype)}
                yield ModelInputs(
                    entry_path, with_states, "text", [f"{note}, encoder states {tuple(states.shape)}"], fed=list(fed)
                )
            yield ModelInputs(entry_path, row, "text", [note], fed=list(fed))
        if "decoder_input_ids" in params:  # an encoder-decoder that does not derive them itself
            decoder, start = decoder_ids(ids, entry.config)
            yield ModelInputs(
                entry_path,
                {**kwargs, "decoder_input_ids": decoder},
                "text",
                [f"{ids.shape[0]} x {ids.shape[1]} text tokens, {decoder.shape[1]} decoder tokens from token {start}"],
            )
        # a model that takes audio and text side by side (CLAP's two towers), tried after text alone;
        # not one that reads audio in place of audio tokens (those are counted: run/modal.py)
        side_by_side = config_value(entry.config, "audio_token_id", "audio_token_index") is None
        for audio in audio_inputs(entry, params, _generator(seed), dtype, workload) if side_by_side else ():
            yield ModelInputs(
                entry_path,
                {**kwargs, **audio.kwargs},
                "audio+text",
                [*audio.notes, f"{ids.shape[0]} x {ids.shape[1]} text tokens"],
            )
    if "past_values" in params and not found:
        found = True
        for inputs in series_inputs(entry, params, _generator(seed), dtype, workload):
            inputs.entry = entry_path
            inputs.kwargs.update(common)
            yield inputs
    side = _size(config_value(entry.config, "image_size"))
    if not found and conv is None and "pixel_values" in params and side:
        # a patch embedding that is no Conv (Llama 4's unfold and Linear): an image of the config's size
        import torch

        found = True
        side = workload.image_size or min(side, MAX_INPUT_SIDE)
        channels = int(config_value(entry.config, "num_channels") or 3)
        n = max(1, workload.batch)
        image = torch.randn(n, channels, side, side, generator=_generator(seed)).to(dtype)
        note = f"{n} image(s), {channels} channels, {side}x{side} (the config's size)"
        yield ModelInputs(entry_path, {"pixel_values": image, **common}, "image", [note])
        patch = _size(config_value(entry.config, "patch_size"))
        if patch and side % patch == 0:  # its patches flattened, one row of values each (Molmo2's tower)
            g = side // patch
            rows = image.reshape(n, channels, g, patch, g, patch).permute(0, 2, 4, 1, 3, 5).reshape(n, g * g, -1)
            note = f"{n} image(s) of {side}x{side} as {g * g} patches of {rows.shape[-1]} values"
            fed = [FedInput("image", "image", n, f"{side}x{side} px as {g * g} patches", "synthetic")]
            kwargs = {"pixel_values": rows.contiguous(), **common}
            yield ModelInputs(entry_path, kwargs, "image", [note], fed=fed)
    media = conv is not None or any(key_modality(k) in ("image", "video", "audio") for k in params)
    if not found or ("input_ids" in params and not media) or states_in_values(entry, params):
        # (last, for a text model: one that takes only embeddings although it names input_ids,
        # Qwen3-Omni's code predictor; and after a waveform, for a speech model without pre-nets)
        for inputs in state_inputs(entry, params, _generator(seed), dtype, workload):
            found = True
            inputs.entry = entry_path
            inputs.kwargs.update(common)
            yield inputs
    if not found:
        raise ValueError(
            f"cannot make inputs for {type(entry).__name__}.forward({', '.join(params)}): "
            "no pixel_values, pixel_values_videos, input_ids, past_values or inputs_embeds"
        )
