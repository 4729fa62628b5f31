"""Each side's state-dict keys by the model key they load into, and the two sides matched.

A checkpoint key reaches a model key as transformers loads it (its renamings of legacy
names and base prefixes: :class:`~fusion_core.plan.key_names.KeyMatcher`), or through a
fusion family's transform when the checkpoint holds a fused layout: the fused keys stand
for the original keys their family's inverse gives back (shapes by the transform's shape
inference, no tensor data). The families are those of the config's ``fusion_config`` and
any family whose fused keys the checkpoint holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import FusionError
from .result import KeyRow

if TYPE_CHECKING:
    from ..plan.fusion_plan import CheckpointTransform, Inspection


@dataclass(frozen=True)
class Entry:
    """One model key of a side: what the checkpoint stores for it."""

    name: str  # the model key (original layout)
    stored: str  # the checkpoint key holding it (a fused key for a fused layout)
    shape: tuple[int, ...]
    dtype: str  # safetensors code
    via: str = ""  # "" | "renames" | a family
    group: CheckpointTransform | None = None  # the transform whose fused keys hold it
    index: int = 0  # its place among the group's sources
    stored_shape: tuple[int, ...] | None = None  # the stored tensor's shape, where it is not ``shape`` (fused)


def _st_dtype(t: Any) -> str:
    from ..model.checkpoint import TORCH_TO_ST

    name = str(t.dtype).removeprefix("torch.")
    return TORCH_TO_ST.get(name, name)


def _fused_plan(insp: Inspection) -> tuple[list[CheckpointTransform], dict[str, Any], list[str]]:
    """The transforms whose fused keys the checkpoint holds, the families, and notes."""
    from ..families import REGISTRY

    notes: list[str] = []
    own = getattr(insp.source.config, "fusion_config", None) or {}
    wanted: dict[str, Any] = dict(own) if isinstance(own, dict) else {}
    for name in REGISTRY:
        if name in wanted:
            continue
        try:
            plan = insp.plan({name: True})
        except FusionError:
            continue
        if any(ct.present == "fused" for ct in plan.checkpoint_transforms):
            wanted[name] = True
    if not wanted:
        return [], {}, notes
    try:
        plan = insp.plan(wanted)
    except FusionError as e:
        notes.append(f"{insp.name}: its fused layout cannot be read back ({e}); keys compared as stored")
        return [], {}, notes
    cts = [ct for ct in plan.checkpoint_transforms if ct.present == "fused"]
    return cts, {f: wanted[f] for f in dict.fromkeys(ct.family for ct in cts)}, notes


def key_view(insp: Inspection) -> tuple[dict[str, Entry], dict[str, Any], list[str]]:
    """Every key of ``insp``'s checkpoint (or of its meta model, without one) by model key.

    Returns:
        Entries by model key, the families of its fused layout, and notes.
    """
    ckpt = insp.source.checkpoint
    if ckpt is None:
        tensors = insp.model_tensors()
        return {k: Entry(k, k, tuple(t.shape), _st_dtype(t)) for k, t in tensors.items()}, {}, []
    entries: dict[str, Entry] = {}
    cts, families, notes = _fused_plan(insp)
    covered: set[str] = set()
    for ct in cts:
        for i, src in enumerate(ct.transform.sources):
            stored = ct.target_keys[min(i, len(ct.target_keys) - 1)]
            held = ckpt.tensors.get(stored)
            shape = tuple(ct.source_shapes[i])
            # what the fused key stores: e.g. the whole qkv_proj, or the flattened patch Linear
            kept = tuple(held.shape) if held is not None and tuple(held.shape) != shape else None
            entries[src] = Entry(src, stored, shape, ct.dtype, ct.family, ct, i, kept)
        covered.update(ct.target_keys)
    from ..plan.key_names import Found

    matcher = insp.key_matcher()
    for name in insp.model_tensors():
        if name in entries:
            continue
        hit = matcher.lookup(name)
        if isinstance(hit, Found) and hit.key not in covered and hit.key in ckpt.tensors:
            info = ckpt.tensors[hit.key]
            entries[name] = Entry(name, hit.key, info.shape, info.dtype, "renames" if hit.key != name else "")
            covered.add(hit.key)
    for key, info in ckpt.tensors.items():  # what loads into no model key: by its own name
        if key not in covered and key not in entries:
            entries[key] = Entry(key, key, info.shape, info.dtype)
    return entries, families, notes


def match_keys(a: dict[str, Entry], b: dict[str, Entry]) -> list[KeyRow]:
    """Rows for every model key of either side: matched ones first (A's order), then the
    removed and the added keys, each sorted."""
    rows = []
    for name, ea in a.items():
        eb = b.get(name)
        if eb is None:
            continue
        changes = tuple(c for c, differ in (("shape", ea.shape != eb.shape), ("dtype", ea.dtype != eb.dtype)) if differ)
        if changes:
            status = "changed"
        elif (ea.group is not None or eb.group is not None) and (ea.via, ea.stored) != (eb.via, eb.stored):
            status = "transformed"  # one side fused (or fused otherwise): equal once undone
        elif ea.stored != eb.stored:
            status = "renamed"
        else:
            status = "equal"
        rows.append(
            KeyRow(
                name,
                status,
                ea.stored,
                eb.stored,
                ea.shape,
                eb.shape,
                ea.dtype,
                eb.dtype,
                ea.via,
                eb.via,
                changes,
                stored_shape_a=ea.stored_shape,
                stored_shape_b=eb.stored_shape,
            )
        )
    for name in sorted(a.keys() - b.keys()):
        e = a[name]
        rows.append(
            KeyRow(name, "removed", key_a=e.stored, shape_a=e.shape, dtype_a=e.dtype, via_a=e.via,
                   stored_shape_a=e.stored_shape)
        )  # fmt: skip
    for name in sorted(b.keys() - a.keys()):
        e = b[name]
        rows.append(
            KeyRow(name, "added", key_b=e.stored, shape_b=e.shape, dtype_b=e.dtype, via_b=e.via,
                   stored_shape_b=e.stored_shape)
        )  # fmt: skip
    return rows
