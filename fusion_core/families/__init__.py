"""Fusion families: the spec protocol (``base``), key transforms (``transforms``), one module
per family, the registry (``registry``) and third-party plugins (``plugins``). The
conformance kit that checks a family lives above, in :mod:`fusion_core.conformance`. How to write a family: ``docs/extending.md``.
"""

from __future__ import annotations

from ._linear_group import LinearGroupFusion
from .base import FusionSpec, Option, Verdict, validate_spec
from .plugins import PluginError, clear_plugin_errors, plugin_errors
from .registry import (
    BUILTIN_ORIGIN,
    REGISTRY,
    families,
    get_family,
    load_entry_points,
    load_family_file,
    register,
    unregister,
)

__all__ = [
    "BUILTIN_ORIGIN",
    "REGISTRY",
    "FusionSpec",
    "LinearGroupFusion",
    "Option",
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
