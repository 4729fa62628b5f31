"""What crosses between the window and the engine process: JSON lines of plain data.

Results are dataclasses of the core whose modules import no torch (``CheckResult``,
``ExportResult``, ``PlanDiff``, ``PlanView``, ``InspectionView``): :func:`to_plain` turns one
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
