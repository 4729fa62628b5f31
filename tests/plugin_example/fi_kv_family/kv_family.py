"""``kv_proj``: an attention module's ``k_proj`` and ``v_proj`` Linears -> one ``kv_proj``.

Cross attention projects the encoder states twice (keys and values) while the queries
come from the decoder; fusing only k and v gives those two one GEMM. An example plugin:
it also loads with ``fusion-core --family-file kv_family.py``.

It declares one option (``fusion_config={"kv_proj": {"min_in_features": 1024}}``): small
projections gain little from one GEMM, so a user may keep them unfused.
"""

from __future__ import annotations

from fusion_core.families import LinearGroupFusion, Option, Verdict


class KVProjFusion(LinearGroupFusion):
    name = "kv_proj"
    description = "Attention k_proj and v_proj Linears (same input size) become one kv_proj Linear."
    members = ("k_proj", "v_proj")
    fused_name = "kv_proj"

    def options_schema(self):
        return {"min_in_features": Option(int, 0, "leave projections with fewer input features unfused")}

    def judge(self, module):
        verdict = super().judge(module)
        smallest = self.options["min_in_features"]
        if verdict.ok and module.k_proj.in_features < smallest:
            return Verdict.no(f"in_features {module.k_proj.in_features} < min_in_features {smallest}")
        return verdict
