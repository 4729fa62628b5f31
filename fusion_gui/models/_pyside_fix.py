"""A workaround for a reference-count bug of PySide6 6.12 on Python < 3.12.

When a Python override of ``QAbstractItemModel.data()`` or ``headerData()`` returns ``None``
(an invalid QVariant) to a C++ caller (a view, a proxy, ``QModelIndex.data()``), PySide
drops one reference to ``None`` that it never took. Views call ``data()`` thousands of
times a second; after ~100k calls ``None`` is deallocated and the interpreter aborts
("Fatal Python error: none_dealloc"). ``None`` is immortal from Python 3.12 on.

:func:`no_data` returns ``None`` and, where the bug is present (probed once, at import),
adds the reference PySide will drop. An extra reference to ``None`` is harmless (a
direct call from Python drops nothing, and None is never freed anyway).
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QAbstractListModel, QModelIndex, QSortFilterProxyModel, Qt


class _Probe(QAbstractListModel):
    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else 1

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        return None


def _none_is_dropped() -> bool:
    if sys.version_info >= (3, 12):
        return False
    probe = _Probe()
    proxy = QSortFilterProxyModel()
    proxy.setSourceModel(probe)
    index = proxy.index(0, 0)
    before = sys.getrefcount(None)
    for _ in range(16):
        proxy.data(index, Qt.ItemDataRole.ToolTipRole)  # C++ -> Python override -> C++
    dropped = before - sys.getrefcount(None)
    for _ in range(max(0, dropped)):  # give back what the probe itself cost
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(None))
    return dropped >= 8


_DROPS_NONE = _none_is_dropped()
_incref = ctypes.pythonapi.Py_IncRef
_none = ctypes.py_object(None)


def no_data() -> None:
    """``None`` for ``data()``/``headerData()``: "no value for this role", safely."""
    if _DROPS_NONE:
        _incref(_none)
    return None


def drops_none() -> bool:
    """Whether this PySide6 has the bug (for tests and the log)."""
    return _DROPS_NONE
