"""Background jobs, run by the engine process (:mod:`fusion_gui.engine`).

The window never runs the engine itself: it never imports torch or transformers, and its
thread is never held by them. A :class:`Job` is one request to the engine process
(``open``, ``check``, ``export``, or a quick one: ``plan``, ``diff``...); its signals arrive
on the GUI thread, with the result rebuilt as its typed object (``decode``).

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
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal, Slot

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("fusion_gui.jobs")

Decode = Callable[[Any], Any]


class Job(QObject):
    """One request to the engine process; every signal is emitted on the GUI thread."""

    progressed = Signal(int, int, str)  # done, total (0: unknown), message
    succeeded = Signal(object)  # the decoded result
    failed = Signal(object)  # the exception (a FusionError subclass, EngineStopped, EngineFailure)
    cancelled = Signal()
    finished = Signal()

    def __init__(
        self,
        name: str,
        op: str,
        args: dict[str, Any],
        decode: Decode | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.name = name
        self.op = op
        self.args = args
        self.decode = decode
        self.id = 0  # set by the engine when sent
        self.done = False
        self.cancel_requested = False
        self.engine: Engine | None = None

    def cancel(self) -> None:
        """Ask the engine to stop this job (for sure after the grace period)."""
        if not self.done and not self.cancel_requested and self.engine is not None:
            self.cancel_requested = True
            self.engine.cancel(self)

    # called by the engine ------------------------------------------------------------
    def _progress(self, done: int, total: int, message: str) -> None:
        if not self.done:
            self.progressed.emit(done, total, message)

    def _result(self, value: Any) -> None:
        if self.done:
            return
        try:
            decoded = self.decode(value) if self.decode is not None else value
        except (TypeError, ValueError, KeyError) as e:
            from fusion_core.host.wire import EngineFailure

            log.debug("cannot read the %s result", self.op, exc_info=True)
            self._failed(EngineFailure(type(e).__name__, f"the engine's {self.op} result is malformed: {e}"))
            return
        # the handlers (panels rebuilding) run in the next turn of the event loop: rebuilding
        # the typed result and reacting to it are two shorter stalls, not one longer one
        QTimer.singleShot(1, self, lambda: self._succeed(decoded))

    def _succeed(self, decoded: Any) -> None:
        if self.done:
            return
        if self.cancel_requested:
            self._cancelled()
            return
        self.succeeded.emit(decoded)
        self._finish()

    def _failed(self, error: BaseException) -> None:
        if not self.done:
            self.failed.emit(error)
            self._finish()

    def _cancelled(self) -> None:
        if not self.done:
            self.cancelled.emit()
            self._finish()

    def _finish(self) -> None:
        self.done = True
        self.finished.emit()


class JobManager(QObject):
    """Sends jobs to the engine and keeps track of the user's current one.

    ``current`` is the one user-visible long job (open, checks, export); others (plans,
    the diff, lists for the Open dialog) run as ``background`` jobs that do not block the
    actions.
    """

    job_started = Signal(object)  # Job
    job_finished = Signal(object)  # Job

    def __init__(self, parent: QObject | None = None, engine: Engine | None = None) -> None:
        super().__init__(parent)
        if engine is None:
            from .engine import shared_engine

            engine = shared_engine()
        self.engine = engine
        self.current: Job | None = None
        self._jobs: set[Job] = set()

    @property
    def busy(self) -> bool:
        return self.current is not None

    def start(
        self, name: str, op: str, args: dict[str, Any], *, decode: Decode | None = None, background: bool = False
    ) -> Job:
        """Send ``op`` with ``args`` to the engine.

        Args:
            name: the job's name, for the status bar and the log.
            op: the engine operation (:mod:`fusion_core.host.worker`).
            args: its arguments (plain data).
            decode: rebuilds the typed result from the plain data (on the GUI thread).
            background: not the user's current job (no status, no busy state).

        Returns:
            The :class:`Job`; connect to its signals before returning to the event loop.

        Raises:
            RuntimeError: a user job is already running (the actions are disabled then).
        """
        if not background and self.current is not None:
            raise RuntimeError(f"a {self.current.name} job is already running")
        job = Job(name, op, args, decode, self)
        self._jobs.add(job)
        job.finished.connect(self._on_job_finished)
        if not background:
            self.current = job
            self.job_started.emit(job)
        log.debug("starting job %s (%s)", name, op)
        self.engine.send(job)
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
