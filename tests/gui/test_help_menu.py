"""Issue 33, item 8: the Help menu lists the window's real keyboard shortcuts and opens the docs."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QPlainTextEdit

from fusion_gui.main_window import MainWindow
from fusion_gui.panels.help_dialog import ShortcutsDialog


def _help_actions(window: MainWindow) -> dict[str, object]:
    menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    return {a.text().replace("&", ""): a for a in menu.actions() if not a.isSeparator()}


def test_shortcuts_dialog_opens_from_the_menu_and_lists_the_real_shortcuts(window: MainWindow, qtbot) -> None:
    actions = _help_actions(window)
    actions["Keyboard shortcuts"].trigger()
    dialog = window.dialog
    assert isinstance(dialog, ShortcutsDialog)
    qtbot.waitExposed(dialog)
    text = dialog.findChild(QPlainTextEdit)
    assert text is not None and text.isReadOnly()  # plain text: a name is never rendered as markup
    listed = dict((what, keys) for keys, what in dialog.listed())
    # defined in main_window._make_actions and tree_panel's QShortcut
    assert listed["Run checks"] == "Ctrl+R"
    assert listed["Export"] == "Ctrl+E"
    assert listed["Compare with"] == "Ctrl+Shift+O"
    assert listed["Next match (module tree)"] == "F3"
    assert listed["Clear the module filter"] == "Esc"
    assert listed["Show the Checks tab"] == "Alt+5"
    dialog.reject()


def test_documentation_actions_point_at_existing_files(window: MainWindow) -> None:
    actions = _help_actions(window)
    readme, docs = actions["Documentation (README)"], actions["Documentation folder (docs/)"]
    assert readme.isEnabled() and docs.isEnabled()
    readme_path = Path(window.doc_url("readme").toLocalFile())
    docs_path = Path(window.doc_url("docs").toLocalFile())
    assert readme_path.name == "README.md" and readme_path.is_file()
    assert docs_path.is_dir() and (docs_path / "cli.md").is_file()


def test_documentation_actions_are_disabled_with_the_reason_without_a_source_tree(
    make_window, monkeypatch, tmp_path: Path
) -> None:
    import fusion_gui.main_window as main_window
    from fusion_gui.panels.help_dialog import doc_paths

    monkeypatch.setattr(main_window, "doc_paths", lambda: doc_paths(tmp_path))  # an installed package: no docs
    actions = _help_actions(make_window())
    for name in ("Documentation (README)", "Documentation folder (docs/)"):
        assert not actions[name].isEnabled()
        assert "not there" in actions[name].toolTip()
