"""The export's rules around the streamed copy: which families, what config.json says, what is refused.

- a fused checkpoint keeps its own families on re-export (:func:`with_own_families`);
- config.json names only families that matched, in order (:func:`matched_config`), and
  with the ``fusion_core:`` prefix when stock transformers must refuse them (:func:`guard`);
- a transform group of mixed dtypes is refused before writing (:func:`check_dtypes`);
- an original-layout export holds no fused key (:func:`check_original_keys`);
- a legacy fused checkpoint is loaded through transformers' conversion and fused in
  memory (:func:`legacy_tensors`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ExportError
from ..plan.fusion_config import GUARD_PREFIX, validate_fusion_config
from ..plan.layout import listed
from .writer import OutTensor

if TYPE_CHECKING:
    import torch

    from ..model.checkpoint import CheckpointIndex
    from ..plan.fusion_plan import FusionPlan, Inspection

__all__ = ["check_dtypes", "check_original_keys", "guard", "legacy_tensors", "matched_config", "with_own_families"]


def legacy_tensors(plan: FusionPlan) -> tuple[list[OutTensor], Callable[[OutTensor], torch.Tensor]]:
    """A legacy fused checkpoint, fused: loaded (transformers splits its projections), fused in place.

    Not streamed: the model is in memory once, in the checkpoint's dtype; the written keys
    are the fused model's own names.
    """
    from ..boundary.options import DTYPES
    from ..model.checkpoint import TORCH_TO_ST
    from ..progress import drive
    from ..run.loading import iter_load

    ckpt = plan.source.checkpoint
    assert ckpt is not None
    first = next(iter(ckpt.tensors.values()))
    dtype = next((k for k, v in TORCH_TO_ST.items() if v == first.dtype), "float32")
    model = drive(iter_load(plan, dtype=dtype if dtype in DTYPES else "float32")).model
    state: dict[str, Any] = {}
    seen: set[int] = set()
    for key, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:  # a tied weight is written once, as save_pretrained does
            continue
        seen.add(tensor.data_ptr())
        state[key] = tensor.detach().contiguous()
    outputs = [
        OutTensor(key, TORCH_TO_ST[str(t.dtype).removeprefix("torch.")], tuple(t.shape)) for key, t in state.items()
    ]
    return outputs, lambda t: state[t.key]


def with_own_families(plan: FusionPlan) -> tuple[FusionPlan, str]:
    """``plan`` plus the families the checkpoint is already fused with (first, in their order).

    A fused checkpoint re-exported with other families keeps (or, in the original layout,
    undoes) the ones it has; without them its fused keys would be copied as they are.

    Returns:
        ``(plan, "")`` when ``plan`` already holds them, else a new, wider plan on the same
        opened model and a message saying which families it added (the export shows it).
    """
    insp = plan.inspection
    own = getattr(insp.source.config, "fusion_config", None)
    if not own:
        return plan, ""
    own_enabled = {name: (opts or True) for name, opts in validate_fusion_config(own)}
    added = [name for name in own_enabled if name not in plan.fusion_config]
    if not added:
        return plan, ""
    wider = insp.plan({**own_enabled, **plan.fusion_config})
    return wider, (
        f"the checkpoint is already fused with {', '.join(map(repr, added))}: the export's plan includes "
        f"{'it' if len(added) == 1 else 'them'} (families: {', '.join(wider.fusion_config)})"
    )


def matched_config(plan: FusionPlan) -> dict[str, Any]:
    """The plan's ``fusion_config``, in its order, without the families that matched nothing."""
    matched = {fam.name for fam in plan.families if fam.discovery.matches}
    return {name: opts for name, opts in plan.fusion_config.items() if name in matched}


def guard(recorded: dict[str, Any]) -> dict[str, Any]:
    return {name if name.startswith(GUARD_PREFIX) else GUARD_PREFIX + name: opts for name, opts in recorded.items()}


def check_dtypes(groups: list[Any], ckpt: CheckpointIndex) -> None:
    """Refuse a group whose tensors differ in dtype, before anything is written."""
    for g in groups:
        dtypes = {key: ckpt.tensors[key].dtype for key in g.inputs}
        if len(set(dtypes.values())) > 1:
            listed_ = ", ".join(f"{k} {d}" for k, d in dtypes.items())
            raise ExportError(
                f"{ckpt.folder}: {g.ct.family}: cannot fuse tensors of different dtypes ({listed_}); "
                "nothing was written. Convert the checkpoint to one dtype first"
            )


def check_original_keys(insp: Inspection, folder: Path) -> None:
    """An original-layout export holds no key of any fused module (read from what was written)."""
    from ..families import REGISTRY
    from ..model.checkpoint import read_index
    from ..plan.key_names import Found, KeyMatcher

    written = read_index(folder)
    assert written is not None
    matcher = KeyMatcher(written.tensors, insp.model)
    left = []
    for name in REGISTRY:
        for t in insp.discovery(name).transforms:
            sources = [matcher.lookup(k) for k in t.sources]
            for key in t.targets:
                found = matcher.lookup(key)
                if isinstance(found, Found) and not any(isinstance(s, Found) and s.key == found.key for s in sources):
                    left.append(found.key)
    if left:
        raise ExportError(
            f"verification failed: the original-layout export still holds fused keys: {listed(left)}; "
            "nothing was written (its config.json may name fewer families than the checkpoint holds)"
        )
