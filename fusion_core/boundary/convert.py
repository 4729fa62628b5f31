"""One converter between the engine's dataclasses and plain data (JSON objects, lists, scalars).

Every plain-data form of the project goes through it: the CLI's ``--json`` documents
(docs/cli-json.md), the JSON lines between the window and the engine process
(:mod:`fusion_core.host.wire`), the model cache (:mod:`fusion_core.model.cache`) and the
answers of child processes (upstream parity, export consumers). One concept has one
plain form, so what the CLI documents is also what the window receives and the cache keeps.

It is a :class:`cattrs.Converter` whose dataclass hooks read how a class wants to look as
plain data from the class itself, so this module knows no result class:

* :func:`plain` in a field's metadata: the key in the JSON when it differs from the field
  name (``path`` is ``"module"``), a field left out (a class object, the engine's live
  model), a value hook on the way out or in (a rounded time), or a field left out while it
  has its default (``tied_to``);
* a ``PLAIN_KEYS`` class attribute: the documented keys in their documented order, by
  attribute name. A property named there is a derived value (``passed``, ``limit``): written
  out, ignored when read back. A field not named there is left out (it keeps its default
  when read back).

Paths become strings, tuples lists, NamedTuples objects of their fields; floats keep NaN and infinities (the CLI's
``--json`` writes them as ``null``: :func:`fusion_core.cli.output.print_json`; elsewhere JSON as Python writes
it, which timings use); ``X | None`` of dataclasses structures either. Reading back is
strict: a string where a number belongs, a missing required key or a list of the wrong
length raises :class:`PlainDataError`.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any, TypeVar

import cattrs
from cattrs.cols import is_namedtuple, namedtuple_dict_structure_factory, namedtuple_dict_unstructure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

__all__ = ["PlainDataError", "converter", "from_plain", "plain", "to_plain"]

T = TypeVar("T")
_META = "fusion_core.plain"


class PlainDataError(ValueError):
    """Data that does not have the plain form of the type asked for (the message says where)."""


@dataclasses.dataclass(frozen=True)
class _Plain:
    key: str | None = None
    omit: bool = False
    dump: Callable[[Any], Any] | None = None
    load: Callable[[Any], Any] | None = None
    omit_if_default: bool = False


def plain(
    key: str | None = None,
    *,
    omit: bool = False,
    dump: Callable[[Any], Any] | None = None,
    load: Callable[[Any], Any] | None = None,
    omit_if_default: bool = False,
) -> dict[str, Any]:
    """Field metadata saying how the field looks as plain data (``field(metadata=plain(...))``).

    Args:
        key: its JSON key, when it is not the field name.
        omit: never written nor read (the field must have a default).
        dump: turns the field's value into what is written (e.g. rounds it).
        load: turns the read value into the field's value before it is structured.
        omit_if_default: not written while the field has its default.
    """
    return {_META: _Plain(key, omit, dump, load, omit_if_default)}


# leaves: exact types only (cattrs would turn "fast" into a float with float("fast"))
def _exact(tp: type) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _: Any) -> Any:
        if not isinstance(value, tp) or (tp is not bool and isinstance(value, bool)):
            raise PlainDataError(f"expected {tp.__name__}, got {value!r:.80}")
        return value

    return structure


def _float(value: Any, _: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlainDataError(f"expected a number, got {value!r:.80}")
    return float(value)


_LEAVES = (int, float, str, bool, type(None))


def _is_leaf_union(tp: Any) -> bool:
    """A union of leaves only (``int | str``): cattrs has no hook for those."""
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and all(a in _LEAVES for a in typing.get_args(tp))


def _leaf_union(value: Any, tp: Any) -> Any:
    """``value`` when its exact type is one of the union's (an int is no bool, a float may be an int)."""
    args = typing.get_args(tp)
    kind = type(value)
    if kind in args or (kind is int and float in args):
        return float(value) if kind is int and int not in args else value
    raise PlainDataError(f"expected {' | '.join(a.__name__ for a in args)}, got {value!r:.80}")


def _none(value: Any, _: Any) -> None:
    if value is not None:
        raise PlainDataError(f"expected null, got {value!r:.80}")


def _list_of(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise PlainDataError(f"expected a list, got {type(value).__name__}")
    return value


class _Names(dict):  # type: ignore[type-arg]
    """The namespace annotations are resolved in: the class's module, then builtins; a name only
    imported under TYPE_CHECKING (torch's ``nn``, a spec) resolves to Any."""

    def __init__(self, module: str) -> None:
        super().__init__()
        self.module = vars(sys.modules[module]) if module in sys.modules else {}

    def __missing__(self, name: str) -> Any:
        if name in self.module:
            return self.module[name]
        import builtins

        return getattr(builtins, name, _UNKNOWN)


class _Unknown:
    """A name imported only for type checkers: ``nn.Module``, ``Foo | None``, ``Foo[int]`` are Any."""

    def __getattr__(self, name: str) -> Any:
        return Any

    def __or__(self, other: Any) -> Any:
        return Any

    __ror__ = __or__

    def __getitem__(self, item: Any) -> Any:
        return Any


_UNKNOWN = _Unknown()


def _resolve(cls: type) -> None:
    """Resolve the string annotations of ``cls`` (``from __future__ import annotations``) in place,
    leniently (see :class:`_Names`), before cattrs reads them."""
    if not any(isinstance(f.type, str) for f in dataclasses.fields(cls)):
        return
    hints: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        if dataclasses.is_dataclass(base):
            hints.update(typing.get_type_hints(base, localns=_Names(base.__module__)))
    for f in dataclasses.fields(cls):
        f.type = hints.get(f.name, Any)


def _spec(cls: type) -> tuple[dict[str, _Plain], tuple[str, ...] | None]:
    fields = {f.name: f.metadata.get(_META, _Plain()) for f in dataclasses.fields(cls)}
    return fields, getattr(cls, "PLAIN_KEYS", None)


def _unstructure_factory(cls: type) -> Callable[[Any], dict[str, Any]]:
    _resolve(cls)
    fields, keys = _spec(cls)
    overrides = {
        name: override(
            rename=p.key,
            omit=p.omit or (keys is not None and name not in keys),
            omit_if_default=p.omit_if_default or None,
            unstruct_hook=p.dump,
        )
        for name, p in fields.items()
    }
    base = make_dict_unstructure_fn(cls, converter, **overrides)
    if keys is None:
        return base
    derived = [k for k in keys if k not in fields]
    order = [fields[k].key or k if k in fields else k for k in keys]

    def unstructure(value: Any) -> dict[str, Any]:
        data = base(value)
        for name in derived:
            data[name] = converter.unstructure(getattr(value, name))
        return {k: data[k] for k in order if k in data}

    return unstructure


def _structure_factory(cls: type) -> Callable[[Any, Any], Any]:
    _resolve(cls)
    fields, keys = _spec(cls)
    overrides = {}
    loads: dict[str, Callable[[Any], Any]] = {}
    for name, p in fields.items():
        omitted = p.omit or (keys is not None and name not in keys)
        overrides[name] = override(rename=p.key, omit=omitted)
        if p.load is not None and not omitted:
            loads[p.key or name] = p.load
    base = make_dict_structure_fn(cls, converter, **overrides)

    def structure(data: Any, tp: Any) -> Any:
        if not isinstance(data, dict):
            raise PlainDataError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        if loads:
            data = {k: loads[k](v) if k in loads else v for k, v in data.items()}
        return base(data, tp)

    return structure


def _is_dataclass(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


_PLAIN_TYPES = (str, int, float, bool, type(None), list, tuple, dict, set, frozenset, PurePath)


def _not_plain(tp: Any) -> bool:
    """A class that is neither plain data nor a dataclass: refused (a tensor, a class, a function)."""
    if tp is Any or not isinstance(tp, type):
        return False
    return not _is_dataclass(tp) and not issubclass(tp, _PLAIN_TYPES)


def _refuse(value: Any) -> Any:
    raise TypeError(f"not plain data: {type(value).__name__}")


def _tuple(value: Any, tp: Any) -> tuple[Any, ...]:
    items = _list_of(value)
    args = typing.get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(converter.structure(v, args[0]) for v in items)
    if args and len(args) != len(items):
        raise PlainDataError(f"expected {len(args)} items, got {len(items)}")
    return tuple(converter.structure(v, a) for v, a in zip(items, args or [Any] * len(items), strict=True))


def _is_tuple(tp: Any) -> bool:
    return tp is tuple or typing.get_origin(tp) is tuple


def _is_list(tp: Any) -> bool:
    return tp is list or typing.get_origin(tp) is list


def _make_list_structure(tp: Any) -> Callable[[Any, Any], list[Any]]:
    args = typing.get_args(tp)
    item = args[0] if args else Any

    def structure(value: Any, _: Any) -> list[Any]:
        return [converter.structure(v, item) for v in _list_of(value)]

    return structure


def _make_converter() -> cattrs.Converter:
    c = cattrs.Converter(unstruct_collection_overrides={tuple: list})
    for tp in (str, int, bool):
        c.register_structure_hook(tp, _exact(tp))
    c.register_structure_hook(float, _float)
    c.register_unstructure_hook(float, lambda x: x)  # NaN and infinities stay floats
    c.register_unstructure_hook_func(lambda tp: isinstance(tp, type) and issubclass(tp, PurePath), str)
    c.register_structure_hook(Path, lambda v, _: Path(_exact(str)(v, str)))
    c.register_structure_hook_func(_is_tuple, _tuple)
    c.register_structure_hook(type(None), _none)  # an operation that answers nothing
    c.register_structure_hook_func(_is_leaf_union, _leaf_union)  # int | str (a shard size), str | None...
    # a NamedTuple is an object of its fields ({"name": ..., "bytes": ...}), not a list
    c.register_unstructure_hook_factory(is_namedtuple, namedtuple_dict_unstructure_factory)
    c.register_structure_hook_factory(is_namedtuple, namedtuple_dict_structure_factory)
    c.register_structure_hook_factory(_is_list, _make_list_structure)
    c.register_unstructure_hook_func(_not_plain, _refuse)
    c.register_unstructure_hook_factory(_is_dataclass, _unstructure_factory)
    c.register_structure_hook_factory(_is_dataclass, _structure_factory)
    return c


converter = _make_converter()


def to_plain(value: Any) -> Any:
    """``value`` (dataclasses, lists, tuples, dicts, paths, scalars) as JSON data, in its one plain form.

    Raises:
        TypeError: something that is not plain data (a class, a tensor, a function).
    """
    return converter.unstructure(value)


def from_plain(tp: type[T] | Any, data: Any) -> T:
    """The value of type ``tp`` (a dataclass, or a typing form of them) that :func:`to_plain` gave ``data``.

    Raises:
        PlainDataError: ``data`` does not have the plain form of ``tp`` (a ValueError; the
            message says what and where).
    """
    try:
        return converter.structure(data, tp)
    except PlainDataError:
        raise
    except (cattrs.BaseValidationError, TypeError, ValueError, KeyError, AttributeError) as e:
        refused = _option_error(e)
        if refused is not None:  # a value the option object itself refuses: its own message
            raise refused from None
        raise PlainDataError(_message(e)) from e


def _option_error(error: BaseException) -> BaseException | None:
    """The engine error (an OptionError) that an option object raised while it was rebuilt, if any."""
    from ..errors import FusionError

    if isinstance(error, FusionError):
        return error
    for inner in getattr(error, "exceptions", ()) or ():
        found = _option_error(inner)
        if found is not None:
            return found
    return None


def _message(error: BaseException) -> str:
    if isinstance(error, cattrs.BaseValidationError):
        lines = cattrs.transform_error(error)
        return "; ".join(lines[:3]) or str(error)
    return f"{type(error).__name__}: {error}"
