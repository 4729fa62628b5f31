"""GUI test fixtures: isolated settings, a main window, and helpers that wait on signals."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt

from fusion_gui.main_window import MainWindow
from fusion_gui.settings import Settings
from fusion_gui.state import AppState

OPEN_TIMEOUT_MS = 120_000


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing a test does reaches the user's settings."""
    monkeypatch.delenv("FUSION_INSPECTOR_SETTINGS", raising=False)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path / "qsettings"))


@pytest.fixture
def settings_path(tmp_path: Path) -> Path:
    return tmp_path / "settings.ini"


@pytest.fixture
def make_window(qtbot, settings_path: Path) -> Iterator[Callable[[], MainWindow]]:
    """Build main windows over the test's settings file (a second one = a restart)."""
    made: list[MainWindow] = []

    def make() -> MainWindow:
        state = AppState(Settings(QSettings(str(settings_path), QSettings.Format.IniFormat)))
        window = MainWindow(state)
        qtbot.addWidget(window)
        window.show()
        qtbot.waitExposed(window)
        made.append(window)
        return window

    yield make
    for window in made:
        window.state.shutdown()


@pytest.fixture
def window(make_window: Callable[[], MainWindow]) -> MainWindow:
    return make_window()


@pytest.fixture
def open_model(qtbot) -> Callable[[MainWindow, str], None]:
    """Open a model spec in a window and wait until the window shows it."""

    def open_(window: MainWindow, spec: str) -> None:
        with qtbot.waitSignal(window.state.model_changed, timeout=OPEN_TIMEOUT_MS):
            assert window.state.open_model(spec) is not None
        qtbot.waitUntil(lambda: not window.state.busy and not window.state.plan_pending, timeout=30_000)

    return open_


@pytest.fixture
def wait_plan(qtbot) -> Callable[[MainWindow], None]:
    """Wait for the engine's plan of the fusions on show (plans are computed in the engine process)."""

    def wait(window: MainWindow) -> None:
        qtbot.waitUntil(lambda: not window.state.plan_pending, timeout=30_000)

    return wait


@pytest.fixture
def only_fusions(wait_plan) -> Callable[..., None]:
    """Enable exactly the given families through the Fusions tab's checkboxes, as a user would."""

    def only(window: MainWindow, *names: str) -> None:
        panel = window.fusions
        for name in panel.order():
            item = panel.item(name)
            item.setCheckState(Qt.CheckState.Checked if name in names else Qt.CheckState.Unchecked)
        assert set(window.state.enabled) == set(names)
        wait_plan(window)

    return only


@pytest.fixture
def engine_family(qtbot):
    """Register the families of a family file in the engine process (where plans run); unregistered after."""
    names: list[tuple[MainWindow, str]] = []

    def load(window: MainWindow, path: Path) -> list[str]:
        job = window.state.load_family_file(path)
        with qtbot.waitSignal(job.succeeded, timeout=OPEN_TIMEOUT_MS) as blocker:
            pass
        loaded = list(blocker.args[0])
        names.extend((window, n) for n in loaded)
        return loaded

    yield load
    for window, name in names:
        job = window.state.unregister_family(name)
        qtbot.waitUntil(job.done, timeout=30_000)
