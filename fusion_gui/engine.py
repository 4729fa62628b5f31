"""The engine process, seen from the window: a :class:`QProcess` speaking JSON lines.

The process runs :mod:`fusion_core.host.worker`, isolated (``python -I`` from an empty
folder: :func:`fusion_core.run.isolated.isolated_command`), so nothing in a model folder or
the working directory is ever imported. The window holds only plain data; the engine holds
the meta models, one per window (*session*).

The process starts with the application (it imports torch while the window paints) and is
shared by the windows of the application. If it ends while jobs run (a crash in a model,
or :meth:`Engine.cancel` ending a job that did not stop), those jobs fail with
:class:`fusion_core.errors.EngineStopped` (the cancelled one is reported cancelled), the
process is started again and every session's model is opened again there.

Every request is an entry of the operation table (:mod:`fusion_core.host.ops`):
:meth:`Engine.call` sends it and returns its :class:`~fusion_gui.jobs.Job`, which this
engine completes by the job's id when the answer comes (:mod:`fusion_core.host.protocol`).
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from PySide6.QtCore import QCoreApplication, QEventLoop, QObject, QProcess, QProcessEnvironment, QTimer, Signal

from fusion_core.host import protocol
from fusion_core.host.ops import CLOSE, OPEN, Op, OpenParams, SessionParams

from .jobs import Job

R = TypeVar("R")

#: how long the engine may take to end by itself once its input is closed, at quit
QUIT_GRACE_MS = 400
log = logging.getLogger("fusion_gui.engine")

CANCEL_GRACE_S = 5.0  # a cancelled job that has not stopped by then ends with the process
MAX_RESTARTS = 3  # within RESTART_WINDOW_S; then the engine waits for the next request
RESTART_WINDOW_S = 60.0
_STDERR_KEEP = 4000


class Engine(QObject):
    """The engine process and the jobs it runs."""

    restarted = Signal(str)  # why (the process ended while jobs ran, or a cancel ended it)
    #: (message, its result decoded or the error decoding it, or None): from the decoding thread, in order
    _decoded = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._proc: QProcess | None = None
        self._folder = ""
        self._buffer = bytearray()
        self._stderr_tail = ""
        self._jobs: dict[int, Job[Any]] = {}
        self._next_id = 1
        self._opened: dict[str, OpenParams] = {}  # session -> its last open
        self._restarts: list[float] = []
        self._stopping = False
        self.pid = 0
        # the engine's lines are read into typed values on a thread of their own: a large answer
        # (the module tree of a 2,700-module model) took 80-140 ms of the window's thread to
        # decode; one thread and a queued signal keep the engine's order
        self._lines: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._decoder: threading.Thread | None = None
        self._decoded.connect(self._on_decoded)

    # process ---------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.state() != QProcess.ProcessState.NotRunning

    def start(self, opening: str | None = None) -> None:
        """Start the process (no-op when it runs); a new process reopens every session's model
        (``opening``: the session whose open is the request being sent) - after a crash, the
        restart cap, or a failed start alike."""
        if self.running:
            return
        from fusion_core.run.isolated import isolated_command

        argv, env = isolated_command("fusion_core.host.worker")
        self._folder = tempfile.mkdtemp(prefix="fusion-engine-")
        proc = QProcess(self)
        environment = QProcessEnvironment()
        for key, value in env.items():
            environment.insert(key, value)
        proc.setProcessEnvironment(environment)
        proc.setWorkingDirectory(self._folder)
        proc.readyReadStandardOutput.connect(self._on_stdout)
        proc.readyReadStandardError.connect(self._on_stderr)
        proc.finished.connect(lambda code, status, p=proc: self._on_finished(p, code, status))
        proc.errorOccurred.connect(lambda error, p=proc: self._on_error(p, error))
        self._proc, self._buffer, self._stderr_tail, self._stopping = proc, bytearray(), "", False
        proc.start(argv[0], argv[1:])
        log.debug("engine process starting: %s", " ".join(argv[:2]))
        for session, params in self._opened.items():  # notifications: their answers go nowhere
            if session != opening:
                self._notify(OPEN, dataclasses.replace(params, restore=True))

    def stop(self, msecs: int = QUIT_GRACE_MS) -> None:
        """End the process: close its input (it cancels its jobs and exits), end it if it does not.

        At quit the grace is short: an engine with torch imported takes seconds to tear itself
        down, and the window must not linger (Ctrl+Q). An export cut short leaves only its
        temporary sibling, which the next export to that place removes.
        """
        proc = self._proc
        if proc is None:
            return
        self._stopping = True
        try:
            if proc.state() != QProcess.ProcessState.NotRunning:
                proc.closeWriteChannel()
                if not proc.waitForFinished(msecs):
                    proc.kill()
                    proc.waitForFinished(1000)
        except RuntimeError:  # already deleted with the application
            pass
        self._proc = None
        self._fail_pending(None, "the engine was stopped")
        shutil.rmtree(self._folder, ignore_errors=True)

    def _restart(self, reason: str, cancelled: Job | None = None) -> None:
        """End the process (if it still runs), end its jobs, start it again and reopen the sessions' models."""
        old = self._proc
        self._proc = None
        if old is not None:
            self._stopping = True  # this end is ours
            try:
                old.kill()
                old.waitForFinished(3000)
                old.deleteLater()
            except RuntimeError:  # already deleted with its parent
                pass
        shutil.rmtree(self._folder, ignore_errors=True)
        log.warning("%s", reason)
        self._fail_pending(cancelled, reason)
        now = time.monotonic()
        self._restarts = [t for t in self._restarts if now - t < RESTART_WINDOW_S] + [now]
        if len(self._restarts) > MAX_RESTARTS:
            log.error("the engine stopped %d times in a minute: it starts again with the next request", MAX_RESTARTS)
            return
        self.start()  # reopens the sessions' models
        self.restarted.emit(reason)

    def _fail_pending(self, cancelled: Job | None, reason: str) -> None:
        from fusion_core.errors import EngineStopped

        jobs, self._jobs = list(self._jobs.values()), {}
        for job in jobs:
            if job is cancelled or job.cancel_requested:
                job.set_cancelled()
            else:
                job.set_exception(EngineStopped(f"{reason}. The {job.name} job was not finished; run it again."))

    def _on_finished(self, proc: QProcess, code: int, status: QProcess.ExitStatus) -> None:
        if proc is not self._proc or self._stopping or QCoreApplication.closingDown():
            return
        how = f"exit code {code}" if status == QProcess.ExitStatus.NormalExit else _crashed(code)
        tail = self._stderr_tail.strip().splitlines()[-3:]
        said = f" (it wrote: {' | '.join(tail)})" if tail else ""
        running = ", ".join(sorted({j.name for j in self._jobs.values()})) or "nothing"
        self._restart(f"The engine process stopped ({how}) while running {running}{said}; it was started again")

    def _on_error(self, proc: QProcess, error: QProcess.ProcessError) -> None:
        if proc is self._proc and error == QProcess.ProcessError.FailedToStart:
            self._proc = None
            self._fail_pending(None, f"the engine process could not start: {proc.errorString()}")

    # messages --------------------------------------------------------------------------
    def call(self, op: Op[Any, R], params: Any, *, name: str = "", parent: QObject | None = None) -> Job[R]:
        """Send the request ``op(params)`` (starting the process when needed).

        Args:
            op: an entry of :mod:`fusion_core.host.ops`.
            params: an ``op.params`` object.
            name: the job's name (default: the op's).
            parent: the job's Qt parent (default: this engine).

        Returns:
            The job, completed with the typed result (``op.result``) when the engine answers.

        Raises:
            TypeError: ``params`` is not an ``op.params`` object.
        """
        from fusion_core.boundary.convert import to_plain

        if not isinstance(params, op.params):
            raise TypeError(f"{op.name} takes {op.params.__name__}, not {type(params).__name__}")
        self.start(opening=params.session if op is OPEN else None)
        job: Job[R] = Job(op, params, name, parent if parent is not None else self)
        job.id, self._next_id = self._next_id, self._next_id + 1
        self._jobs[job.id] = job
        job.cancel_asked.connect(lambda job=job: self.cancel(job))
        self._send_raw(protocol.request(op.name, to_plain(params), job.id))
        return job

    def _notify(self, op: Op[Any, Any], params: Any) -> None:
        """Send ``op(params)`` as a notification: no job, no answer."""
        from fusion_core.boundary.convert import to_plain

        self._send_raw(protocol.request(op.name, to_plain(params)))

    def cancel(self, job: Job[Any], grace_s: float | None = None) -> None:
        """Ask the engine to stop ``job``; end the process if it has not after ``grace_s`` (:data:`CANCEL_GRACE_S`)."""
        if job.id not in self._jobs:
            return
        grace_s = CANCEL_GRACE_S if grace_s is None else grace_s
        self._send_raw(protocol.cancel_request(job.id))
        QTimer.singleShot(int(grace_s * 1000), self, lambda: self._force_cancel(job, grace_s))

    def _force_cancel(self, job: Job[Any], grace_s: float) -> None:
        if job.done() or self._jobs.get(job.id) is not job:
            return
        self._restart(
            f"The {job.name} job did not stop within {grace_s:.0f} s of Cancel: the engine was restarted", job
        )

    def forget(self, session: str) -> None:
        """A window closed: drop its model in the engine."""
        self._opened.pop(session, None)
        if self.running:
            self._notify(CLOSE, SessionParams(session))

    def _send_raw(self, message: dict[str, Any]) -> None:
        from fusion_core.host.wire import encode

        if self._proc is not None:
            self._proc.write(encode(message))

    def _on_stdout(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._buffer += bytes(proc.readAllStandardOutput().data())
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            if self._decoder is None:
                self._decoder = threading.Thread(target=self._decode_lines, name="engine-decode", daemon=True)
                self._decoder.start()
            self._lines.put(line)

    def _decode_lines(self) -> None:
        """The decoding thread: each line to a message, and a job's result to its typed value."""
        from fusion_core.host.wire import decode

        while True:
            line = self._lines.get()
            try:
                msg = decode(line)
            except ValueError:
                log.warning("engine: unreadable message %r", line[:200])
                continue
            decoded: tuple[str, Any] | None = None
            job = self._jobs.get(msg.get("id") or 0) if "result" in msg else None
            if job is not None:
                try:
                    decoded = ("value", job.op.decode(msg.get("result")))
                except (TypeError, ValueError, KeyError) as e:
                    decoded = ("error", e)
            try:
                self._decoded.emit((msg, decoded))
            except RuntimeError:  # the engine object is gone (the application ended)
                return

    def _on_decoded(self, item: tuple[dict[str, Any], tuple[str, Any] | None]) -> None:
        self._on_message(*item)

    def _on_message(self, msg: dict[str, Any], decoded: tuple[str, Any] | None = None) -> None:
        """One message of the engine: a notification, or the answer that completes a job
        (``decoded``: its result already read on the decoding thread)."""
        from fusion_core.host.wire import EngineFailure, error_from_data

        method = msg.get("method")
        if method is not None:
            params = msg.get("params") or {}
            if method == protocol.PROGRESS:
                job = self._jobs.get(params.get("token") or 0)
                value = params.get("value") or {}
                if job is not None:
                    job.set_progress(
                        int(value.get("done", 0)), int(value.get("total", 0)), str(value.get("message", ""))
                    )
            elif method == protocol.LOG:
                logging.getLogger(str(params.get("name") or "fusion_core")).log(
                    int(params.get("level") or logging.INFO), "%s", params.get("message", "")
                )
            elif method == protocol.READY:
                self.pid = int(params.get("pid") or 0)
            return
        job = self._jobs.pop(msg.get("id") or 0, None)
        error = msg.get("error")
        if job is None:
            if error:
                log.warning("engine: %s", error.get("message", ""))
            return
        if error is not None:
            if error.get("code") == protocol.REQUEST_CANCELLED:
                job.set_cancelled()
            else:
                job.set_exception(error_from_data(error.get("data") or {"message": error.get("message", "")}))
            return
        if decoded is None:  # the job was not known yet when its line was read
            try:
                decoded = ("value", job.op.decode(msg.get("result")))
            except (TypeError, ValueError, KeyError) as e:
                decoded = ("error", e)
        kind, value = decoded
        if kind == "error":
            log.debug("cannot read the %s result: %s", job.op.name, value)
            job.set_exception(
                EngineFailure(type(value).__name__, f"the engine's {job.op.name} result is malformed: {value}")
            )
            return
        if job.op is OPEN:
            self._opened[job.params.session] = job.params
        job.set_result(value)

    def _on_stderr(self) -> None:
        if self._proc is None:
            return
        text = bytes(self._proc.readAllStandardError().data()).decode("utf-8", "replace")
        self._stderr_tail = (self._stderr_tail + text)[-_STDERR_KEEP:]
        for line in text.replace("\r", "\n").splitlines():
            if line.strip():
                log.debug("engine stderr: %s", line)

    def wait_for(self, done: Callable[[], bool], msecs: int) -> bool:
        """Read the engine's messages on this thread until ``done()`` or ``msecs`` pass (used at exit)."""
        deadline = time.monotonic() + msecs / 1000
        while not done() and time.monotonic() < deadline:
            proc = self._proc
            if proc is None or proc.state() == QProcess.ProcessState.NotRunning:
                QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.ExcludeUserInputEvents)
                if proc is None:
                    return done()
                continue
            proc.waitForReadyRead(50)
            self._on_stdout()
            # results are delivered in the next turn of the event loop (Job.set_result)
            QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.ExcludeUserInputEvents)
        return done()


_engines: dict[int, Engine] = {}


def shared_engine() -> Engine:
    """The application's engine (started on first use; stopped when the application quits)."""
    app = QCoreApplication.instance()
    if app is None:
        raise RuntimeError("create the QApplication first")
    engine = _engines.get(id(app))
    if engine is None or not _alive(engine):
        engine = Engine(app)
        _engines[id(app)] = engine
        app.aboutToQuit.connect(engine.stop)
        atexit.register(_stop_quietly, engine)  # tests and scripts that never run app.exec()
        engine.start()
    return engine


def _stop_quietly(engine: Engine) -> None:
    if _alive(engine):
        engine.stop()


def _alive(engine: Engine) -> bool:
    try:
        engine.objectName()
    except RuntimeError:  # its C++ object went with the application
        return False
    return True


def _crashed(code: int) -> str:
    """How the engine crashed: on Unix QProcess gives the signal's number as the exit code of a
    crash, and SIGKILL is most often the kernel's out-of-memory killer (a model too large)."""
    from fusion_core.run.isolated import killed_by

    if code > 0:
        said = killed_by(-code)
        if said:
            oom = "; out of memory? set a memory budget in the workload" if "out-of-memory" in said else ""
            return f"crashed: {said}{oom}"
    return "crashed"
