"""The messages between the window and the engine process: JSON-RPC 2.0 in shape, one per line.

* request: ``{"jsonrpc": "2.0", "id": N, "method": OP, "params": {...}}``; without ``id`` it
  is a notification and gets no answer (the window's ``close``, a restart's ``open``);
* answer: ``{"id": N, "result": value}`` or ``{"id": N, "error": {"code", "message", "data"}}``,
  ``data`` being :func:`.wire.error_data` (the engine's error class, its traceback for bugs);
  a cancelled request answers the error :data:`REQUEST_CANCELLED` (LSP's code);
* ``$/progress`` (engine -> window): ``{"token": N, "value": {"done", "total", "message"}}``,
  ``token`` being the request's id; ``$/cancelRequest`` (window -> engine): ``{"id": N}``;
* ``$/ready`` ``{"pid"}`` when the engine starts, ``$/log`` ``{"name", "level", "message"}``
  for its log records.

The methods are the operations of :mod:`.ops`. Importing this module imports no torch.
"""

from __future__ import annotations

from typing import Any

from . import wire

PROGRESS = "$/progress"
CANCEL = "$/cancelRequest"
READY = "$/ready"
LOG = "$/log"

# JSON-RPC 2.0 and LSP error codes
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_FAILED = -32803  # LSP: the request is valid but failed (an engine error the user can act on)
REQUEST_CANCELLED = -32800  # LSP


def request(method: str, params: Any, id: int | None = None) -> dict[str, Any]:
    """A request (``id`` given) or a notification; ``params`` is plain data."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if id is not None:
        message["id"] = id
    return message


def notification(method: str, **params: Any) -> dict[str, Any]:
    return request(method, params)


def result(id: int, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": value}


def error(id: int | None, error: BaseException, code: int | None = None) -> dict[str, Any]:
    """The error answer for ``error`` (its class and message cross in ``data``)."""
    from ..errors import FusionError

    if code is None:
        code = REQUEST_FAILED if isinstance(error, FusionError) else INTERNAL_ERROR
    return {"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": str(error), "data": wire.error_data(error)}}


def cancelled(id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "error": {"code": REQUEST_CANCELLED, "message": "cancelled"}}


def progress(id: int, done: int, total: int, message: str) -> dict[str, Any]:
    return notification(PROGRESS, token=id, value={"done": done, "total": total, "message": message})


def cancel_request(id: int) -> dict[str, Any]:
    return notification(CANCEL, id=id)
