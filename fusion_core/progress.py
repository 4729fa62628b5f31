"""Progress reporting and cancellation for long operations.

Long operations are generators that yield :class:`Progress` and *return* their result.
:func:`drive` runs such a generator with an optional callback and cancel token; the CLI
passes a tqdm updater, the GUI a worker that emits signals. Cancellation takes effect at
the next yield: :func:`drive` closes the generator, so its ``finally`` blocks clean up.
"""

from __future__ import annotations

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

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise Cancelled("cancelled by the user")


ProgressCallback = Callable[[Progress], None]
ProgressGenerator = Generator[Progress, None, T]


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
    try:
        while True:
            if cancel is not None and cancel.cancelled:
                gen.close()
                raise Cancelled("cancelled by the user")
            try:
                step = next(gen)
            except StopIteration as stop:
                return stop.value
            if progress is not None:
                progress(step)
    finally:
        gen.close()
