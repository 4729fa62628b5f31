"""The fusion family registry: the one list that the CLI and the GUI read.

Built-in families are listed explicitly in :data:`BUILTIN`. Third-party packages add
families through the ``fusion_inspector.families`` entry point group, loaded when the
registry is first used (not when ``fusion_core`` is imported); :func:`load_family_file`
loads one from a Python file. A broken plugin is reported in ``plugin_errors()`` and
skipped. How to write a family: ``docs/extending.md``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from ..errors import UnknownFamilyError
from . import plugins
from .base import FusionSpec, validate_spec
from .gate_up import GateUpFusion
from .patch_embeddings import PatchEmbeddingsFusion
from .patch_embeddings_2d import PatchEmbeddings2dFusion
from .qkv import QKVFusion

BUILTIN: tuple[type[FusionSpec], ...] = (PatchEmbeddingsFusion, PatchEmbeddings2dFusion, QKVFusion, GateUpFusion)
BUILTIN_ORIGIN = "fusion_core"

_lock = threading.RLock()


class _Registry(dict):
    """name -> spec, in registration order; entry-point plugins load on the first read."""

    _plugins_loaded = False

    def _ensure(self) -> None:
        if not self._plugins_loaded:
            load_entry_points()

    def __getitem__(self, key: str) -> FusionSpec:
        self._ensure()
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._ensure()
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        self._ensure()
        return super().__iter__()

    def __len__(self) -> int:
        self._ensure()
        return super().__len__()

    def get(self, key: str, default: Any = None) -> Any:
        self._ensure()
        return super().get(key, default)

    def keys(self):  # type: ignore[override]
        self._ensure()
        return super().keys()

    def values(self):  # type: ignore[override]
        self._ensure()
        return super().values()

    def items(self):  # type: ignore[override]
        self._ensure()
        return super().items()


REGISTRY: dict[str, FusionSpec] = _Registry()


def register(spec: FusionSpec, *, origin: str = "", replace: bool = False) -> FusionSpec:
    """Add ``spec`` to the registry (after checking its protocol).

    Args:
        spec: the family.
        origin: where it comes from (shown by ``fusion-core families``); kept as ``spec.origin``.
        replace: replace a registered family of the same name.

    Returns:
        ``spec``.

    Raises:
        TypeError: ``spec`` does not implement the protocol (see :func:`validate_spec`).
        ValueError: another family of that name is registered and ``replace`` is false.
    """
    spec = validate_spec(spec, origin)
    with _lock:
        old = dict.get(REGISTRY, spec.name)
        if old is not None and not replace and type(old) is not type(spec):
            raise ValueError(f"a fusion family named {spec.name!r} is already registered")
        if origin or not getattr(spec, "origin", ""):
            spec.origin = origin or BUILTIN_ORIGIN  # type: ignore[attr-defined]
        # discoveries are cached per spec object, so a replaced family is never served stale results
        dict.__setitem__(REGISTRY, spec.name, spec)
    return spec


def unregister(name: str) -> FusionSpec | None:
    """Remove family ``name`` from the registry (returns it, or None if absent)."""
    with _lock:
        return dict.pop(REGISTRY, name, None)


def get_family(name: str) -> FusionSpec:
    """Return the registered family ``name``.

    Raises:
        UnknownFamilyError: naming the known families.
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownFamilyError(
            f"unknown fusion family {name!r}; known: {', '.join(sorted(REGISTRY)) or 'none'}"
        ) from None


def families() -> list[FusionSpec]:
    """The registered families, built-in first, then plugins in load order."""
    return list(REGISTRY.values())


def _register_plugin(spec: FusionSpec, origin: str) -> FusionSpec:
    existing = dict.get(REGISTRY, spec.name)
    if existing is not None and getattr(existing, "origin", "") != origin:
        raise ValueError(
            f"a fusion family named {spec.name!r} is already registered by {getattr(existing, 'origin', '?')}"
        )
    # the same origin loaded again (a family file edited and reloaded) replaces its families
    return register(spec, origin=origin, replace=existing is not None)


def load_entry_points() -> list[FusionSpec]:
    """Register the families of every ``fusion_inspector.families`` entry point (once per process
    unless called again explicitly).

    Returns:
        The specs registered now; failures are in :func:`~fusion_core.families.plugins.plugin_errors`.
    """
    with _lock:
        REGISTRY._plugins_loaded = True  # type: ignore[attr-defined]
        loaded_origins = {getattr(s, "origin", "") for s in dict.values(REGISTRY)}
        registered = []
        for spec, origin, name in plugins.entry_point_specs(loaded_origins):
            try:
                registered.append(_register_plugin(spec, origin))
            except Exception as e:
                plugins.record(name, origin, e)
        return registered


def load_family_file(path: Any) -> list[FusionSpec]:
    """Register the families defined in the Python file ``path`` (see :func:`plugins.file_specs`).

    Loading the same file again replaces its families. The file is code: load only files
    you trust.

    Returns:
        The specs registered; empty when the file is broken (the error is logged and kept
        in ``plugin_errors()``; the application goes on without it).
    """
    specs, origin = plugins.file_specs(path)
    registered: list[FusionSpec] = []
    for spec in specs:
        try:
            registered.append(_register_plugin(spec, origin))
        except Exception as e:
            plugins.record(f"{origin.removeprefix('file ')}:{getattr(spec, 'name', '?')}", origin, e)
    return registered


for _cls in BUILTIN:
    register(_cls(), origin=BUILTIN_ORIGIN)
