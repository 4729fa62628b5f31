"""How a model's weights fit in a memory budget: all in memory, or the rest on disk (issue 35).

The budget is accelerate's ``max_memory`` for the CPU (``--max-memory``), by default the
memory available now. When the weights at the check's dtype, plus room for activations,
fit in it, the model loads as usual (transformers maps the files lazily). Otherwise
``accelerate.infer_auto_device_map`` on the plan's meta model places whole blocks
(the model's ``_no_split_modules``) in memory up to the budget and the rest on ``"disk"``;
transformers then loads with that ``device_map`` and accelerate's hooks read each offloaded
block's tensors for each call: from the checkpoint's own safetensors files when the dtype is
the stored one, else from a temporary offload folder. No offloading of our own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import modules
from .modules import GIB, model_bytes

if TYPE_CHECKING:
    from ..plan.fusion_plan import FusionPlan

__all__ = ["MemoryPlan", "memory_plan"]

#: room above the weights for activations, captured inputs and outputs (a forward at real size)
HEADROOM = 1.15
#: of a budget too small for the whole model, the share the in-memory weights may take
WEIGHTS_SHARE = 0.7


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


@dataclass
class MemoryPlan:
    """Where the weights go: ``device_map`` None means all in memory."""

    weights: int  # bytes of the weights at the dtype
    budget: int  # bytes the weights may take (max_memory, or what is available)
    asked: bool  # the budget is the user's --max-memory
    device_map: dict[str, Any] | None = None
    on_disk: list[str] = field(default_factory=list)  # module paths the map puts on disk
    disk_bytes: int = 0

    @property
    def offloaded(self) -> bool:
        return self.device_map is not None

    def describe(self) -> str:
        """One line: the estimate, the budget, and what is offloaded."""
        source = "budget" if self.asked else "available"
        head = f"weights {gib(self.weights)} at this dtype, {gib(self.budget)} {source}"
        if not self.offloaded:
            return f"{head}: all in memory"
        n = len(self.on_disk)
        return (
            f"{head}: {gib(self.disk_bytes)} of weights offloaded to disk through accelerate "
            f"({n} block(s): {', '.join(d or '(the whole model)' for d in self.on_disk[:3])}{'…' if n > 3 else ''}), "
            "read for each call: slower"
        )


def memory_plan(
    plan: FusionPlan, dtype: str, device: str, max_memory: int | None = None, *, meta: Callable[[], Any] | None = None
) -> MemoryPlan:
    """The :class:`MemoryPlan` of ``plan`` at ``dtype`` for a budget (``max_memory``, else what
    is available). ``meta``: builds the meta model to place, called only when the weights do
    not fit (default: the plan's original one; a fused-layout load places the fused model)."""
    weights = model_bytes(plan, dtype)
    have = modules.available_bytes()
    budget = max_memory if max_memory is not None else have
    out = MemoryPlan(weights, int(budget or 0), max_memory is not None)
    if not str(device).startswith("cpu") or budget is None or weights * HEADROOM <= budget:
        return out
    import torch
    from accelerate import infer_auto_device_map

    model = plan.inspection.model if meta is None else meta()
    no_split = list(getattr(model, "_no_split_modules", None) or [])
    limit = int(budget * WEIGHTS_SHARE)
    device_map = infer_auto_device_map(
        model, max_memory={"cpu": limit, "disk": 2**62}, no_split_module_classes=no_split, dtype=getattr(torch, dtype)
    )
    out.device_map = dict(device_map)
    out.on_disk = [name for name, where in device_map.items() if where == "disk"]
    sizes = {n: p.numel() for n, p in model.named_parameters()}
    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    out.disk_bytes = sum(
        n * size
        for name, n in sizes.items()
        if any(d == "" or name == d or name.startswith(d + ".") for d in out.on_disk)
    )
    if not out.on_disk:  # everything fits under the limit after all
        out.device_map = None
    return out
