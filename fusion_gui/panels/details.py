"""Details of the selected module: path, class (and fused class), tensors, per-family verdicts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QTextBrowser, QVBoxLayout, QWidget

from .. import style
from ..format import human_count, rich, shape_text

if TYPE_CHECKING:
    from fusion_core.model.tree import ModuleNode

    from ..state import AppState


class DetailsPanel(QWidget):
    """A read-only rich-text view of the current module."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.browser = QTextBrowser()
        self.browser.setOpenLinks(False)
        self.browser.anchorClicked.connect(lambda url: state.reveal(url.toString().removeprefix("module:")))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.browser)
        state.module_selected.connect(self._on_module_selected)
        state.fusions_changed.connect(self._on_fusions_changed)
        state.model_changed.connect(lambda _insp: self.show_path(""))
        self.browser.setHtml("<p style='color:gray'>Select a module in the tree.</p>")

    def _on_module_selected(self, path: str) -> None:
        self.show_path(path)

    def _on_fusions_changed(self) -> None:
        self.show_path(self.state.selected_path)

    def text(self) -> str:
        return self.browser.toPlainText()

    def show_path(self, path: str) -> None:
        insp = self.state.inspection
        node = insp.tree.by_path.get(path) if insp is not None else None
        if node is None:
            self.browser.setHtml("<p style='color:gray'>Select a module in the tree.</p>")
            return
        self.browser.setHtml(self._html(node))

    def _html(self, node: ModuleNode) -> str:
        e = rich
        parts = [f"<h3 style='margin:0'>{e(node.path or node.name)}</h3>"]
        fused = self._fused_class(node.path)
        cls = f"<code>{e(node.class_qualname)}</code>"
        if fused:
            cls += f" &nbsp;→&nbsp; <b style='color:{style.PASS}'>{e(fused)}</b> (when fused)"
        parts.append(
            f"<p>{cls}<br>kind: {e(node.kind)}; {node.same_class_count} instance(s) of this class in the model; "
        )
        parts.append(
            f"parameters: {human_count(node.total_params)} total, {human_count(node.own_params)} own; "
            f"{len(node.children)} child module(s)</p>"
        )
        tensors = [("parameter", t) for t in node.params] + [("buffer", t) for t in node.buffers]
        if tensors:
            rows = "".join(
                f"<tr><td>{e(t.name)}</td><td>{kind}</td><td>{e(shape_text(t.shape))}</td>"
                f"<td>{e(t.dtype)}</td><td align='right'>{human_count(t.numel)}</td></tr>"
                for kind, t in tensors
            )
            parts.append(
                "<table cellspacing='0' cellpadding='3' border='1' style='border-collapse:collapse'>"
                "<tr><th align='left'>tensor</th><th align='left'>kind</th><th align='left'>shape</th>"
                f"<th align='left'>dtype</th><th align='right'>elements</th></tr>{rows}</table>"
            )
        else:
            parts.append("<p style='color:gray'>No tensors of its own.</p>")
        parts.append("<h4 style='margin-bottom:2px'>Fusion families</h4><ul style='margin-top:0'>")
        for name in self.state.family_order:
            parts.append(f"<li><b>{e(name)}</b>{'' if name in self.state.enabled else ' (disabled)'}: ")
            parts.append(self._verdict(name, node.path) + "</li>")
        parts.append("</ul>")
        return "".join(parts)

    def _fused_class(self, path: str) -> str:
        for name in self.state.family_order:
            if name not in self.state.enabled:
                continue
            d = self.state.discovery(name)
            for m in d.matches if d else ():
                if m.path == path:
                    return m.fused_class_name
        return ""

    def _verdict(self, family: str, path: str) -> str:
        e = rich
        d = self.state.discovery(family)
        if d is None:
            return ""
        for m in d.matches:
            if m.path == path:
                why = f" ({e(m.reason)})" if m.reason else ""
                return f"<span style='color:{style.PASS}'>replaced by {e(m.fused_class_name)}</span>{why}"
        for r in d.rejected:
            if r.path == path:
                fused_by = self._fused_by_other(family, path)
                if fused_by:
                    return f"not this family ({e(r.reason)}); <span style='color:{style.PASS}'>{fused_by}</span>"
                return f"<span style='color:{style.REJECTED}'>rejected</span>: {e(r.reason)}"
        below = [m.path for m in d.matches if m.path.startswith(f"{path}.") or not path]
        if below:
            links = ", ".join(f"<a href='module:{e(p)}'>{e(p)}</a>" for p in below[:5])
            more = f" and {len(below) - 5} more" if len(below) > 5 else ""
            return f"not a candidate; fuses {len(below)} module(s) below: {links}{more}"
        for r in getattr(d, "near_misses", None) or []:
            if r.path == path:
                why = r.reason.removeprefix("not a candidate: ")  # discovery's reasons carry the words already
                return f"<span style='color:{style.REJECTED}'>not a candidate</span>: {e(why)}"
        fused_by = self._fused_by_other(family, path)
        if fused_by:  # another family fuses this module or one around it: this one has nothing to say
            return f"<span style='color:gray'>does not apply</span>: this module is {fused_by}"
        return "<span style='color:gray'>not a candidate</span>"

    def _fused_by_other(self, family: str, path: str) -> str:
        """'fused by F' / 'fused as part of P by F' when another enabled family replaces it or an ancestor."""
        for name in self.state.family_order:
            if name == family or name not in self.state.enabled:
                continue
            d = self.state.discovery(name)
            for m in d.matches if d else ():
                if m.path == path:
                    return f"fused by {rich(name)}"
                if path.startswith(f"{m.path}."):
                    return f"fused as part of {rich(m.path)} by {rich(name)}"
        return ""
