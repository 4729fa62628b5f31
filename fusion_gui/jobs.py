"""Background jobs, run by the engine process (:mod:`fusion_gui.engine`).

The window never runs the engine itself: it never imports torch or transformers, and its
thread is never held by them. A :class:`Job` is one request to the engine process, made
by an entry of the operation table (:mod:`fusion_core.host.ops`): ``engine.call(OPEN,
OpenParams(...))`` is a ``Job[InspectionView]``. It is a passive future, in the shape of
:class:`concurrent.futures.Future`: the engine completes it (``set_result``,
``set_exception``, ``set_cancelled``) by its id, and its signals then arrive on the GUI
thread with the typed result.

Cancel asks the engine to stop at its next step; a job that has not stopped after
:data:`fusion_gui.engine.CANCEL_GRACE_S` ends for sure: the engine process is ended
and started again (the open model is opened again there, from the same spec).

Why not threads (as before) or superqt's ``GeneratorWorker``: importing torch and running
Python-heavy engine code on a thread of the GUI process holds the interpreter lock for
hundreds of milliseconds at a time (218-528 ms on the first open, measured with
benchmarks/bench_gui.py), a crash in a model took the window down, and a cancel could only
be honoured at the job's next yield.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from PySide6.QtCore import QObject, QTimer, Signal, Slot

if TYPE_CHECKING:
    from fusion_core.host.ops import Op

log = logging.getLogger("fusion_gui.jobs")

R = TypeVar("R")
_UNSET: Any = object()


class Job(QObject, Generic[R]):
    """One request to the engine process: a future of its typed result; signals on the GUI thread."""

    progressed = Signal(int, int, str)  # done, total (0: unknown), message
    succeeded = Signal(object)  # the typed result (the operation's result type)
    failed = Signal(object)  # the exception (a FusionError subclass, EngineStopped, EngineFailure)
    aborted = Signal()  # cancelled
    finished = Signal()  # after any of the three
    cancel_asked = Signal()  # cancel() was called: the engine asks its process to stop the job

    def __init__(self, op: Op[Any, R], params: Any, name: str = "", parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.op = op
        self.params = params
        self.name = name or op.name
        self.id = 0  # set by the engine when sent
        self.cancel_requested = False
        self._done = False
        self._cancelled = False
        self._result: Any = _UNSET
        self._exception: BaseException | None = None

    # the Future shape ------------------------------------------------------------------
    def done(self) -> bool:
        """Whether the job has ended (its signal was emitted)."""
        return self._done

    def cancelled(self) -> bool:
        return self._cancelled

    def result(self) -> R:
        """The typed result.

        Raises:
            RuntimeError: the job has not ended (this future never blocks the GUI thread).
            Exception: the job's failure; ``fusion_core.errors.Cancelled`` when it was cancelled.
        """
        if not self._done:
            raise RuntimeError(f"the {self.name} job has not ended")
        if self._cancelled:
            from fusion_core.errors import Cancelled

            raise Cancelled(f"the {self.name} job was cancelled")
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self) -> BaseException | None:
        if not self._done:
            raise RuntimeError(f"the {self.name} job has not ended")
        return self._exception

    def add_done_callback(self, fn: Callable[[Job[R]], Any]) -> None:
        """Call ``fn(job)`` when the job ends (at once if it has)."""
        if self._done:
            fn(self)
        else:
            self.finished.connect(lambda: fn(self))

    def cancel(self) -> bool:
        """Ask the engine to stop this job (for sure after the grace period); False when it has ended."""
        if self._done:
            return False
        if not self.cancel_requested:
            self.cancel_requested = True
            self.cancel_asked.emit()
        return True

    # completed by the engine ------------------------------------------------------------
    def set_progress(self, done: int, total: int, message: str) -> None:
        if not self._done:
            self.progressed.emit(done, total, message)

    def set_result(self, value: R) -> None:
        if self._done:
            return
        # the handlers (panels rebuilding) run in the next turn of the event loop: rebuilding
        # the typed result and reacting to it are two shorter stalls, not one longer one
        QTimer.singleShot(1, self, lambda: self._succeed(value))

    def set_exception(self, error: BaseException) -> None:
        if not self._done:
            self._exception = error
            self._done = True
            self.failed.emit(error)
            self.finished.emit()

    def set_cancelled(self) -> None:
        if not self._done:
            self._cancelled = self._done = True
            self.aborted.emit()
            self.finished.emit()

    def _succeed(self, value: R) -> None:
        if self._done:
            return
        if self.cancel_requested:
            self.set_cancelled()
            return
        self._result, self._done = value, True
        self.succeeded.emit(value)
        self.finished.emit()


class Caller(Protocol):
    """What runs jobs (:class:`fusion_gui.engine.Engine`; this module does not import it)."""

    def call(self, op: Op[Any, R], params: Any, *, name: str = "", parent: QObject | None = None) -> Job[R]: ...

    def wait_for(self, done: Callable[[], bool], msecs: int) -> bool: ...


class JobManager(QObject):
    """Calls the engine and keeps track of the user's current job.

    ``current`` is the one user-visible long job (open, checks, export); others (plans,
    the diff, lists for the Open dialog) run as ``background`` jobs that do not block the
    actions.
    """

    job_started = Signal(object)  # Job
    job_finished = Signal(object)  # Job

    def __init__(self, engine: Caller, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine = engine
        self.current: Job[Any] | None = None
        self._jobs: set[Job[Any]] = set()

    @property
    def busy(self) -> bool:
        return self.current is not None

    def call(self, op: Op[Any, R], params: Any, *, name: str = "", background: bool = False) -> Job[R]:
        """Run ``op`` with ``params`` (its params dataclass) in the engine.

        Args:
            op: an entry of :mod:`fusion_core.host.ops`.
            params: an ``op.params`` object.
            name: the job's name, for the status bar and the log (default: the op's).
            background: not the user's current job (no status, no busy state).

        Returns:
            The :class:`Job`; connect to its signals before returning to the event loop.

        Raises:
            RuntimeError: a user job is already running (the actions are disabled then).
        """
        if not background and self.current is not None:
            raise RuntimeError(f"a {self.current.name} job is already running")
        job = self.engine.call(op, params, name=name, parent=self)
        self._jobs.add(job)
        job.finished.connect(self._on_job_finished)
        if not background:
            self.current = job
            self.job_started.emit(job)
        log.debug("started job %s (%s)", job.name, op.name)
        return job

    def cancel_current(self) -> None:
        if self.current is not None:
            self.current.cancel()

    def wait_for_done(self, msecs: int = 30_000) -> bool:
        """Block until every job of this manager has ended (used at exit)."""
        return self.engine.wait_for(lambda: not self._jobs, msecs)

    @Slot()
    def _on_job_finished(self) -> None:
        job = self.sender()
        if not isinstance(job, Job):
            return
        self._jobs.discard(job)
        if job is self.current:
            self.current = None
            self.job_finished.emit(job)
        job.deleteLater()
