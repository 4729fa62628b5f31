"""What the window remembers between runs (QSettings): geometry, splitters, recent models, fusions.

The organization and application names are set in :func:`fusion_gui.app.create_app`;
``FUSION_INSPECTOR_SETTINGS`` (a path to an .ini file) overrides the location, and
tests point ``QSettings.setPath`` at a temporary folder. A ``read_only`` Settings (the
``--screenshot`` mode) reads the user's settings but never writes them: a scripted run
must not change the saved fusions or fill the recent-models list.
"""

from __future__ import annotations

import json
import os
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

ORGANIZATION = "FusionInspector"
APPLICATION = "fusion-inspector"
MAX_RECENT = 10


class Settings:
    """Typed accessors over one :class:`QSettings`."""

    def __init__(self, qsettings: QSettings | None = None, read_only: bool = False) -> None:
        if qsettings is None:
            path = os.environ.get("FUSION_INSPECTOR_SETTINGS")
            if path:
                qsettings = QSettings(path, QSettings.Format.IniFormat)
            else:
                qsettings = QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANIZATION, APPLICATION)
        self.q = qsettings
        self.read_only = read_only
        self._memory: dict[str, Any] = {}  # what a read-only run "wrote", seen by its own reads

    def sync(self) -> None:
        if not self.read_only:
            self.q.sync()

    def _value(self, key: str, default: Any = None) -> Any:
        return self._memory[key] if key in self._memory else self.q.value(key, default)

    def _set(self, key: str, value: Any) -> None:
        if self.read_only:
            self._memory[key] = value
        else:
            self.q.setValue(key, value)

    # window layout -------------------------------------------------------------------
    def state(self, key: str) -> QByteArray | None:
        value = self._value(f"window/{key}")
        return value if isinstance(value, QByteArray) and not value.isEmpty() else None

    def set_state(self, key: str, value: QByteArray) -> None:
        self._set(f"window/{key}", value)

    def text(self, key: str, default: str = "") -> str:
        value = self._value(key, default)
        return value if isinstance(value, str) else default

    def set_text(self, key: str, value: str) -> None:
        self._set(key, value)

    # recent models ---------------------------------------------------------------------
    def recent_models(self) -> list[str]:
        return [s for s in self._json("models/recent", []) if isinstance(s, str)][:MAX_RECENT]

    def add_recent_model(self, spec: str) -> list[str]:
        recent = [spec, *[s for s in self.recent_models() if s != spec]][:MAX_RECENT]
        self._set("models/recent", json.dumps(recent))
        return recent

    # fusions ---------------------------------------------------------------------------
    def fusions(self) -> tuple[list[str], set[str]] | None:
        """The last-used family order and the enabled ones; None when never saved."""
        data = self._json("fusions/last", None)
        if not isinstance(data, dict):
            return None
        order = [n for n in data.get("order", []) if isinstance(n, str)]
        enabled = {n for n in data.get("enabled", []) if isinstance(n, str)}
        return order, enabled

    def set_fusions(self, order: list[str], enabled: set[str]) -> None:
        self._set("fusions/last", json.dumps({"order": order, "enabled": [n for n in order if n in enabled]}))

    def _json(self, key: str, default: Any) -> Any:
        raw = self._value(key)
        if not isinstance(raw, str):
            return default
        try:
            return json.loads(raw)
        except ValueError:
            return default
