"""LoRA adapters across layouts: PEFT adapters converted exactly between the original and the fused model.

``source`` reads an adapter folder (config as PEFT resolves it, header only), ``rules``
plans the conversion from the fusion plan's groups, ``convert`` streams and verifies it,
``consumers`` is the child process that loads both layouts with PEFT, ``result`` holds
what a conversion reports (plain data, no torch: the window imports it). Names are
imported on first use.
"""

from __future__ import annotations

from ..lazy import lazy_attributes

_API = {
    "AdapterPlan": "result",
    "AdapterResult": "result",
    "AdapterStep": "result",
    "AdapterVerification": "result",
    "convert_adapter": "convert",
    "iter_convert_adapter": "convert",
    "plan_adapter": "convert",
}
__all__ = sorted(_API)

__getattr__ = lazy_attributes(__name__, _API)
