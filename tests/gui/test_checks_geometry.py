"""Issue 33, item 3: the Checks tab is readable at the default size (1460x900) and at 1280x800,
with the workload panel open or closed: at least 5 result rows, a chart of at least 150 px whose
axis titles and tick labels are whole, module names that keep their layer index and last names
(the full path in the tooltip)."""

from __future__ import annotations

import math

import pytest
from PySide6.QtCharts import QValueAxis
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics

from fusion_gui.models.elide import KeyElideDelegate

JOB_TIMEOUT_MS = 300_000


def _shown_text(table, row: int, col: int) -> str:
    """The text the delegate paints in a cell at its current width."""
    from PySide6.QtWidgets import QStyleOptionViewItem

    index = table.model().index(row, col)
    option = QStyleOptionViewItem()
    option.initFrom(table)
    option.rect = table.visualRect(index)
    delegate = table.itemDelegateForColumn(col)
    assert isinstance(delegate, KeyElideDelegate)
    delegate.initStyleOption(option, index)
    return option.text


# QtCharts pads each tick label by 4 px on both sides and cuts a label to '...' past its room:
# a vertical axis gives each of its n labels height / n, a category axis each label
# width / (categories + 1) (it counts the category edges)
LABEL_PADDING = 4


def _assert_chart_whole(view, context) -> None:
    """The chart's axis titles and tick labels fit the plot area as QtCharts lays them out."""
    view.chart().layout().activate()
    area = view.chart().plotArea()
    assert area.height() > 0, context
    for axis in (view.y_speed, view.y_err):
        title = axis.titleText()
        assert title and axis.isTitleVisible(), context
        # a vertical axis title runs along the plot's height and is cut past it
        assert QFontMetrics(axis.titleFont()).horizontalAdvance(title) <= area.height(), (context, title, area)
        if isinstance(axis, QValueAxis):
            labels = axis.tickCount()
        else:
            labels = int(math.log(axis.max() / axis.min(), axis.base()) + 1e-9) + 1
        pitch = area.height() / labels - 2 * LABEL_PADDING
        assert QFontMetrics(axis.labelsFont()).height() <= pitch, (context, title, labels, area)
    x = view.x_axis
    room = area.width() / (x.count() + 1) - 2 * LABEL_PADDING
    fm = QFontMetrics(x.labelsFont())
    for label, row in zip(x.categories(), view.rows, strict=True):
        assert fm.horizontalAdvance(label) <= room, (context, label, room)
        if row["path"] is not None:  # the bar's label keeps the module's last name and layer index
            parts = row["module"].split(".")
            assert label.endswith(parts[-1]), (context, label)
            assert all(d in label for d in [p for p in parts[:-1] if p.isdigit()][-1:]), (context, label)


@pytest.mark.parametrize("size", [(1460, 900), (1280, 800)])
def test_checks_tab_is_readable_at_the_default_sizes(qtbot, window, open_model, only_fusions, qwen2_vl_dir, size):
    open_model(window, str(qwen2_vl_dir))
    only_fusions(window, "patch_embeddings", "qkv", "gate_up")
    panel = window.checks
    panel.upstream_box.setChecked(False)
    panel.repeats.setValue(1)
    window.show()
    window.resize(*size)
    window.tabs.setCurrentWidget(panel)
    with qtbot.waitSignal(window.state.checks_finished, timeout=JOB_TIMEOUT_MS):
        panel.run_button.click()
    qtbot.waitUntil(lambda: not window.state.busy, timeout=10_000)
    rows = panel.model.rows
    assert len(rows) >= 5
    for workload_open in (False, True):
        panel.workload_button.setChecked(workload_open)
        qtbot.wait(50)
        assert panel.workload.isVisible() == workload_open
        table = panel.table
        shown = table.viewport().height() // table.rowHeight(0)
        assert shown >= 5, (size, workload_open, shown)
        assert panel.chart.height() >= 150, (size, workload_open, panel.chart.height())
        _assert_chart_whole(panel.chart, (size, workload_open, panel.chart.height()))
        for row in range(len(rows)):
            path = rows[row]["module"]
            text = _shown_text(table, row, 0)
            if rows[row]["path"]:  # the layer index and the last name stay readable
                tail = path.split(".")[-1]
                digits = [p for p in path.split(".") if p.isdigit()]
                assert text.endswith(tail), (size, text, path)
                assert all(d in text for d in digits[-1:]), (size, text, path)
            assert path in (table.model().index(row, 0).data(Qt.ItemDataRole.ToolTipRole) or path)
