"""``gate_up``: a gated MLP's ``gate_proj`` and ``up_proj`` Linears -> one ``gate_up_proj``.

Gated MLPs (Llama, Qwen, Mistral, Gemma...) compute ``act(gate_proj(x)) * up_proj(x)``:
two products of the same input. Concatenating the weights (gate first, then up) makes it
one GEMM, as inference engines (vLLM) do at load time. The MLP's own forward runs
unchanged; rejections say why (missing member, different input sizes, bias on only one,
not a plain ``nn.Linear``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _samples as samples
from ._linear_group import LinearGroupFusion

if TYPE_CHECKING:
    from transformers import PretrainedConfig


class GateUpFusion(LinearGroupFusion):
    name = "gate_up"
    description = (
        "Gated-MLP gate_proj and up_proj Linears (same input size) become one gate_up_proj Linear "
        "(gate rows first): one GEMM instead of two."
    )
    members = ("gate_proj", "up_proj")
    fused_name = "gate_up_proj"
    # act(gate) * up only reads its inputs element-wise: the two halves stay views of the one
    # product (a copy of a 512-token bfloat16 product cost as much as the fusion saved)
    views = True
    near_miss_names = (
        (("w1", "w3"), "gated MLP named w1, w3 (Mixtral style); this family fuses gate_proj, up_proj"),
        (("wi_0", "wi_1"), "gated MLP named wi_0, wi_1 (T5 v1.1 style); this family fuses gate_proj, up_proj"),
        (("gate_up_proj",), "already one fused gate_up_proj"),
        (("wi", "wo"), "a plain MLP (wi, activation, wo): not gated, one up projection, nothing to concatenate"),
        (("fc1", "fc2"), "a plain MLP (fc1, activation, fc2): not gated, one up projection, nothing to concatenate"),
    )

    def sample_configs(self) -> list[PretrainedConfig]:
        return [samples.qwen2(), samples.gemma()]
