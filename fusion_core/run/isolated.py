"""Our child processes (upstream parity, export consumers), isolated from untrusted code.

A child is started with ``python -I`` (no ``PYTHON*`` variables, no user site, no script
folder or working directory on ``sys.path``) from an empty temporary folder, and finds
fusion_core by the path of this installed package alone: a ``json.py`` planted in a model
folder or in the user's working directory is never imported (DESIGN.md, Security).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

__all__ = ["WarmChild", "child_for", "close_spares", "isolated_command", "keep_spares", "refill_spares", "run_isolated"]

# the folder holding the fusion_core package, put first on the child's sys.path
_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = "import runpy, sys; sys.path.insert(0, sys.argv[1]); runpy.run_module(sys.argv[2], run_name='__main__')"


def isolated_command(module: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run ``python -m module`` isolated (see the module docstring).

    Start it from an empty folder: :func:`run_isolated` does; the window's engine process
    (:mod:`fusion_core.host`) does with its own.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    return [sys.executable, "-I", "-c", _BOOT, _ROOT, module], env


def run_isolated(module: str, stdin: str, *, timeout: float, prefix: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m module`` isolated, with ``stdin`` as its input, and return what it printed.

    Args:
        module: a module of fusion_core with a ``__main__`` block.
        stdin: the request (JSON text).
        timeout: seconds before the child is stopped.
        prefix: name prefix of the empty working folder.

    Raises:
        subprocess.TimeoutExpired: the child took longer than ``timeout``.
    """
    argv, env = isolated_command(module)
    with tempfile.TemporaryDirectory(prefix=prefix) as neutral:
        return subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=neutral,
            check=False,
        )


class WarmChild:
    """An isolated child started ahead of its request, so its imports overlap the parent's work.

    It runs :mod:`fusion_core.run.child` isolated (as :func:`run_isolated` does), which imports
    torch and transformers at once and then serves the module it is given: ``module`` here,
    or later with :meth:`assign` (a spare, see :func:`keep_spares`). :meth:`send` hands it one
    request line without waiting; :meth:`finish` closes its input and returns what it
    printed, as :func:`run_isolated` does (again on a later call: the first answer is kept).
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
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=self._folder.name,
        )
        if module is not None:
            self.assign(module)

    def assign(self, module: str) -> None:
        """Give the child the module it serves (once; see :data:`fusion_core.run.child.SERVES`)."""
        if self.module is not None:
            raise ValueError(f"this child already serves {self.module}")
        self.module = module
        self._write(json.dumps({"serve": module}))

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
