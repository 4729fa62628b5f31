"""``gate_up``: a gated MLP's ``gate_proj`` and ``up_proj`` Linears -> one ``gate_up_proj``.

Gated MLPs (Llama, Qwen, Mistral, Gemma...) compute ``act(gate_proj(x)) * up_proj(x)``:
two products of the same input. Concatenating the weights (gate first, then up) makes it
one GEMM, as inference engines (vLLM) do at load time. The MLP's own forward runs
unchanged; rejections say why (missing member, different input sizes, bias on only one,
not a plain ``nn.Linear``).
"""

from __future__ import annotations

from ._linear_group import LinearGroupFusion


class GateUpFusion(LinearGroupFusion):
    name = "gate_up"
    description = (
        "Gated-MLP gate_proj and up_proj Linears (same input size) become one gate_up_proj Linear "
        "(gate rows first): one GEMM instead of two."
    )
    members = ("gate_proj", "up_proj")
    fused_name = "gate_up_proj"
