"""The checks chart (QtCharts): speedup per fused module as bars with 95% whiskers and the
A/A noise floor (two dotted ticks around 1.0), error vs its limit on a log axis. No ratio
without its interval and its floor."""

from __future__ import annotations

import math
from typing import Any

from PySide6.QtCharts import (
    QBarCategoryAxis,
    QBarSeries,
    QBarSet,
    QChart,
    QChartView,
    QLineSeries,
    QLogValueAxis,
    QScatterSeries,
    QValueAxis,
)
from PySide6.QtCore import QMargins, QPointF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen

from . import style

SLOWER = "#ef6c00"  # amber: slower is a finding, not a failure (red is kept for failed checks)


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def chart_label(path: str) -> str:
    """A bar's label: the module's last name after its nearest layer index (``0.self_attn``,
    ``patch_embed``): what tells the bars apart in the least room (the full path is in the table)."""
    pieces = path.split(".")
    index = next((p for p in reversed(pieces[:-1]) if p.isdigit()), "")
    return f"{index}.{pieces[-1]}" if index else pieces[-1]


TITLE = "Speedup of each fused module (bars, 95% whiskers) and its error against the limit (dots)"
#: each axis title from the longest to the shortest: the longest that the plot's height holds is shown
SPEED_TITLES = ("speedup (×)", "speedup", "×")
ERROR_TITLES = ("error (log)", "error", "err")
#: below this height the chart's title goes to its tooltip: the axis titles need the room
COMPACT_HEIGHT = 240


def label_room(width: float, count: int) -> float:
    """The width QtCharts gives each of ``count`` bar labels along ``width`` before it cuts one
    to '...': the width over the count of category edges, less a 4 px padding on both sides."""
    return width / (count + 1) - 2 * 4 - 1


LEGEND_TIP = (
    "Bars: speedup of the fused module over the original (amber: slower), whiskers: its 95% interval.\n"
    "Dotted ticks: the A/A noise floor (faster or slower only clear of 1 by more than its widest side).\n"
    "Dots: max abs error on a log axis (white: exact), dashes: each row's limit."
)


def _sized(font: QFont, points: float) -> QFont:
    out = QFont(font)
    out.setPointSizeF(points)
    return out


class ChecksChart(QChartView):
    """Bars: speedup (fused vs original; green, amber when slower) with 95% whiskers. Dots: max abs error (log)."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setMinimumHeight(150)  # the Checks tab also holds the workload controls
        self.rows: list[dict[str, Any]] = []
        self.y_speed: QValueAxis | None = None
        self.y_err: QLogValueAxis | None = None
        self.x_axis: QBarCategoryAxis | None = None
        self.set_rows([])

    def resizeEvent(self, event) -> None:  # Qt override: a short chart gives its title's row to the axes
        super().resizeEvent(event)
        self._fit_titles()

    def _fit_titles(self) -> None:
        chart = self.chart()
        if chart is None or not self.rows:
            return
        compact = self.height() < COMPACT_HEIGHT
        if chart.title() != ("" if compact else TITLE):
            chart.setTitle("" if compact else TITLE)
        self.setToolTip(f"{TITLE}\n{LEGEND_TIP}" if compact else LEGEND_TIP)

    def _on_plot_area(self, area) -> None:
        """Each vertical axis shows the longest of its titles that the plot's height holds whole, and
        no more tick labels than it holds one above another (QtCharts cuts a crowded label to '…')."""
        for axis, titles in ((self.y_speed, SPEED_TITLES), (self.y_err, ERROR_TITLES)):
            if axis is None:
                continue
            fm = QFontMetrics(axis.titleFont())
            title = next((t for t in titles if fm.horizontalAdvance(t) + 4 <= area.height()), titles[-1])
            if axis.titleText() != title:
                axis.setTitleText(title)
        if self.y_speed is None or self.y_err is None:
            return
        if self.x_axis is not None and self.x_axis.count():  # bar labels: a smaller font before QtCharts's '...'
            room = label_room(area.width(), self.x_axis.count())
            font = QFont(self.x_axis.labelsFont())
            size = QFont().pointSizeF()
            while (
                size > 7
                and max(QFontMetrics(_sized(font, size)).horizontalAdvance(t) for t in self.x_axis.categories()) > room
            ):
                size -= 0.5
            if font.pointSizeF() != size:
                self.x_axis.setLabelsFont(_sized(font, size))
        # QtCharts gives each of n tick labels the height / n less twice its 4 px padding
        pitch = QFontMetrics(self.y_speed.labelsFont()).height() + 8 + 1
        steps = self._speed_steps  # the nice intervals of the speed axis: fewer, by its divisors
        fit = next((k for k in range(steps, 0, -1) if steps % k == 0 and area.height() / (k + 1) >= pitch), 1)
        if self.y_speed.tickCount() != fit + 1:
            self.y_speed.setTickCount(fit + 1)
        decades = self._decades  # the log axis: a label every 1, 2, 3... decades
        every = next((n for n in range(1, decades + 1) if area.height() / (decades // n + 1) >= pitch), decades)
        if self.y_err.base() != 10.0**every:
            self.y_err.setBase(10.0**every)

    def set_rows(self, rows: list[dict[str, Any]], end_to_end: dict[str, Any] | None = None) -> None:
        """Plot ``rows`` (label or module, speedup, low, high, max_abs_diff, limit, passed) plus the end-to-end row."""
        self.rows = list(rows) + ([end_to_end] if end_to_end else [])
        self.whiskers: list[QLineSeries] = []
        self.floors = []
        self.y_speed = self.y_err = self.x_axis = None
        chart = QChart()
        chart.setMargins(QMargins(4, 4, 4, 4))
        chart.layout().setContentsMargins(0, 0, 0, 0)  # the room goes to the plot (150 px at least)
        chart.setBackgroundRoundness(0)
        chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
        chart.legend().setFont(_sized(QFont(), QFont().pointSizeF() - 1))  # six entries in a 1280 px window
        chart.setAnimationOptions(QChart.AnimationOption.NoAnimation)
        title_font = QFont()
        title_font.setBold(True)
        chart.setTitleFont(title_font)
        if not self.rows:
            chart.setTitle("Run checks to see speedups and errors per fused module")
            self.setToolTip("")
            self.setChart(chart)
            return
        chart.setTitle(TITLE)
        labels = [chart_label(r.get("label") or r["module"]) for r in self.rows]
        speed = QBarSet("speedup (amber: slower)")
        speed.setColor(QColor(style.PASS))
        speed.setSelectedColor(QColor(SLOWER))  # one set, per-bar colour: slower bars are "selected"
        speed.setLabelColor(QColor(style.TEXT_ON_TINT))
        top = 1.0
        for i, r in enumerate(self.rows):
            s = r.get("speedup")
            s = float(s) if isinstance(s, (int, float)) and math.isfinite(s) else 0.0
            top = max(top, s, _finite(r.get("high")) or 0.0)
            speed.append(s)
            if r.get("verdict") == "slower" or (not r.get("verdict") and s < 1):
                speed.selectBar(i)
        for i, r in enumerate(self.rows):
            low, high = _finite(r.get("low")), _finite(r.get("high"))
            if low is None or high is None:
                continue
            whisker = QLineSeries()
            whisker.setName("95% interval")
            whisker.setPen(QPen(QColor("#212121"), 2))
            for x, y in ((i - 0.08, low), (i + 0.08, low), (i, low), (i, high), (i - 0.08, high), (i + 0.08, high)):
                whisker.append(QPointF(x, y))
            self.whiskers.append(whisker)
        self.floors: list[QLineSeries] = []  # the A/A noise floor of each row: dotted ticks at its two ends
        for i, r in enumerate(self.rows):
            n_low, n_high = _finite(r.get("noise_low")), _finite(r.get("noise_high"))
            if n_low is None or n_high is None:
                continue
            top = max(top, n_high)
            floor = QLineSeries()
            floor.setName("A/A floor")
            floor.setPen(QPen(QColor("#757575"), 2, Qt.PenStyle.DotLine))
            for x, y in ((i - 0.3, n_low), (i + 0.3, n_low), (i + 0.3, n_high), (i - 0.3, n_high), (i - 0.3, n_low)):
                floor.append(QPointF(x, y))
            self.floors.append(floor)
        bars = QBarSeries()
        bars.append(speed)
        bars.setBarWidth(0.45)
        bars.setLabelsVisible(True)
        bars.setLabelsFormat("@value×")
        bars.setLabelsPrecision(3)
        # at the bar's foot: above its end the label sat on the whisker, which runs through the end
        bars.setLabelsPosition(QBarSeries.LabelsPosition.LabelsInsideBase)
        chart.addSeries(bars)

        ok_dots, bad_dots = QScatterSeries(), QScatterSeries()
        ok_dots.setName("error (pass)")
        bad_dots.setName("error (FAIL)")
        for dots, colour, shape in (
            (ok_dots, "#1565c0", QScatterSeries.MarkerShape.MarkerShapeCircle),
            (bad_dots, style.FAIL, QScatterSeries.MarkerShape.MarkerShapeRectangle),
        ):
            dots.setColor(QColor(colour))
            dots.setBorderColor(QColor("white"))
            dots.setMarkerSize(11)
            dots.setMarkerShape(shape)
        exact_dots = QScatterSeries()  # zero error has no place on a log axis: drawn at its bottom
        exact_dots.setName("exact (0)")
        exact_dots.setColor(QColor("white"))
        exact_dots.setBorderColor(QColor("#1565c0"))
        exact_dots.setMarkerSize(10)
        errors = [_finite(r.get("max_abs_diff")) for r in self.rows]
        tols = [_finite(r.get("limit")) for r in self.rows]
        scale = [v for v in errors + tols if v is not None and v > 0] or [1e-6]
        lo = 10 ** (math.floor(math.log10(min(scale))) - 1)
        hi = 10 ** (math.ceil(math.log10(max(scale))) + 1)
        tol_lines: list[QLineSeries] = []  # one short dash per row: tolerances differ per row
        for i, r in enumerate(self.rows):
            err = errors[i]
            if err is None:  # NaN / inf: a failure, drawn at the top
                bad_dots.append(QPointF(i, hi))
            elif err <= 0:
                (exact_dots if r.get("passed") else bad_dots).append(QPointF(i, lo))
            else:
                (ok_dots if r.get("passed") else bad_dots).append(QPointF(i, err))
            if tols[i]:
                line = QLineSeries()
                line.setName("limit")
                line.setPen(QPen(QColor("#6d4c41"), 2, Qt.PenStyle.DashLine))
                line.append(QPointF(i - 0.35, tols[i]))
                line.append(QPointF(i + 0.35, tols[i]))
                tol_lines.append(line)
        dot_series = [ok_dots, bad_dots, exact_dots, *tol_lines]
        for series in dot_series:
            chart.addSeries(series)

        x_axis = QBarCategoryAxis()
        x_axis.append(labels)
        chart.addAxis(x_axis, Qt.AlignmentFlag.AlignBottom)
        y_speed = QValueAxis()
        y_speed.setRange(0, top * 1.2)
        y_speed.setTitleText(SPEED_TITLES[0])
        y_speed.setLabelFormat("%.1f")
        y_speed.applyNiceNumbers()
        self._speed_steps = max(1, y_speed.tickCount() - 1)
        chart.addAxis(y_speed, Qt.AlignmentFlag.AlignLeft)
        bars.attachAxis(x_axis)
        bars.attachAxis(y_speed)
        for whisker in self.whiskers + self.floors:
            chart.addSeries(whisker)
        y_err = QLogValueAxis()
        y_err.setBase(10)
        y_err.setRange(lo, hi)
        self._decades = max(1, round(math.log10(hi / lo)))
        y_err.setMinorTickCount(0)
        y_err.setTitleText(ERROR_TITLES[0])
        y_err.setLabelFormat("%.0e")
        chart.addAxis(y_err, Qt.AlignmentFlag.AlignRight)
        x_num = QValueAxis()  # the dots use numeric x at the category centres, hidden
        x_num.setRange(-0.5, len(self.rows) - 0.5)
        x_num.setVisible(False)
        chart.addAxis(x_num, Qt.AlignmentFlag.AlignBottom)
        for series in dot_series:
            series.attachAxis(x_num)
            series.attachAxis(y_err)
        for whisker in self.whiskers + self.floors:
            whisker.attachAxis(x_num)
            whisker.attachAxis(y_speed)
        for whisker in self.whiskers[1:] + self.floors[1:]:
            chart.legend().markers(whisker)[0].setVisible(False)
        for line in tol_lines[1:]:
            chart.legend().markers(line)[0].setVisible(False)
        for dots in (bad_dots, exact_dots):
            if not dots.count():
                chart.legend().markers(dots)[0].setVisible(False)
        self.y_speed, self.y_err, self.x_axis = y_speed, y_err, x_axis
        chart.plotAreaChanged.connect(self._on_plot_area)
        self.setChart(chart)
        self._fit_titles()
