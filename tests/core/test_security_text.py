"""Issue 20, items 2 and 6: names from a folder are quoted short and printed escaped.

A name in a message is cut by :func:`fusion_core.errors.quoted` (``'aaaa…' (N characters)``),
so a 20 MB key in an index is a short line, not 20 MB of terminal or a frozen window.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fusion_core.cli.main import main
from fusion_core.errors import QUOTE_LIMIT, quoted


def test_quoted_cuts_with_the_full_length() -> None:
    assert quoted("model.safetensors") == "'model.safetensors'"
    assert quoted("a" * 50_000_000) == f"'{'a' * QUOTE_LIMIT}…' (50,000,000 characters)"
    assert quoted("x\x1b]0;T\x07") == "'x\\x1b]0;T\\x07'"  # escaped like repr
    assert quoted(list(range(10**6))) == "<a list of 1,000,000 items>"


def test_twenty_megabyte_key_is_a_short_line(llama_dir: Path, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "key"
    folder.mkdir()
    shutil.copy(llama_dir / "config.json", folder / "config.json")
    shutil.copy(llama_dir / "model.safetensors", folder / "model-00001-of-00001.safetensors")
    key = "k" * 20_000_000
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {key: "model-00001-of-00001.safetensors"}})
    )
    code = main(["plan", str(folder)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and len(err) < 1_000, err[:2000]
    assert "(20,000,000 characters)" in err and "kkkk…" in err, err


_ESC = "\x1b]0;TITLE\x07\x1b[2J"  # retitles and clears the terminal when printed raw


@pytest.fixture(scope="module")
def escaping_folder(llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Llama demo in a folder named with escapes, its config's ``auto_map`` and a hidden file too."""
    folder = tmp_path_factory.mktemp("esc") / f"m{_ESC}x"
    folder.mkdir()
    for p in llama_dir.iterdir():
        shutil.copy(p, folder / p.name)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": f"mod{_ESC}.Cls"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / f".x{_ESC}").write_text("x")  # export: "not copied: NAME: hidden entry"
    return folder


@pytest.mark.parametrize("command", ["plan", "load", "diff", "export"])
def test_escape_sequences_from_the_folder_are_printed_escaped(
    escaping_folder: Path, tmp_path: Path, capsys, command: str
) -> None:
    argv = ["--trust-remote-code", command, str(escaping_folder), "--fusion", "qkv"]
    if command == "export":  # --trust-remote-code export of an auto_map folder works (item 7)
        argv[3:3] = [str(tmp_path / "out"), "--no-verify-outputs"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "\\x1b]0;TITLE\\x07" in out + err  # the name is there, escaped
    if command == "export":
        assert f"not copied: .x{_ESC.encode('unicode_escape').decode()}: hidden entry" in out
        assert (tmp_path / "out" / "model.safetensors").is_file()
