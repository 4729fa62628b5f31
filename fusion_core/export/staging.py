"""Crash-safe staging of an export: recognisable temp folders, signals, stale leftovers, the swap.

An export is written into a hidden sibling of the destination named
``.NAME.fusion-export-tmp-PID-HEX`` and moved into place only once verified:

* SIGTERM and SIGHUP end the export like SIGINT (an exception unwinds it and the temp
  folder is removed), and an ``atexit`` hook removes any temp folder still registered;
* a kill -9 cannot be caught: the next export to the same destination finds the
  leftovers of a dead process (the PID in their names), removes them and says so;
* the temp folder is made, and moved into place, through one descriptor of the parent
  folder opened when the temp folder is made; the parent's identity (device, inode) is
  checked again before the move, so a parent swapped during the export (a link flipped to
  the source) is never written into (issue 32);
* ``--overwrite`` exchanges the new folder and the old one in one step with
  ``renameat2(RENAME_EXCHANGE)`` on Linux. Elsewhere (or when the file system refuses)
  it takes two renames, recorded first in a journal, so that the next export can restore
  the old folder if a crash fell between them. Signals are blocked during the swap.

A private environment variable (``_FUSION_EXPORT_FAULT``, for the fault-injection tests
only, not an interface) kills or pauses the process at a named step.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import json
import os
import re
import secrets
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import ExportError

_TAG = "fusion-export"
_LEFTOVER = re.compile(rf"^\.(?P<name>.+)\.{_TAG}-(?P<kind>tmp|old|journal)-(?P<pid>\d+)-[0-9a-f]+(?:\.json)?$")
_FAULT_ENV = "_FUSION_EXPORT_FAULT"
_NO_EXCHANGE_ENV = "_FUSION_EXPORT_NO_EXCHANGE"
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))

_live: set[Path] = set()
_parents: dict[Path, int] = {}  # temp folder -> a descriptor of its parent, opened once
_previous: dict[int, Any] = {}
_lock = threading.Lock()


def fault_point(step: str) -> None:
    """Kill (``kill:STEP``) or pause (``pause:STEP``) this process at ``step``; tests only."""
    spec = os.environ.get(_FAULT_ENV)
    if not spec:
        return
    action, _, where = spec.partition(":")
    if where != step:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "pause":
        ready = os.environ.get(_FAULT_ENV + "_READY")
        if ready:
            Path(ready).write_text(str(os.getpid()))
        time.sleep(120)


def _name(dest: Path, kind: str) -> Path:
    return dest.parent / f".{dest.name}.{_TAG}-{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's process), or cannot tell: keep its files
    return True


def clean_stale(dest: Path) -> list[str]:
    """Remove the leftovers of killed exports to ``dest``; return one note per thing done.

    Only names of our own pattern whose process is gone are touched. An interrupted
    two-step swap (a journal) is rolled back first: if the destination is missing, the
    old folder is put back.
    """
    notes: list[str] = []
    parent = dest.parent
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return notes
    stale = []
    for name in names:
        m = _LEFTOVER.match(name)
        if m and m.group("name") == dest.name and not _alive(int(m.group("pid"))):
            stale.append((m.group("kind"), parent / name))
    for kind, path in stale:
        if kind == "journal":
            notes.extend(_roll_back(path, dest))
    for kind, path in stale:
        if kind == "journal" or not os.path.lexists(path):
            continue
        size = _tree_size(path)
        remove_tree(path)
        notes.append(f"removed {path.name} ({size / 1e6:.1f} MB), left by an export that was killed before it finished")
    return notes


def _roll_back(journal: Path, dest: Path) -> list[str]:
    notes = []
    try:
        record = json.loads(journal.read_text(encoding="utf-8"))
        old = dest.parent / str(record["old"])
    except (OSError, ValueError, KeyError, TypeError):
        old = None
    if old is not None and old.parent == dest.parent and not os.path.lexists(dest) and old.is_dir():
        os.rename(old, dest)
        notes.append(f"restored {dest.name} from {old.name}: an overwriting export was killed between its two renames")
    try:
        journal.unlink()
    except OSError:
        pass
    return notes


def _tree_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def make_temp_sibling(dest: Path) -> Path:
    """Create ``.NAME.fusion-export-tmp-PID-HEX`` beside ``dest`` (same file system: rename works).

    The folder is registered for removal on SIGTERM, SIGHUP and interpreter exit until
    :func:`move_into_place` or :func:`remove_tree` is done with it.

    Raises:
        ExportError: the parent folder is not writable.
    """
    parent_fd = _open_parent(dest)
    for _ in range(100):
        tmp = _name(dest, "tmp")
        try:
            if parent_fd is None:
                tmp.mkdir(mode=0o777)  # honours the umask, unlike mkdtemp's 0700
            else:
                os.mkdir(tmp.name, mode=0o777, dir_fd=parent_fd)
        except FileExistsError:
            continue
        except OSError as e:
            if parent_fd is not None:
                os.close(parent_fd)
            raise ExportError(f"{dest}: cannot write into {dest.parent} ({e.strerror or e})") from None
        if parent_fd is not None:
            _parents[tmp] = parent_fd
        _register(tmp)
        return tmp
    if parent_fd is not None:
        os.close(parent_fd)
    raise ExportError(f"{dest}: cannot create a temporary folder in {dest.parent}")


def _open_parent(dest: Path) -> int | None:
    """A descriptor of ``dest``'s parent folder (``None`` where folders cannot be opened: Windows)."""
    if os.name != "posix":
        return None
    try:
        fd = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ExportError(f"{dest}: cannot open its folder {dest.parent} ({e.strerror or e})") from None
    return fd


def _same_parent(tmp: Path, path: Path) -> int | None:
    """The descriptor of ``tmp``'s parent, after checking that ``path``'s parent is still that folder.

    Raises:
        ExportError: the parent folder was replaced (or moved) since the export began.
    """
    fd = _parents.get(tmp)
    if fd is None:
        return None
    try:
        same = os.path.samestat(os.fstat(fd), os.stat(path.parent))
    except OSError:
        same = False
    if not same or path.parent != tmp.parent:
        raise ExportError(
            f"{path}: its folder {path.parent} was replaced during the export (a link or a folder swapped); "
            "nothing was moved there. Export again to a folder nobody else changes"
        )
    return fd


def _forget_parent(tmp: Path) -> None:
    fd = _parents.pop(tmp, None)
    if fd is not None:
        os.close(fd)


def _on_signal(signum: int, frame: Any) -> None:
    # unwind like KeyboardInterrupt does for SIGINT: every finally block removes its temp folder
    raise SystemExit(128 + signum)


def _register(tmp: Path) -> None:
    with _lock:
        _live.add(tmp)
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread; atexit still cleans
        for sig in _SIGNALS:
            if sig not in _previous and signal.getsignal(sig) in (signal.SIG_DFL, None):
                _previous[sig] = signal.signal(sig, _on_signal)


def _unregister(tmp: Path) -> None:
    with _lock:
        _live.discard(tmp)
        if _live or threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in list(_previous.items()):
            if signal.getsignal(sig) is _on_signal:
                signal.signal(sig, handler)
            del _previous[sig]


@atexit.register
def _remove_live() -> None:
    for tmp in list(_live):
        shutil.rmtree(tmp, ignore_errors=True)


def remove_tree(folder: Path) -> None:
    """Remove a temp folder of ours (and forget it)."""
    shutil.rmtree(folder, ignore_errors=True)
    _forget_parent(folder)
    _unregister(folder)


def sync_folder(folder: Path) -> None:
    """fsync a folder so that renames and new entries survive a crash (best effort)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path, dir_fd: int | None = None) -> bool:
    """Swap ``a`` and ``b`` atomically (Linux ``renameat2``, by name in ``dir_fd`` when given); ``False`` when not available."""
    if not sys.platform.startswith("linux") or os.environ.get(_NO_EXCHANGE_ENV):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    where = at_fdcwd if dir_fd is None else dir_fd
    names = (a, b) if dir_fd is None else (a.name, b.name)
    if fn(where, os.fsencode(names[0]), where, os.fsencode(names[1]), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False  # the file system does not do it: use the journalled two-step swap
    raise OSError(err, os.strerror(err), str(b))


class _SignalsHeld:
    """Block SIGINT, SIGTERM and SIGHUP for a few renames that must not be split."""

    def __enter__(self) -> None:
        self.mask = None
        if hasattr(signal, "pthread_sigmask"):
            self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, *_SIGNALS})

    def __exit__(self, *exc: object) -> None:
        if self.mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)


def move_into_place(tmp: Path, path: Path, replaces: bool) -> None:
    """Move the finished ``tmp`` folder to ``path``; an old folder there is swapped out, then removed.

    Raises:
        ExportError: a rename failed; ``path`` is as it was.
    """
    sync_folder(tmp)
    fault_point("before-swap")
    try:
        with _SignalsHeld():
            dir_fd = _same_parent(tmp, path)
            if not replaces:
                _move_new(tmp, path, dir_fd)
            else:
                _swap(tmp, path, dir_fd)
            sync_folder(path.parent)
    finally:
        _forget_parent(tmp)
    _unregister(tmp)


def _move_new(tmp: Path, path: Path, dir_fd: int | None = None) -> None:
    try:
        try:
            if dir_fd is not None:  # by name, in the parent opened when the export began
                os.rename(tmp.name, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                return
            os.rename(tmp, path)  # POSIX: atomically replaces an empty folder
        except OSError as e:
            if not os.path.isdir(path) or e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EACCES):
                raise
            os.rmdir(path)  # Windows: remove the empty folder first
            os.rename(tmp, path)
    except OSError as e:
        raise ExportError(f"{path}: cannot move the export into place ({e.strerror or e})") from None


def _swap(tmp: Path, path: Path, dir_fd: int | None = None) -> None:
    try:
        exchanged = _exchange(tmp, path, dir_fd)
    except OSError as e:
        raise ExportError(f"{path}: cannot swap the export into place ({e.strerror or e}); kept the old one") from None
    if exchanged:  # tmp now holds the old folder
        fault_point("after-swap")
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = _name(path, "old")
    journal = Path(f"{_name(path, 'journal')}.json")
    try:
        journal.write_text(json.dumps({"old": old.name, "new": tmp.name}), encoding="utf-8")
        sync_folder(path.parent)
        os.rename(path, old)
    except OSError as e:
        journal.unlink(missing_ok=True)
        raise ExportError(f"{path}: cannot move the old folder aside ({e.strerror or e})") from None
    fault_point("after-aside")
    try:
        os.rename(tmp, path)
    except OSError as e:
        os.rename(old, path)
        journal.unlink(missing_ok=True)
        raise ExportError(f"{path}: cannot move the export into place ({e.strerror or e}); kept the old one") from None
    sync_folder(path.parent)
    journal.unlink(missing_ok=True)
    fault_point("after-swap")
    shutil.rmtree(old, ignore_errors=True)
