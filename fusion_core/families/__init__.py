"""Fusion families: the spec protocol (``base``), key transforms (``transforms``), one module
per family, the registry (``registry``), third-party plugins (``plugins``) and the
conformance kit (``conformance``). How to write a family: ``docs/extending.md``.
"""

from __future__ import annotations

from ._linear_group import LinearGroupFusion
from .base import FusionSpec, Verdict, validate_spec
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
