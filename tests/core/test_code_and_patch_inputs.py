"""Inputs made from the config for two classes of forward: ids read by an embedding smaller than the
text vocabulary or in several code columns per step (Dia: a byte encoder, a decoder of audio codes,
``(batch, steps, channels)``), and images given as flattened patches, rows of [row id, column id,
values] (Kosmos-2.5 with its text and position mask; Pix2Struct with decoder tokens)."""

from __future__ import annotations

import pytest

from fusion_core.coverage.checked import VERIFIED, check_type

FAMILIES = ["patch_embeddings", "patch_embeddings_2d", "qkv", "gate_up"]


@pytest.mark.parametrize(
    ("model_type", "kinds"),
    [("dia", ["text"]), ("dia_decoder", ["text"]), ("kosmos-2.5", ["image", "text"])],
)
def test_code_columns_and_flattened_patches_are_verified_end_to_end(model_type: str, kinds: list[str]) -> None:
    r = check_type(model_type, FAMILIES, 0)
    assert r["status"] == VERIFIED, r["reason"]
    assert r["input_kinds"] == kinds


def test_dia_ids_fit_the_byte_encoder_and_the_decoder_columns() -> None:
    import torch
    from transformers import DiaConfig, DiaModel

    from fusion_core.run.candidates import candidate_inputs
    from fusion_core.run.inputs import code_columns, input_vocab

    tiny = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = DiaConfig(
        encoder_config={**tiny, "vocab_size": 256, "num_key_value_heads": 2, "head_dim": 16},
        decoder_config={
            **tiny,
            "num_channels": 3,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "cross_num_attention_heads": 2,
            "cross_num_key_value_heads": 2,
            "cross_head_dim": 16,
            "cross_hidden_size": 32,
        },
        delay_pattern=[0, 8, 9],
    )
    model = DiaModel(config).eval()
    assert input_vocab(model) == 256  # the encoder's, not the decoder's 1028
    assert code_columns(model.decoder) == 3
    first = next(candidate_inputs(model, []))
    assert int(first.kwargs["input_ids"].max()) < 256
    with torch.no_grad():
        model(**first.kwargs)
    decoder = next(candidate_inputs(model.decoder, []))
    ids = decoder.kwargs["input_ids"]
    assert ids.dim() == 3 and ids.shape[-1] == 3 and decoder.kind == "text"
    assert decoder.kwargs["attention_mask"].shape == ids.shape[:2]
    with torch.no_grad():
        model.decoder(**decoder.kwargs)


def test_pix2struct_takes_flattened_patches_and_decoder_tokens() -> None:
    import torch
    from transformers import Pix2StructConfig, Pix2StructForConditionalGeneration

    from fusion_core.run.candidates import candidate_inputs

    config = Pix2StructConfig(
        text_config={"vocab_size": 300, "hidden_size": 32, "d_kv": 8, "d_ff": 64, "num_layers": 1, "num_heads": 4},
        vision_config={
            "hidden_size": 32,
            "patch_embed_hidden_size": 768,
            "d_ff": 64,
            "d_kv": 8,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
        },
    )
    model = Pix2StructForConditionalGeneration(config).eval()
    made = [c for c in candidate_inputs(model, []) if "decoder_input_ids" in c.kwargs]
    assert made, "no flattened patches with decoder tokens"
    patches = made[0].kwargs["flattened_patches"]
    assert patches.shape[-1] == 2 + 768 and made[0].kind == "image"
    assert float(patches[..., :2].min()) >= 1  # row and column ids from 1, as the processor writes them
    assert [f.modality for f in made[0].fed] == ["image"]
    with torch.no_grad():
        model(**made[0].kwargs)
