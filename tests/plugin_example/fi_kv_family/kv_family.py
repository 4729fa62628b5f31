"""``kv_proj``: an attention module's ``k_proj`` and ``v_proj`` Linears -> one ``kv_proj``.

Cross attention projects the encoder states twice (keys and values) while the queries
come from the decoder; fusing only k and v gives those two one GEMM. An example plugin:
it also loads with ``fusion-core --family-file kv_family.py``.
"""

from __future__ import annotations

from fusion_core.families import LinearGroupFusion


class KVProjFusion(LinearGroupFusion):
    name = "kv_proj"
    description = "Attention k_proj and v_proj Linears (same input size) become one kv_proj Linear."
    members = ("k_proj", "v_proj")
    fused_name = "kv_proj"
