"""What crosses between the window and the engine process: JSON lines of plain data.

Results are dataclasses of the core whose modules import no torch (``CheckResult``,
``ExportResult``, ``PlanDiff``, ``PlanView``): :func:`to_plain` turns one into JSON data in
the engine, :func:`from_plain` rebuilds the same type in the window from its field types,
so both sides work with the typed object. Errors cross as their class name and message
(:func:`error_data`, :func:`error_from_data`): an engine error is the same
:class:`~fusion_core.errors.FusionError` subclass on both sides; anything else arrives as
:class:`EngineFailure`, with the engine's traceback.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import traceback
import types
import typing
from pathlib import Path, PurePath
from typing import Any, TypeVar

from .. import errors

T = TypeVar("T")
MAX_LINE_BYTES = 256 * 1024 * 1024  # one message; a 200k-module tree is ~30 MB


class EngineFailure(Exception):
    """An unexpected exception in the engine (a bug): its type, message and traceback."""

    def __init__(self, kind: str, message: str, details: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.details = details


def encode(message: dict[str, Any]) -> bytes:
    """One message as a JSON line (NaN and infinities allowed: timings use them)."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes | str) -> dict[str, Any]:
    """One JSON line back to a message.

    Raises:
        ValueError: not a JSON object.
    """
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError("a message must be a JSON object")
    return data


def to_plain(value: Any) -> Any:
    """``value`` (dataclasses, lists, tuples, dicts, paths, scalars) as JSON data.

    Raises:
        TypeError: something that is not plain data (a class, a tensor, a function).
    """
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"not plain data: {type(value).__name__}")


def from_plain(tp: type[T] | Any, data: Any) -> T:
    """Rebuild a value of type ``tp`` (a dataclass, or a typing form of them) from :func:`to_plain` data.

    Raises:
        TypeError, ValueError, KeyError: ``data`` does not have the shape of ``tp``.
    """
    if tp is Any or tp is object:
        return data
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if data is None and type(None) in args:
            return None  # type: ignore[return-value]
        options = [a for a in args if a is not type(None)]
        last: Exception | None = None
        for option in options:
            try:
                return from_plain(option, data)
            except (TypeError, ValueError, KeyError) as e:
                last = e
        raise TypeError(f"{data!r:.80} fits none of {tp}") from last
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise TypeError(f"{tp.__name__}: expected an object, got {type(data).__name__}")
        kwargs = {name: from_plain(hint, data[name]) for name, hint in _init_fields(tp) if name in data}
        return tp(**kwargs)  # type: ignore[return-value]
    if origin is list:
        return [from_plain(args[0] if args else Any, v) for v in _seq(data)]  # type: ignore[return-value]
    if origin is tuple:
        items = _seq(data)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_plain(args[0], v) for v in items)  # type: ignore[return-value]
        if args and len(args) != len(items):
            raise ValueError(f"expected {len(args)} items, got {len(items)}")
        return tuple(from_plain(a, v) for a, v in zip(args or [Any] * len(items), items, strict=True))  # type: ignore[return-value]
    if origin is dict:
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        value_type = args[1] if args else Any
        return {k: from_plain(value_type, v) for k, v in data.items()}  # type: ignore[return-value]
    if tp is Path:
        return Path(_typed(str, data))  # type: ignore[return-value]
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise TypeError(f"expected a number, got {data!r:.80}")
        return float(data)  # type: ignore[return-value]
    if tp in (str, int, bool):
        return _typed(tp, data)
    return data


@functools.cache
def _init_fields(tp: type) -> tuple[tuple[str, Any], ...]:
    """(name, resolved type) of the dataclass's init fields (resolving hints costs ~0.3 ms: once per class)."""
    hints = typing.get_type_hints(tp)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(tp) if f.init)


def _seq(data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise TypeError(f"expected a list, got {type(data).__name__}")
    return data


def _typed(tp: type, data: Any) -> Any:
    if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
        raise TypeError(f"expected {tp.__name__}, got {data!r:.80}")
    return data


def error_data(error: BaseException) -> dict[str, Any]:
    """An exception as plain data: class name, message, traceback (bugs only), its files (RemoteCodeError)."""
    data: dict[str, Any] = {"kind": type(error).__name__, "message": str(error)}
    if not isinstance(error, errors.FusionError):
        data["details"] = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    if isinstance(error, errors.RemoteCodeError):
        data["files"] = list(error.files)
    return data


def error_from_data(data: dict[str, Any]) -> Exception:
    """The exception :func:`error_data` describes: the same FusionError subclass, or an EngineFailure."""
    kind, message = str(data.get("kind", "")), str(data.get("message", ""))
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, errors.FusionError):
        if cls is errors.RemoteCodeError:
            return errors.RemoteCodeError(message, [str(f) for f in data.get("files") or []])
        error = cls.__new__(cls)
        Exception.__init__(error, message)
        return error
    return EngineFailure(kind or "Exception", message, str(data.get("details", "")))
