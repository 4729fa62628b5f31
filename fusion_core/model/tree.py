"""The meta-initialized module tree as plain data (no tensors, no Qt; :func:`tree_plain` is its JSON)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..boundary.convert import PlainDataError, converter, from_plain, plain, to_plain
from ..errors import FusionError, ModelSourceError

if TYPE_CHECKING:
    from torch import nn

    from .sources import ModelSource

# A meta model beyond this many modules is refused: building it would take minutes and
# gigabytes even without weights (a hostile or broken config).
MAX_MODULES = 200_000


@dataclass(frozen=True)
class TensorSpec:
    """A parameter or buffer: its name (relative to the module), shape and dtype.

    ``tied_to`` is the full dotted name of the first owner when the tensor is shared
    (tied embeddings): it is listed under each owner but counted once, at the first.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    tied_to: str | None = field(default=None, metadata=plain(omit_if_default=True))

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class ModuleNode:
    """One module of the tree. ``path`` is the dotted name ('' for the root)."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "path", "name", "class_name", "class_qualname", "module_name", "kind", "params", "buffers", "own_params",
        "total_params", "same_class_count", "children",
    )  # fmt: skip

    path: str
    name: str
    class_name: str = field(metadata=plain("class"))
    class_qualname: str
    module_name: str  # the Python module that defines the class
    kind: str
    params: list[TensorSpec] = field(default_factory=list)
    buffers: list[TensorSpec] = field(default_factory=list)
    own_params: int = 0
    total_params: int = 0
    children: list[ModuleNode] = field(default_factory=list)
    same_class_count: int = 1  # instances of this class in the whole model
    #: a hash of the structure below (class, tensor shapes and dtypes, children's names and
    #: signatures), not of the node's own name: equal for identical repeated layers
    signature: int = 0
    parent: ModuleNode | None = field(default=None, repr=False, compare=False)

    @property
    def main_weight(self) -> TensorSpec | None:
        for p in self.params:
            if p.name == "weight":
                return p
        return self.params[0] if self.params else None

    def walk(self):
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


@dataclass
class ModuleTree:
    """The whole tree: root node, nodes by dotted path, instance counts per class."""

    root: ModuleNode
    by_path: dict[str, ModuleNode]
    class_counts: dict[str, int]
    build_seconds: float

    @property
    def total_params(self) -> int:
        return self.root.total_params

    def __len__(self) -> int:
        return len(self.by_path)


def tree_plain(node: ModuleNode, depth: int | None = None) -> dict[str, Any]:
    """The plain form of ``node`` and its subtree (``fusion-core tree --json``, docs/cli-json.md).

    Args:
        node: the top of the subtree.
        depth: levels of children to include below ``node`` (None: all). A node whose
            children are cut off has ``"children": null`` (unknown), a leaf ``[]``.
    """
    data: dict[str, Any] = to_plain(node)
    if depth is not None:
        _cut(data, depth)
    return data


def _cut(data: dict[str, Any], depth: int) -> None:
    if depth > 0:
        for child in data["children"]:
            _cut(child, depth - 1)
    else:
        data["children"] = None if data["children"] else []


def _tree_plain(tree: ModuleTree) -> dict[str, Any]:
    return {"root": to_plain(tree.root)}


def _tree_structure(data: Any, _: Any) -> ModuleTree:
    """A tree from its plain form (the model cache, the engine's answer to "open"): parents,
    the index by path, class counts, totals and signatures are rebuilt, never read."""
    if not isinstance(data, dict) or "root" not in data:
        raise PlainDataError("a module tree is an object with its root")
    root = from_plain(ModuleNode, data["root"])
    if root.path:
        raise PlainDataError(f"the root of a module tree has path '', not {root.path!r:.80}")
    by_path: dict[str, ModuleNode] = {}
    counts: dict[str, int] = {}
    for node in root.walk():
        if node.path in by_path:
            raise PlainDataError(f"module {node.path!r:.80} appears twice")
        for child in node.children:
            if child.path.rpartition(".")[0] != node.path or not child.path:
                raise PlainDataError(f"module {child.path!r:.80} is not a child of {node.path!r:.80}")
            child.parent = node
        by_path[node.path] = node
        counts[node.class_qualname] = node.same_class_count
    totals_and_signatures(root)  # the folds of identical layers compare signatures
    return ModuleTree(root, by_path, counts, 0.0)


converter.register_unstructure_hook(ModuleTree, _tree_plain)
converter.register_structure_hook(ModuleTree, _tree_structure)


def build_meta_model(source: ModelSource) -> nn.Module:
    """Instantiate ``source``'s model class on the meta device (no memory for weights).

    Built under the patching lock, so a scoped patch running in another thread never
    leaks fused classes into this plain model.

    Raises:
        ModelSourceError: the class cannot be built from this config, or it would have
            more than ``MAX_MODULES`` modules (checked before and during the build).
    """
    import torch

    from ..patching import current_class, patch_lock
    from .sources import check_model_size, module_budget

    config = source.config
    check_model_size(config, source.name, MAX_MODULES)  # absurd layer counts: refused before building
    with patch_lock(), torch.device("meta"), module_budget(MAX_MODULES, source.name):
        try:
            model = current_class(source.model_class)(config)  # fused inside a scoped_patch of the root
        except FusionError:  # the module budget ran out
            raise
        except Exception as e:
            raise ModelSourceError(
                f"{source.name}: {source.model_class.__name__} cannot be built from this config: "
                f"{type(e).__name__}: {e}"
            ) from e
    return model


def _kind(module: nn.Module) -> str:
    from torch import nn

    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, nn.modules.conv._ConvNd):
        return "conv"
    if isinstance(module, nn.Embedding):
        return "embedding"
    if isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._BatchNorm)):
        return "norm"
    if isinstance(module, (nn.ModuleList, nn.ModuleDict, nn.Sequential)):
        return "container"
    name = type(module).__name__.lower()
    for key, kind in (
        ("norm", "norm"),
        ("attention", "attention"),
        ("attn", "attention"),
        ("mlp", "mlp"),
        ("embed", "embedding"),
        ("rotary", "rotary"),
        ("act", "activation"),
        ("block", "block"),
        ("layer", "block"),
        ("merger", "merger"),
    ):
        if key in name:
            return kind
    if not any(True for _ in module.children()):
        return "leaf"
    return "module"


def _dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def module_tree(model: nn.Module) -> ModuleTree:
    """Export ``model``'s module hierarchy as plain :class:`ModuleNode` data.

    Every module path is a node, also when one module object is reachable under two
    paths; shared (tied) parameters are listed under each owner and counted once.

    Raises:
        ModelSourceError: the model has more than ``MAX_MODULES`` modules.
    """
    t0 = time.perf_counter()
    by_path: dict[str, ModuleNode] = {}
    counts: Counter[str] = Counter()  # distinct module objects per class
    seen: set[int] = set()
    owner: dict[int, str] = {}  # id(tensor) -> full name of its first owner
    for path, module in model.named_modules(remove_duplicate=False):
        if len(by_path) >= MAX_MODULES:
            raise ModelSourceError(f"the model has more than {MAX_MODULES} modules; refusing to show it")
        if path in by_path:
            continue
        cls = type(module)
        qualname = f"{cls.__module__}.{cls.__qualname__}"
        if id(module) not in seen:
            seen.add(id(module))
            counts[qualname] += 1
        prefix = f"{path}." if path else ""
        params = [_spec(n, p, prefix, owner) for n, p in module._parameters.items() if p is not None]
        buffers = [_spec(n, b, prefix, owner) for n, b in module._buffers.items() if b is not None]
        node = ModuleNode(
            path=path,
            name=path.rsplit(".", 1)[-1] if path else cls.__name__,
            class_name=cls.__name__,
            class_qualname=qualname,
            module_name=cls.__module__,
            kind=_kind(module),
            params=params,
            buffers=buffers,
            own_params=sum(p.numel for p in params if p.tied_to is None),
        )
        by_path[path] = node
        if path:
            parent = by_path.get(path.rsplit(".", 1)[0] if "." in path else "")
            if parent is not None:
                node.parent = parent
                parent.children.append(node)
    root = by_path[""]
    totals_and_signatures(root)
    for node in by_path.values():
        node.same_class_count = counts[node.class_qualname]
    return ModuleTree(root, by_path, dict(counts), time.perf_counter() - t0)


def _spec(name: str, tensor: Any, prefix: str, owner: dict[int, str]) -> TensorSpec:
    full = prefix + name
    first = owner.setdefault(id(tensor), full)
    return TensorSpec(name, tuple(tensor.shape), _dtype_name(tensor), None if first == full else first)


def totals_and_signatures(root: ModuleNode) -> None:
    """Parameter totals and structure signatures, bottom-up in one pass."""
    order = list(root.walk())
    for node in reversed(order):
        node.total_params = node.own_params + sum(c.total_params for c in node.children)
        node.signature = hash(
            (
                node.class_qualname,
                tuple((t.name, t.shape, t.dtype) for t in node.params),
                tuple((t.name, t.shape, t.dtype) for t in node.buffers),
                tuple((c.name, c.signature) for c in node.children),
            )
        )


def repeat_runs(children: list[ModuleNode], minimum: int = 2) -> list[tuple[int, int]]:
    """Runs ``(start, stop)`` of consecutive numbered siblings with identical structure.

    Only numbered siblings (a ``ModuleList``'s ``0``, ``1``, ...) fold: named siblings
    such as ``q_proj``/``k_proj`` are different roles even when their shapes agree.

    Args:
        children: the children of one node, in order.
        minimum: the shortest run reported.

    Returns:
        Half-open index ranges into ``children``, in order, each at least ``minimum`` long.
    """
    runs: list[tuple[int, int]] = []
    i, n = 0, len(children)
    while i < n:
        j = i + 1
        if children[i].name.isdigit():
            while j < n and children[j].name.isdigit() and children[j].signature == children[i].signature:
                j += 1
        if j - i >= minimum:
            runs.append((i, j))
        i = j
    return runs


#: the longest period a periodic fold looks for (Llama-4: 4 = 3 dense + 1 MoE; Gemma-3: 6)
MAX_PERIOD = 8


def periodic_runs(children: list[ModuleNode], minimum_repeats: int = 2) -> list[tuple[int, int, int]]:
    """Runs ``(start, stop, period)`` of numbered siblings that repeat a pattern of ``period``
    layers that are not all identical (Llama-4's 48 text layers: 12 x [3 dense + 1 MoE]).

    A run holds whole periods only, at least ``minimum_repeats`` of them; a run of identical
    siblings is :func:`repeat_runs`'s, not one of these. The shortest period is preferred.

    Returns:
        Half-open index ranges into ``children`` with their period, in order, not overlapping.
    """
    sigs = [c.signature if c.name.isdigit() else None for c in children]
    n = len(children)
    runs: list[tuple[int, int, int]] = []
    i = 0
    while i < n:
        best: tuple[int, int] | None = None  # (stop, period)
        if sigs[i] is not None:
            for period in range(2, MAX_PERIOD + 1):
                window = sigs[i : i + period]
                if len(window) < period or None in window or len(set(window)) == 1:
                    continue
                j = i + period
                while j < n and sigs[j] is not None and sigs[j] == sigs[j - period]:
                    j += 1
                stop = i + (j - i) // period * period  # whole periods only
                if (stop - i) // period >= minimum_repeats and (best is None or stop > best[0]):
                    best = (stop, period)
        if best is None:
            i += 1
            continue
        runs.append((i, best[0], best[1]))
        i = best[0]
    return runs


def difference(a: ModuleNode, b: ModuleNode, limit: int = 6) -> str:
    """Where ``b``'s structure first differs from ``a``'s, in words ("feed_forward: Llama4TextMLP
    vs Llama4TextMoe"; "mlp.up_proj.weight: 64x128 vs 64x256"); "" when they are identical."""

    def walk(x: ModuleNode, y: ModuleNode, rel: str, depth: int) -> str:
        where = rel or "itself"
        if x.class_qualname != y.class_qualname:
            return f"{where}: {x.class_name} vs {y.class_name}"
        xs = {t.name: t for t in x.params}
        ys = {t.name: t for t in y.params}
        for name in sorted(xs.keys() | ys.keys()):
            tx, ty = xs.get(name), ys.get(name)
            if tx is None or ty is None or (tx.shape, tx.dtype) != (ty.shape, ty.dtype):

                def show(t: TensorSpec | None) -> str:
                    return "none" if t is None else "x".join(map(str, t.shape)) or "scalar"

                return f"{rel + '.' if rel else ''}{name}: {show(tx)} vs {show(ty)}"
        xc = {c.name: c for c in x.children}
        yc = {c.name: c for c in y.children}
        if xc.keys() != yc.keys():
            only = sorted(xc.keys() ^ yc.keys())
            return f"{where}: children {', '.join(only[:3])} in one only"
        if depth >= limit:
            return f"{where}: structure"
        for name, cx in xc.items():
            if cx.signature != yc[name].signature:
                return walk(cx, yc[name], f"{rel}.{name}" if rel else name, depth + 1)
        return "" if x.signature == y.signature else f"{where}: buffers"

    return walk(a, b, "", 0)
