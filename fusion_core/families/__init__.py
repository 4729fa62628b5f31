"""The fusion family registry: the one list that the CLI and the GUI read.

Built-in families are listed explicitly below. Third-party packages add families through
the ``fusion_inspector.families`` entry point group (loaded when this package is first
imported); ``load_family_file`` loads one from a Python file. A broken plugin is reported
in ``plugin_errors()`` and skipped. How to write a family: ``docs/extending.md``.
"""

from __future__ import annotations

from ._linear_group import LinearGroupFusion
from .base import FusionSpec, Verdict, validate_spec
from .gate_up import GateUpFusion
from .patch_embeddings import PatchEmbeddingsFusion
from .patch_embeddings_2d import PatchEmbeddings2dFusion
from .plugins import PluginError, clear_plugin_errors, load_entry_points, load_family_file, plugin_errors
from .qkv import QKVFusion

_BUILTIN: tuple[type[FusionSpec], ...] = (PatchEmbeddingsFusion, PatchEmbeddings2dFusion, QKVFusion, GateUpFusion)
BUILTIN_ORIGIN = "fusion_core"

REGISTRY: dict[str, FusionSpec] = {}


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
    old = REGISTRY.get(spec.name)
    if old is not None and not replace and type(old) is not type(spec):
        raise ValueError(f"a fusion family named {spec.name!r} is already registered")
    if origin or not getattr(spec, "origin", ""):
        spec.origin = origin or BUILTIN_ORIGIN  # type: ignore[attr-defined]
    REGISTRY[spec.name] = spec
    if old is not None and old is not spec:
        from ..discovery import clear_cache

        clear_cache()  # discoveries are cached per family name
    return spec


def unregister(name: str) -> FusionSpec | None:
    """Remove family ``name`` from the registry (returns it, or None if absent)."""
    spec = REGISTRY.pop(name, None)
    if spec is not None:
        from ..discovery import clear_cache

        clear_cache()
    return spec


for _cls in _BUILTIN:
    register(_cls(), origin=BUILTIN_ORIGIN)


def get_family(name: str) -> FusionSpec:
    """Return the registered family ``name``.

    Raises:
        UnknownFamilyError: naming the known families.
    """
    from ..errors import UnknownFamilyError

    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownFamilyError(
            f"unknown fusion family {name!r}; known: {', '.join(sorted(REGISTRY)) or 'none'}"
        ) from None


def families() -> list[FusionSpec]:
    """The registered families, built-in first, then plugins in load order."""
    return list(REGISTRY.values())


load_entry_points()  # after the built-ins: a plugin cannot take a built-in family's name

__all__ = [
    "REGISTRY",
    "FusionSpec",
    "LinearGroupFusion",
    "PluginError",
    "Verdict",
    "clear_plugin_errors",
    "families",
    "get_family",
    "load_entry_points",
    "load_family_file",
    "plugin_errors",
    "register",
    "unregister",
    "validate_spec",
]
