"""Checkpoint-layout validation of a plan, from safetensors headers only (before any load or export)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import LoadError

if TYPE_CHECKING:
    from .fusion_plan import FusionPlan

__all__ = ["check_layout", "check_shapes", "listed", "require_checkpoint"]

_MAX_LISTED = 20


def listed(keys: list[str]) -> str:
    """``keys`` sorted and joined, the first 20 of them."""
    keys = sorted(keys)
    shown = ", ".join(keys[:_MAX_LISTED])
    return shown + (f" (and {len(keys) - _MAX_LISTED} more)" if len(keys) > _MAX_LISTED else "")


def require_checkpoint(plan: FusionPlan, *, allow_mixed: bool = False) -> None:
    """Validate the checkpoint against ``plan`` (layout and shapes, from headers), once per plan.

    :func:`check_layout` and :func:`check_shapes` run the first time only (the outcome is
    kept on the plan): a check's fused load and its original, or an export and its
    verification, share it.

    Args:
        plan: the plan, its transforms located in the checkpoint.
        allow_mixed: accept some families fused and others not (see :func:`check_layout`).

    Raises:
        LoadError: a checkpoint in neither layout (or both), or shapes that do not match its config.
    """
    done = plan.checkpoint_validated
    if done == "strict" or (allow_mixed and done == "mixed"):
        return
    check_layout(plan, allow_mixed=allow_mixed)
    if not done:
        check_shapes(plan)
    plan.checkpoint_validated = "mixed" if allow_mixed else "strict"


def check_layout(plan: FusionPlan, *, allow_mixed: bool = False) -> None:
    """Refuse a checkpoint that is in neither layout, or in both at once.

    A legacy fused checkpoint (:attr:`FusionPlan.legacy_fused`: transformers computes the
    original keys with its own conversion) passes: it loads plainly, then fuses in place.

    Args:
        plan: the plan, its transforms located in the checkpoint.
        allow_mixed: accept some families fused and others not (an export of a fused
            checkpoint that gains a family, or is unfused); keys in neither layout are
            still refused.

    Raises:
        LoadError: naming the keys expected in each layout.
    """
    where = str(plan.source.folder)
    if plan.legacy_fused:  # stored fused, split by transformers' own conversion: a plain load, then fusion
        return
    _refuse_tied(plan, where)
    if plan.layout == "missing":
        ct = next(c for c in plan.checkpoint_transforms if c.present == "missing")
        why = f" ({ct.note})" if ct.note else ""
        raise LoadError(
            f"{where}: the checkpoint is in neither the original nor the fused layout for "
            f"{ct.family!r}{why}: expected {', '.join(ct.source_keys)} (original) or {', '.join(ct.target_keys)} (fused); "
            "is this checkpoint for this model class and config?"
        )
    if plan.layout == "mixed" and allow_mixed and all(c.present != "missing" for c in plan.checkpoint_transforms):
        return
    if plan.layout == "mixed":
        orig = [k for ct in plan.checkpoint_transforms if ct.present == "original" for k in ct.source_keys]
        fused = [k for ct in plan.checkpoint_transforms if ct.present == "fused" for k in ct.target_keys]
        missing = [k for ct in plan.checkpoint_transforms if ct.present == "missing" for k in ct.source_keys]
        detail = f"original-layout keys: {listed(orig) or 'none'}; fused-layout keys: {listed(fused) or 'none'}"
        if missing:
            detail += f"; in neither layout: {listed(missing)}"
        raise LoadError(f"{where}: the checkpoint mixes layouts ({detail}); re-export it in one layout")


def _refuse_tied(plan: FusionPlan, where: str) -> None:
    """Refuse fusing parameters tied across modules (Zamba2's shared attention), with that reason.

    The checkpoint stores a tied tensor once, so the other module's keys are in neither
    layout; fusing each module on its own would untie them.
    """
    params = dict(plan.inspection.model.named_parameters(remove_duplicate=False))
    owner: dict[int, str] = {}
    for t in plan.transforms:
        for key in t.sources:
            p = params.get(key)
            if p is None:
                continue
            first = owner.setdefault(id(p), key)
            if first != key:
                raise LoadError(
                    f"{where}: {key} is tied to {first} (one tensor, stored once in the checkpoint): fusing "
                    f"{t.family!r} would untie weights the model shares across layers; fusing tied weights is "
                    "not supported, leave this family off for this model"
                )


def check_shapes(plan: FusionPlan) -> None:
    """Compare every checkpoint tensor's shape (from headers) with the plan's model's, before loading.

    Raises:
        LoadError: naming each key whose shape does not match the config.
    """
    insp = plan.inspection
    ckpt = insp.source.checkpoint
    if ckpt is None:
        return
    expected: dict[str, tuple[int, ...]] = {}
    params = {k: tuple(v.shape) for k, v in insp.model.state_dict().items()}
    transformed: set[str] = set()
    for ct in plan.checkpoint_transforms:
        t = ct.transform
        meta_shapes = [params.get(k) for k in t.sources]
        if any(s is None for s in meta_shapes):
            continue
        if ct.present == "original":
            keys, shapes = ct.source_keys, meta_shapes
        elif ct.present == "fused":
            keys, shapes = ct.target_keys, t.forward_shapes(meta_shapes)
        else:
            continue
        transformed.update(t.sources)
        expected.update(zip(keys, (tuple(s) for s in shapes)))
    matcher = insp.key_matcher()  # follows transformers' own renames (ViT's attention.query -> q_proj)
    for key, shape in params.items():
        if key in transformed:
            continue
        found = matcher.find(key)
        if found is not None:
            expected.setdefault(found[0], shape)
    bad = [
        f"{key} has shape {list(ckpt.tensors[key].shape)}, the config expects {list(shape)}"
        for key, shape in sorted(expected.items())
        if key in ckpt.tensors and tuple(ckpt.tensors[key].shape) != tuple(shape)
    ]
    if bad:
        more = f" (and {len(bad) - _MAX_LISTED} more)" if len(bad) > _MAX_LISTED else ""
        raise LoadError(
            f"{ckpt.folder}: tensor shapes do not match config.json: {'; '.join(bad[:_MAX_LISTED])}{more}; "
            "is config.json the one these weights were saved with?"
        )
