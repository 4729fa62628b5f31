"""Background jobs: the only place in the GUI where threads start.

A job is a generator function of the core (``iter_load``, ``iter_check``, ``iter_export``,
or a small GUI wrapper around ``inspect_model``) that yields
:class:`fusion_core.progress.Progress` and returns a result. :class:`Worker` runs it on
a :class:`QThreadPool` thread with :func:`fusion_core.progress.drive` and a
:class:`fusion_core.progress.CancelToken`; its signals are queued back to the GUI thread.

Why not superqt's ``GeneratorWorker`` (0.9.0, measured here): it does not fit, for three reasons.

1. A ``RuntimeError`` raised by the generator is taken for "the worker was deleted":
   ``GeneratorWorker.work`` returns it, and ``WorkerBase.run`` only warns and returns,
   emitting neither ``errored`` nor ``finished``. torch raises ``RuntimeError`` for
   ordinary user errors (shape mismatches, out of memory), so the error would be lost and
   the window would stay busy forever.
2. ``quit()`` stops the loop between yields but never closes the generator, so its
   ``finally`` blocks (export removes its temporary folder there) run whenever, and on
   whatever thread, the garbage collector gets to it.
   :func:`fusion_core.progress.drive` closes it on the worker thread, at once.
3. ``run`` wraps the work in ``warnings.catch_warnings()`` and replaces
   ``warnings.showwarning`` from the worker thread: process-wide state, changed while the
   GUI thread runs (and restored in whatever order concurrent workers finish).

It also emits ``yielded`` for every step (a per-tensor export would flood the event loop;
ours sends at most 20 progress signals a second), and its ``start()`` always uses the global pool. Ours
is the same pattern (a ``QRunnable`` with a signals ``QObject``, cancel honoured at the
next yield) in about 100 lines.

Why the core is imported inside :meth:`Worker.run` only: importing ``fusion_core``
imports torch and transformers (seconds). Doing it on a worker thread keeps the window
responsive and its first paint fast; the GUI thread touches the core only after a job
has finished importing it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

log = logging.getLogger("fusion_gui.jobs")

GeneratorFactory = Callable[[], Generator[Any, None, Any]]
# At most this many progress signals per second reach the GUI thread: a generator that
# yields per tensor must not flood the event loop.
_PROGRESS_INTERVAL_S = 0.05


class WorkerSignals(QObject):
    """Signals of one worker (a QRunnable is not a QObject). Emitted from the worker thread."""

    progressed = Signal(int, int, str)  # done, total (0: unknown), message
    succeeded = Signal(object)
    failed = Signal(object)  # the exception
    cancelled = Signal()
    finished = Signal()


class Worker(QRunnable):
    """Runs one progress generator on a pool thread.

    Args:
        name: shown in the status bar ("open", "checks", "export").
        factory: called on the worker thread; returns the generator to drive.
    """

    def __init__(self, name: str, factory: GeneratorFactory) -> None:
        super().__init__()
        self.setAutoDelete(False)  # the JobManager keeps it until `finished`
        self.name = name
        self.signals = WorkerSignals()
        self._factory = factory
        self._cancel_requested = threading.Event()
        self._token: Any = None
        self._lock = threading.Lock()
        self._last_emit = 0.0

    def cancel(self) -> None:
        """Ask the job to stop; it stops at its next yield (thread-safe)."""
        with self._lock:
            self._cancel_requested.set()
            if self._token is not None:
                self._token.cancel()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel_requested.is_set()

    def run(self) -> None:  # Qt override: runs on the pool thread
        try:
            from fusion_core.errors import Cancelled
            from fusion_core.progress import CancelToken, drive

            with self._lock:
                self._token = CancelToken()
                if self._cancel_requested.is_set():
                    self._token.cancel()
            try:
                result = drive(self._factory(), self._report, self._token)
            except Cancelled:
                self.signals.cancelled.emit()
            else:
                if self._cancel_requested.is_set():
                    self.signals.cancelled.emit()
                else:
                    self.signals.succeeded.emit(result)
        except BaseException as e:  # everything goes to the GUI as a message, never lost
            log.debug("job %s failed", self.name, exc_info=True)
            self.signals.failed.emit(e)
        finally:
            self.signals.finished.emit()

    def _report(self, step: Any) -> None:
        now = time.monotonic()
        last = step.total and step.done >= step.total
        if last or now - self._last_emit >= _PROGRESS_INTERVAL_S:
            self._last_emit = now
            self.signals.progressed.emit(int(step.done), int(step.total), str(step.message))


class Job(QObject):
    """The GUI-thread face of one running worker; its signals arrive on the GUI thread."""

    progressed = Signal(int, int, str)
    succeeded = Signal(object)
    failed = Signal(object)
    cancelled = Signal()
    finished = Signal()

    def __init__(self, worker: Worker, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.worker = worker
        self.name = worker.name
        self.done = False
        # Bound methods of a QObject that lives in the GUI thread: Qt queues the calls here.
        worker.signals.progressed.connect(self._on_progressed)
        worker.signals.succeeded.connect(self._on_succeeded)
        worker.signals.failed.connect(self._on_failed)
        worker.signals.cancelled.connect(self._on_cancelled)
        worker.signals.finished.connect(self._on_finished)

    def cancel(self) -> None:
        self.worker.cancel()

    @Slot(int, int, str)
    def _on_progressed(self, done: int, total: int, message: str) -> None:
        if not self.done:
            self.progressed.emit(done, total, message)

    @Slot(object)
    def _on_succeeded(self, result: object) -> None:
        self.succeeded.emit(result)

    @Slot(object)
    def _on_failed(self, error: object) -> None:
        self.failed.emit(error)

    @Slot()
    def _on_cancelled(self) -> None:
        self.cancelled.emit()

    @Slot()
    def _on_finished(self) -> None:
        self.done = True
        self.finished.emit()


class JobManager(QObject):
    """Starts workers and keeps them alive until they finish.

    ``current`` is the one user-visible long job (open, checks, export); others (lists for
    the Open dialog) run as ``background`` jobs that do not block the actions.
    """

    job_started = Signal(object)  # Job
    job_finished = Signal(object)  # Job

    def __init__(self, parent: QObject | None = None, pool: QThreadPool | None = None) -> None:
        super().__init__(parent)
        self._pool = pool or QThreadPool.globalInstance()
        self._jobs: set[Job] = set()
        self.current: Job | None = None

    @property
    def busy(self) -> bool:
        return self.current is not None

    def start(self, name: str, factory: GeneratorFactory, *, background: bool = False) -> Job:
        """Run ``factory()``'s generator on a pool thread.

        Args:
            name: the job's name, for the status bar and the log.
            factory: builds the generator (called on the worker thread).
            background: not the user's current job (no status, no busy state).

        Returns:
            The :class:`Job`; connect to its signals before returning to the event loop.

        Raises:
            RuntimeError: a user job is already running (the actions are disabled then).
        """
        if not background and self.current is not None:
            raise RuntimeError(f"a {self.current.name} job is already running")
        job = Job(Worker(name, factory), self)
        self._jobs.add(job)
        job.finished.connect(self._on_job_finished)
        if not background:
            self.current = job
            self.job_started.emit(job)
        log.debug("starting job %s", name)
        self._pool.start(job.worker)
        return job

    def cancel_current(self) -> None:
        if self.current is not None:
            self.current.cancel()

    def wait_for_done(self, msecs: int = 30_000) -> bool:
        """Block until every worker has finished (used at exit)."""
        return self._pool.waitForDone(msecs)

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


def call(fn: Callable[..., Any], *args: Any, message: str = "", **kwargs: Any) -> GeneratorFactory:
    """Wrap a plain function as a one-step job (for quick look-ups off the GUI thread)."""

    def factory() -> Generator[Any, None, Any]:
        from fusion_core.progress import Progress

        yield Progress(0, 1, message)
        return fn(*args, **kwargs)

    return factory
