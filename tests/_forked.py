"""Processes of their own for the tests that need one, forked with torch and transformers imported.

Some tests run the CLI or a script in a process no other test touched: a config bomb's
memory growth, an export killed by a signal, transformers' own fusion polluting its
process. What they need is a process of their own, not a fresh interpreter: a fresh one
spends about 7 s of CPU importing torch and transformers, and on two cores those imports
were a tenth of the suite. :mod:`multiprocessing`'s forkserver does the imports once per
test worker and forks one child per run. The child takes the environment, working folder,
arguments and standard streams it is given, and its exit code (negative for a signal) is
what :mod:`subprocess` reports. Its memory high-water mark starts at the RSS it was
forked with (Linux), which can be above what it holds once it runs: a test that measures
growth resets the mark first (``"5"`` into ``/proc/self/clear_refs``). A child also starts
without the server's file-backed pages mapped (libraries, 11 MB against 83 MB in a fresh
interpreter) and faults them in again as it runs, which counts in its RSS: fine under the
config bombs' 1.2 GB bound, too coarse for the ``--modules-only`` growth, which a fresh
interpreter measures.

Tests that are about a fresh interpreter (``python -m``, import-time plugins, the window
process never importing torch) start one with :mod:`subprocess`, as before.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

from fusion_core.cli import console

# what the fork server imports (by name: Python 3.11's server does not take this folder's
# sys.path), so that every child starts with them
_PRELOAD = ["torch", "transformers.modeling_utils", "fusion_core.cli"]

_context: multiprocessing.context.ForkServerContext | None = None


def _server() -> multiprocessing.context.ForkServerContext:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(_PRELOAD)
    return _context


class Forked:
    """A forked child with the part of :class:`subprocess.Popen` the tests use (text streams)."""

    def __init__(self, argv: Sequence[str], code: str | None, env: Mapping[str, str], cwd: str) -> None:
        self._streams = tempfile.TemporaryDirectory(prefix="fusion-forked-")
        self._out = os.path.join(self._streams.name, "stdout")
        self._err = os.path.join(self._streams.name, "stderr")
        self.args = list(argv)
        self._proc = _server().Process(target=_child, args=(self.args, code, dict(env), cwd, self._out, self._err))
        self._proc.start()
        self.pid: int = self._proc.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._proc.is_alive():
            self._proc.join()
            self.returncode = self._proc.exitcode
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end (killed after ``timeout``, then TimeoutExpired) and return stdout, stderr."""
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise
        out, err = (_read(path) for path in (self._out, self._err))
        self._streams.cleanup()
        return out, err


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except FileNotFoundError:  # the child ended before it took its streams
        return ""


def start(
    argv: Sequence[str],
    *,
    code: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Forked:
    """A child running ``fusion-core *argv`` (or ``python -c code *argv``) with ``env`` (default:
    this process's environment) in ``cwd`` (default: this process's folder)."""
    return Forked([str(a) for a in argv], code, os.environ if env is None else env, str(cwd or os.getcwd()))


def run(
    argv: Sequence[str],
    *,
    code: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """:func:`start`, then wait: what :func:`subprocess.run` with ``capture_output`` and ``text`` returns."""
    child = start(argv, code=code, env=env, cwd=cwd)
    out, err = child.communicate(timeout)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def _child(argv: list[str], code: str | None, env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """In the child: take the environment, folder and streams, run, and end without teardown."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, out, os.O_WRONLY | os.O_CREAT),
        (2, err, os.O_WRONLY | os.O_CREAT),
    ):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    if code is None:
        sys.argv = ["fusion-core", *argv]
        console()  # ends the process
    sys.argv = ["-c", *argv]
    status: object = 0
    try:
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as e:
        status = e.code
    except BaseException:
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    if status is None:
        status = 0
    elif not isinstance(status, int):
        print(status, file=sys.stderr, flush=True)
        status = 1
    os._exit(status)
