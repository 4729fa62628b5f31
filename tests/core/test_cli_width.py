"""The CLI fits 120 columns by default and folds repeated layers; ``--wide`` prints every row
and column whole (issue 33 item 7)."""

from __future__ import annotations

import pytest

from fusion_core.cli.main import main
from fusion_core.text import elide, fold_layers, table


def run(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def widest(out: str) -> int:
    """The longest line, in characters and in UTF-8 bytes (what ``awk`` counts) alike."""
    return max(max(len(line), len(line.encode())) for line in out.splitlines())


@pytest.mark.parametrize(
    "argv",
    [
        ("plan", "demo:qwen2-vl", "--fusion", "qkv", "--fusion", "patch_embeddings"),
        ("diff", "demo:qwen2-vl", "--fusion", "qkv", "--fusion", "patch_embeddings"),
        ("tree", "demo:qwen2-vl", "--fusion", "qkv"),
        ("plan", "arch:qwen2_5_vl", "--fusion", "qkv"),
        ("diff", "arch:qwen2_5_vl", "--fusion", "qkv"),
        ("tree", "arch:qwen2_5_vl", "--fusion", "qkv"),
    ],
)
def test_outputs_fit_120_columns(capsys, qwen2_vl_dir, argv):
    assert widest(run(capsys, *argv)) <= 120


def test_check_fits_120_columns(capsys, qwen2_vl_dir):
    argv = ["check", "demo:qwen2-vl", "--fusion", "patch_embeddings", "--no-upstream", "--time-budget", "0"]
    out = run(capsys, *argv)
    assert widest(out) <= 120
    assert "model.visual.patch_embed: PatchEmbed -> FusedPatchEmbed; verified by" in out  # the details below it


def test_plan_folds_repeated_layers_and_wide_restores_them(capsys):
    out = run(capsys, "plan", "arch:qwen2_5_vl", "--fusion", "qkv")
    assert len(out.splitlines()) <= 250
    assert "{0-79}" in out and "×80" in out and "{0-31}" in out  # the 80 text layers, the 32 vision blocks
    wide = run(capsys, "plan", "arch:qwen2_5_vl", "--fusion", "qkv", "--wide")
    assert "language_model.layers.79.self_attn.qkv_proj.weight" in wide and "{0-79}" not in wide
    assert len(wide.splitlines()) > 500 and widest(wide) > 120


def test_tree_folds_and_marks_the_fused_modules(capsys, qwen2_vl_dir):
    out = run(capsys, "tree", "demo:qwen2-vl", "--fusion", "qkv")
    lines = out.splitlines()
    assert lines[3].split()[-1] != "qkv"  # the root is not fused
    marked = [line.split() for line in lines if line.rstrip().endswith(" qkv")]
    assert [m[0] for m in marked] == ["self_attn"]  # layer 0's, standing for the folded layers
    assert any(line.split()[:2] == ["0-1", "×2"] and line.endswith("(qkv inside)") for line in lines)
    assert "'in model': instances of the row's class in the whole model" in out
    wide = run(capsys, "tree", "demo:qwen2-vl", "--fusion", "qkv", "--wide")
    assert len([line for line in wide.splitlines() if line.rstrip().endswith(" qkv")]) == 2


def test_fold_layers_and_table_width():
    rows = [
        (f"model.layers.{i}.self_attn.{p}_proj.weight", "64x64", f"model.layers.{i}.qkv")
        for i in range(28)
        for p in "qk"
    ]
    rows.append(("model.norm", "64", ""))
    folded = fold_layers(rows)
    assert folded == [
        ["model.layers.{0-27}.self_attn.q_proj.weight ×28", "64x64", "model.layers.{0-27}.qkv"],
        ["model.layers.{0-27}.self_attn.k_proj.weight ×28", "64x64", "model.layers.{0-27}.qkv"],
        ["model.norm", "64", ""],
    ]
    assert (
        fold_layers([("a.layers.0.x", "1"), ("a.layers.2.x", "1"), ("a.layers.3.x", "1")])[0][0]
        == "a.layers.{0,2-3}.x ×3"
    )
    text = table(
        [("model.language_model.layers.13.self_attn.o_proj.weight", "x" * 90)], ["key", "note"], width=80, mark="~"
    )
    assert widest(text) <= 80 and "model.language_model.~13.~o_proj.weight" in text
    assert elide("model.language_model.layers.{0-79}.self_attn ×80", 40, "~").endswith("{0-79}.self_attn ×80")
