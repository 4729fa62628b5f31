"""Codecs whose forward requires both a waveform and its mel features (Xcodec2, NeuCodec): audio made
from the config gives the two at once, with as many feature frames as the encoder's hops."""

from __future__ import annotations

import pytest

from fusion_core.coverage.checked import VERIFIED, check_type

FAMILIES = ["patch_embeddings", "patch_embeddings_2d", "qkv", "gate_up"]


@pytest.mark.parametrize("model_type", ["xcodec2", "neucodec"])
def test_codec_with_waveform_and_features_is_verified_end_to_end(model_type: str) -> None:
    r = check_type(model_type, FAMILIES, 0)
    assert r["status"] == VERIFIED, r["reason"]
    assert r["input_kinds"] == ["audio"]
