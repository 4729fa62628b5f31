"""Keep None, True and False alive under a PySide6 build that drops references to them.

The PySide6 6.12 wheels (abi3) behave as if compiled for Python >= 3.12, where ``None``,
``True`` and ``False`` are immortal and returning them needs no new reference: on Python
3.11 every void Qt call from Python (``label.setText(...)``), every ``bool`` result, and
every ``None`` a Python ``data()`` override hands back to C++ drops one reference it never
took. A busy window makes ~100k such calls in minutes; then the interpreter aborts with
"Fatal Python error: none_dealloc".

Where this is measured (Python < 3.12 and a probe shows the drops), :func:`apply` does what
Python 3.12 does: it gives these three objects a reference count so large (2**40) that no
session can drain it. Nothing else changes; on a fixed PySide6 or Python >= 3.12 it is a no-op.
"""

from __future__ import annotations

import ctypes
import sys

_CUSHION = 2**40
_applied = False


def _drops(obj: object, call, n: int = 256) -> int:
    for _ in range(8):  # the first calls initialize PySide's caches (which hold references)
        call()
    before = sys.getrefcount(obj)
    for _ in range(n):
        call()
    return before - sys.getrefcount(obj)


def probe() -> bool:
    """Whether this PySide6 drops references to None on void calls (Python < 3.12 only)."""
    if sys.version_info >= (3, 12):
        return False
    from PySide6.QtCore import QObject

    obj = QObject()
    dropped = _drops(None, lambda: obj.setObjectName("probe"))
    _give(None, max(0, dropped) + 8)  # what the probe itself took
    return dropped >= 128


def _give(obj: object, n: int) -> None:
    if n > 0:
        ctypes.c_ssize_t.from_address(id(obj)).value += n  # ob_refcnt is the first field


def apply() -> bool:
    """Make None, True and False effectively immortal if this PySide6 needs it; True if applied."""
    global _applied
    if _applied:
        return True
    if not probe():
        return False
    for obj in (None, True, False):
        _give(obj, _CUSHION)
    _applied = True
    return True
