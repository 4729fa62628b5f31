"""``fusion-core`` inspection commands: tables, stable JSON, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fusion_core.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_demo_table(capsys, qwen2_vl_dir):
    code, out, err = run(capsys, "plan", str(qwen2_vl_dir), "--fusion", "patch_embeddings")
    assert code == 0 and err == ""
    assert "model.visual.patch_embed" in out and "FusedPatchEmbed" in out
    assert "32x3x2x14x14" in out and "32x1176" in out and "conv3d_to_linear" in out


def test_plan_json(capsys, qwen2_vl_dir):
    code, out, _ = run(capsys, "plan", str(qwen2_vl_dir), "--fusion", "patch_embeddings", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["families"][0]["matches"][0]["module"] == "model.visual.patch_embed"
    assert data["patch_mapping"] == {"PatchEmbed": "FusedPatchEmbed"}
    [row] = data["transforms"]
    assert (row["source_shape"], row["target_shape"]) == ([32, 3, 2, 14, 14], [32, 1176])
    assert data["reverse_transforms"][0]["op"] == "linear_to_conv3d"


def test_nothing_fusable_exits_0_with_the_message(capsys):
    code, out, err = run(capsys, "plan", "arch:llama", "--fusion", "patch_embeddings")
    assert code == 0 and err == ""
    assert "no module of LlamaModel can be fused by 'patch_embeddings'" in out


def test_tree_depth_and_json(capsys, qwen2_vl_dir):
    code, out, _ = run(capsys, "tree", str(qwen2_vl_dir), "--depth", "1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"{qwen2_vl_dir.name}: Qwen2VLForConditionalGeneration")
    body = [line.split()[0] for line in lines[3 : lines.index("")]]  # the table, before its notes
    assert body == ["Qwen2VLForConditionalGeneration", "model", "lm_head"]
    assert "'in model': instances of the row's class in the whole model" in out
    code, out, _ = run(capsys, "tree", str(qwen2_vl_dir), "--json", "--depth", "2")
    data = json.loads(out)
    assert data["model_class"] == "Qwen2VLForConditionalGeneration"
    assert data["total_params"] == data["tree"]["total_params"]
    model = data["tree"]["children"][0]
    assert [c["path"] for c in model["children"]] == ["model.visual", "model.language_model"]
    assert model["children"][0]["children"] is None


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (["plan", "arch:llama", "--fusion", "nope"], 2, "unknown fusion family 'nope'; known: "),
        (["plan", "arch:llama"], 2, "--fusion"),
        (["tree", "arch:llama", "--depth", "x"], 2, "invalid int value"),
        (["tree", "arch:llama", "--depth", "-1"], 2, "--depth"),
        (["frobnicate"], 2, "invalid choice"),
        (["tree", "arch:no_such_type"], 1, "unknown model_type"),
        (["coverage", "--only", "no_such_type", "--jobs", "0"], 2, "unknown model type"),
        (["coverage", "--family", "nope", "--jobs", "0"], 2, "unknown fusion family"),
        (["demo", "no-such-demo"], 1, "unknown demo"),
    ],
)
def test_errors_are_one_line_with_the_right_exit_code(capsys, argv, code, needle):
    got, out, err = run(capsys, *argv)
    assert got == code
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("fusion-core")
    assert needle in err
    assert "Traceback" not in err


def test_model_file_errors_exit_1(capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(capsys, "tree", str(empty))
    assert code == 1 and "no config.json" in err and err.count("\n") == 1
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    code, _, err = run(capsys, "plan", str(bad), "--fusion", "patch_embeddings")
    assert code == 1 and "not valid JSON" in err and err.count("\n") == 1


def test_debug_shows_the_traceback(tmp_path):
    from fusion_core import ModelSourceError

    with pytest.raises(ModelSourceError):
        main(["--debug", "tree", str(tmp_path)])


def test_help_returns_0(capsys):
    assert main(["--help"]) == 0
    assert "coverage" in capsys.readouterr().out


def test_families_and_demo(capsys, qwen2_vl_dir):
    code, out, _ = run(capsys, "families", "--json")
    assert code == 0 and "patch_embeddings" in [f["name"] for f in json.loads(out)]
    code, out, _ = run(capsys, "demo", "qwen2-vl")
    assert code == 0 and out.strip() == str(qwen2_vl_dir)
    code, out, _ = run(capsys, "demo", "--list")
    assert code == 0 and "qwen2-vl" in out and "llama" in out


def test_coverage_in_process(capsys):
    code, out, _ = run(capsys, "coverage", "--only", "vivit", "--jobs", "0", "--family", "patch_embeddings", "--json")
    data = json.loads(out)
    assert code == 0 and data["model_types"] == 1
    [fusable] = data["families"][0]["fusable"]
    assert fusable["model_type"] == "vivit"
    assert fusable["classes"][0]["modules"] == ["embeddings.patch_embeddings"]


@pytest.mark.slow
def test_python_dash_m_in_a_fresh_process(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "fusion_core", "plan", str(tmp_path), "--fusion", "patch_embeddings"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert result.stdout == "" and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["plan", "diff"])
def test_comma_separated_fusions_get_the_hint_to_repeat_the_flag(capsys, command):
    code = main([command, "demo:llama", "--fusion", "qkv,gate_up"])
    err = capsys.readouterr().err
    assert code == 2
    assert "one family per --fusion; to enable several, repeat it: --fusion qkv --fusion gate_up" in err
