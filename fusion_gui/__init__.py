"""fusion_gui: the PySide6 desktop inspector over fusion_core."""
