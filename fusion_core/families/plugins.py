"""Third-party fusion families: entry points and family files.

A package registers families under the ``fusion_inspector.families`` entry point group;
each entry point resolves to a :class:`~fusion_core.families.base.FusionSpec` subclass (built
with no arguments) or instance::

    [project.entry-points."fusion_inspector.families"]
    kv_proj = my_package.families:KVProjFusion

``fusion-core --family-file PATH.py`` (and
:func:`fusion_core.families.registry.load_family_file`) loads the families defined in one
Python file, for quick experiments. This module finds and imports plugins; the registry
registers them (entry points on the registry's first use).

A broken plugin (import error, not a spec, protocol not implemented, a name already taken)
never stops the application: it is logged, recorded in :func:`plugin_errors` (what the CLI
and GUI show) and skipped. Setting ``FUSION_INSPECTOR_NO_PLUGINS=1`` skips entry points
altogether (to start despite a plugin that hangs on import).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .base import FusionSpec

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

GROUP = "fusion_inspector.families"
_log = logging.getLogger(__name__)
_lock = threading.RLock()


@dataclass(frozen=True)
class PluginError:
    """A plugin that could not be loaded: what it is, where it came from, and why."""

    name: str  # entry point name or file path
    origin: str  # "entry point <name> (<distribution>)" or "file <path>"
    error: str

    def __str__(self) -> str:
        return f"{self.origin}: {self.error}"


_errors: list[PluginError] = []


def plugin_errors() -> list[PluginError]:
    """The plugins that failed to load so far, oldest first (a copy)."""
    with _lock:
        return list(_errors)


def clear_plugin_errors() -> None:
    with _lock:
        _errors.clear()


def record(name: str, origin: str, error: BaseException | str) -> PluginError:
    """Keep (and log) the failure of plugin ``name`` from ``origin``."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    text = " ".join(text.split())
    item = PluginError(name, origin, text)
    with _lock:
        _errors.append(item)
    _log.warning("fusion family plugin skipped: %s", item)
    return item


def _as_spec(obj: object) -> FusionSpec:
    """A spec instance from what a plugin exposes (a FusionSpec subclass or instance)."""
    if isinstance(obj, type) and issubclass(obj, FusionSpec):
        return obj()
    if isinstance(obj, FusionSpec):
        return obj
    raise TypeError(f"{obj!r} is neither a FusionSpec subclass nor a FusionSpec instance")


def _entry_points() -> list[EntryPoint]:
    from importlib.metadata import entry_points

    return sorted(entry_points(group=GROUP), key=lambda ep: ep.name)


def entry_point_specs(loaded_origins: set[str]) -> list[tuple[FusionSpec, str, str]]:
    """The families of every ``fusion_inspector.families`` entry point, with their origins.

    Args:
        loaded_origins: origins already registered (skipped).

    Returns:
        (spec, origin, entry point name) triples; failures are recorded in :func:`plugin_errors` and skipped.
    """
    if os.environ.get("FUSION_INSPECTOR_NO_PLUGINS"):
        return []
    found: list[tuple[FusionSpec, str, str]] = []
    try:
        eps = _entry_points()
    except Exception as e:  # a broken distribution's metadata must not stop the app
        record(GROUP, f"entry point group {GROUP}", e)
        return found
    for ep in eps:
        dist = getattr(getattr(ep, "dist", None), "name", None) or "unknown distribution"
        origin = f"entry point {ep.name} ({dist})"
        if origin in loaded_origins:
            continue
        try:
            found.append((_as_spec(ep.load()), origin, ep.name))
        except Exception as e:
            record(ep.name, origin, e)
    return found


def file_specs(path: str | os.PathLike[str]) -> tuple[list[FusionSpec], str]:
    """The families defined in the Python file ``path``, and its origin (``"file <path>"``).

    Every ``FusionSpec`` subclass defined in the file (with a ``name``) is instantiated, and
    every module-level ``FusionSpec`` instance is taken. The file is code: load only files
    you trust.

    Returns:
        (specs, origin); no specs when the file is missing or broken (the error is recorded
        in :func:`plugin_errors`).
    """
    file = Path(path).expanduser().absolute()
    origin = f"file {file}"  # absolute: coverage workers load the file again from here
    try:
        resolved = file.resolve(strict=True)
        if not resolved.is_file():
            raise FileNotFoundError(f"{file} is not a file")
        module = _import_file(resolved)
        specs = _specs_in(module)
        if not specs:
            raise TypeError(f"{file} defines no FusionSpec subclass with a name and no FusionSpec instance")
    except Exception as e:
        record(str(file), origin, e)
        return [], origin
    return specs, origin


def _import_file(path: Path) -> object:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    mod_name = f"fusion_inspector_family_file_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look classes up by module name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(mod_name, None)
        raise
    return module


def _specs_in(module: object) -> list[FusionSpec]:
    mod_name = getattr(module, "__name__", "")
    specs: list[FusionSpec] = []
    seen: set[type] = set()
    for _attr, value in vars(module).items():
        if isinstance(value, FusionSpec) and type(value) not in seen:
            specs.append(value)
            seen.add(type(value))
    for _attr, value in vars(module).items():
        if (
            inspect.isclass(value)
            and issubclass(value, FusionSpec)
            and value.__module__ == mod_name
            and value.name
            and value not in seen
        ):
            specs.append(value())
            seen.add(value)
    return specs


__all__ = [
    "GROUP",
    "PluginError",
    "clear_plugin_errors",
    "entry_point_specs",
    "file_specs",
    "plugin_errors",
    "record",
]
