"""A reviewed plan runs as reviewed (issue 31): ``plan --json > p.json``, then ``check --plan
p.json`` and ``export --plan p.json OUT`` run exactly its modules, and refuse a model that
changed since (one byte of a shard is enough), naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fusion_core.cli import main
from fusion_core.model.checkpoint import read_header

FAST = ["--no-upstream", "--repeats", "1", "--time-budget", "0"]


def _plan(capsys, model: str, *families: str) -> dict:
    assert main(["plan", model, *[a for f in families for a in ("--fusion", f)], "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _write(tmp_path: Path, doc: dict, name: str = "p.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_check_runs_exactly_the_planned_modules(llama_dir: Path, tmp_path: Path, capsys) -> None:
    doc = _plan(capsys, "demo:llama", "qkv", "gate_up")
    paths = {f"model.layers.{i}.{m}": fam for i in (0, 1) for m, fam in (("self_attn", "qkv"), ("mlp", "gate_up"))}
    assert doc["matched"] == paths and doc["identity"]["spec"] == "demo:llama"
    assert [f["name"] for f in doc["identity"]["files"]] == ["model.safetensors"]
    plan = _write(tmp_path, doc)
    assert main(["check", "--plan", str(plan), *FAST, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {m["module"]: m["family"] for m in result["modules"]} == paths
    assert list(result["fusion_config"]) == ["qkv", "gate_up"]


def test_a_byte_changed_after_planning_is_refused_naming_the_file(llama_dir: Path, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "model"
    shutil.copytree(llama_dir, folder)
    plan = _write(tmp_path, _plan(capsys, str(folder), "qkv"))
    weights = folder / "model.safetensors"
    offset = read_header(weights).data_start + 100  # a byte of a tensor, the size unchanged
    data = bytearray(weights.read_bytes())
    data[offset] ^= 0x01
    weights.write_bytes(bytes(data))
    assert main(["check", "--plan", str(plan), *FAST]) == 1
    err = capsys.readouterr().err
    assert "p.json: model.safetensors changed since the plan (its SHA-256 differs)" in err
    assert main(["export", "--plan", str(plan), str(tmp_path / "out")]) == 1
    assert "model.safetensors changed since the plan" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_moved_model_is_checked_where_it_is_now(llama_dir: Path, tmp_path: Path, capsys) -> None:
    """CI: the plan names the folder it was made from; MODEL says where the same model is now."""
    first, moved = tmp_path / "first", tmp_path / "moved"
    shutil.copytree(llama_dir, first)
    plan = _write(tmp_path, _plan(capsys, str(first), "gate_up"))
    first.rename(moved)
    assert main(["check", str(moved), "--plan", str(plan), *FAST, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(m["module"] for m in result["modules"]) == ["model.layers.0.mlp", "model.layers.1.mlp"]
    out = tmp_path / "exported"
    assert main(["export", str(moved), str(out), "--plan", str(plan), "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["verification"]["outputs"]["passed"] is True and (out / "model.safetensors").is_file()


def test_export_plan_out(llama_dir: Path, tmp_path: Path, capsys) -> None:
    plan = _write(tmp_path, _plan(capsys, "demo:llama", "qkv"))
    out = tmp_path / "out"
    assert main(["export", "--plan", str(plan), str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["layout"] == "fused" and result["verification"]["outputs"]["passed"] is True
    config = json.loads((out / "config.json").read_text())
    assert list(config["fusion_config"]) == ["qkv"]


def test_a_plan_whose_modules_no_longer_match_is_refused(llama_dir: Path, tmp_path: Path, capsys) -> None:
    doc = _plan(capsys, "demo:llama", "qkv")
    del doc["matched"]["model.layers.1.self_attn"]  # the plan someone reviewed listed one module
    plan = _write(tmp_path, doc)
    assert main(["check", "--plan", str(plan), *FAST]) == 1
    err = capsys.readouterr().err
    assert "the families no longer match the planned modules (newly matched: model.layers.1.self_attn)" in err


@pytest.mark.parametrize(
    ("content", "said"),
    [("{}", "is not a plan file written by `fusion-core plan` in JSON"), ("not json", "is not a plan file (not JSON")],
)
def test_not_a_plan_file_is_a_usage_error(tmp_path: Path, capsys, content: str, said: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(content)
    assert main(["check", "--plan", str(path)]) == 2
    assert said in capsys.readouterr().err


def test_plan_and_fusion_together_are_a_usage_error(llama_dir: Path, tmp_path: Path, capsys) -> None:
    plan = _write(tmp_path, _plan(capsys, "demo:llama", "qkv"))
    assert main(["check", "--plan", str(plan), "--fusion", "gate_up"]) == 2
    assert "--plan already says which families run; drop --fusion" in capsys.readouterr().err


def test_a_relative_folder_is_recorded_by_its_absolute_path(
    llama_dir: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan may be checked from another working directory (a CI step): the folder is absolute."""
    shutil.copytree(llama_dir, tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    doc = _plan(capsys, "model", "qkv")
    assert doc["identity"]["spec"] == str((tmp_path / "model").resolve())
    plan = _write(tmp_path, doc)
    monkeypatch.chdir(llama_dir)
    assert main(["check", "--plan", str(plan), *FAST]) == 0


def test_export_plan_without_out_says_what_to_give(llama_dir: Path, tmp_path: Path, capsys) -> None:
    plan = _write(tmp_path, _plan(capsys, "demo:llama", "qkv"))
    assert main(["export", "--plan", str(plan)]) == 2
    assert "give MODEL and OUT, or --plan PLAN.json OUT" in capsys.readouterr().err


def test_the_engine_runs_the_plan_it_is_sent_and_refuses_one_that_is_not_its_model(llama_dir: Path, tmp_path: Path):
    """The window's plan (PlanData, weights by size) resolves on the engine's model to the plan
    it shows; a weight file that changed since, or a plan edited to other options or keys, is
    refused, naming what differs."""
    import dataclasses

    from fusion_core.errors import PlanMismatchError
    from fusion_core.host import wire
    from fusion_core.plan.fusion_plan import inspect_model
    from fusion_core.plan.plan_data import PlanData
    from fusion_core.plan.plan_file import preview_plan, resolve_plan

    shutil.copytree(llama_dir, tmp_path / "model")
    insp = inspect_model(str(tmp_path / "model"))
    sent = wire.from_plain(PlanData, json.loads(json.dumps(wire.to_plain(preview_plan(insp, {"qkv": True})))))
    assert [f.sha256 for f in sent.identity.files] == [""]  # sizes only: no 16 GB hashed per preview
    plan = resolve_plan(sent, insp)
    assert plan.matched_paths == sent.matched == {f"model.layers.{i}.self_attn": "qkv" for i in (0, 1)}
    edited = dataclasses.replace(sent, transforms=sent.transforms[1:])
    with pytest.raises(PlanMismatchError, match="the plan's transforms differ"):
        resolve_plan(edited, insp)
    with pytest.raises(PlanMismatchError, match="no longer match the planned modules"):
        resolve_plan(dataclasses.replace(sent, matched={}), insp)
    with (tmp_path / "model" / "model.safetensors").open("ab") as f:
        f.write(b"\0")
    with pytest.raises(PlanMismatchError, match=r"model\.safetensors changed since the plan"):
        resolve_plan(sent, insp)
