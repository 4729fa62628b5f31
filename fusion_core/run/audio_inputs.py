"""Audio made from the config for a model whose forward takes audio (split from :mod:`.inputs`).

A waveform (``input_values``), mel features (``input_features``) or a codec's tokens
(``audio_input_ids``) in the layouts models use, with the frame masks an audio encoder takes
alone (then, where they are optional, without them) and the clip lengths it takes; the caller
keeps the first layout the original model accepts.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..families._sample_inputs import config_value
from .inputs import _PADDING_MASKS, ModelInputs, _decoder_start, key_modality

if TYPE_CHECKING:
    from torch import nn

    from ..families.base import Workload


#: the masks an audio encoder's forward may take over its frames (only fed without text: with
#: text, ``attention_mask`` is the text's)
_AUDIO_MASKS = (
    "attention_mask", "feature_attention_mask", "input_features_mask", "audio_attention_mask", "padding_mask",
    "input_features_attention_mask", "audio_feature_mask", *_PADDING_MASKS,
)  # fmt: skip
#: the lengths of the clips an audio encoder's forward may take (only fed without text, as the masks)
_AUDIO_LENGTHS = ("feature_lens", "audio_feature_lengths", "feature_lengths", "waveform_lengths")
_MEL_KEYS = ("num_mel_bins", "feature_size", "n_mels", "input_feat_size", "num_mel_filters", "mel_bins", "input_dim")
AUDIO_SAMPLES = 16_000  # a synthetic waveform: one second at 16 kHz
AUDIO_FRAMES = 200  # synthetic mel frames when the config gives no encoder length: two seconds at a 10 ms hop
AUDIO_CODE_FRAMES = 25  # synthetic frames of codec tokens: two seconds at 12.5 Hz


def audio_inputs(entry: nn.Module, params: Any, gen: Any, dtype: Any, workload: Workload) -> Iterator[ModelInputs]:
    """Audio made from the config for an encoder that takes it (``input_features``, ``input_values``...):
    a waveform, or mel features in both layouts models use ((batch, mels, frames) and
    (batch, frames, mels)), or a codec's tokens (an ``..._ids`` audio input: ``num_codebooks`` of
    ``codebook_size`` per frame); the run that the model accepts is the one kept."""
    import torch

    key = next((k for k in params if key_modality(k) == "audio"), None)
    if key is None:
        return
    config = getattr(entry, "config", None)
    n = max(1, workload.batch)
    required = [k for k in params if key_modality(k) == "audio" and _required(params, k)]
    wave = next((k for k in required if "values" in k), None)
    features = next((k for k in required if "features" in k), None)
    if wave is not None and features is not None:  # a codec taking both (Xcodec2's, NeuCodec's): the two at once
        yield from _paired_audio(entry, params, gen, dtype, n, wave, features)
        return
    masks = [] if "input_ids" in params else [k for k in _AUDIO_MASKS if k in params]
    lengths = None if "input_ids" in params else next((k for k in _AUDIO_LENGTHS if k in params), None)
    books = codebooks(config) if key.endswith("_ids") else None
    if key.endswith("_ids") and books is None:
        return  # tokens of a codec the config does not size: nothing to make
    if books is not None:  # a codec's tokens, one per codebook and frame (Higgs Audio's audio_input_ids)
        frames = AUDIO_CODE_FRAMES
        shapes = [((n, frames, books[0]), frames), ((n, books[0], frames), frames)]
        what = f"{frames} frames of {books[0]} codebook tokens (of {books[1]})"
    elif "values" in key:
        # then 3 s, a length that the hops of codecs' encoders divide (MuseSpark's 1920)
        shapes = [((n, AUDIO_SAMPLES), AUDIO_SAMPLES), ((n, 1, AUDIO_SAMPLES), AUDIO_SAMPLES)]
        shapes.append(((n, 3 * AUDIO_SAMPLES), 3 * AUDIO_SAMPLES))
        what = "samples of waveform"
    else:
        mels = config_value(config, *_MEL_KEYS)
        mels = int(mels) if isinstance(mels, int) and 0 < mels <= 512 else 80
        positions = config_value(config, "max_source_positions")
        frames = 2 * positions if isinstance(positions, int) and 0 < 2 * positions <= 3000 else AUDIO_FRAMES
        shapes = [((n, mels, frames), frames), ((n, frames, mels), frames)]
        stacked = _stacked_width(entry, mels)
        if (
            stacked
        ):  # frames stacked (and delta-expanded) by the feature extractor: the encoder's first layer says how wide
            shapes += [((n, frames, stacked), frames), ((n, stacked, frames), frames)]
        shapes.append(((n, 1, frames, mels), frames))  # one channel of a spectrogram image (CLAP)
        if lengths is not None:  # the clips packed along time, told apart by their lengths (Qwen3-Omni's encoder)
            shapes.append(((mels, n * frames), frames))
        what = f"{frames} frames of {mels} mel bins"
    # a speech encoder-decoder that does not start its decoder itself (a transducer's one step, SeamlessM4T)
    start = _decoder_start(config) if "decoder_input_ids" in params else None
    # then, where every mask is optional, the same layouts without them: a mask over the encoder's own
    # (downsampled) frames is not one over the mel frames or samples (Voxtral Realtime's, PE Audio's)
    passes = [masks, []] if masks and all(_optional(params, k) for k in masks) else [masks]
    for fed_masks in passes:
        for shape, length in shapes:
            if books is not None:
                x = torch.randint(0, books[1], shape, generator=gen)
            else:
                x = torch.randn(*shape, generator=gen)
                x = x.to(dtype) if dtype is not None else x
            kwargs: dict[str, Any] = {key: x}
            for mask in fed_masks:
                kwargs[mask] = _mask(mask, n, length)
            if lengths is not None:
                kwargs[lengths] = torch.full((n,), length, dtype=torch.long)
            note = (
                f"audio made from the config: {length} {what}"
                if "values" in key
                else f"audio made from the config: {what}"
            )
            note += f", {key} {tuple(shape)}"
            if lengths is not None:
                note += f", {lengths} {length} per clip"
            if masks and not fed_masks:
                note += f", without {' / '.join(masks)}"
            yield ModelInputs("", kwargs, "audio", [note])
            if start is not None:
                decoder = torch.full((n, 1), start, dtype=torch.long)
                yield ModelInputs(
                    "", {**kwargs, "decoder_input_ids": decoder}, "audio", [f"{note}, decoder from token {start}"]
                )


def _paired_audio(
    entry: nn.Module, params: Any, gen: Any, dtype: Any, n: int, wave: str, features: str
) -> Iterator[ModelInputs]:
    """A waveform and its mel features together, for a forward that requires both (a codec's
    acoustic encoder reads the waveform, its semantic encoder the features, and the two are joined
    frame by frame): about one second of samples, a whole number of the encoder's hops, and the
    features of those samples at 100 mel frames per second (a 10 ms hop), stacked by the feature
    extractor to the width of the first layer that reads them, so as many frames as the encoder's."""
    import torch

    config = getattr(entry, "config", None)
    rate = config_value(config, "input_sampling_rate", "sampling_rate")
    rate = int(rate) if isinstance(rate, int) and 0 < rate <= 192_000 else AUDIO_SAMPLES
    hop = _hop(config)
    samples = max(1, rate // hop) * hop
    width = _reader_width(entry, features)
    mels = config_value(config, *_MEL_KEYS)
    mels = next((m for m in (mels, 80) if isinstance(m, int) and m > 0 and width % m == 0), width)
    stack = max(1, width // mels)
    # the frames of those samples (100 a second, ``stack`` at a time), then where that differs, the encoder's
    frames = list(dict.fromkeys(f for f in (samples * 100 // (rate * stack), samples // hop) if f > 0))
    waves = [(n, 1, samples), (n, samples)]  # (batch, channel, samples) as the feature extractor gives, then flat
    for count in frames:
        for wave_shape in waves:
            for feature_shape in ((n, count, width), (n, width, count)):
                kwargs: dict[str, Any] = {}
                for key, shape in ((wave, wave_shape), (features, feature_shape)):
                    x = torch.randn(*shape, generator=gen)
                    kwargs[key] = x.to(dtype) if dtype is not None else x
                for mask in (k for k in _AUDIO_MASKS if k in params and _required(params, k)):
                    kwargs[mask] = _mask(mask, n, count if "feature" in mask else samples)
                note = (
                    f"audio made from the config: {samples} samples of waveform at {rate} Hz, {wave} {wave_shape},"
                    f" with {count} frames of {width} features ({stack} x {mels} mel bins), {features} {feature_shape}"
                )
                yield ModelInputs("", kwargs, "audio", [note])


def _mask(name: str, n: int, length: int) -> Any:
    """A mask over ``length`` frames or samples of ``n`` clips, none of them padding: a padding mask
    (True marks padding) all False, an attention mask all ones."""
    import torch

    if name in _PADDING_MASKS:
        return torch.zeros(n, length, dtype=torch.bool)
    return torch.ones(n, length, dtype=torch.long)


def _hop(config: Any) -> int:
    """Samples per frame of a codec's encoder: its encoder hop (NeuCodec's, at the input rate), else
    the product of its downsampling ratios, else its hop length; 320 (20 ms at 16 kHz) if none."""
    hop = config_value(config, "encoder_hop_length")
    if not isinstance(hop, int) or hop <= 0:
        ratios = config_value(config, "downsampling_ratios")
        if isinstance(ratios, (list, tuple)) and ratios and all(isinstance(r, int) and r > 0 for r in ratios):
            hop = math.prod(ratios)
        else:
            hop = config_value(config, "hop_length")
    return int(hop) if isinstance(hop, int) and 0 < hop <= AUDIO_SAMPLES else 320


def _reader_width(entry: nn.Module, key: str) -> int:
    """The width of the features ``key``: the first layer (a Linear, Conv1d or LayerNorm) of the first
    sub-module whose forward takes ``key`` (Xcodec2's semantic encoder: a LayerNorm of 160), else the
    config's mel bins, else 80."""
    from torch import nn

    for _, module in entry.named_modules():
        if module is entry:
            continue
        try:
            takes = key in inspect.signature(module.forward).parameters
        except (TypeError, ValueError):
            continue
        if not takes:
            continue
        for layer in module.modules():
            if isinstance(layer, (nn.Linear, nn.Conv1d, nn.LayerNorm)):
                shape = getattr(layer, "normalized_shape", None)
                width = getattr(layer, "in_features", None) or getattr(layer, "in_channels", None)
                width = width or (shape or [None])[-1]
                if isinstance(width, int) and width > 0:
                    return width
        break
    mels = config_value(getattr(entry, "config", None), *_MEL_KEYS)
    return int(mels) if isinstance(mels, int) and 0 < mels <= 512 else 80


def codebooks(config: Any) -> tuple[int, int] | None:
    """(codebooks, tokens per codebook) of the audio codec whose tokens a model takes in place of
    audio (``num_codebooks``, ``codebook_size`` of its config), else None."""
    books, size = config_value(config, "num_codebooks"), config_value(config, "codebook_size")
    if all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 16 for v in (books, size)):
        return int(books), int(size)
    return None


def _optional(params: Any, name: str) -> bool:
    """Whether the forward's parameter ``name`` has a default (a mask the model goes without)."""
    param = params.get(name) if isinstance(params, dict) else None
    return isinstance(param, inspect.Parameter) and param.default is not inspect.Parameter.empty


def _required(params: Any, name: str) -> bool:
    """Whether the forward's parameter ``name`` has no default (an input the model cannot go without)."""
    param = params.get(name) if isinstance(params, dict) else None
    return isinstance(param, inspect.Parameter) and param.default is inspect.Parameter.empty


def _stacked_width(entry: nn.Module, mels: int) -> int | None:
    """The width of the encoder's first layer when it takes several mel frames at once (a
    multiple of ``mels``, e.g. 4 x 80 or 7 x 80), else None."""
    from torch import nn

    layers = (nn.Linear, nn.Conv1d, nn.LayerNorm)
    audio = [m for path, m in entry.named_modules() if any(w in path for w in _AUDIO_PARTS) and isinstance(m, layers)]
    firsts = [next((m for m in entry.modules() if isinstance(m, (nn.Linear, nn.Conv1d))), None), *audio[:1]]
    for first in firsts:  # the model's first layer, then its speech encoder's (SeamlessM4T's LayerNorm of 2 x 80)
        shape = getattr(first, "normalized_shape", None)
        width = getattr(first, "in_features", None) or getattr(first, "in_channels", None) or (shape or [None])[-1]
        if isinstance(width, int) and width != mels and width % mels == 0 and width <= 16 * mels:
            return width
    return None


_AUDIO_PARTS = ("speech_encoder", "audio_encoder", "audio_tower", "feature_projection")
