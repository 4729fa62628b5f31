"""Demo checkpoints: generated on first use, deterministic, written atomically."""

from __future__ import annotations

import hashlib

import pytest

from fusion_core import ModelSourceError, inspect_model
from fusion_core.model.demo import DEFAULT_DEMO, DEMOS, Demo, demo_path, register_demo

# the smoke subset: also run against the oldest transformers pyproject.toml admits (scripts/test_oldest.sh)
pytestmark = pytest.mark.smoke


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_default_demo_has_a_conv3d_patch_embedding(qwen2_vl_dir):
    assert DEFAULT_DEMO == "qwen2-vl"
    assert demo_path("") == qwen2_vl_dir
    assert {"config.json", "model.safetensors"} <= {p.name for p in qwen2_vl_dir.iterdir()}
    assert inspect_model("demo:qwen2-vl").discovery("patch_embeddings").matched_paths == ["model.visual.patch_embed"]


def test_plain_decoder_demo(llama_dir):
    insp = inspect_model("demo:llama")
    assert insp.source.folder == llama_dir
    assert not insp.discovery("patch_embeddings")


def test_generation_is_deterministic_and_reused(tmp_path, monkeypatch, llama_dir):
    monkeypatch.setenv("FUSION_INSPECTOR_CACHE", str(tmp_path))
    again = demo_path("llama")
    assert again != llama_dir and again.is_relative_to(tmp_path)
    assert _digests(again) == _digests(llama_dir)  # same bytes in another cache folder
    stamp = (again / "model.safetensors").stat().st_mtime_ns
    assert demo_path("llama") == again
    assert (again / "model.safetensors").stat().st_mtime_ns == stamp  # not generated twice
    # nothing half-written next to it
    assert [p.name for p in again.parent.iterdir()] == [again.name]


def test_failed_generation_leaves_nothing(tmp_path, monkeypatch):
    def broken():
        config, cls = DEMOS["llama"].build()

        class DiskFull(cls):
            def save_pretrained(self, folder, **kwargs):
                (folder / "model.safetensors").write_bytes(b"partial")
                raise OSError(28, "No space left on device")

        return config, DiskFull

    monkeypatch.setenv("FUSION_INSPECTOR_CACHE", str(tmp_path))
    monkeypatch.setitem(DEMOS, "broken", Demo("broken", "test only", broken))
    with pytest.raises(ModelSourceError, match="No space left on device"):
        demo_path("broken")
    assert list((tmp_path / "demos").iterdir()) == []


def test_unknown_demo_lists_the_demos():
    with pytest.raises(ModelSourceError) as err:
        demo_path("nope")
    for name in DEMOS:
        assert name in str(err.value)


def test_register_demo_refuses_a_second_one_of_the_same_name(monkeypatch):
    monkeypatch.setattr("fusion_core.model.demo.DEMOS", dict(DEMOS))
    from fusion_core.model import demo

    extra = Demo("extra", "test only", DEMOS["llama"].build)
    register_demo(extra)
    register_demo(extra)  # the same one again is fine
    assert demo.DEMOS["extra"] is extra
    with pytest.raises(ValueError, match="already registered"):
        register_demo(Demo("extra", "another", DEMOS["llama"].build))
