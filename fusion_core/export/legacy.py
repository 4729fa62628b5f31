"""A source stored in a legacy layout: what an export changes, said before writing.

transformers converts some checkpoints at load time: DINOv2 with ``use_swiglu_ffn`` stores
one fused ``mlp.weights_in`` (split into ``gate_proj`` / ``up_proj``) and ``query`` /
``key`` / ``value`` (renamed ``q_proj`` ...); GTE and NomicBERT store fused projections.
A fused export of such a source is written under the model's *current* names, so a later
export back to the original layout gives those names, not the source's: original ->
fused -> original is then not bitwise the source's layout. :func:`legacy_note` says so,
naming the renamed and split keys, and the export drops its round-trip claim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..plan.fusion_plan import FusionPlan

#: verification notes starting with this make the export's summary claim no round trip
LEGACY_NOTE = "layout changes: "


def _short(keys: list[str], limit: int = 2) -> str:
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def legacy_note(plan: FusionPlan, layout: str) -> str | None:
    """The note for exporting ``plan``'s legacy-layout source to ``layout``, or None.

    Only a fused export of a legacy *fused* source (:attr:`FusionPlan.legacy_fused`: it is
    loaded through transformers' conversion, so every key gets the model's current name)
    changes the layout; any other export keeps untouched keys under their stored names and
    reverses its own transforms' renamings.
    """
    if layout != "fused" or not plan.legacy_fused:
        # otherwise untouched keys keep their stored names and the transforms' own are reversed
        return None
    try:
        matcher = plan.inspection.key_matcher()
    except Exception:  # no checkpoint: nothing is exported
        return None
    renamed = dict(getattr(matcher, "_renamed", {}))
    converted = list(getattr(matcher, "_converted", {}).values())
    split: dict[str, list[str]] = {}
    for conv in converted:
        for src in conv.sources:
            split.setdefault(src, []).append(conv.model_key)
    if not split and not renamed:
        return None
    parts = []
    if renamed:
        pairs = [f"{k} -> {v}" for k, v in sorted(renamed.items()) if k not in split]
        if pairs:
            parts.append(f"{len(pairs)} key(s) renamed ({_short(pairs)})")
    if split:
        pairs = [f"{k} -> {' + '.join(sorted(v))}" for k, v in sorted(split.items())]
        parts.append(f"{len(pairs)} key(s) split ({_short(pairs, 1)})")
    return (
        f"{LEGACY_NOTE}the source stores a legacy layout that transformers converts on load; this {layout} "
        f"export writes the model's current names instead: {'; '.join(parts)}. An export back to the original "
        "layout gives these names, not the source's, so original -> fused -> original is not bitwise the "
        "source's files (stock transformers still loads either exactly)"
    )
