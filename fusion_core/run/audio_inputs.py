"""Audio made from the config for a model whose forward takes audio (split from :mod:`.inputs`).

A waveform (``input_values``) or mel features (``input_features``) in the layouts models
use, with the frame masks an audio encoder takes alone; the caller keeps the first layout
the original model accepts.
"""

from __future__ import annotations

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
_MEL_KEYS = ("num_mel_bins", "feature_size", "n_mels", "input_feat_size", "num_mel_filters", "mel_bins", "input_dim")
AUDIO_SAMPLES = 16_000  # a synthetic waveform: one second at 16 kHz
AUDIO_FRAMES = 200  # synthetic mel frames when the config gives no encoder length: two seconds at a 10 ms hop


def audio_inputs(entry: nn.Module, params: Any, gen: Any, dtype: Any, workload: Workload) -> Iterator[ModelInputs]:
    """Audio made from the config for an encoder that takes it (``input_features``, ``input_values``...):
    a waveform, or mel features in both layouts models use ((batch, mels, frames) and
    (batch, frames, mels)); the run that the model accepts is the one kept."""
    import torch

    key = next((k for k in params if key_modality(k) == "audio"), None)
    if key is None:
        return
    config = getattr(entry, "config", None)
    n = max(1, workload.batch)
    masks = [] if "input_ids" in params else [k for k in _AUDIO_MASKS if k in params]
    if "values" in key:
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
        what = f"{frames} frames of {mels} mel bins"
    # a speech encoder-decoder that does not start its decoder itself (a transducer's one step, SeamlessM4T)
    start = _decoder_start(config) if "decoder_input_ids" in params else None
    for shape, length in shapes:
        x = torch.randn(*shape, generator=gen)
        kwargs: dict[str, Any] = {key: x.to(dtype) if dtype is not None else x}
        for mask in masks:
            padding = mask in _PADDING_MASKS
            kwargs[mask] = (
                torch.zeros(n, length, dtype=torch.bool) if padding else torch.ones(n, length, dtype=torch.long)
            )
        note = (
            f"audio made from the config: {length} {what}" if "values" in key else f"audio made from the config: {what}"
        )
        note += f", {key} {tuple(shape)}"
        yield ModelInputs("", kwargs, "audio", [note])
        if start is not None:
            decoder = torch.full((n, 1), start, dtype=torch.long)
            yield ModelInputs(
                "", {**kwargs, "decoder_input_ids": decoder}, "audio", [f"{note}, decoder from token {start}"]
            )


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
