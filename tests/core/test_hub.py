"""Hub ids ``org/name`` resolve offline from a local Hugging Face cache (a real layout in tmp_path)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import huggingface_hub.constants as hf_constants
import pytest

from fusion_core import ModelSourceError, cached_hub_models, inspect_model, resolve
from fusion_core.cli.main import main

REPO = "tiny-org/tiny-qwen2-vl"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def _add_to_cache(cache: Path, repo_id: str, files: list[Path]) -> Path:
    """Lay out ``files`` as the hub client does: blobs by hash, snapshot symlinks, refs/main."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for file in files:
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copyfile(file, repo / "blobs" / digest)
        os.symlink(os.path.join("..", "..", "blobs", digest), snapshot / file.name)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path, monkeypatch, qwen2_vl_dir):
    cache = tmp_path / "hub"
    files = sorted(p for p in qwen2_vl_dir.iterdir() if p.is_file())
    _add_to_cache(cache, REPO, files)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    # huggingface_hub reads the variable once, at import; it looks the constant up per call
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_cached_repo_resolves_offline(hub_cache):
    source = resolve(REPO)
    assert (source.kind, source.name) == ("hub", REPO)
    assert source.config.model_type == "qwen2_vl"
    assert source.folder is not None and source.folder.name == REVISION
    assert source.checkpoint is not None
    assert "visual.patch_embed.proj.weight" in source.checkpoint.tensors
    assert REPO in cached_hub_models()


def test_plan_of_a_cached_repo(hub_cache, capsys):
    plan = inspect_model(REPO).plan({"patch_embeddings": True})
    assert plan.layout == "original"
    assert main(["plan", REPO, "--fusion", "patch_embeddings", "--json"]) == 0
    assert '"model": "tiny-org/tiny-qwen2-vl"' in capsys.readouterr().out


def test_uncached_repo_offline_says_so(hub_cache, capsys):
    with pytest.raises(ModelSourceError) as err:
        resolve("tiny-org/not-downloaded")
    assert "not in the local Hugging Face cache" in str(err.value)
    assert "tiny-org/not-downloaded" in str(err.value)
    assert main(["tree", "tiny-org/not-downloaded"]) == 1
    err_text = capsys.readouterr().err
    assert "not in the local Hugging Face cache" in err_text and err_text.count("\n") == 1
