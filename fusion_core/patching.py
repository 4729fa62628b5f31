"""Scoped class patching: fused classes are visible only inside a ``with`` block.

Patching is by class *identity*: every module attribute under ``transformers`` (and the
class's own module) that *is* an original class is replaced by its fused class, and put
back on exit, also on error. Model classes' ``_can_record_outputs`` mappings (output
recorders) are snapshotted and restored too. One lock serializes patched sections, so two
threads never see each other's patches half-applied.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

_lock = threading.RLock()


def _owners(cls: type) -> list[tuple[Any, str]]:
    """Every (module, attribute name) that refers to ``cls`` in the loaded modules."""
    found: list[tuple[Any, str]] = []
    home = cls.__module__
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == home or mod_name.startswith("transformers.")):
            continue
        namespace = getattr(mod, "__dict__", None)
        if not namespace:
            continue
        for attr, value in list(namespace.items()):
            if value is cls:
                found.append((mod, attr))
    return found


def _recorder_snapshot(modules: set[Any]) -> list[tuple[type, Any]]:
    snap: list[tuple[type, Any]] = []
    for mod in modules:
        for value in list(vars(mod).values()):
            if isinstance(value, type) and "_can_record_outputs" in vars(value):
                current = vars(value)["_can_record_outputs"]
                snap.append((value, dict(current) if isinstance(current, dict) else current))
    return snap


@contextmanager
def scoped_patch(mapping: Mapping[type, type]) -> Iterator[None]:
    """Replace each original class by its fused class for the duration of the block.

    Args:
        mapping: original class -> fused class (as from a plan's ``patch_mapping``).
    """
    with _lock:
        applied: list[tuple[Any, str, type]] = []
        touched = {sys.modules[c.__module__] for c in mapping if c.__module__ in sys.modules}
        recorders = _recorder_snapshot(touched)
        try:
            for original, fused in mapping.items():
                for mod, attr in _owners(original):
                    applied.append((mod, attr, original))
                    setattr(mod, attr, fused)
            yield
        finally:
            for mod, attr, original in reversed(applied):
                setattr(mod, attr, original)
            for cls, value in recorders:
                cls._can_record_outputs = value
