"""Helpers the built-in families use to make sample inputs for one module.

A family's :meth:`~fusion_core.families.base.FusionSpec.sample_inputs` builds a few
candidate ``(args, kwargs)`` from the module's ``forward`` signature, its children and the
config, and keeps the first one the (original) module accepts: :func:`first_accepted`.
Sizes not set by the :class:`~fusion_core.families.base.Workload` come from the module
(``image_size`` attributes) or the config (``image_size`` in a nested vision config).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import one_line

if TYPE_CHECKING:
    import torch
    from torch import nn

    from .base import Workload

Inputs = tuple[tuple[Any, ...], dict[str, Any]]
DEFAULT_SEQ_LEN = 128
DEFAULT_IMAGE_SIZE = 224


def generator(workload: Workload) -> torch.Generator:
    import torch

    return torch.Generator().manual_seed(int(workload.seed))


def randn(workload: Workload, gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Seeded normal values (made on the CPU, so a seed gives the same tensor on every device)."""
    import torch

    dtype = getattr(torch, workload.dtype) if isinstance(workload.dtype, str) else workload.dtype
    return torch.randn(*shape, generator=gen).to(device=workload.device, dtype=dtype)


def config_value(config: Any, *names: str) -> Any:
    """The first of ``names`` on ``config`` or its sub-configs (breadth first), else None."""
    from transformers import PretrainedConfig

    queue, seen = [config], set()
    while queue:
        cfg = queue.pop(0)
        if cfg is None or id(cfg) in seen:
            continue
        seen.add(id(cfg))
        for name in names:
            try:
                value = getattr(cfg, name, None)
            except Exception:  # transformers' per-layer configs refuse a global read: not one value
                value = None
            if value is not None and not isinstance(value, PretrainedConfig):
                return value
        queue.extend(v for v in vars(cfg).values() if isinstance(v, PretrainedConfig))
    return None


def parameters(module: nn.Module) -> dict[str, inspect.Parameter]:
    """The named parameters of ``module.forward`` (no ``*args`` / ``**kwargs``)."""
    params = inspect.signature(module.forward).parameters
    return {n: p for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def first_accepted(module: nn.Module, candidates: Iterable[tuple[str, Inputs]], what: str) -> Inputs:
    """The first candidate ``module`` runs on (original module, inference mode).

    Raises:
        ValueError: none runs; the message names each attempt and its error.
    """
    import torch

    errors = []
    for label, (args, kwargs) in candidates:
        try:
            with torch.inference_mode():
                module(*args, **kwargs)
        except Exception as e:  # a candidate the module does not accept: try the next
            errors.append(f"{label}: {one_line(e, first=True, named=True, limit=200)}")
            continue
        return args, kwargs
    detail = "; ".join(errors) or "no candidate"
    raise ValueError(f"no sample input {type(module).__name__} accepts as {what} ({detail})")


def projection_width(module: nn.Module, names: Iterable[str]) -> int | None:
    """The input size of the first child of ``module`` named in ``names`` (a Linear, or a fused
    group member's alias): the width that projection reads; ``None`` when none has one."""
    for name in names:
        width = getattr(module._modules.get(name), "in_features", None)
        if isinstance(width, int):
            return width
    return None


def seq_len(workload: Workload) -> int:
    return int(workload.seq_len) if workload.seq_len else DEFAULT_SEQ_LEN


#: the names a forward takes each image's patch grid under (MiniCPM-V's embeddings and towers)
PATCH_GRID_KEYS = ("target_sizes", "tgt_sizes")


def patch_grids(params: Any, batch: int, rows: int, cols: int) -> dict[str, torch.Tensor]:
    """Each of ``batch`` images' patch grid (``rows`` x ``cols``), under the name the forward
    whose ``params`` these are takes it (none: empty)."""
    import torch

    return {name: torch.tensor([[rows, cols]] * batch, dtype=torch.int32) for name in PATCH_GRID_KEYS if name in params}
