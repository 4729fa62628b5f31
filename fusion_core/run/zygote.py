"""A fork server for our isolated children: torch and transformers imported once, a child per job at once.

An isolated child spends most of its life importing torch, transformers and their loading
machinery (about 7 s of CPU here) before it serves one job. A long-lived process that
starts many children (the window's engine, a test worker) starts one *zygote* instead:
an isolated process (as :mod:`fusion_core.run.isolated` starts every child: ``python -I``,
an empty folder, no ``PYTHON*`` variables) that does those imports, never runs a tensor
operation and never starts a thread, and then forks one child per request. The child
starts with the imports done; what it then loads (a model, transformers' fusion
registries) stays in it and ends with it, exactly as in a fresh process: one job per child.

Why not :mod:`multiprocessing`'s forkserver: its children re-apply the parent's working
folder, ``sys.path`` and main module (``multiprocessing.spawn.prepare``), which is what
isolation keeps out (a ``json.py`` in the user's folder), and they speak pickles, where our
children speak JSON lines on their standard streams.

The protocol, over an ``AF_UNIX``/``SOCK_SEQPACKET`` socket pair, is operations of
:mod:`fusion_core.boundary.ops` declared here and gathered with every other child's in
:data:`fusion_core.host.ops.CHILD_OPS`; each message is one datagram, built and read by its
entry (so both sides hold typed values, never hand-made dicts):

* parent -> zygote: a :data:`ZYGOTE_FORK` request line (:class:`ZygoteFork`: the child's
  folder and environment) with three file descriptors attached (the child's stdin, stdout
  and stderr); the child's environment is exactly ``env`` (the zygote's own differs at most
  in variables nothing imported reads, see :func:`fusion_core.run.isolated.zygote_key`);
* zygote -> parent, answering each request in order: :data:`ZYGOTE_FORK`'s answer
  (:class:`ZygoteForked`: the child's pid) once forked, or :data:`ZYGOTE_REFUSED`
  (:class:`ZygoteRefused`: a request it could not read, without its three descriptors, or a
  failed fork; the zygote serves on and the parent starts that child itself);
* zygote -> parent, later: :data:`ZYGOTE_EXITED` (:class:`ZygoteExited`) when a child ends
  (``code`` as :attr:`subprocess.Popen.returncode`: negative for a signal).

The zygote ends when its parent closes the socket (or dies).
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Any

from ..boundary.ops import Op, read_child_line

__all__ = [
    "ZYGOTE_EXITED",
    "ZYGOTE_FORK",
    "ZYGOTE_REFUSED",
    "ZygoteExited",
    "ZygoteFork",
    "ZygoteForked",
    "ZygoteRefused",
    "main",
    "read_answer",
]

_MAX_MESSAGE = 256 * 1024  # a request: a folder and an environment


@dataclass(frozen=True)
class ZygoteFork:
    """Fork a child into ``cwd`` with exactly ``env`` (its stdin, stdout and stderr ride along as descriptors)."""

    cwd: str
    env: dict[str, str]


@dataclass(frozen=True)
class ZygoteForked:
    """A request forked: the child's pid."""

    pid: int


@dataclass(frozen=True)
class ZygoteRefused:
    """A request not forked, and why (the parent starts that child itself)."""

    error: str


@dataclass(frozen=True)
class ZygoteExited:
    """A forked child ended with ``code`` (as :attr:`subprocess.Popen.returncode`: negative for a signal)."""

    pid: int
    code: int


#: the parent's request; its answer, in the order asked, is the child's pid or a ZYGOTE_REFUSED
ZYGOTE_FORK: Op[ZygoteFork, ZygoteForked] = Op("child/zygote_fork", ZygoteFork, ZygoteForked)
#: the answer to a request the zygote could not fork
ZYGOTE_REFUSED: Op[ZygoteRefused, ZygoteRefused] = Op("child/zygote_refused", ZygoteRefused, ZygoteRefused)
#: what the zygote says when one of its children ends
ZYGOTE_EXITED: Op[ZygoteExited, ZygoteExited] = Op("child/zygote_exited", ZygoteExited, ZygoteExited)

_ANSWERS: dict[str, Op[Any, Any]] = {op.name: op for op in (ZYGOTE_FORK, ZYGOTE_REFUSED, ZYGOTE_EXITED)}


def read_answer(data: bytes) -> ZygoteForked | ZygoteRefused | ZygoteExited:
    """What one message of the zygote says (in the parent).

    Raises:
        ValueError: not one of the zygote's messages, or without its declared shape.
    """
    found = read_child_line(data.decode(), _ANSWERS)
    if found is None:
        raise ValueError(f"not a message of the zygote: {data[:80]!r}")
    return found[1]  # type: ignore[no-any-return]


def _send(sock: socket.socket, line: str) -> None:
    try:
        sock.send(line.encode())
    except OSError:
        pass  # the parent is gone: the loop ends on its next read


def _read_request(data: bytes, fds: list[int]) -> ZygoteFork:
    """The fork request of one message.

    Raises:
        ValueError: not a :data:`ZYGOTE_FORK` request, or not with three descriptors.
    """
    request = ZYGOTE_FORK.read_request(data.decode())
    if len(fds) != 3:
        raise ValueError(f"a fork request carries 3 descriptors (stdin, stdout, stderr), not {len(fds)}")
    return request


def _serve(sock: socket.socket) -> tuple[list[int], str, dict[str, str]] | None:
    """Fork a child per request until the parent goes; in a child, return its fds, folder and environment."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd is written
    signal.set_wakeup_fd(wake_w)
    children: set[int] = set()
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_READ, "request")
        sel.register(wake_r, selectors.EVENT_READ, "child")
        while True:
            for key, _ in sel.select():
                if key.data == "child":
                    os.read(wake_r, 4096)
                    _reap(sock, children)
                    continue
                try:
                    data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, 3)
                except OSError:
                    data, fds = b"", []
                if not data:  # the parent closed its end: no more children
                    for fd in fds:
                        os.close(fd)
                    return None
                try:
                    request = _read_request(data, fds)
                    pid = os.fork()
                except (ValueError, OSError) as e:  # answered, so the parent's next request keeps its place
                    for fd in fds:
                        os.close(fd)
                    _send(sock, ZYGOTE_REFUSED.answer_line(ZygoteRefused(f"{type(e).__name__}: {e}"[:2000])))
                    continue
                if pid == 0:  # the child: leave the loop with what it was given
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for fd in (wake_r, wake_w):
                        os.close(fd)
                    sock.close()
                    return fds, request.cwd, request.env
                children.add(pid)
                for fd in fds:
                    os.close(fd)
                _send(sock, ZYGOTE_FORK.answer_line(ZygoteForked(pid)))
                _reap(sock, children)


def _reap(sock: socket.socket, children: set[int]) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0
        if done:
            children.discard(pid)
            _send(sock, ZYGOTE_EXITED.answer_line(ZygoteExited(pid, os.waitstatus_to_exitcode(status))))


def _become_child(fds: list[int], cwd: str, env: dict[str, str]) -> None:
    """Put the request's pipes on fds 0-2, enter its empty folder and take its environment."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(cwd)
    os.environ.clear()  # os.environ writes through to the C environment (putenv/unsetenv)
    os.environ.update(env)


def main() -> int:
    """The zygote: warm up, then fork children on request (see the module docstring)."""
    from . import child

    sock = socket.socket(fileno=int(os.environ["FUSION_ZYGOTE_FD"]))
    child.warm()
    if threading.active_count() != 1:  # a fork would copy a thread's locks: serve nothing
        sys.stderr.write("the zygote has threads after its imports; children start on their own\n")
        return 1
    given = _serve(sock)
    if given is None:
        return 0
    _become_child(*given)
    return child.serve()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # tearing the interpreter down with torch and transformers loaded takes seconds
