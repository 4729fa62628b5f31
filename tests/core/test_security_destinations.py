"""Issue 13, item 3: an export never replaces a folder that is not a model export.

``fusion-core export demo:qwen2-vl "" --overwrite`` once replaced the working directory
(an unset ``$OUT`` in a script). Each refused destination ends in one line, exit 2 for
the names that can never be a destination, and leaves every file where it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _export_helpers import folder_digest

from fusion_core.cli.main import main


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with a user's files in it, and a home folder of its own."""
    work = tmp_path / "home" / "code" / "project"
    (work / "src").mkdir(parents=True)
    (work / "notes.txt").write_text("my notes\n")
    (work / "src" / "main.py").write_text("print('hi')\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(work)
    return work


def _export(capsys: pytest.CaptureFixture[str], out: str, *extra: str) -> tuple[int, str]:
    code = main(["export", "demo:qwen2-vl", out, "--fusion", "patch_embeddings", "--no-verify-outputs", *extra])
    _out, err = capsys.readouterr()
    return code, err


@pytest.mark.parametrize(
    ("out", "words"),
    [
        ("", "destination is empty"),
        ("  ", "destination is empty"),
        (".", "is the working directory"),
        ("/", "root of the file system"),
        ("~", "is your home folder"),
        ("..", "contains the working directory"),
        ("{work}", "is the working directory"),
        ("{work}/..", "contains the working directory"),
    ],
)
def test_never_a_destination(workdir: Path, capsys, out: str, words: str) -> None:
    before = folder_digest(workdir.parent)
    code, err = _export(capsys, out.format(work=workdir), "--overwrite")
    assert code == 2, err
    assert err.count("\n") == 1 and words in err, err
    assert folder_digest(workdir.parent) == before


def test_ancestor_of_the_source_is_refused(qwen2_vl_dir: Path, workdir: Path, capsys) -> None:
    code, err = _export(capsys, str(qwen2_vl_dir.parent), "--overwrite")
    assert code == 2 and "contains the source model folder" in err, err
    assert (qwen2_vl_dir / "config.json").is_file()


def test_overwrite_replaces_only_an_export(workdir: Path, tmp_path: Path, capsys) -> None:
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8 not really a photo")
    code, err = _export(capsys, str(other), "--overwrite")
    assert code == 1 and "holds no model export" in err and err.count("\n") == 1, err
    assert (other / "cat.jpg").read_bytes() == b"\xff\xd8 not really a photo"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _export(capsys, str(empty), "--overwrite")[0] == 0  # an empty folder is fine
    (empty / "extra.txt").write_text("x")  # an export (config.json + model.safetensors) may be replaced
    code, err = _export(capsys, str(empty), "--overwrite")
    assert code == 0, err
    assert not (empty / "extra.txt").exists() and (empty / "model.safetensors").is_file()
