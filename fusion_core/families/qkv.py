"""``qkv``: an attention module's ``q_proj``, ``k_proj``, ``v_proj`` Linears -> one ``qkv_proj``.

The three weights (and biases) are concatenated along the output dimension in q, k, v
order, as inference engines (vLLM) do at load time. Self attention then runs one GEMM
instead of three; cross attention (queries and keys from different inputs) stays exact
and falls back to one product per projection. Rejected: a missing projection, different
input sizes, bias on only some, layers that are not plain ``nn.Linear`` (quantized or
custom layers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _samples as samples
from ._linear_group import LinearGroupFusion

if TYPE_CHECKING:
    from transformers import PretrainedConfig


class QKVFusion(LinearGroupFusion):
    name = "qkv"
    description = (
        "Attention q_proj, k_proj, v_proj Linears (same input size, bias on all or none) become one "
        "qkv_proj Linear: one GEMM for self attention; cross attention stays exact."
    )
    members = ("q_proj", "k_proj", "v_proj")
    fused_name = "qkv_proj"
    near_miss_names = (
        (
            ("q", "k", "v"),
            "projections named q, k, v (T5, Qwen2.5-Omni vision); this family fuses q_proj, k_proj, v_proj",
        ),
        (
            ("query", "key", "value"),
            "projections named query, key, value (BERT, ViT); this family fuses q_proj, k_proj, v_proj",
        ),
        (
            ("q_a_proj", "kv_a_proj_with_mqa"),
            "multi-head latent attention: low-rank q_a_proj and kv_a_proj_with_mqa take different inputs "
            "downstream, no q_proj, k_proj, v_proj to concatenate",
        ),
        (("qkv_proj",), "already one fused projection qkv_proj (Phi-3 style)"),
        (("Wqkv",), "already one fused projection Wqkv"),
        (("qkv",), "already one fused projection qkv"),
        (("query_key_value",), "already one fused projection query_key_value"),
        (("c_attn",), "already one fused projection c_attn"),
        (("in_proj_weight",), "torch MultiheadAttention: q, k, v are already one in_proj_weight"),
    )

    def sample_configs(self) -> list[PretrainedConfig]:
        return [samples.bart(), samples.qwen2()]
