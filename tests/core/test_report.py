"""Sharing what you see: the folded tree as SVG and text, and comparisons and checks as HTML and
Markdown reports, written from the CLI and re-read (the SVG parses, the HTML holds the numbers,
model strings are escaped)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fusion_core.cli import main
from fusion_core.compare.result import Comparison, KeyRow, ModuleRow, Side, ValueRow
from fusion_core.report import comparison_html, comparison_markdown, tree_rows, tree_svg, tree_text
from fusion_core.report.tree_image import Mark

SVG = "{http://www.w3.org/2000/svg}"


def _texts(path: Path) -> list[str]:
    return [t.text or "" for t in ET.parse(path).getroot().iter(f"{SVG}text")]


def test_a_2700_module_tree_folds_into_a_readable_image(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from fusion_core.model.tree import module_tree
    from fusion_core.patching import patch_lock

    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=208,
                         num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    import torch

    with patch_lock(), torch.device("meta"):
        tree = module_tree(LlamaForCausalLM(config))
    assert len(tree) > 2700
    marks = {"model.layers.0.self_attn": Mark("#1565c0", "fused by qkv")}
    rows = tree_rows(tree, marks)
    assert len(rows) == 20  # the 208 layers are one row with the first layer's modules below it
    fold = next(r for r in rows if r.count > 1)
    assert (fold.name, fold.count, fold.mark) == ("0–207", 208, marks["model.layers.0.self_attn"])  # a mark below
    path = tmp_path / "tree.svg"
    path.write_text(tree_svg(rows, "a <deep> model", "2,700 modules"))
    texts = _texts(path)
    assert "a <deep> model" in texts and "0–207 ×208" in texts and "fused by qkv" in texts  # title escaped, legend
    assert int(ET.parse(path).getroot().get("height")) < 600
    text = tree_text(rows)
    assert "    0–207 ×208  LlamaDecoderLayer" in text and "self_attn  LlamaAttention" in text
    assert "[fused by qkv]" in text


def test_cli_tree_svg_and_text(tmp_path, capsys):
    svg, txt = tmp_path / "t.svg", tmp_path / "t.txt"
    assert main(["tree", "demo:qwen2-vl", "--depth", "0", "--svg", str(svg), "--text", str(txt),
                 "--fusion", "patch_embeddings"]) == 0  # fmt: skip
    assert "fused by patch_embeddings" in _texts(svg) and "blocks  ModuleList" in txt.read_text()
    assert "[fused by patch_embeddings]" in txt.read_text()
    assert main(["tree", "demo:qwen2-vl", "--svg", str(tmp_path / "no" / "t.svg")]) == 2
    assert "cannot write" in capsys.readouterr().err


def _hostile() -> Comparison:
    name = "<script>alert(1)</script>|`x`"
    side = Side(name, "Cls", 2, 10, 1, True, 40)
    return Comparison(
        side, side,
        [ModuleRow("", "equal", "Cls", "Cls", 10, 10), ModuleRow("m|<b>", "added", None, "Lin<ear>", None, 4)],
        [],
        [KeyRow("w|<i>", "changed", "w|<i>", "w|<i>", (2, 2), (2, 2), "F32", "F16", changes=("dtype",))],
        [ValueRow("w|<i>", "different", "decoded", 4, 0.25, 0.125, 0.5, 1e-5, 1e-3)],
        messages=["note <img src=x>"],
    )  # fmt: skip


def test_reports_escape_model_strings_and_hold_the_numbers():
    c = _hostile()
    page = comparison_html(c)
    assert "<script>" not in page and "<img" not in page and "<b>" not in page and "Lin<ear>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "m|&lt;b&gt;" in page
    assert "25.0000%" in page and "0.125" in page and page.count("<svg") == 1
    ET.fromstring(page[page.index("<svg") : page.index("</svg>") + 6])  # the inline chart is valid XML
    md = comparison_markdown(c)
    assert "| added | m\\|\\<b\\> |" in md and "\\<script\\>" in md and "<script>" not in md
    assert md.count("\n| different | w\\|\\<i\\> | 25.0000% | 0.125 | 0.5 |") == 1


def test_check_report_from_the_cli(tmp_path, capsys):
    out = tmp_path / "check.html"
    args = ["check", "demo:llama", "--fusion", "qkv", "--no-upstream", "--repeats", "1", "--time-budget", "0"]
    assert main([*args, "--report", str(out)]) == 0
    page = out.read_text()
    assert "passed" in page and "model.layers.1.self_attn" in page and "<svg" in page
    assert "speed-up" in page and "LlamaAttention -&gt; FusedLlamaAttention" in page
    assert main([*args, "--report", str(tmp_path / "check.pdf")]) == 2
    assert "give a file ending in .html or .md" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".html", ".md"])
def test_diff_report_from_the_cli(llama_dir, tmp_path, suffix):
    out = tmp_path / f"diff{suffix}"
    assert main(["diff", str(llama_dir), str(llama_dir), "--values", "--report", str(out)]) == 0
    text = out.read_text()
    assert "equal" in text and "model.layers 0–1: equal" in text


def test_the_window_side_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, fusion_core.report, fusion_core.compare.result, fusion_core.host.ops; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False"]


def test_written_text_files_get_the_users_default_mode(tmp_path):
    """Reports and SVGs are written through a temporary sibling (mkstemp: 0600); the result has
    the mode any file the user writes gets (issue 33: the report was 0600, the PNG 0644)."""
    import os

    from fusion_core.report.tree_image import write_text

    old = os.umask(0o022)
    try:
        write_text(tmp_path / "report.html", "<p>ok</p>")
        os.umask(0o077)
        write_text(tmp_path / "private.md", "ok")
    finally:
        os.umask(old)
    assert (tmp_path / "report.html").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "private.md").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "report.html").read_text() == "<p>ok</p>"


def test_tree_images_use_the_apps_family_colours():
    """Issue 33: patch_embeddings was maroon in the app and blue in the saved tree image."""
    from fusion_core.families.registry import families
    from fusion_core.report.colours import family_colours
    from fusion_core.report.tree_image import plan_marks

    app = family_colours([s.name for s in families()])  # what fusion_gui.style gives the window
    marks = plan_marks({"a.patch_embed": "patch_embeddings", "b.self_attn": "qkv"}, ["patch_embeddings", "qkv"])
    assert marks["a.patch_embed"].colour == app["patch_embeddings"]
    assert marks["b.self_attn"].colour == app["qkv"]
    # enabling fewer families never recolours the others
    only = plan_marks({"b.self_attn": "qkv"}, ["qkv"])
    assert only["b.self_attn"].colour == app["qkv"]


@pytest.fixture(scope="module")
def vlm_check(qwen2_vl_dir, tmp_path_factory):
    """One real check of the Qwen2-VL demo (three families, a real image, 2 generated tokens,
    upstream parity on: it reports the missing linear_proj.weight and the leak)."""
    import numpy as np
    from PIL import Image

    from fusion_core import check

    folder = tmp_path_factory.mktemp("vlm")
    image = folder / "photo.png"
    Image.fromarray((np.indices((56, 84)).sum(0) * 5 % 256).astype("uint8")).convert("RGB").save(image)
    families = {"patch_embeddings": True, "qkv": True, "gate_up": True}
    return check(str(qwen2_vl_dir), families, image=str(image), generate=2, time_budget=0, repeats=1)


@pytest.mark.parametrize("suffix", [".html", ".md"])
def test_a_check_report_holds_what_the_run_found(vlm_check, tmp_path, suffix):
    """Issue 33, item 5: upstream parity, the milliseconds, the inputs and workload, the floors,
    layer-indexed names and the generation, as the run recorded them."""
    import html
    import os

    from fusion_core.report import write_report

    r = vlm_check
    old = os.umask(0o022)
    try:
        path = write_report(r, tmp_path / f"check{suffix}")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
    raw = path.read_text()
    text = html.unescape(raw) if suffix == ".html" else raw.replace("\\", "")  # Markdown escapes _ | [ ] < >
    u = r.upstream
    assert u is not None and not u.error and "DIFFERS from ours" in u.summary and u.leak
    assert "DIFFERS from ours" in text and "linear_proj.weight MISSING, randomly initialized" in text
    assert "model.visual.patch_embed.linear_proj.weight" in text and "LEAK: " in text
    e = r.end_to_end
    assert e is not None and e.ran and e.timing is not None
    for t in [e.timing, *(m.timing for m in r.modules)]:  # every timed row: ms, interval, A/A floor
        assert f"{t.original_ms:.3f}" in text and f"{t.fused_ms:.3f}" in text
        assert t.interval_text() in text and t.floor_text() in text
    assert "photo.png" in text and any(f"{f.size}" in text for f in e.inputs if f.modality == "text")
    assert "| dtype | float32 |" in text or "<td>dtype</td><td>float32</td>" in text
    assert "2 new tokens (dynamic cache)" in text and "0 s per timing" in text
    assert "rounding floor end to end: not measured (float32)" in text
    assert f"timing noise floor end to end (A/A): {e.timing.floor_text()}" in text
    assert "model.language_model.layers.0.self_attn" in text and "model.language_model.layers.1.self_attn" in text
    assert r.generation is not None and r.generation.line in text
    assert "upstream parity: not run" not in text
    if suffix == ".html":
        chart = raw[raw.index("speed-up, fused vs original") :]
        labels = _texts_of(chart[: chart.index("</svg>")])
        assert "model.language_model.…0.self_attn" in labels and "model.language_model.…1.self_attn" in labels


def _texts_of(svg_tail: str) -> list[str]:
    import re

    return re.findall(r'<text x="0" y="\d+">([^<]*)</text>', svg_tail)


def test_a_check_report_escapes_and_bounds_what_came_from_the_folder(vlm_check):
    """Names from a model folder are data: never markup, never unbounded; what did not run says why."""
    from dataclasses import replace

    from fusion_core.report import check_html, check_markdown
    from fusion_core.run.results import EndToEndCheck

    hostile = "<script>alert(1)</script>|`x`" + "y" * 5000
    r = replace(vlm_check, model=hostile, upstream=None)
    r.modules = [replace(m, path=f"model.<b>{i}</b>.layers.{i}.self_attn") for i, m in enumerate(r.modules)]
    r.end_to_end = EndToEndCheck("", "", "", {}, None, None, skipped="not run: <i>too big</i>")
    page, md = check_html(r), check_markdown(r)
    assert "<script>" not in page and "<b>" not in page and "<i>" not in page and "&lt;script&gt;" in page
    assert "y" * 1500 not in page and "y" * 1500 not in md
    assert "<script>" not in md and "\\<script\\>" in md and "\\<b\\>" in md
    ET.fromstring(page[page.index("<svg") : page.index("</svg>") + 6])
    for text in (page, md.replace("\\", "")):
        assert "upstream parity: not run: not asked" in text and "end to end: not run:" in text
