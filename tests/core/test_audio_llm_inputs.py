"""Audio made from the config reaches every audio model's end-to-end run (``coverage --check``).

Each case is a class of audio input the config alone has to make (no processor can be built
here): the tiny model of the type must be verified end to end on the modalities it takes.
"""

from __future__ import annotations

import pytest

from fusion_core.coverage.checked import VERIFIED, check_type

FAMILIES = ["patch_embeddings", "patch_embeddings_2d", "qkv", "gate_up"]


@pytest.mark.parametrize(
    ("model_type", "kinds"),
    [
        # get_audio_features reads the text's audio tokens (its time embedding): as many as the
        # audio tower makes frames, and the audio's own frame mask
        ("musicflamingo", ["audio", "text"]),
        # no audio token: the audio features are added to the text position by position
        ("voxtral_realtime", ["audio", "text"]),
        # a frame mask over the encoder's own (downsampled) frames: the optional mask left out
        ("voxtral_realtime_encoder", ["audio"]),
        ("pe_audio_encoder", ["audio"]),
        # the clips packed along time with their lengths (feature_lens)
        ("qwen3_omni_moe_audio_encoder", ["audio"]),
        # a codec's tokens in place of audio (audio_input_ids), one audio token per frame
        ("higgs_audio_v2", ["audio", "text"]),
        # counted audio+text through a Q-Former projector (with the tiny config's projector width)
        ("granite_speech", ["audio", "text"]),
        ("granite_speech_plus", ["audio", "text"]),
    ],
)
def test_audio_runs_end_to_end(model_type, kinds) -> None:
    result = check_type(model_type, FAMILIES, 0)
    assert result["status"] == VERIFIED, result["reason"]
    assert result["input_kinds"] == kinds


@pytest.mark.parametrize(("model_type", "kinds"), [("qwen2_audio", ["audio", "text"]), ("voxtral", ["audio", "text"])])
def test_audio_llms_verified_before_stay_verified(model_type, kinds) -> None:
    result = check_type(model_type, FAMILIES, 0)
    assert result["status"] == VERIFIED, result["reason"]
    assert result["input_kinds"] == kinds
