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

from .tree import ModuleNode, ModuleTree, TensorSpec, totals_and_signatures

FORMAT = "fusion-inspector-inspection"
VERSION = 2
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
    class_path: str = ""  # module.qualname of the original class


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
    #: modules that look like the family's target under other names ("not a candidate: ...")
    near_misses: list[CachedRejection] = field(default_factory=list)


@dataclass(frozen=True)
class FamilyInfo:
    """A registered family as the window describes it (its spec is not imported)."""

    name: str
    description: str = ""
    options: dict[str, str] = field(default_factory=dict)  # option -> what it accepts


@dataclass
class InspectionView:
    """An opened model as plain data: what the window shows, from the cache or from the engine.

    The window never holds the live :class:`fusion_core.Inspection` (the meta model lives in
    the engine process, :mod:`fusion_core.host`); it holds this.
    """

    spec: str
    name: str
    model_class: str
    tree: ModuleTree
    families: list[str]  # the registered families, in registry order
    discoveries: dict[str, CachedDiscovery]
    describe: str = ""  # the source, one line (ModelSource.describe)
    checkpoint_files: int = -1  # weight files; -1: no checkpoint (config only)
    checkpoint_tensors: int = 0
    folder: str = ""  # the model's folder (a local or cached source), else ""
    notes: list[str] = field(default_factory=list)  # what resolving the source noted (ModelSource.notes)
    family_info: dict[str, FamilyInfo] = field(default_factory=dict)

    @property
    def has_checkpoint(self) -> bool:
        return self.checkpoint_files >= 0

    def discovery(self, family: str) -> CachedDiscovery:
        return self.discoveries.get(family) or CachedDiscovery(family)

    def info(self, family: str) -> FamilyInfo:
        return self.family_info.get(family) or FamilyInfo(family)


CachedInspection = InspectionView  # the name this module had before the engine moved out of the GUI


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


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _rejections(items: Any) -> list[list[str]]:
    return [[r.path, r.class_name, r.reason] for r in items]


def to_data(spec: str, insp: Any, families: dict[str, FamilyInfo]) -> dict[str, Any]:
    """Plain data of an opened model (``insp``: a :class:`fusion_core.Inspection`) for :func:`save`
    and for the window (:func:`view_from_data`); ``families``: the registered ones, in order."""
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
            "matches": [
                [m.path, m.original_class.__name__, m.fused_class.__name__, m.reason, _class_path(m.original_class)]
                for m in d.matches
            ],
            "rejected": _rejections(d.rejected),
            "near_misses": _rejections(d.near_misses),
            "message": d.empty_message,
        }
    info = {name: {"description": f.description, "options": dict(f.options)} for name, f in families.items()}
    ckpt = insp.source.checkpoint
    return {
        "format": FORMAT,
        "version": VERSION,
        "spec": spec,
        "name": insp.name,
        "model_class": insp.source.model_class.__name__,
        "nodes": nodes,
        "families": list(families),
        "discovery": discoveries,
        "family_info": info,
        "describe": insp.source.describe(),
        "checkpoint_files": len(ckpt.files) if ckpt is not None else -1,
        "checkpoint_tensors": len(ckpt.tensors) if ckpt is not None else 0,
        "folder": str(insp.source.folder) if insp.source.folder is not None else "",
        "notes": [str(n) for n in insp.source.notes],
    }


def save(spec: str, data: dict[str, Any]) -> Path | None:
    """Store ``data`` (:func:`to_data`: the tree and every family's discovery) for ``spec``;
    None if not cacheable.

    Written atomically (a temporary file, then renamed); the oldest entries beyond
    :data:`MAX_ENTRIES` are removed. Errors are logged, never raised: the cache is an
    optimisation.
    """
    key = cache_key(spec)
    if key is None:
        return None
    try:
        text = json.dumps({**data, "key": key}, separators=(",", ":")).encode()
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
    totals_and_signatures(root)  # the folds of identical layers compare signatures
    return ModuleTree(root, by_path, counts, 0.0)


def _discovery(name: str, value: Any) -> CachedDiscovery:
    if not isinstance(value, dict):
        raise _Invalid("discovery must be an object")
    matches = [CachedMatch(*(_str(x) for x in _list(m, 5))) for m in _list(value.get("matches"))]
    rejected = [CachedRejection(*(_str(x) for x in _list(r, 3))) for r in _list(value.get("rejected"))]
    near = [CachedRejection(*(_str(x) for x in _list(r, 3))) for r in _list(value.get("near_misses"))]
    return CachedDiscovery(name, matches, rejected, _str(value.get("message")), near)


def _family_info(name: str, value: Any) -> FamilyInfo:
    if not isinstance(value, dict) or not isinstance(value.get("options"), dict):
        raise _Invalid("family info must be an object with options")
    return FamilyInfo(name, _str(value.get("description")), {_str(k): _str(v) for k, v in value["options"].items()})


def view_from_data(data: Any) -> InspectionView:
    """Validate and rebuild the plain data of :func:`to_data` (the engine's answer to "open").

    Raises:
        ValueError: anything that is not exactly that structure.
    """
    if not isinstance(data, dict):
        raise _Invalid("an inspection must be an object")
    families = [_str(f) for f in _list(data.get("families"))]
    raw, info = data.get("discovery"), data.get("family_info")
    if not isinstance(raw, dict) or set(raw) != set(families):
        raise _Invalid("discovery does not match the families")
    if not isinstance(info, dict) or set(info) != set(families):
        raise _Invalid("family info does not match the families")
    files = data.get("checkpoint_files")
    if not isinstance(files, int) or isinstance(files, bool) or files < -1:
        raise _Invalid(f"expected a file count, got {files!r}")
    return InspectionView(
        spec=_str(data.get("spec")),
        name=_str(data.get("name")),
        model_class=_str(data.get("model_class")),
        tree=_tree(data.get("nodes")),
        families=families,
        discoveries={name: _discovery(name, raw[name]) for name in families},
        describe=_str(data.get("describe")),
        checkpoint_files=files,
        checkpoint_tensors=_int(data.get("checkpoint_tensors")),
        folder=_str(data.get("folder")),
        notes=[_str(n) for n in _list(data.get("notes"))],
        family_info={name: _family_info(name, info[name]) for name in families},
    )


def from_data(data: Any, key: str) -> InspectionView:
    """Validate and rebuild an entry.

    Raises:
        ValueError: anything that is not exactly a version-:data:`VERSION` entry for ``key``.
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise _Invalid("not a model cache entry of this version")
    if data.get("key") != key:
        raise _Invalid("entry for another key")
    return view_from_data(data)


def load(spec: str) -> InspectionView | None:
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
