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

The protocol, over an ``AF_UNIX``/``SOCK_SEQPACKET`` socket pair (one message each):

* parent -> zygote: ``{"cwd": FOLDER, "env": {NAME: VALUE}}`` with three file descriptors
  attached (the child's stdin, stdout and stderr); the child's environment is exactly
  ``env`` (the zygote's own differs at most in variables nothing imported reads, see
  :func:`fusion_core.run.isolated.zygote_key`);
* zygote -> parent: ``{"pid": PID}`` once forked, and ``{"exit": PID, "code": CODE}``
  when it ends (``CODE`` as :attr:`subprocess.Popen.returncode`: negative for a signal).

The zygote ends when its parent closes the socket (or dies).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import threading

__all__ = ["main"]

_MAX_MESSAGE = 256 * 1024  # a request: a folder and an environment


def _send(sock: socket.socket, message: dict[str, object]) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        pass  # the parent is gone: the loop ends on its next read


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
                    return None
                request = json.loads(data)
                pid = os.fork()
                if pid == 0:  # the child: leave the loop with what it was given
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for fd in (wake_r, wake_w):
                        os.close(fd)
                    sock.close()
                    return fds, str(request["cwd"]), dict(request["env"])
                children.add(pid)
                for fd in fds:
                    os.close(fd)
                _send(sock, {"pid": pid})
                _reap(sock, children)


def _reap(sock: socket.socket, children: set[int]) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0
        if done:
            children.discard(pid)
            _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


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
