"""Our child processes (upstream parity, export and adapter consumers, coverage workers), isolated from untrusted code.

A child is started with ``python -I`` (no ``PYTHON*`` variables, no user site, no script
folder or working directory on ``sys.path``) from an empty temporary folder, and finds
fusion_core by the path of this installed package alone: a ``json.py`` planted in a model
folder or in the user's working directory is never imported (DESIGN.md, Security).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO

from .zygote import ZYGOTE_FORK, ZygoteExited, ZygoteFork, ZygoteForked, read_answer

__all__ = [
    "WarmChild",
    "child_for",
    "close_spares",
    "close_zygote",
    "isolated_command",
    "keep_spares",
    "killed_by",
    "refill_spares",
    "use_zygote",
]

log = logging.getLogger(__name__)

# the folder holding the fusion_core package, put first on the child's sys.path
_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = "import runpy, sys; sys.path.insert(0, sys.argv[1]); runpy.run_module(sys.argv[2], run_name='__main__')"


def isolated_command(module: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run ``python -m module`` isolated (see the module docstring).

    Start it from an empty folder: :class:`WarmChild` does; the window's engine process
    (:mod:`fusion_core.host`) does with its own.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    return [sys.executable, "-I", "-c", _BOOT, _ROOT, module], env


def killed_by(returncode: int | None) -> str:
    """How a child that a signal ended ended, e.g. "killed by signal 9 (SIGKILL, the kernel's
    out-of-memory killer?)"; "" when it exited by itself (``returncode`` as
    :attr:`subprocess.Popen.returncode`: negative for a signal)."""
    if returncode is None or returncode >= 0:
        return ""
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = "an unknown signal"
    oom = ", the kernel's out-of-memory killer?" if number == signal.SIGKILL else ""
    return f"killed by signal {number} ({name}{oom})"


class WarmChild:
    """An isolated child started ahead of its request, so its imports overlap the parent's work.

    It runs :mod:`fusion_core.run.child` isolated (:func:`isolated_command`, from an empty folder), which imports
    torch and transformers at once and then serves the module it is given: ``module`` here,
    or later with :meth:`assign` (a spare, see :func:`keep_spares`). :meth:`send` hands it one
    request line without waiting; :meth:`finish` closes its input and returns what it
    printed (again on a later call: the first answer is kept).
    A child that is never finished is killed by :meth:`close` (also on garbage collection of
    the parent's ``with`` block).
    """

    def __init__(self, module: str | None = None, *, prefix: str = "fusion-child-") -> None:
        argv, env = isolated_command("fusion_core.run.child")
        self._folder = tempfile.TemporaryDirectory(prefix=prefix)
        self._argv = argv
        self._done: subprocess.CompletedProcess[str] | None = None
        self._timed_out = False
        #: the module it serves (None: a spare not yet given one)
        self.module: str | None = None
        #: request lines sent so far
        self.sent = 0
        self.proc: subprocess.Popen[str] | _ForkedChild = _start(argv, env, self._folder.name)
        if module is not None:
            self.assign(module)

    def assign(self, module: str) -> None:
        """Give the child the module it serves (once; see :data:`fusion_core.run.child.SERVES`)."""
        if self.module is not None:
            raise ValueError(f"this child already serves {self.module}")
        from .child import SERVE, ServeParams

        self.module = module
        self._write(SERVE.request_line(ServeParams(module)))

    def _write(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # it died: finish() reports its stderr
            pass

    def send(self, line: str) -> None:
        """Write one request line (no newline inside) to the child; never blocks on its answer."""
        if "\n" in line:
            raise ValueError("a request is one line")
        if self.module is None:
            raise ValueError("assign the child its module first")
        self.sent += 1
        self._write(line)

    def finish(self, timeout: float) -> subprocess.CompletedProcess[str]:
        """Close the child's input, wait for it to end, and return what it printed (what it
        printed the first time, when called again).

        Raises:
            subprocess.TimeoutExpired: it took longer than ``timeout`` (it is killed first; a
                later call raises it again).
        """
        if self._done is not None:
            return self._done
        if self._timed_out:
            raise subprocess.TimeoutExpired(self._argv, timeout)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._timed_out = True
            self.close()
            raise
        finally:
            self._folder.cleanup()
        self._done = subprocess.CompletedProcess(self._argv, self.proc.returncode, out, err)
        return self._done

    def close(self) -> None:
        """Stop the child if it still runs (a request that will not come: cancel, an error)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        self._folder.cleanup()

    def __enter__(self) -> WarmChild:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _start(argv: list[str], env: dict[str, str], cwd: str) -> subprocess.Popen[str] | _ForkedChild:
    """A child for :class:`WarmChild`: forked by the zygote when one is in use, else started."""
    zygote = _zygote_for(env)
    if zygote is not None:
        return zygote.fork(argv, env, cwd)
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )


# -- the zygote: children forked from one process that did the imports once -----------------

#: zygotes by the environment their children get, most recent last (a test that changes a
#: variable for a while and then restores it finds the first one still there)
_zygotes: list[_Zygote] = []
_zygote_lock = threading.Lock()
_zygote_wanted: bool | None = None
_MAX_ZYGOTES = 2


def use_zygote(on: bool | None = True) -> None:
    """Fork children from a zygote from now on (:mod:`fusion_core.run.zygote`), or stop.

    For a process that starts many children (the window's engine, a test worker): each then
    starts with torch and transformers imported. Off unless asked (here or by
    ``FUSION_CHILD_ZYGOTE=1``; None: as that variable says): a CLI run starts one child, and
    a zygote would cost it one more process. The zygote starts with the first child.
    """
    global _zygote_wanted
    _zygote_wanted = on
    if on is False:
        close_zygote()


def close_zygote() -> None:
    """End the zygotes (their children run on; the next child starts a new one if wanted)."""
    with _zygote_lock:
        zygotes, _zygotes[:] = list(_zygotes), []
    for zygote in zygotes:
        zygote.close()


#: variables that change while a process runs and that nothing a child imports reads: a
#: child's differ from its zygote's in these alone (pytest names the running test in one)
VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})


def zygote_key(env: dict[str, str]) -> dict[str, str]:
    """What of ``env`` a zygote must have been started with to fork a child with ``env``: all
    but :data:`VOLATILE` (the child then takes ``env`` itself, before it imports anything more)."""
    return {k: v for k, v in env.items() if k not in VOLATILE}


def _zygote_for(env: dict[str, str]) -> _Zygote | None:
    """The zygote for children with ``env`` (a new one for an environment not seen lately)."""
    wanted = _zygote_wanted if _zygote_wanted is not None else os.environ.get("FUSION_CHILD_ZYGOTE") == "1"
    if not wanted:
        return None
    key = zygote_key(env)
    gone: list[_Zygote] = []
    with _zygote_lock:
        for zygote in list(_zygotes):
            if not zygote.alive():
                _zygotes.remove(zygote)
                gone.append(zygote)
            elif zygote.env == key:
                _zygotes.remove(zygote)
                _zygotes.append(zygote)
                break
        else:
            if _zygotes:
                last = _zygotes[-1].env
                changed = sorted(k for k in {*key, *last} if key.get(k) != last.get(k))
                log.debug("a zygote for a changed environment (%s)", ", ".join(changed)[:300])
            _zygotes.append(_Zygote(key))
            while len(_zygotes) > _MAX_ZYGOTES:
                gone.append(_zygotes.pop(0))
        zygote = _zygotes[-1]
    for old in gone:
        old.close()
    return zygote


class _Zygote:
    """Our end of a zygote (see :mod:`fusion_core.run.zygote` for what it is and its protocol)."""

    def __init__(self, env: dict[str, str], argv: list[str] | None = None) -> None:
        """Start a zygote for children with ``env`` (``argv``: another program that speaks its protocol)."""
        self.env = dict(env)
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._folder = tempfile.TemporaryDirectory(prefix="fusion-zygote-")
        if argv is None:
            argv, _ = isolated_command("fusion_core.run.zygote")
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**self.env, "FUSION_ZYGOTE_FD": str(theirs.fileno())},
                cwd=self._folder.name,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        self._lock = threading.Lock()  # one fork request at a time: pids answer in order
        self._pending: deque[_ForkedChild] = deque()
        self._children: dict[int, _ForkedChild] = {}
        self._ended = threading.Event()
        self._closing = False
        threading.Thread(target=self._read, name="fusion-zygote", daemon=True).start()

    def alive(self) -> bool:
        return not self._ended.is_set()

    def fork(self, argv: list[str], env: dict[str, str], cwd: str) -> _ForkedChild:
        """A child running in ``cwd``; its pipes work at once (it reads them once the zygote is warm).

        ``argv`` and ``env`` start it as a plain child instead if the zygote cannot fork it.
        """
        child = _ForkedChild(argv, env, cwd)
        with self._lock:
            if self.alive():
                self._pending.append(child)
                try:
                    request = ZYGOTE_FORK.request_line(ZygoteFork(cwd, env)).encode()
                    socket.send_fds(self._sock, [request], child.theirs)
                    return child
                except OSError:
                    self._pending.remove(child)
        child.start_plain()  # the zygote is gone: a child of our own, on the same pipes
        return child

    def _read(self) -> None:
        """Hand the zygote's answers to their children; when it ends (or says what we cannot
        read: then it is killed), start the requests it never answered ourselves and let its
        children's pipes say when they end."""
        try:
            while True:
                data = self._sock.recv(65536)
                if not data:
                    break
                said = read_answer(data)
                if isinstance(said, ZygoteExited):
                    ended = self._children.pop(said.pid, None)
                    if ended is not None:
                        ended.exited(said.code)
                    continue
                with self._lock:
                    child = self._pending.popleft()  # answers come in the order asked
                if isinstance(said, ZygoteForked):
                    self._children[said.pid] = child
                    child.forked(said.pid)
                else:
                    log.debug("the zygote did not fork a child: %s", said.error)
                    child.start_plain()
        except (OSError, ValueError, IndexError) as e:  # a message we cannot read, or one too many
            log.debug("the zygote's answers end: %s", e)
            if not self._closing:  # (our own close ends the reads too: the zygote then ends by itself)
                self.proc.kill()  # so it forks none of the requests that we now start ourselves
        finally:
            with self._lock:
                self._ended.set()
                unforked = list(self._pending)
                self._pending.clear()
            for child in unforked:  # asked for and never forked: children of our own
                child.start_plain()
            for child in list(self._children.values()):  # forked, and now nobody reports their end
                child.orphaned()

    def close(self) -> None:
        self._closing = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._folder.cleanup()


class _ForkedChild:
    """A zygote's child, with what :class:`WarmChild` uses of a :class:`subprocess.Popen`.

    Its three pipes are made here, so requests can be written before the zygote has forked
    it (a pipe holds them); its pid and exit code come from the zygote.
    """

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self._command = (argv, env, cwd)  # to start it ourselves if the zygote cannot
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        #: the child's ends, held until it has them (the zygote forked, or our own child started)
        self.theirs = [in_r, out_w, err_w]
        self.stdin: IO[str] = os.fdopen(in_w, "w")
        self.stdout: IO[str] = os.fdopen(out_r)
        self.stderr: IO[str] = os.fdopen(err_r)
        self.pid: int | None = None
        self.returncode: int | None = None
        self._plain: subprocess.Popen[str] | None = None
        self._state = threading.Condition()
        self._kill = False
        self._ended = False  # its end was reported: its pid may belong to another process now
        self._out: list[str] = []
        self._err: list[str] = []
        self._readers: list[threading.Thread] = []

    # what the zygote's reader reports
    def forked(self, pid: int) -> None:
        with self._state:
            self.pid = pid
            self._close_theirs()
            kill = self._kill
            self._state.notify_all()
        if kill:
            self._signal()

    def exited(self, code: int) -> None:
        with self._state:
            self._ended = True
            self.returncode = code
            self._state.notify_all()

    def orphaned(self) -> None:
        """The zygote ended before this child: its end can only be seen by its pipes closing."""
        threading.Thread(target=self._wait_orphan, daemon=True).start()

    def _wait_orphan(self) -> None:
        self._read_all()
        with self._state:
            self._ended = True
            if self.returncode is None:
                self.returncode = -signal.SIGKILL if self._kill else 0
            self._state.notify_all()

    def start_plain(self) -> None:
        """Start this child ourselves on its pipes (the zygote could not fork it)."""
        argv, env, cwd = self._command
        with self._state:
            if self._kill:
                self._close_theirs()
                self.returncode = -signal.SIGKILL
                self._state.notify_all()
                return
            self._plain = subprocess.Popen(
                argv, stdin=self.theirs[0], stdout=self.theirs[1], stderr=self.theirs[2], env=env, cwd=cwd
            )
            self.pid = self._plain.pid
            self._close_theirs()
            self._state.notify_all()
        threading.Thread(target=self._wait_plain, daemon=True).start()

    def _wait_plain(self) -> None:
        assert self._plain is not None
        self.exited(self._plain.wait())

    def _close_theirs(self) -> None:
        for fd in self.theirs:
            os.close(fd)
        self.theirs = []

    def _signal(self) -> None:
        if self._plain is not None:
            self._plain.kill()
        elif self.pid is not None and not self._ended:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait_forked(self, timeout: float | None = None) -> int:
        """Its pid, once the zygote forked it (or we started it).

        Raises:
            subprocess.TimeoutExpired: not forked within ``timeout``.
        """
        with self._state:
            if not self._state.wait_for(lambda: self.pid is not None or self.returncode is not None, timeout):
                raise subprocess.TimeoutExpired("fusion_core.run.child", timeout or 0)
            assert self.pid is not None
            return self.pid

    # the Popen subset
    def poll(self) -> int | None:
        return self.returncode

    def kill(self) -> None:
        with self._state:
            self._kill = True
            known = self.pid is not None
            if not known and self.returncode is None:
                # not forked yet (the zygote may be stuck): it is killed if it ever is; we stop
                # waiting for it now, and its output ends here
                self._close_theirs()
                self.returncode = -signal.SIGKILL
                self._state.notify_all()
        if known:
            self._signal()

    def wait(self, timeout: float | None = None) -> int:
        with self._state:
            if not self._state.wait_for(lambda: self.returncode is not None, timeout):
                raise subprocess.TimeoutExpired("fusion_core.run.child", timeout or 0)
            assert self.returncode is not None
            return self.returncode

    def _start_readers(self) -> None:
        with self._state:
            if self._readers:
                return
            for stream, sink in ((self.stdout, self._out), (self.stderr, self._err)):
                t = threading.Thread(target=_drain, args=(stream, sink), daemon=True)
                t.start()
                self._readers.append(t)

    def _read_all(self) -> None:
        self._start_readers()
        for t in self._readers:
            t.join()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Close stdin, read both outputs to their end and wait for the exit, as Popen does."""
        if not self.stdin.closed:
            try:
                self.stdin.close()
            except BrokenPipeError:
                pass
        self._start_readers()
        if self._kill and self.pid is None:  # killed before it was forked: no output will come
            return "".join(self._out), "".join(self._err)
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._readers:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired("fusion_core.run.child", timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return "".join(self._out), "".join(self._err)


def _drain(stream: IO[str], sink: list[str]) -> None:
    try:
        sink.append(stream.read())
    except (OSError, ValueError):
        pass
    finally:
        stream.close()


# -- spares: children whose imports are done before an operation asks for one ---------------

_spares: list[WarmChild] = []
_spares_lock = threading.Lock()
_keep = 0


def keep_spares(count: int) -> None:
    """Keep ``count`` spare children from now on (0: none, the default; a CLI run needs none).

    The window's engine keeps one: a check's upstream child or an export's consumers then
    start with their imports done. A spare holds torch and transformers in memory (a few
    hundred MB) and serves one job. :func:`refill_spares` starts them; the caller picks when,
    so their imports do not share the CPU with an operation's timings.
    """
    global _keep
    with _spares_lock:
        _keep = max(0, count)
    if count <= 0:
        close_spares()


def refill_spares() -> None:
    """Start spares until :func:`keep_spares` many are alive (a quiet moment: between operations)."""
    with _spares_lock:
        _spares[:] = [c for c in _spares if c.proc.poll() is None]
        while len(_spares) < _keep:
            _spares.append(WarmChild())


def child_for(module: str, *, prefix: str = "fusion-child-") -> WarmChild:
    """A child serving ``module``: a spare whose imports are done when there is one, else a new one."""
    with _spares_lock:
        while _spares:
            child = _spares.pop(0)
            if child.proc.poll() is None:
                child.assign(module)
                return child
            child.close()
    return WarmChild(module, prefix=prefix)


def close_spares() -> None:
    """Stop every spare (the engine ends)."""
    with _spares_lock:
        spares, _spares[:] = list(_spares), []
    for child in spares:
        child.close()
