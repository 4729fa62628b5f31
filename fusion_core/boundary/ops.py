"""An operation of one of our processes, declared once: name, params dataclass, result type.

The engine process's operations (the window's, :mod:`fusion_core.host.ops`) and our
isolated children's (:mod:`fusion_core.run.child`: upstream parity, the export's and the
adapter's consumers, the coverage workers; and the zygote that forks them,
:mod:`fusion_core.run.zygote`) are :class:`Op` entries, gathered in one table
(:data:`fusion_core.host.ops.OPS` and :data:`fusion_core.host.ops.CHILD_OPS`). Params and
results cross as the one converter's plain data (:mod:`fusion_core.boundary.convert`) and
are rebuilt as their own types on the other side.

A child's operation is declared next to the code that serves it (a layer may import only
those below it) and speaks lines on the child's standard streams: a request is one line
:meth:`Op.request_line` writes and :meth:`Op.read_request` reads back as the params
dataclass (JSON-RPC 2.0 in shape, as the window's requests); an answer, or a notification
the child sends (the type it starts, what it loads), is a line marked :data:`CHILD_MARK`
that :meth:`Op.answer_line` writes, found among whatever else the child printed by
:meth:`Op.find_answer` or :func:`read_child_line`. The zygote speaks the same lines, one
per datagram on its socket.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .convert import from_plain, to_plain

__all__ = ["CHILD_MARK", "Op", "read_child_line"]

P = TypeVar("P")
R = TypeVar("R")

#: what starts a child's answer line (a child's other output, model code printing, is not one)
CHILD_MARK = "FUSION_CHILD "


@dataclass(frozen=True, eq=False)
class Op(Generic[P, R]):
    """One operation: of the engine process (the window's), or of one of our children."""

    name: str
    params: type[P]
    result: Any  # the result's type (a dataclass, a typing form of them, or None)
    long: bool = False  # the engine's: on its own thread, with progress and cancel
    #: reads the result's plain form where it is checked beyond its shape (default: from_plain)
    reader: Callable[[Any], Any] | None = None

    def decode(self, data: Any) -> R:
        """The typed result from its plain data.

        Raises:
            TypeError, ValueError, KeyError: ``data`` does not have the result's shape.
        """
        return self.reader(data) if self.reader is not None else from_plain(self.result, data)  # type: ignore[no-any-return]

    def request_line(self, params: P) -> str:
        """``params`` as the one request line a child reads (no newline)."""
        return json.dumps({"jsonrpc": "2.0", "method": self.name, "params": to_plain(params)})

    def read_request(self, line: str) -> P:
        """The params of a request line of this operation (in the child).

        Raises:
            ValueError: not a request of this operation, or params of another shape.
        """
        data = _object(line)
        if data.get("method") != self.name:
            raise ValueError(f"expected a {self.name!r} request, got {str(data.get('method'))!r:.80}")
        return from_plain(self.params, data.get("params"))

    def answer_line(self, value: R) -> str:
        """``value`` as the marked line a child prints (its answer, or a notification's params)."""
        return CHILD_MARK + json.dumps({"method": self.name, "result": to_plain(value)})

    def find_answer(self, output: str) -> R | None:
        """The last answer of this operation among a child's printed lines (None: there is none).

        Raises:
            ValueError: the answer does not have the result's shape.
        """
        for line in reversed(output.splitlines()):
            found = read_child_line(line, {self.name: self})
            if found is not None:
                return found[1]  # type: ignore[no-any-return]
        return None

    def __repr__(self) -> str:
        return f"Op({self.name!r})"


def read_child_line(line: str, table: dict[str, Op[Any, Any]]) -> tuple[Op[Any, Any], Any] | None:
    """The operation of ``table`` and its result that one line a child printed carries; None
    for any other line (model code printing, an operation not in ``table``).

    Raises:
        ValueError: a marked line that is not JSON, or a result without its declared shape.
    """
    if not line.startswith(CHILD_MARK):
        return None
    data = _object(line[len(CHILD_MARK) :])
    op = table.get(str(data.get("method")))
    if op is None:
        return None
    return op, op.decode(data.get("result"))


def _object(line: str) -> dict[str, Any]:
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError("a message must be a JSON object")
    return data
