"""A cache of opened models as plain data: the module tree and every family's discovery.

The window paints a model it has seen before from this cache, before torch is imported
(importing this module imports neither torch nor transformers), and then swaps in the
live inspection. An entry stores the plain form (:mod:`fusion_core.boundary.convert`) of
the opened model's view, :class:`fusion_core.plan.view.InspectionView`, which is also the
engine's answer to "open"; this module keys, writes and reads entries, the caller rebuilds
the view (:func:`fusion_core.plan.view.cached_view`). An entry is keyed by everything its content depends on:

* the model's config: the bytes of a folder's ``config.json``, the ``arch:`` type, or the
  demo's name and version (hub ids and folders with custom code are not cached);
* the installed transformers and torch versions (read from package metadata);
* fusion_core's version and a fingerprint of its source files (size and mtime of each),
  so an edited family or discovery never reuses an old result;
* the registered family plugins (entry point names, targets and distribution versions).

A cache file is never trusted blindly: it is read only up to :data:`MAX_BYTES`, must be
JSON of the exact expected structure, version and key, and is removed when it is not.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
FORMAT = "fusion-inspector-inspection"
VERSION = 3  # 3: the converter's plain form of InspectionView (2: positional rows)
MAX_BYTES = 64 * 1024 * 1024  # a 200k-module tree is ~60 MB as keyed objects; anything larger is not ours
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_ENTRIES = 64
# fusion_core.families.plugins.GROUP (not imported: the families import torch; a test keeps them equal)
PLUGIN_GROUP = "fusion_inspector.families"
log = logging.getLogger(__name__)


def cache_folder() -> Path:
    """Where the entries live: ``<user cache>/inspections``."""
    from .demo import cache_root

    return cache_root() / "inspections"


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


def _code_fingerprint() -> list[Any]:
    root = Path(__file__).resolve().parent.parent
    out: list[Any] = []
    for path in sorted(root.rglob("*.py")):
        st = path.stat()
        out.append([str(path.relative_to(root)), st.st_size, st.st_mtime_ns])
    return out


def _plugins() -> list[list[str]]:
    from importlib.metadata import entry_points

    return sorted(
        [ep.name, ep.value, f"{ep.dist.name if ep.dist else ''}=={ep.dist.version if ep.dist else ''}"]
        for ep in entry_points(group=PLUGIN_GROUP)
    )


def _config_fingerprint(spec: str) -> str | None:
    """What identifies the config of ``spec`` (None: not cacheable)."""
    if spec.startswith("arch:"):
        return spec
    if spec.startswith("demo:"):
        from .demo import DEMO_VERSION, DEMOS

        name = spec.removeprefix("demo:")
        return f"demo:{name}:v{DEMO_VERSION}" if name in DEMOS else None
    path = Path(spec).expanduser()
    config = path / "config.json" if path.is_dir() else path
    if config.name != "config.json" or not config.is_file() or config.stat().st_size > MAX_CONFIG_BYTES:
        return None
    content = config.read_bytes()
    if b'"auto_map"' in content:  # custom code: its Python files would have to be keyed too
        return None
    return "config:" + hashlib.sha256(content).hexdigest()


def cache_key(spec: str) -> str | None:
    """The key of ``spec``'s entry, or None when it is not cacheable (never imports torch)."""
    try:
        config = _config_fingerprint(spec.strip())
        if config is None:
            return None
        from .. import __version__

        parts = [VERSION, config, _version("transformers"), _version("torch"), __version__]
        parts += [_code_fingerprint(), _plugins()]
    except (OSError, ValueError) as e:
        log.debug("no cache key for %s: %s", spec, e)
        return None
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


# writing ---------------------------------------------------------------------------------
def save(spec: str, data: Any) -> Path | None:
    """Store ``data`` (the plain form of the opened model's view:
    :func:`fusion_core.plan.view.inspection_data`) for ``spec``; None if not cacheable.

    Written atomically (a temporary file, then renamed); the oldest entries beyond
    :data:`MAX_ENTRIES` are removed. Errors are logged, never raised: the cache is an
    optimisation.
    """
    key = cache_key(spec)
    if key is None:
        return None
    try:
        entry = {"format": FORMAT, "version": VERSION, "key": key, "view": data}
        text = json.dumps(entry, separators=(",", ":")).encode()
        if len(text) > MAX_BYTES:
            return None
        folder = cache_folder()
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{key}.json"
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.replace(tmp, target)
        entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[MAX_ENTRIES:]:
            old.unlink(missing_ok=True)
        return target
    except OSError as e:
        log.warning("cannot write the model cache: %s", e)
        return None


# reading ---------------------------------------------------------------------------------
def from_data(data: Any, key: str, read: Callable[[Any], T]) -> T:
    """Validate an entry and rebuild what it stores with ``read`` (which validates that).

    Raises:
        ValueError: anything that is not exactly a version-:data:`VERSION` entry for ``key``.
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError("not a model cache entry of this version")
    if data.get("key") != key:
        raise ValueError("entry for another key")
    return read(data.get("view"))


def load(spec: str, read: Callable[[Any], T]) -> T | None:
    """The cached entry of ``spec`` when there is a valid one for its current key, else None.

    Args:
        spec: the model as the user named it.
        read: rebuilds the stored plain data, raising ValueError when it is not valid
            (:func:`fusion_core.plan.view.view_from_data`; :func:`fusion_core.plan.view.cached_view`
            is this with it). An invalid entry is removed.
    """
    key = cache_key(spec)
    if key is None:
        return None
    path = cache_folder() / f"{key}.json"
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError:
        return None
    try:
        if len(raw) > MAX_BYTES:
            raise ValueError("too large")
        return from_data(json.loads(raw), key, read)
    except (ValueError, TypeError, KeyError, RecursionError) as e:  # JSONDecodeError, PlainDataError
        log.warning("ignoring the invalid model cache entry %s: %s", path, e)
        path.unlink(missing_ok=True)
        return None
