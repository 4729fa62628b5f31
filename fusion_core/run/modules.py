"""Single modules from a checkpoint, and what a model's weights take in memory.

A modules-only check (``CheckOptions.modules_only``) checks each matched module on its own: it is materialized from the
plan's meta model (a copy of that one submodule) and filled from the checkpoint by key
through safetensors, so memory stays bounded by the matched modules, whatever the size of
the model. :func:`model_bytes` and :func:`available_bytes` size a whole model against the
memory (:mod:`fusion_core.run.offload` decides what stays on disk).
"""

from __future__ import annotations

import copy
import os
from typing import TYPE_CHECKING, Any

from ..errors import CheckError

if TYPE_CHECKING:
    from torch import nn

    from ..model.checkpoint import CheckpointIndex
    from ..plan.fusion_plan import FusionPlan

GIB = 2**30


def available_bytes() -> int | None:
    """Memory the OS can still give (``MemAvailable`` on Linux; ``None`` where unknown)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def model_bytes(plan: FusionPlan, dtype: str) -> int:
    """Bytes of the model's weights in ``dtype`` (from the checkpoint's headers)."""
    ckpt = plan.source.checkpoint
    if ckpt is None:
        return 0
    return checkpoint_bytes(ckpt, dtype)


def checkpoint_bytes(ckpt: CheckpointIndex, dtype: str) -> int:
    """Bytes of a checkpoint's tensors, each held in ``dtype`` (from its headers)."""
    import torch

    size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    return sum(info.nbytes // max(1, _itemsize(info.dtype)) * size for info in ckpt.tensors.values())


def _itemsize(dtype: str) -> int:
    return {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2}.get(dtype, 1)


def _size(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 2**20:.0f} MiB"


def materialize(plan: FusionPlan, path: str, dtype: str, device: str) -> nn.Module:
    """The original module at ``path``, alone, with its weights read from the checkpoint by key.

    Raises:
        CheckError: a tensor of the module is not in the checkpoint (or only computed by a
            conversion), or the module holds buffers the checkpoint does not store.
    """
    import torch

    from ..plan.key_names import Found

    insp = plan.inspection
    src = plan.source
    if src.checkpoint is None or src.folder is None:
        raise CheckError(f"{path}: checking a module alone needs a checkpoint folder")
    meta = insp.model.get_submodule(path)
    module = copy.deepcopy(meta).to_empty(device="cpu")
    matcher = insp.key_matcher()
    wanted = getattr(torch, dtype)
    persistent = {f"{p}.{n}" if p else n for p, m in module.named_modules() for n in m._buffers}
    persistent -= {
        f"{p}.{n}" if p else n for p, m in module.named_modules() for n in getattr(m, "_non_persistent_buffers_set", ())
    }
    names = [n for n, _ in module.named_parameters()] + sorted(persistent)
    by_file: dict[str, list[tuple[str, str]]] = {}
    for name in names:
        hit = matcher.lookup(f"{path}.{name}" if path else name)
        if not isinstance(hit, Found):
            why = hit.reason() if hit is not None else "not in the checkpoint"
            raise CheckError(f"{path}.{name}: {why}")
        by_file.setdefault(src.checkpoint.tensors[hit.key].file, []).append((name, hit.key))
    state: dict[str, Any] = {}
    for file, pairs in by_file.items():
        with src.checkpoint.open(file) as f:
            for name, key in pairs:
                state[name] = f.get_tensor(key)
    module.load_state_dict(state, strict=True, assign=True)
    _computed_buffers(module, meta, path)
    return module.to(device=device, dtype=wanted).eval()


def _computed_buffers(module: nn.Module, meta: nn.Module, path: str) -> None:
    """Fill the buffers a module computes at init (``position_ids``, rotary ``inv_freq``...).

    They are not in the checkpoint: they come from a fresh instance of the same class built
    on the CPU from the module's own ``config`` (only that module is allocated), or, for an
    integer ``position_ids``, from ``arange``.

    Raises:
        CheckError: a computed buffer neither way can fill.
    """
    import torch

    wanted = [
        (p, m, n)
        for p, m in module.named_modules()
        for n in getattr(m, "_non_persistent_buffers_set", ())
        if m._buffers.get(n) is not None
    ]
    if not wanted:
        return
    fresh = None
    config = getattr(meta, "config", None)
    if config is not None:
        try:
            with torch.device("cpu"):
                fresh = type(meta)(config)
        except Exception:  # a constructor with other arguments: fall back to arange below
            fresh = None
    for p, m, n in wanted:
        name = f"{p}.{n}" if p else n
        if fresh is not None:
            try:
                m._buffers[n] = fresh.get_buffer(name).clone()
                continue
            except AttributeError:
                pass
        buf = m._buffers[n]
        if "position_ids" in n and not buf.is_floating_point():
            m._buffers[n] = torch.arange(buf.shape[-1], dtype=buf.dtype).expand(buf.shape).clone()
            continue
        raise CheckError(f"{path}: buffer {name} is computed at init and not stored in the checkpoint")
