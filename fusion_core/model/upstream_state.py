"""transformers' own fusion, as it leaves a process: detected, and suspended while we build or load.

``from_pretrained(..., fusion_config=...)`` registers class patches and weight converters
process-wide and never removes them (DESIGN.md). Discovery on the meta model (the plan) and
loading (the run) both need the original classes: :func:`upstream_fusion_suspended` takes
those registrations out for a block and puts them back after.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["POLLUTED", "upstream_fusion_suspended", "upstream_patches"]

_SUSPEND_LOCK = threading.RLock()


POLLUTED = (
    "transformers' own fusion (from_pretrained(..., fusion_config=...)) ran earlier in this process and left "
    "its class patches ({names}) and weight converters registered process-wide; they are suspended while "
    "this runs (to avoid them, run transformers' fusion in a separate process)"
)


def upstream_patches() -> list[str]:
    """The class names transformers' own fusion has patched process-wide (empty when none)."""
    mp = sys.modules.get("transformers.monkey_patching")
    fm = sys.modules.get("transformers.fusion_mapping")
    if mp is None or fm is None:  # transformers' fusion never imported: it cannot have run
        return []
    registered = getattr(fm, "_REGISTERED_FUSION_SOURCE_PATTERNS", {})
    return sorted(mp.get_patch_mapping()) if registered or mp.get_patch_mapping() else []


@contextmanager
def upstream_fusion_suspended(notes: list[str] | None = None) -> Iterator[list[str]]:
    """Build and load models as if transformers' own fusion had never run in this process.

    ``from_pretrained(..., fusion_config=...)`` registers class patches (applied by every
    later ``from_pretrained`` and model ``__init__``) and weight converters for the model
    type, and never removes them (DESIGN.md). Inside this block both are taken out, so
    the "original" is the original and discovery sees the original classes; they are put
    back on exit. A note naming them is added to ``notes``.
    """
    names = upstream_patches()
    if not names:
        yield []
        return
    import transformers.conversion_mapping as cm
    from transformers import fusion_mapping as fm
    from transformers import monkey_patching as mp

    with _SUSPEND_LOCK:
        mapping = mp.get_patch_mapping()
        saved: dict[str, Any] = {}
        cache = cm._checkpoint_conversion_mapping_cache or {}
        for (model_type, _family), sources in fm._REGISTERED_FUSION_SOURCE_PATTERNS.items():
            current = cache.get(model_type)
            if current is not None and model_type not in saved:
                saved[model_type] = current
                cache[model_type] = [c for c in current if tuple(c.source_patterns) not in sources]
        mp.clear_patch_mapping()
        message = POLLUTED.format(names=", ".join(names) or "weight converters")
        if notes is not None and message not in notes:
            notes.append(message)
        try:
            yield [message]
        finally:
            cache.update(saved)
            if mapping:
                mp.register_patch_mapping(mapping, overwrite=True)
