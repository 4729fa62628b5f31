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
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QCoreApplication, QEventLoop, QObject, QProcess, QProcessEnvironment, QTimer, Signal

from .jobs import Job

log = logging.getLogger("fusion_gui.engine")

CANCEL_GRACE_S = 5.0  # a cancelled job that has not stopped by then ends with the process
MAX_RESTARTS = 3  # within RESTART_WINDOW_S; then the engine waits for the next request
RESTART_WINDOW_S = 60.0
_STDERR_KEEP = 4000


class Engine(QObject):
    """The engine process and the jobs it runs."""

    restarted = Signal(str)  # why (the process ended while jobs ran, or a cancel ended it)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._proc: QProcess | None = None
        self._folder = ""
        self._buffer = bytearray()
        self._stderr_tail = ""
        self._jobs: dict[int, Job] = {}
        self._next_id = 1
        self._opened: dict[str, dict[str, Any]] = {}  # session -> the args of its last open
        self._restarts: list[float] = []
        self._stopping = False
        self.pid = 0

    # process ---------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.state() != QProcess.ProcessState.NotRunning

    def start(self) -> None:
        """Start the process (no-op when it runs)."""
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

    def stop(self, msecs: int = 5000) -> None:
        """End the process: close its input (it cancels its jobs and exits), kill it if it does not."""
        proc = self._proc
        if proc is None:
            return
        self._stopping = True
        try:
            if proc.state() != QProcess.ProcessState.NotRunning:
                proc.closeWriteChannel()
                if not proc.waitForFinished(msecs):
                    proc.kill()
                    proc.waitForFinished(2000)
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
        self.start()
        for session, args in self._opened.items():
            self._send_raw({"id": 0, "op": "open", "args": {**args, "session": session, "restore": True}})
        self.restarted.emit(reason)

    def _fail_pending(self, cancelled: Job | None, reason: str) -> None:
        from fusion_core.errors import EngineStopped

        jobs, self._jobs = list(self._jobs.values()), {}
        for job in jobs:
            if job is cancelled or job.cancel_requested:
                job._cancelled()
            else:
                job._failed(EngineStopped(f"{reason}. The {job.name} job was not finished; run it again."))

    def _on_finished(self, proc: QProcess, code: int, status: QProcess.ExitStatus) -> None:
        if proc is not self._proc or self._stopping or QCoreApplication.closingDown():
            return
        how = f"exit code {code}" if status == QProcess.ExitStatus.NormalExit else "crashed"
        tail = self._stderr_tail.strip().splitlines()[-3:]
        said = f" (it wrote: {' | '.join(tail)})" if tail else ""
        running = ", ".join(sorted({j.name for j in self._jobs.values()})) or "nothing"
        self._restart(f"The engine process stopped ({how}) while running {running}{said}; it was started again")

    def _on_error(self, proc: QProcess, error: QProcess.ProcessError) -> None:
        if proc is self._proc and error == QProcess.ProcessError.FailedToStart:
            self._proc = None
            self._fail_pending(None, f"the engine process could not start: {proc.errorString()}")

    # messages --------------------------------------------------------------------------
    def send(self, job: Job) -> None:
        """Send ``job``'s request (starting the process when needed)."""
        self.start()
        job.id, self._next_id = self._next_id, self._next_id + 1
        job.engine = self
        self._jobs[job.id] = job
        self._send_raw({"id": job.id, "op": job.op, "args": job.args})

    def cancel(self, job: Job, grace_s: float | None = None) -> None:
        """Ask the engine to stop ``job``; end the process if it has not after ``grace_s`` (:data:`CANCEL_GRACE_S`)."""
        if job.id not in self._jobs:
            return
        grace_s = CANCEL_GRACE_S if grace_s is None else grace_s
        self._send_raw({"op": "cancel", "target": job.id})
        QTimer.singleShot(int(grace_s * 1000), self, lambda: self._force_cancel(job, grace_s))

    def _force_cancel(self, job: Job, grace_s: float) -> None:
        if job.done or self._jobs.get(job.id) is not job:
            return
        self._restart(
            f"The {job.name} job did not stop within {grace_s:.0f} s of Cancel: the engine was restarted", job
        )

    def forget(self, session: str) -> None:
        """A window closed: drop its model in the engine."""
        self._opened.pop(session, None)
        if self.running:
            self._send_raw({"id": 0, "op": "close", "args": {"session": session}})

    def _send_raw(self, message: dict[str, Any]) -> None:
        from fusion_core.host.wire import encode

        if self._proc is not None:
            self._proc.write(encode(message))

    def _on_stdout(self) -> None:
        from fusion_core.host.wire import decode, error_from_data

        proc = self._proc
        if proc is None:
            return
        self._buffer += bytes(proc.readAllStandardOutput().data())
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            try:
                msg = decode(line)
            except ValueError:
                log.warning("engine: unreadable message %r", line[:200])
                continue
            kind = msg.get("type")
            if kind == "log":
                logging.getLogger(str(msg.get("name") or "fusion_core")).log(
                    int(msg.get("level") or logging.INFO), "%s", msg.get("message", "")
                )
                continue
            if kind == "ready":
                self.pid = int(msg.get("pid") or 0)
                continue
            job = self._jobs.get(msg.get("id") or 0)
            if job is None:
                if kind == "error":
                    log.warning("engine: %s", (msg.get("error") or {}).get("message", ""))
                continue
            if kind == "progress":
                job._progress(int(msg.get("done", 0)), int(msg.get("total", 0)), str(msg.get("message", "")))
                continue
            del self._jobs[job.id]
            if kind == "result":
                if job.op == "open":
                    self._opened[str(job.args.get("session"))] = {
                        k: v for k, v in job.args.items() if k in ("spec", "trust_remote_code")
                    }
                job._result(msg.get("value"))
            elif kind == "error":
                job._failed(error_from_data(msg.get("error") or {}))
            else:
                job._cancelled()

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
            # results are delivered in the next turn of the event loop (Job._result)
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
        engine.stop(2000)


def _alive(engine: Engine) -> bool:
    try:
        engine.objectName()
    except RuntimeError:  # its C++ object went with the application
        return False
    return True
