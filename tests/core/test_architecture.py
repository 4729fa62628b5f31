"""The engine's and the window's shape: no import cycles in either (imports inside functions
and under ``TYPE_CHECKING`` count), few top-level modules, and a lazy public API
(``import fusion_core.errors`` pulls in no torch and no plugin)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grimp

import fusion_core

TOP_LEVEL_LIMIT = 8


def _cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    nodes = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    edges = {m: sorted(n for n in graph.find_modules_directly_imported_by(m) if n in nodes) for m in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan, recursive: the graph is ~120 modules
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1 or v in edges[v]:
                found.append(sorted(scc))

    for v in nodes:
        if v not in index:
            visit(v)
    return found


def test_fusion_core_has_no_import_cycles() -> None:
    graph = grimp.build_graph("fusion_core", cache_dir=None)
    assert len(graph.modules) > 50  # the whole package was read, function-level imports included
    assert _cycles(graph, "fusion_core") == []


def test_fusion_gui_has_no_import_cycles() -> None:
    graph = grimp.build_graph("fusion_gui", cache_dir=None)
    assert {"fusion_gui.engine", "fusion_gui.jobs", "fusion_gui.panels.tree_panel"} <= graph.modules
    assert _cycles(graph, "fusion_gui") == []


def test_cycle_finder_finds_a_cycle() -> None:
    # the finder itself: fusion_core.__init__ imports lazily *inside a function*, which grimp counts
    graph = grimp.build_graph("fusion_core", cache_dir=None)
    graph.add_import(importer="fusion_core.errors", imported="fusion_core.progress")
    assert ["fusion_core.errors", "fusion_core.progress"] in _cycles(graph, "fusion_core")


def test_at_most_eight_top_level_modules() -> None:
    root = Path(fusion_core.__file__).parent
    modules = sorted(p.name for p in root.glob("*.py"))
    assert len(modules) <= TOP_LEVEL_LIMIT, modules


def test_importing_errors_loads_neither_torch_nor_plugins() -> None:
    code = (
        "import json, sys; import fusion_core.errors, fusion_core.progress; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'transformers', 'safetensors') or m.startswith('fusion_core.families'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_public_api_names_resolve() -> None:
    for name in fusion_core.__all__:
        assert getattr(fusion_core, name) is not None, name
    assert callable(fusion_core.export)  # the export sub-package is callable
    assert fusion_core.export.export is fusion_core.export.pipeline.export


def test_flag_names_live_only_in_the_cli() -> None:
    """No string of the engine outside ``cli/`` names a command-line flag (docstrings aside):
    engine errors name options (``OptionError.option``, ``FusionError.options``), the CLI flags."""
    import ast
    import re

    flag = re.compile(r"(?<![\w-])--[a-z][a-z-]+")
    root = Path(fusion_core.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "cli":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found += [f"{path.relative_to(root)}:{node.lineno}: {m}" for m in flag.findall(node.value)]
    assert found == []
