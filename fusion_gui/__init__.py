"""fusion_gui: the PySide6 desktop inspector over fusion_core."""

from . import _pyside_fix

# before any widget exists: see _pyside_fix for the PySide6 6.12 / Python 3.11 reference bug
_pyside_fix.apply()
