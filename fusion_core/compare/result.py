"""What a comparison of two models holds: plain dataclasses (no torch), one plain form.

The plain form of a :class:`Comparison` is the ``fusion-core diff A B --json`` document
(docs/cli-json.md, "diff A B"); the window receives the same data and rebuilds the same
classes through the one converter (:mod:`fusion_core.boundary.convert`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..boundary.convert import plain

Shape = tuple[int, ...]
#: a module or key of A against B
STATUSES = ("equal", "changed", "added", "removed")
#: a key matched only through transformers' renamings ("renamed") or a family's transform
KEY_STATUSES = ("equal", "renamed", "transformed", "changed", "added", "removed")
#: a tensor's values: bitwise equal, within the tolerance, different, or not compared
VALUE_STATUSES = ("equal", "close", "different", "skipped")


def _rounded(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")


@dataclass(frozen=True)
class Side:
    """One of the two models compared."""

    name: str
    model_class: str
    modules: int
    params: int
    keys: int  # checkpoint tensors (the meta model's state dict when there is no checkpoint)
    has_checkpoint: bool
    bytes: int = 0  # tensor data in the checkpoint
    fusion_config: dict[str, Any] = field(default_factory=dict)  # families whose layout it holds


@dataclass(frozen=True)
class ModuleRow:
    """One module path of A against B (``class_*`` and ``params_*`` are null on the side without it)."""

    path: str = field(metadata=plain("module"))
    status: str  # one of STATUSES
    class_a: str | None = None
    class_b: str | None = None
    params_a: int | None = None
    params_b: int | None = None
    #: what differs: "class", "shapes", "dtypes", "params" (below it), "children"
    changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FoldRow:
    """Consecutive numbered siblings (``model.layers`` 0 to 31) with one status for their whole subtrees."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = ("parent", "first", "last", "count", "status", "text")

    parent: str
    first: str
    last: str
    count: int
    status: str  # one of STATUSES; "changed" when something below differs

    @property
    def text(self) -> str:
        """``model.layers 0–31: equal``."""
        span = self.first if self.first == self.last else f"{self.first}–{self.last}"
        return f"{self.parent or '(root)'} {span}: {self.status}"


@dataclass(frozen=True)
class KeyRow:
    """One state-dict key of A against B, matched by the model key it loads into.

    ``name`` is that model key (original layout); ``key_a``/``key_b`` are the names the
    checkpoints store (for a fused checkpoint, the fused key holding it; null on the side
    without it); ``via_a``/``via_b`` say how a stored name reaches ``name``: "" (as is),
    "renames" (transformers' renamings on load) or a fusion family's name.
    """

    name: str
    status: str  # one of KEY_STATUSES
    key_a: str | None = None
    key_b: str | None = None
    shape_a: Shape | None = None
    shape_b: Shape | None = None
    dtype_a: str | None = None
    dtype_b: str | None = None
    via_a: str = ""
    via_b: str = ""
    changes: tuple[str, ...] = ()  # "shape", "dtype"
    #: what the checkpoint stores under ``key_a``/``key_b`` where that is not ``shape_a``/``shape_b``
    #: (a fused key: the whole ``qkv_proj``, the flattened patch Linear); None: the same shape
    stored_shape_a: Shape | None = None
    stored_shape_b: Shape | None = None

    @property
    def families(self) -> list[str]:
        return [v for v in (self.via_a, self.via_b) if v and v != "renames"]

    def stored(self, side: str) -> Shape | None:
        """The shape the checkpoint of ``side`` ("a" or "b") stores for this key."""
        held = getattr(self, f"stored_shape_{side}")
        return held if held is not None else getattr(self, f"shape_{side}")


@dataclass(frozen=True)
class ValueRow:
    """One matched tensor's values: bitwise equal, or how far apart.

    ``how``: "bytes" (the byte ranges compared without decoding; equal), "decoded" (read
    and compared element by element), "transform" (a fused side undone by its family's
    inverse first). With ``digest``, ``digest_a``/``digest_b`` hash each side's stored
    bytes (to compare with a third copy elsewhere). ``differing`` is the share of elements that are not equal;
    ``max_rel`` is relative to A's value.
    """

    name: str
    status: str  # one of VALUE_STATUSES
    how: str = ""
    elements: int = 0
    differing: float = 0.0
    max_abs: float | None = field(default=None, metadata=plain(dump=_rounded))
    max_rel: float | None = field(default=None, metadata=plain(dump=_rounded))
    atol: float = 0.0
    rtol: float = 0.0
    note: str = ""
    #: BLAKE2b (128 bits, hex) of each side's stored bytes, with ``digest=True`` (keys stored as is)
    digest_a: str = field(default="", metadata=plain(omit_if_default=True))
    digest_b: str = field(default="", metadata=plain(omit_if_default=True))


@dataclass
class Comparison:
    """A against B: structure, keys and (when asked) values, and the verdict."""

    PLAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "schema_version", "a", "b", "equal", "verdict", "summary", "transforms", "folds", "modules", "keys",
        "values", "tolerance", "messages", "seconds",
    )  # fmt: skip

    a: Side
    b: Side
    modules: list[ModuleRow]
    folds: list[FoldRow]
    keys: list[KeyRow]
    values: list[ValueRow] | None = None  # None: not compared
    #: the tolerance asked for (atol, rtol; null: only bitwise equal tensors are equal)
    tolerance: tuple[float | None, float | None] | None = None
    messages: list[str] = field(default_factory=list)
    seconds: float = field(default=0.0, compare=False, metadata=plain(dump=lambda s: round(s, 3)))
    schema_version: int = 1

    # -- counts and the verdict ---------------------------------------------------------
    def module_counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for m in self.modules:
            out[m.status] += 1
        return out

    def key_counts(self) -> dict[str, int]:
        out = dict.fromkeys(KEY_STATUSES, 0)
        for k in self.keys:
            out[k.status] += 1
        return out

    def value_counts(self) -> dict[str, int] | None:
        if self.values is None:
            return None
        out = dict.fromkeys(VALUE_STATUSES, 0)
        for v in self.values:
            out[v.status] += 1
        return out

    @property
    def transforms(self) -> list[str]:
        """The families whose transforms explain a layout difference, in order of first use."""
        seen: dict[str, None] = {}
        for k in self.keys:
            if k.status == "transformed":
                seen.update(dict.fromkeys(k.families))
        return list(seen)

    @property
    def structure_equal(self) -> bool:
        return all(m.status == "equal" for m in self.modules)

    @property
    def keys_equal(self) -> bool:
        """Every key matched, with its shape and dtype (renamed or transformed keys count as matched)."""
        return all(k.status in ("equal", "renamed", "transformed") for k in self.keys)

    @property
    def values_equal(self) -> bool | None:
        """None when values were not compared; "close" counts only with a tolerance asked for."""
        if self.values is None:
            return None
        ok = ("equal", "close") if self.tolerance is not None else ("equal",)
        return all(v.status in ok for v in self.values)

    @property
    def equal(self) -> bool:
        return self.structure_equal and self.keys_equal and self.values_equal is not False

    @property
    def verdict(self) -> str:
        """One line: ``equal``, ``equal after renames``, ``equal after transforms: qkv, gate_up`` or ``different: ...``."""
        if not self.equal:
            what = []
            if not self.structure_equal:
                c = self.module_counts()
                what.append(f"modules ({', '.join(f'{n} {s}' for s, n in c.items() if n and s != 'equal')})")
            if not self.keys_equal:
                c = self.key_counts()
                bad = ("changed", "added", "removed")
                what.append(f"keys ({', '.join(f'{c[s]} {s}' for s in bad if c[s])})")
            if self.values_equal is False:
                c = self.value_counts() or {}
                what.append(f"values ({c.get('different', 0) + c.get('close', 0)} tensor(s) differ)")
            return "different: " + "; ".join(what)
        text = "equal"
        if self.transforms:
            text += f" after transforms: {', '.join(self.transforms)}"
        elif any(k.status == "renamed" for k in self.keys):
            text += " after renames"
        if self.values is None:
            text += " (structure and keys; values not compared)"
        return text

    @property
    def summary(self) -> dict[str, Any]:
        return {
            "modules": self.module_counts(),
            "keys": self.key_counts(),
            "values": self.value_counts(),
            "structure_equal": self.structure_equal,
            "keys_equal": self.keys_equal,
            "values_equal": self.values_equal,
        }

    def value_of(self, name: str) -> ValueRow | None:
        for v in self.values or ():
            if v.name == name:
                return v
        return None
