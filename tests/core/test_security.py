"""Issue 6: an untrusted model folder is data, never code, and hostile files fail safely.

Every case is a real hostile folder written by the test (tests/core/_hostile.py). Custom
code and pickles write a marker file when executed: the marker's absence proves they
were not run. The CLI must end each case with exit 1 and one line on stderr.
"""

from __future__ import annotations

import ast
import json
import os
import runpy
from pathlib import Path

import pytest
import torch
from _hostile import (
    copy_model,
    evil_pickle_checkpoint,
    remote_code_folder,
    sharded_model,
    tiled,
    write_index,
    write_safetensors,
)

from fusion_core import inspect_model, resolve
from fusion_core.cli.main import main
from fusion_core.errors import CheckpointError, ConfigError, ExportError, RemoteCodeError, UnsafeModelError

REPO = Path(__file__).resolve().parents[2]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 1, err
    assert err.count("\n") == 1 and err.startswith("fusion-core: error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in err, err


# --- 1. remote code ----------------------------------------------------------------------


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "EXECUTED"


@pytest.fixture
def remote(llama_dir, tmp_path, marker) -> Path:
    return remote_code_folder(tmp_path / "remote", marker, llama_dir)


def test_remote_code_payload_is_live(llama_dir, tmp_path):
    """The hostile files are real: importing them writes their marker."""
    live = tmp_path / "live-marker"
    folder = remote_code_folder(tmp_path / "live", live, llama_dir)
    runpy.run_path(str(folder / "modeling_x.py"))
    assert live.exists()


def test_remote_code_is_refused_by_default(remote, marker, capsys):
    with pytest.raises(RemoteCodeError) as info:
        inspect_model(str(remote))
    assert info.value.files == ["configuration_x.py", "modeling_x.py"]
    code, out, err = run(capsys, "tree", str(remote))
    assert_one_line_error(code, err, "custom code (configuration_x.py, modeling_x.py)", "--trust-remote-code")
    assert out == ""
    code, _, err = run(capsys, "plan", str(remote), "--fusion", "patch_embeddings")
    assert_one_line_error(code, err, "--trust-remote-code")
    assert not marker.exists()


def test_trust_remote_code_opens_with_the_builtin_class_and_runs_nothing(remote, marker, capsys):
    code, out, err = run(capsys, "--trust-remote-code", "tree", str(remote), "--depth", "1")
    assert code == 0, err
    assert "LlamaForCausalLM" in out
    source = resolve(str(remote), trust_remote_code=True)
    assert source.model_class.__name__ == "LlamaForCausalLM"
    assert any("was not run" in note for note in source.notes)
    assert not marker.exists()


def test_trust_remote_code_with_an_unknown_model_type_still_runs_nothing(llama_dir, tmp_path, marker, capsys):
    folder = remote_code_folder(tmp_path / "custom", marker, llama_dir, model_type="x_custom_model")
    code, _, err = run(capsys, "--trust-remote-code", "tree", str(folder))
    assert_one_line_error(code, err, "unknown model_type 'x_custom_model'", "never run")
    assert not marker.exists()


def test_loading_without_the_opt_in_is_refused(remote, marker):
    from fusion_core.api import load

    with pytest.raises(RemoteCodeError):
        load(str(remote))
    assert not marker.exists()


def test_loading_with_the_opt_in_runs_no_code_from_the_folder(remote, marker):
    from fusion_core.api import load

    load(str(remote), trust_remote_code=True)
    assert not marker.exists()


# --- 2. pickle checkpoints ----------------------------------------------------------------


@pytest.fixture
def pickled(llama_dir, tmp_path, marker) -> Path:
    folder = copy_model(llama_dir, tmp_path / "pickled", weights=False)
    evil_pickle_checkpoint(folder / "pytorch_model.bin", marker)
    return folder


def test_pickle_payload_is_live(tmp_path):
    live = tmp_path / "live-marker"
    path = evil_pickle_checkpoint(tmp_path / "live.bin", live)
    with pytest.raises(Exception):  # noqa: B017 - the safe loader refuses it, whatever the type
        torch.load(path, weights_only=True)
    assert not live.exists()
    torch.load(path, weights_only=False)  # what an unsafe loader would do
    assert live.exists()


def test_pickle_only_folder_is_refused_and_never_unpickled(pickled, marker, capsys):
    with pytest.raises(UnsafeModelError, match=r"only pickle weights \(pytorch_model\.bin\).*never read"):
        resolve(str(pickled))
    for argv in (["tree", str(pickled)], ["plan", str(pickled), "--fusion", "patch_embeddings"]):
        code, out, err = run(capsys, *argv)
        assert_one_line_error(code, err, "pytorch_model.bin", "safetensors")
        assert out == ""
    from fusion_core.api import load

    with pytest.raises(UnsafeModelError):
        load(str(pickled))
    assert not marker.exists()


@pytest.mark.parametrize("name", ["pytorch_model-00001-of-00002.bin", "model.pt", "consolidated.00.pth", "last.ckpt"])
def test_other_pickle_names_are_refused(llama_dir, tmp_path, marker, name):
    folder = copy_model(llama_dir, tmp_path / "pickled", weights=False)
    evil_pickle_checkpoint(folder / name, marker)
    with pytest.raises(UnsafeModelError, match=name.replace(".", r"\.")):
        resolve(str(folder))
    assert not marker.exists()


def test_pickle_next_to_safetensors_is_ignored_by_inspect_and_load(llama_dir, tmp_path, marker):
    folder = copy_model(llama_dir, tmp_path / "both")
    evil_pickle_checkpoint(folder / "pytorch_model.bin", marker)
    from fusion_core.api import load

    assert inspect_model(str(folder)).source.checkpoint.files == ["model.safetensors"]
    load(str(folder))
    assert not marker.exists()


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            yield node, owner, name


def test_no_code_path_unpickles():
    """Static guard: no pickle-family import, and torch.load only with weights_only=True."""
    banned = {"pickle", "cPickle", "dill", "joblib", "marshal", "shelve", "cloudpickle"}
    problems = []
    for package in ("fusion_core", "fusion_gui"):
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module.split(".")[0]]
                if banned & set(names):
                    problems.append(f"{path.relative_to(REPO)}:{node.lineno}: imports {names}")
            for node, owner, name in _calls(tree):
                if owner == "torch" and name == "load":
                    safe = any(
                        k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                        for k in node.keywords
                    )
                    if not safe:
                        problems.append(f"{path.relative_to(REPO)}:{node.lineno}: torch.load without weights_only=True")
    assert problems == []


# --- 3. shard paths through the CLI -------------------------------------------------------


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink"])
def test_index_entries_leaving_the_folder_via_cli(llama_dir, tmp_path, capsys, kind):
    folder = sharded_model(llama_dir, tmp_path / "sharded")
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    key = sorted(weight_map)[0]
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes((folder / weight_map[key]).read_bytes())
    if kind == "absolute":
        weight_map[key] = str(outside)
    elif kind == "dotdot":
        weight_map[key] = "../outside.safetensors"
    else:
        (folder / "shared.safetensors").symlink_to(outside)
        weight_map[key] = "shared.safetensors"
    write_index(folder, weight_map)
    code, out, err = run(capsys, "tree", str(folder))
    assert_one_line_error(code, err, f"weight_map entry {key!r}", "refused")
    assert out == ""


# --- 4. hostile headers through the CLI ---------------------------------------------------


@pytest.mark.parametrize(
    ("header", "data", "length", "words"),
    [
        (b"{}", 0, 2**63, ["header length", "past the end of the file"]),
        (
            {"model.embed_tokens.weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
            | {"lm_head.weight": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
            12,
            None,
            ["overlap", "'lm_head.weight'"],
        ),
        ({"w": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 8]}}, 8, None, ["'w'", "unknown dtype 'Q9'"]),
        (
            tiled(("w", "F32", [3]))[0] | {"w": {"dtype": "F32", "shape": [9], "data_offsets": [0, 12]}},
            12,
            None,
            ["'w'"],
        ),
        (b"\x89PNG not json", 0, None, ["header is not valid JSON"]),
    ],
    ids=["length", "overlap", "dtype", "shape", "not-json"],
)
def test_hostile_headers_via_cli(llama_dir, tmp_path, capsys, header, data, length, words):
    folder = copy_model(llama_dir, tmp_path / "hostile", weights=False)
    write_safetensors(folder / "model.safetensors", header, data, length)
    code, _, err = run(capsys, "plan", str(folder), "--fusion", "patch_embeddings")
    assert_one_line_error(code, err, "model.safetensors", *words)


# --- 5. configs that would freeze the app -------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["layers", "nested", "huge", "sub-config-layers"])
def test_config_bombs_via_cli(llama_dir, tmp_path, capsys, kind):
    folder = copy_model(llama_dir, tmp_path / "bomb")
    config = json.loads((folder / "config.json").read_text())
    path = folder / "config.json"
    if kind == "layers":
        config["num_hidden_layers"] = 10**7
        path.write_text(json.dumps(config))
        words = ["num_hidden_layers = 10000000", "more than 10000 layers"]
    elif kind == "sub-config-layers":
        config["text_config"] = {"num_hidden_layers": 10**9}
        path.write_text(json.dumps(config))
        words = ["text_config.num_hidden_layers"]
    elif kind == "nested":
        path.write_text('{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
        words = ["nested too deeply"]
    else:
        with open(path, "wb") as f:
            f.truncate(64 * 1024 * 1024)
        words = ["byte limit"]
    code, _, err = run(capsys, "tree", str(folder))
    assert_one_line_error(code, err, "config.json", *words)


def test_config_error_types():
    with pytest.raises(ConfigError):
        resolve("arch:")


# --- export: links never lead out of the source or the destination ----------------------


def test_export_follows_no_link_out_of_source_or_destination(qwen2_vl_dir, tmp_path):
    from fusion_core import export

    src = copy_model(qwen2_vl_dir, tmp_path / "src")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "key.txt").write_text("private\n")
    (src / "sub").mkdir()
    (src / "tokenizer.json").symlink_to(Path("sub") / ".." / ".." / "secrets" / "key.txt")  # relative escape
    (src / "vocab.json").symlink_to(secrets / "key.txt")  # absolute escape
    (src / "merges.txt").symlink_to(Path("sub") / "gone.txt")  # broken
    os.mkfifo(src / "added_tokens.json")  # reading or copying a pipe would block forever
    # side files transformers reads must be readable regular files: the folder is refused when opened
    with pytest.raises(ConfigError, match=r"added_tokens\.json: not a regular file"):
        export(src, tmp_path / "out", {"patch_embeddings": True}, verify_outputs=False)
    (src / "added_tokens.json").unlink()
    with pytest.raises(ConfigError, match=r"merges\.txt: cannot be read \(a broken link\?\)"):
        export(src, tmp_path / "out", {"patch_embeddings": True}, verify_outputs=False)
    (src / "merges.txt").unlink()
    assert not (tmp_path / "out").exists()
    result = export(src, tmp_path / "out", {"patch_embeddings": True}, verify_outputs=False)
    out = tmp_path / "out"
    for name in ("tokenizer.json", "vocab.json"):  # links out of the folder: never copied
        assert not (out / name).exists(), name
        assert name in dict(result.skipped_files)
    assert all("private" not in p.read_text(errors="ignore") for p in out.iterdir() if p.suffix != ".safetensors")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "dest-link").symlink_to(elsewhere)
    with pytest.raises(ExportError, match="symbolic link"):
        export(src, tmp_path / "dest-link", {"patch_embeddings": True}, verify_outputs=False, overwrite=True)
    assert list(elsewhere.iterdir()) == []


def test_checkpoint_error_for_shard_linked_to_a_folder(llama_dir, tmp_path):
    folder = copy_model(llama_dir, tmp_path / "m", weights=False)
    (folder / "model.safetensors").mkdir()
    with pytest.raises(CheckpointError, match="is a folder"):
        resolve(str(folder))
