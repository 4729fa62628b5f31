"""Issue 33: every file the window writes gets the user's default mode (the umask), the PNG
as the reports (the report was 0600 once, written through mkstemp)."""

from __future__ import annotations

import os

import pytest


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_png_and_reports_follow_the_umask(qapp, tmp_path, umask, mode):
    from fusion_core.report import tree_svg
    from fusion_core.report.tree_image import TreeRow, write_text
    from fusion_gui.panels.save_dialog import _png

    svg = tree_svg([TreeRow(0, "model", "Cls", 1, "")], "m", "1 module")
    old = os.umask(umask)
    try:
        _png(svg, tmp_path / "tree.png")
        write_text(tmp_path / "report.html", "<p>ok</p>")
    finally:
        os.umask(old)
    assert (tmp_path / "tree.png").stat().st_mode & 0o777 == mode
    assert (tmp_path / "report.html").stat().st_mode & 0o777 == mode
