"""What crosses between the window and the engine process: JSON lines of plain data.

Results are dataclasses of the core whose modules import no torch (``CheckResult``,
``ExportResult``, ``PlanDiff``, ``PlanData``, ``InspectionView``): :func:`to_plain` turns one
into its plain form in the engine, :func:`from_plain` rebuilds the same type in the window,
so both sides work with the typed object. Both are the one converter's
(:mod:`fusion_core.boundary.convert`): what crosses is what the CLI documents and the model
cache keeps. Errors cross as their class name and message
(:func:`error_data`, :func:`error_from_data`): an engine error is the same
:class:`~fusion_core.errors.FusionError` subclass on both sides; anything else arrives as
:class:`EngineFailure`, with the engine's traceback.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from .. import errors
from ..boundary.convert import from_plain, to_plain

__all__ = ["EngineFailure", "decode", "encode", "error_data", "error_from_data", "from_plain", "to_plain"]
MAX_LINE_BYTES = 256 * 1024 * 1024  # one message; a 200k-module tree is ~60 MB


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


#: the attributes of an engine error that cross with it besides its message
_CARRIED = ("option", "detail")


def error_data(error: BaseException) -> dict[str, Any]:
    """An exception as plain data: class name, message, the options it names, traceback (bugs
    only), its files (RemoteCodeError), an OptionError's option and detail."""
    data: dict[str, Any] = {"kind": type(error).__name__, "message": str(error)}
    if not isinstance(error, errors.FusionError):
        data["details"] = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return data
    if error.options:
        data["options"] = [str(o) for o in error.options]
    if isinstance(error, errors.RemoteCodeError):
        data["files"] = list(error.files)
    for name in _CARRIED:
        if isinstance(getattr(error, name, None), str):
            data[name] = getattr(error, name)
    return data


def _engine_errors() -> dict[str, type[errors.FusionError]]:
    """Every FusionError class by name, wherever it is declared (``OptionError`` is in
    ``boundary.options``): the lookup is total, a user's error never arrives as a bug."""
    from ..boundary import options  # noqa: F401 - declares OptionError

    found: dict[str, type[errors.FusionError]] = {}
    stack: list[type[errors.FusionError]] = [errors.FusionError]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.__name__, cls)
        stack += cls.__subclasses__()
    return found


def error_from_data(data: dict[str, Any]) -> Exception:
    """The exception :func:`error_data` describes: the same FusionError subclass (with the
    options it names), or an EngineFailure."""
    kind, message = str(data.get("kind", "")), str(data.get("message", ""))
    cls = _engine_errors().get(kind)
    if cls is None:
        return EngineFailure(kind or "Exception", message, str(data.get("details", "")))
    if cls is errors.RemoteCodeError:
        error: errors.FusionError = errors.RemoteCodeError(message, [str(f) for f in data.get("files") or []])
    else:
        error = cls.__new__(cls)
        Exception.__init__(error, message)
    error.options = tuple(str(o) for o in data.get("options") or ())
    for name in _CARRIED:
        if isinstance(data.get(name), str):
            setattr(error, name, data[name])
    return error
