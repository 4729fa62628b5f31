"""The fusion family registry: the one list that the CLI and the GUI read.

Built-in families are listed explicitly below. Third-party packages add families through
the ``fusion_inspector.families`` entry point group; ``load_family_file`` loads one from a
Python file. A broken plugin is reported and skipped.
"""

from __future__ import annotations

from .base import FusionSpec, Verdict, validate_spec
from .patch_embeddings import PatchEmbeddingsFusion

_BUILTIN: tuple[type[FusionSpec], ...] = (PatchEmbeddingsFusion,)

REGISTRY: dict[str, FusionSpec] = {}


def register(spec: FusionSpec, *, origin: str = "", replace: bool = False) -> FusionSpec:
    """Add ``spec`` to the registry (after checking its protocol)."""
    spec = validate_spec(spec, origin)
    if spec.name in REGISTRY and not replace and type(REGISTRY[spec.name]) is not type(spec):
        raise ValueError(f"a fusion family named {spec.name!r} is already registered")
    REGISTRY[spec.name] = spec
    return spec


for _cls in _BUILTIN:
    register(_cls(), origin="fusion_core")


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
    return list(REGISTRY.values())


__all__ = ["REGISTRY", "FusionSpec", "Verdict", "families", "get_family", "register", "validate_spec"]
