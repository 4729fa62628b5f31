"""Share what you see: the module tree as SVG or indented text, checks and comparisons as
self-contained HTML or Markdown reports.

Plain text in, files out: no Qt, no torch. Every string that comes from a model folder
(names, classes, keys, messages) is escaped for the format it goes into (HTML entities,
Markdown table cells, XML text). The window renders PNGs from the same SVG.
"""

from __future__ import annotations

from .documents import check_html, check_markdown, comparison_html, comparison_markdown, write_report
from .tree_image import Mark, TreeRow, plan_marks, tree_rows, tree_svg, tree_text

__all__ = [
    "Mark",
    "TreeRow",
    "check_html",
    "check_markdown",
    "comparison_html",
    "comparison_markdown",
    "plan_marks",
    "tree_rows",
    "tree_svg",
    "tree_text",
    "write_report",
]
