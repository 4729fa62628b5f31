"""Progress reporting and cancellation for long operations.

Long operations are generators that yield :class:`Progress` and *return* their result.
:func:`drive` runs such a generator with an optional callback and cancel token; the CLI
passes a tqdm updater, the GUI a worker that emits signals. Cancellation takes effect at
the next yield: :func:`drive` closes the generator, so its ``finally`` blocks clean up.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TypeVar

from .errors import Cancelled

T = TypeVar("T")


@dataclass(frozen=True)
class Progress:
    """One step of a long operation: ``done`` of ``total`` units (``total`` 0: unknown)."""

    done: int
    total: int
    message: str = ""

    @property
    def fraction(self) -> float | None:
        return self.done / self.total if self.total else None


class CancelToken:
    """A thread-safe flag that a caller sets to stop a running operation."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


ProgressCallback = Callable[[Progress], None]
ProgressGenerator = Generator[Progress, None, T]


@dataclass
class _Driving:
    progress: ProgressCallback | None
    cancel: CancelToken | None
    last: Progress


_DRIVING: contextvars.ContextVar[_Driving | None] = contextvars.ContextVar("fusion_core_driving", default=None)


def heartbeat(message: str) -> None:
    """Report from inside a step that cannot yield (a timing round, a forward at real size).

    The callback of the operation :func:`drive` runs in this thread gets a :class:`Progress`
    with the current step's counts and ``message``; a cancel token that is set raises
    :class:`Cancelled` here, so a long step ends within one of its rounds (the generator's
    ``finally`` blocks still run). Outside :func:`drive`: nothing.

    Raises:
        Cancelled: the operation's cancel token was set.
    """
    driving = _DRIVING.get()
    if driving is None:
        return
    if driving.cancel is not None and driving.cancel.cancelled:
        raise Cancelled("cancelled by the user")
    if driving.progress is not None:
        driving.progress(Progress(driving.last.done, driving.last.total, message))


def drive(
    gen: Generator[Progress, None, T],
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> T:
    """Run a progress generator to completion and return its result.

    Args:
        gen: the operation, a generator yielding :class:`Progress`.
        progress: called with every step (from the calling thread).
        cancel: checked at every step; once set, the generator is closed.

    Returns:
        The generator's return value.

    Raises:
        Cancelled: when ``cancel`` was set before the operation finished.
    """
    driving = _Driving(progress, cancel, Progress(0, 0))
    token = _DRIVING.set(driving)  # for heartbeat(): steps that cannot yield report through it
    try:
        while True:
            if cancel is not None and cancel.cancelled:
                gen.close()
                raise Cancelled("cancelled by the user")
            try:
                step = next(gen)
            except StopIteration as stop:
                return stop.value
            driving.last = step
            if progress is not None:
                progress(step)
    finally:
        gen.close()
        _DRIVING.reset(token)
