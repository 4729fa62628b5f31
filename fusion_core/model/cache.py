"""A cache of opened models as plain data: the module tree and every family's discovery.

The window paints a model it has seen before from this cache, before torch is imported
(importing this module imports neither torch nor transformers), and then swaps in the
live inspection. An entry stores the plain form (:mod:`fusion_core.boundary.convert`) of
the opened model's view, :class:`fusion_core.plan.view.InspectionView`, which is also the
engine's answer to "open"; this module keys, writes and reads entries, the caller rebuilds
the view (:func:`fusion_core.plan.view.cached_view`). An entry is keyed by everything its content depends on:

* the model's config: for a folder, its resolved path, the bytes of its ``config.json``
  and the identity (inode, size, mtime) of every file in it, weights and side files
  included; the ``arch:`` type; or the demo's name and version (hub ids and folders with
  custom code are not cached);
* the ``trust_remote_code`` choice it was opened with;
* the installed transformers and torch versions (read from package metadata);
* fusion_core's version and a fingerprint of its source files (size and mtime of each),
  so an edited family or discovery never reuses an old result;
* the registered family plugins (entry point names, targets and distribution versions).

A cache file is never trusted blindly: it must be a regular file (a link, a pipe or a
device is removed unread) of this user that others cannot write (a shared cache folder), is
read only up to :data:`MAX_BYTES`, must be
JSON of the exact expected structure, version and key, and is removed when it is not.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import stat
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


MAX_FOLDER_ENTRIES = 10_000  # a model folder lists a few dozen files; more is not cached


def _config_fingerprint(spec: str) -> Any:
    """What identifies what ``spec`` shows (None: not cacheable).

    For a folder: the resolved folder, the bytes of its ``config.json`` and the identity of
    every entry in it (:func:`_folder_state`: the weights, the index, the side files, an
    added pickle), so the same config beside other weights, in another folder or after a
    file changed is another key. A config asking for custom code (``auto_map``, found in the
    parsed JSON, whatever its spelling) is not cached.
    """
    if spec.startswith("arch:"):
        return spec
    if spec.startswith("demo:"):
        from .demo import DEMO_VERSION, DEMOS

        name = spec.removeprefix("demo:")
        return f"demo:{name}:v{DEMO_VERSION}" if name in DEMOS else None
    from ..errors import FusionError
    from .safety import read_regular_file, remote_code_files

    path = Path(spec).expanduser()
    config = path / "config.json" if path.is_dir() else path
    if config.name != "config.json":
        return None
    try:
        content = read_regular_file(config, MAX_CONFIG_BYTES)  # a FIFO or a device is never read
        data = json.loads(content)
    except (FusionError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or remote_code_files(data):  # custom code: its files would have to be keyed too
        return None
    folder = config.parent.resolve()
    state = _folder_state(folder)
    if state is None:
        return None
    return ["config", str(folder), hashlib.sha256(content).hexdigest(), state]


def _folder_state(folder: Path) -> list[Any] | None:
    """Each entry of ``folder``: name, and the identity (mode, device, inode, size, mtime) of
    the entry and, for a link, of what it points to (None: too many entries to key)."""
    out: list[Any] = []
    with os.scandir(folder) as it:
        for entry in it:
            if len(out) >= MAX_FOLDER_ENTRIES:
                return None
            row: list[Any] = [entry.name]
            for follow in (False, True):
                try:
                    st = entry.stat(follow_symlinks=follow)
                    row.append([st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns])
                except OSError:
                    row.append(None)  # a broken link
            out.append(row)
    return sorted(out, key=lambda r: r[0])


def cache_key(spec: str, trust_remote_code: bool = False) -> str | None:
    """The key of ``spec``'s entry, or None when it is not cacheable (never imports torch)."""
    try:
        config = _config_fingerprint(spec.strip())
        if config is None:
            return None
        from .. import __version__

        parts = [VERSION, config, bool(trust_remote_code), _version("transformers"), _version("torch"), __version__]
        parts += [_code_fingerprint(), _plugins()]
    except (OSError, ValueError) as e:
        log.debug("no cache key for %s: %s", spec, e)
        return None
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def cacheable(spec: str) -> bool:
    """Whether ``spec`` could have an entry at all, from its spelling (no file is read: for the window's thread)."""
    spec = spec.strip()
    if spec.startswith(("arch:", "demo:")):
        return True
    try:
        return Path(spec).expanduser().exists()
    except (OSError, ValueError):
        return False


# writing ---------------------------------------------------------------------------------
def save(spec: str, data: Any, trust_remote_code: bool = False) -> Path | None:
    """Store ``data`` (the plain form of the opened model's view:
    :func:`fusion_core.plan.view.inspection_data`) for ``spec``; None if not cacheable.

    Written atomically (a temporary file, then renamed); the oldest entries beyond
    :data:`MAX_ENTRIES` are removed. Errors are logged, never raised: the cache is an
    optimisation.
    """
    key = cache_key(spec, trust_remote_code)
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


def _read_entry(path: Path) -> bytes:
    """An entry's bytes: a regular file (no link, pipe or device: opened without following
    links, without blocking, checked on the open handle) of at most :data:`MAX_BYTES`."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError("a symbolic link, not an entry") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
            # a shared cache folder: an entry another user wrote, or could rewrite, is not ours (issue 32)
            raise ValueError("not written by this user, or writable by others")
        if st.st_size > MAX_BYTES:
            raise ValueError(f"{st.st_size:,} bytes, more than {MAX_BYTES:,}")
        return f.read(MAX_BYTES + 1)


def load(spec: str, read: Callable[[Any], T], trust_remote_code: bool = False) -> T | None:
    """The cached entry of ``spec`` when there is a valid one for its current key, else None.

    Args:
        spec: the model as the user named it.
        read: rebuilds the stored plain data, raising ValueError when it is not valid
            (:func:`fusion_core.plan.view.view_from_data`; :func:`fusion_core.plan.view.cached_view`
            is this with it). An invalid entry is removed.
    """
    key = cache_key(spec, trust_remote_code)
    if key is None:
        return None
    path = cache_folder() / f"{key}.json"
    try:
        raw = _read_entry(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:  # a FIFO, a link, a device, too large: never ours
        log.warning("ignoring the model cache entry %s: %s", path, e)
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    try:
        if len(raw) > MAX_BYTES:
            raise ValueError("too large")
        return from_data(json.loads(raw), key, read)
    except (ValueError, TypeError, KeyError, RecursionError) as e:  # JSONDecodeError, PlainDataError
        log.warning("ignoring the invalid model cache entry %s: %s", path, e)
        path.unlink(missing_ok=True)
        return None
