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
from PySide6.QtGui import QColor, QFont, QPainter, QPen

from . import style

SLOWER = "#ef6c00"  # amber: slower is a finding, not a failure (red is kept for failed checks)


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def short_name(path: str, parts: int = 2) -> str:
    """The last ``parts`` components of a module path (chart labels must stay short)."""
    pieces = path.split(".")
    return ".".join(pieces[-parts:]) if len(pieces) > parts else path


class ChecksChart(QChartView):
    """Bars: speedup (fused vs original; green, amber when slower) with 95% whiskers. Dots: max abs error (log)."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setMinimumHeight(150)  # the Checks tab also holds the workload controls
        self.rows: list[dict[str, Any]] = []
        self.set_rows([])

    def set_rows(self, rows: list[dict[str, Any]], end_to_end: dict[str, Any] | None = None) -> None:
        """Plot ``rows`` (module, speedup, low, high, max_abs_diff, limit, passed) plus the end-to-end row."""
        self.rows = list(rows) + ([end_to_end] if end_to_end else [])
        self.whiskers: list[QLineSeries] = []
        self.floors = []
        chart = QChart()
        chart.setMargins(QMargins(4, 4, 4, 4))
        chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
        chart.setAnimationOptions(QChart.AnimationOption.NoAnimation)
        title_font = QFont()
        title_font.setBold(True)
        chart.setTitleFont(title_font)
        if not self.rows:
            chart.setTitle("Run checks to see speedups and errors per fused module")
            self.setChart(chart)
            return
        chart.setTitle("Speedup of each fused module (bars, 95% whiskers) and its error against the limit (dots)")
        labels = [short_name(r["module"]) for r in self.rows]
        speed = QBarSet("speedup (amber: slower; whiskers: 95% interval)")
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
            floor.setName("A/A noise floor (faster or slower only clear of 1 by more than its widest side)")
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
        y_speed.setTitleText("speedup (×)")
        y_speed.setLabelFormat("%.1f")
        y_speed.applyNiceNumbers()
        chart.addAxis(y_speed, Qt.AlignmentFlag.AlignLeft)
        bars.attachAxis(x_axis)
        bars.attachAxis(y_speed)
        for whisker in self.whiskers + self.floors:
            chart.addSeries(whisker)
        y_err = QLogValueAxis()
        y_err.setBase(10)
        y_err.setRange(lo, hi)
        y_err.setMinorTickCount(0)
        y_err.setTitleText("error (log)")
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
        self.setChart(chart)
