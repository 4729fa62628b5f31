"""``qkv``: an attention module's ``q_proj``, ``k_proj``, ``v_proj`` Linears -> one ``qkv_proj``.

The three weights (and biases) are concatenated along the output dimension in q, k, v
order, as inference engines (vLLM) do at load time. Self attention then runs one GEMM
instead of three; cross attention (queries and keys from different inputs) stays exact
and falls back to one product per projection. Rejected: a missing projection, different
input sizes, bias on only some, layers that are not plain ``nn.Linear`` (quantized or
custom layers).
"""

from __future__ import annotations

from ._linear_group import LinearGroupFusion


class QKVFusion(LinearGroupFusion):
    name = "qkv"
    description = (
        "Attention q_proj, k_proj, v_proj Linears (same input size, bias on all or none) become one "
        "qkv_proj Linear: one GEMM for self attention; cross attention stays exact."
    )
    members = ("q_proj", "k_proj", "v_proj")
    fused_name = "qkv_proj"
