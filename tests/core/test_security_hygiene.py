"""Issue 13, item 6: every error a user or a hostile folder can cause is one line, with the right exit code.

Usage errors exit 2, model and file errors exit 1; names from the folder are printed with
control characters escaped; config.json is parsed strictly (repeated keys, NaN/Infinity
refused, naming the key).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch

from fusion_core.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code: int, err: str, expected: int, *words: str) -> None:
    assert code == expected, err
    assert err.count("\n") == 1 and err.startswith("fusion-core: error: "), err
    assert "internal error" not in err and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    assert "\x1b" not in err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["check", "demo:qwen2-vl", "--fusion", "patch_embeddings", "--device", "bogus"],
            ["'bogus': not a torch device"],
        ),
        (["check", "demo:qwen2-vl", "--fusion", "patch_embeddings", "--device", "cuda:{n}"], ["cuda:"]),
        (["check", "demo:qwen2-vl", "--fusion", "patch_embeddings", "--seed", "9" * 30], ["out of range"]),
        (["check", "demo:qwen2-vl", "--fusion", "patch_embeddings", "--seed", "-1"], ["out of range"]),
        (
            ["export", "demo:qwen2-vl", "{tmp}/o", "--fusion", "patch_embeddings", "--max-shard-size", "9" * 400],
            ["too large"],
        ),
        (["--family-file", "{tmp}/missing.py", "families"], ["missing.py: no such file"]),
    ],
)
def test_usage_errors_exit_2(capsys, tmp_path: Path, argv: list[str], words: list[str]) -> None:
    n = torch.cuda.device_count()  # one past the last device: no such device on any machine
    code, _out, err = _run(capsys, *[a.format(tmp=tmp_path, n=n) for a in argv])
    _one_line(code, err, 2, *words)
    assert not (tmp_path / "o").exists()


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_invalid_generation_config(llama_dir: Path, tmp_path: Path, capsys) -> None:
    folder = _copy(llama_dir, tmp_path / "m")
    (folder / "generation_config.json").write_text('{"max_new_tokens": 20,,}')
    code, _out, err = _run(capsys, "load", str(folder))
    _one_line(code, err, 1, "generation_config.json", "not valid JSON")


def _raw_safetensors(path: Path, header_json: str) -> None:
    """A safetensors file whose header text is written verbatim (escapes included)."""
    text = header_json.encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"\0" * 4)


def test_lone_surrogate_tensor_key(llama_dir: Path, tmp_path: Path, capsys) -> None:
    folder = _copy(llama_dir, tmp_path / "m")
    _raw_safetensors(
        folder / "model.safetensors", '{"a\\ud800b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    )
    code, _out, err = _run(capsys, "plan", str(folder), "--fusion", "qkv")
    _one_line(code, err, 1, "lone surrogate", "a\\ud800b")


def test_escape_sequences_in_names_are_printed_escaped(llama_dir: Path, tmp_path: Path, capsys) -> None:
    folder = _copy(llama_dir, tmp_path / "m")
    key = "evil\x1b]0;owned\x07\x1b[2J"
    _raw_safetensors(
        folder / "model.safetensors", json.dumps({key: {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})
    )
    code, _out, err = _run(capsys, "tree", str(folder))
    _one_line(code, err, 1, "evil\\x1b]0;owned\\x07\\x1b[2J")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('"auto_map": {"AutoModel": "m.M"}, "auto_map": {}', ["'auto_map' appears twice"]),
        ('"rms_norm_eps": NaN', ["rms_norm_eps is NaN or Infinity"]),
        ('"rope_theta": Infinity', ["rope_theta is NaN or Infinity"]),
        ('"text": {"x": [1, -Infinity]}', ["text.x[1] is NaN or Infinity"]),
        ('"rope_theta": 1e999', ["rope_theta is NaN or Infinity"]),
    ],
)
def test_config_json_is_parsed_strictly(llama_dir: Path, tmp_path: Path, capsys, text: str, words: list[str]) -> None:
    folder = _copy(llama_dir, tmp_path / "m")
    config = (folder / "config.json").read_text().rstrip().rstrip("}")
    (folder / "config.json").write_text(config + ", " + text + "}")
    code, _out, err = _run(capsys, "tree", str(folder))
    _one_line(code, err, 1, "config.json", *words)
