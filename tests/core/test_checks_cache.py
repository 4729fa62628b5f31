"""A module whose captured inputs hold a key/value cache is compared from the captured state.

CLVP's forward makes a cache for its speech decoder and the decoder's attention layers extend it
on each call. A module check that called the original layer and then the fused one on the same
cache object fed the fused one the original's keys too, and said the fusion raises ("Attention
mask should be of size (1, 1, 11, 22)") where it is exact.
"""

from __future__ import annotations


def test_a_cache_in_a_modules_inputs_is_copied_for_each_call(tmp_path) -> None:
    import torch

    from fusion_core.api import check
    from fusion_core.coverage.tiny import tiny_configs
    from fusion_core.model.classes import resolve_model_class
    from fusion_core.plan.fusion_plan import inspect_model

    how, config = list(tiny_configs("clvp"))[1]  # (the first variant's rotary size is below CLVP's minimum)
    assert how == "tiny, wider heads"
    # the decoder's ids feed the speech encoder: its vocabulary holds them (real checkpoints: 8194 both)
    config.speech_config.vocab_size = config.decoder_config.vocab_size
    torch.manual_seed(0)
    resolve_model_class(config)[0](config).eval().save_pretrained(tmp_path)
    result = check(inspect_model(str(tmp_path)).plan({"qkv": True}), upstream=False, repeats=1, time_budget=0)
    decoder = [m for m in result.modules if ".decoder.layers." in m.path]
    assert decoder and all(m.passed and m.verified_by == "end-to-end inputs" for m in decoder), [
        m.error for m in decoder
    ]
    assert result.passed
