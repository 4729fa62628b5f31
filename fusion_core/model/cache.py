"""A cache of opened models as plain data: the module tree and every family's discovery.

The window paints a model it has seen before from this cache, before torch is imported
(importing this module imports neither torch nor transformers), and then swaps in the
live inspection. An entry is keyed by everything its content depends on:

* the model's config: the bytes of a folder's ``config.json``, the ``arch:`` type, or the
  demo's name and version (hub ids and folders with custom code are not cached);
* the installed transformers and torch versions (read from package metadata);
* fusion_core's version and a fingerprint of its source files (size and mtime of each),
  so an edited family or discovery never reuses an old result;
* the registered family plugins (entry point names, targets and distribution versions).

A cache file is never trusted blindly: it is read only up to :data:`MAX_BYTES`, must be
JSON of the exact expected structure and key, and is removed when it is not.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .tree import ModuleNode, ModuleTree, TensorSpec

FORMAT = "fusion-inspector-inspection"
VERSION = 1
MAX_BYTES = 32 * 1024 * 1024  # a 200k-module tree is ~30 MB; anything larger is not ours
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_ENTRIES = 64
# fusion_core.families.plugins.GROUP (not imported: the families import torch; a test keeps them equal)
PLUGIN_GROUP = "fusion_inspector.families"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedMatch:
    """A module a family replaces (class names only: the classes are not imported)."""

    path: str
    class_name: str
    fused_class_name: str
    reason: str = ""


@dataclass(frozen=True)
class CachedRejection:
    path: str
    class_name: str
    reason: str


@dataclass
class CachedDiscovery:
    family: str
    matches: list[CachedMatch] = field(default_factory=list)
    rejected: list[CachedRejection] = field(default_factory=list)
    empty_message: str = ""


@dataclass
class CachedInspection:
    """What the window shows of a model before the live inspection is ready."""

    spec: str
    name: str
    model_class: str
    tree: ModuleTree
    families: list[str]  # the registered families, in registry order
    discoveries: dict[str, CachedDiscovery]

    def discovery(self, family: str) -> CachedDiscovery:
        return self.discoveries.get(family) or CachedDiscovery(family)


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
def _tensors(specs: list[TensorSpec]) -> list[list[Any]]:
    return [[t.name, list(t.shape), t.dtype, t.tied_to] for t in specs]


def to_data(spec: str, insp: Any, families: list[str]) -> dict[str, Any]:
    """Plain data of an opened model (``insp``: a :class:`fusion_core.Inspection`) for :func:`save`."""
    nodes = [
        [
            n.path,
            n.class_name,
            n.class_qualname,
            n.module_name,
            n.kind,
            _tensors(n.params),
            _tensors(n.buffers),
            n.own_params,
            n.same_class_count,
        ]
        for n in insp.tree.root.walk()
    ]
    discoveries = {}
    for name in families:
        d = insp.discovery(name)
        discoveries[name] = {
            "matches": [[m.path, m.original_class.__name__, m.fused_class.__name__, m.reason] for m in d.matches],
            "rejected": [[r.path, r.class_name, r.reason] for r in d.rejected],
            "message": d.empty_message,
        }
    return {
        "format": FORMAT,
        "version": VERSION,
        "spec": spec,
        "name": insp.name,
        "model_class": insp.source.model_class.__name__,
        "nodes": nodes,
        "families": list(families),
        "discovery": discoveries,
    }


def save(spec: str, insp: Any, families: list[str]) -> Path | None:
    """Store ``insp`` (tree and the discovery of ``families``) for ``spec``; None if not cacheable.

    Written atomically (a temporary file, then renamed); the oldest entries beyond
    :data:`MAX_ENTRIES` are removed. Errors are logged, never raised: the cache is an
    optimisation.
    """
    key = cache_key(spec)
    if key is None:
        return None
    try:
        data = json.dumps({**to_data(spec, insp, families), "key": key}, separators=(",", ":")).encode()
        if len(data) > MAX_BYTES:
            return None
        folder = cache_folder()
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{key}.json"
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
        entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[MAX_ENTRIES:]:
            old.unlink(missing_ok=True)
        return target
    except OSError as e:
        log.warning("cannot write the model cache: %s", e)
        return None


# reading ---------------------------------------------------------------------------------
class _Invalid(ValueError):
    pass


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"expected a string, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _Invalid(f"expected a count, got {value!r}")
    return value


def _list(value: Any, length: int | None = None) -> list[Any]:
    if not isinstance(value, list) or (length is not None and len(value) != length):
        raise _Invalid("expected a list" + (f" of {length}" if length is not None else ""))
    return value


def _tensor_specs(value: Any) -> list[TensorSpec]:
    out = []
    for item in _list(value):
        name, shape, dtype, tied = _list(item, 4)
        out.append(
            TensorSpec(
                _str(name), tuple(_int(d) for d in _list(shape)), _str(dtype), None if tied is None else _str(tied)
            )
        )
    return out


def _tree(nodes: Any) -> ModuleTree:
    by_path: dict[str, ModuleNode] = {}
    counts: dict[str, int] = {}
    for item in _list(nodes):
        path, cls, qualname, module_name, kind, params, buffers, own, same = _list(item, 9)
        path = _str(path)
        node = ModuleNode(
            path=path,
            name=path.rsplit(".", 1)[-1] if path else _str(cls),
            class_name=_str(cls),
            class_qualname=_str(qualname),
            module_name=_str(module_name),
            kind=_str(kind),
            params=_tensor_specs(params),
            buffers=_tensor_specs(buffers),
            own_params=_int(own),
            same_class_count=_int(same),
        )
        if path in by_path or (not by_path) != (path == ""):
            raise _Invalid(f"node {path!r} out of order")
        if path:
            parent = by_path.get(path.rsplit(".", 1)[0] if "." in path else "")
            if parent is None:
                raise _Invalid(f"node {path!r} comes before its parent")
            node.parent = parent
            parent.children.append(node)
        by_path[path] = node
        counts[node.class_qualname] = node.same_class_count
    if not by_path:
        raise _Invalid("no nodes")
    root = by_path[""]
    for node in reversed(list(root.walk())):
        node.total_params = node.own_params + sum(c.total_params for c in node.children)
    return ModuleTree(root, by_path, counts, 0.0)


def _discovery(name: str, value: Any) -> CachedDiscovery:
    if not isinstance(value, dict):
        raise _Invalid("discovery must be an object")
    matches = [CachedMatch(*(_str(x) for x in _list(m, 4))) for m in _list(value.get("matches"))]
    rejected = [CachedRejection(*(_str(x) for x in _list(r, 3))) for r in _list(value.get("rejected"))]
    return CachedDiscovery(name, matches, rejected, _str(value.get("message")))


def from_data(data: Any, key: str) -> CachedInspection:
    """Validate and rebuild an entry.

    Raises:
        ValueError: anything that is not exactly a version-:data:`VERSION` entry for ``key``.
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise _Invalid("not a model cache entry of this version")
    if data.get("key") != key:
        raise _Invalid("entry for another key")
    families = [_str(f) for f in _list(data.get("families"))]
    raw = data.get("discovery")
    if not isinstance(raw, dict) or set(raw) != set(families):
        raise _Invalid("discovery does not match the families")
    return CachedInspection(
        spec=_str(data.get("spec")),
        name=_str(data.get("name")),
        model_class=_str(data.get("model_class")),
        tree=_tree(data.get("nodes")),
        families=families,
        discoveries={name: _discovery(name, raw[name]) for name in families},
    )


def load(spec: str) -> CachedInspection | None:
    """The cached entry of ``spec`` when there is a valid one for its current key, else None."""
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
            raise _Invalid("too large")
        return from_data(json.loads(raw), key)
    except (ValueError, TypeError, RecursionError) as e:  # JSONDecodeError and _Invalid are ValueErrors
        log.warning("ignoring the invalid model cache entry %s: %s", path, e)
        path.unlink(missing_ok=True)
        return None
