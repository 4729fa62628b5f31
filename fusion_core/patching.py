"""Scoped class patching: fused classes are visible only inside a ``with`` block.

Patching is by class *identity*, never by name: every module attribute under
``transformers`` (and in the class's own module) that *is* an original class is replaced
by its fused class, and put back on exit, also on error. Class-level output recorders
(``_can_record_outputs``: dicts, lists and ``OutputRecorder`` objects) of the classes in
the touched modules are snapshotted and restored in place, so nothing that transformers
or a loader mutates during the block survives it.

One re-entrant lock serializes patched sections and plain meta builds
(:func:`fusion_core.model.tree.build_meta_model` takes it too), so a thread never sees another
thread's patches.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

_lock = threading.RLock()
_MISSING = object()
_RECORDERS = "_can_record_outputs"


@contextmanager
def patch_lock() -> Iterator[None]:
    """Hold the lock that patched sections hold (for building plain models safely)."""
    with _lock:
        yield


def _owners(classes: set[type]) -> list[tuple[Any, str, type]]:
    """Every (module, attribute name, class) where a loaded module refers to one of ``classes``."""
    homes = {c.__module__ for c in classes}
    found: list[tuple[Any, str, type]] = []
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name in homes or mod_name == "transformers" or mod_name.startswith("transformers.")):
            continue
        namespace = getattr(mod, "__dict__", None)
        if not namespace:
            continue
        for attr, value in list(namespace.items()):
            if isinstance(value, type) and value in classes:
                found.append((mod, attr, value))
    return found


class _RecorderSnapshot:
    """The ``_can_record_outputs`` of every class defined in some modules, restorable in place."""

    def __init__(self, modules: set[Any]) -> None:
        from dataclasses import fields, is_dataclass

        self._classes: list[tuple[type, Any, list[tuple[Any, Any]]]] = []
        self._lists: list[tuple[list[Any], list[Any]]] = []
        self._objects: list[tuple[Any, dict[str, Any]]] = []
        seen: set[int] = set()
        for mod in modules:
            for value in list(vars(mod).values()):
                if not isinstance(value, type) or id(value) in seen:
                    continue
                seen.add(id(value))
                own = vars(value).get(_RECORDERS, _MISSING)
                items = list(own.items()) if isinstance(own, dict) else []
                self._classes.append((value, own, items))
                for _key, recorder in items:
                    for item in recorder if isinstance(recorder, list) else [recorder]:
                        if is_dataclass(item) and not isinstance(item, type):
                            self._objects.append((item, {f.name: getattr(item, f.name) for f in fields(item)}))
                    if isinstance(recorder, list):
                        self._lists.append((recorder, list(recorder)))

    def restore(self) -> None:
        for obj, state in self._objects:
            for name, value in state.items():
                object.__setattr__(obj, name, value)
        for lst, items in self._lists:
            lst[:] = items
        for cls, own, items in self._classes:
            if own is _MISSING:
                if _RECORDERS in vars(cls):
                    delattr(cls, _RECORDERS)
                continue
            if isinstance(own, dict):
                own.clear()
                own.update(items)
            if vars(cls).get(_RECORDERS, _MISSING) is not own:
                setattr(cls, _RECORDERS, own)


def current_class(cls: type) -> type:
    """``cls`` as its own module names it now: its fused class inside a :func:`scoped_patch`
    that replaces it (a model whose root is fused is built from this), else ``cls`` itself."""
    now = getattr(sys.modules.get(cls.__module__), cls.__name__, cls)
    return now if isinstance(now, type) and issubclass(now, cls) else cls


@contextmanager
def scoped_patch(mapping: Mapping[type, type]) -> Iterator[None]:
    """Replace each original class by its fused class for the duration of the block.

    Models built inside the block get the fused classes; models built after it (or in
    another thread, which waits for the lock) get the originals. Everything is restored
    on exit, also when the block raises.

    Args:
        mapping: original class -> fused class (as from a plan's ``patch_mapping``).

    Raises:
        TypeError: a key or value of ``mapping`` is not a class.
    """
    for original, fused in mapping.items():
        if not isinstance(original, type) or not isinstance(fused, type):
            raise TypeError(f"scoped_patch maps classes to classes, got {original!r} -> {fused!r}")
    with _lock:
        applied: list[tuple[Any, str, type]] = []
        snapshot: _RecorderSnapshot | None = None
        try:
            owners = _owners(set(mapping))
            touched = {mod for mod, _attr, _cls in owners}
            touched.update(sys.modules[c.__module__] for c in mapping if c.__module__ in sys.modules)
            snapshot = _RecorderSnapshot(touched)
            for mod, attr, original in owners:
                applied.append((mod, attr, original))
                setattr(mod, attr, mapping[original])
            yield
        finally:
            for mod, attr, original in reversed(applied):
                setattr(mod, attr, original)
            if snapshot is not None:
                snapshot.restore()
