"""Beyond the memory budget (issue 35): a model of a few hundred MB checked end to end with
``--max-memory`` below its size. The blocks beyond the budget stay on disk through
accelerate's offload; the check still runs on the user's image and says it was offloaded,
and the process's anonymous memory (what a model converted to another dtype takes; the
page cache of mapped files does not count) peaks far below an unbounded run's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MB = 10**6


@pytest.fixture(scope="module")
def mid_vlm(tmp_path_factory: pytest.TempPathFactory, qwen2_vl_dir: Path) -> Path:
    """A Qwen2-VL of about 670 MB in float32 (167M parameters), seeded random weights,
    with the demo's processor and tokenizer files."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    config = Qwen2VLConfig(
        text_config={
            "vocab_size": 32000, "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 6,
            "num_attention_heads": 16, "num_key_value_heads": 4, "tie_word_embeddings": False,
            "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]},
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        },
        vision_config={"depth": 2, "embed_dim": 256, "hidden_size": 1024, "num_heads": 4, "in_channels": 3},
        image_token_id=500, video_token_id=501, vision_start_token_id=502, vision_end_token_id=503,
        tie_word_embeddings=False,
    )  # fmt: skip
    with torch.device("meta"):
        model = Qwen2VLForConditionalGeneration(config)
    model.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=gen)
    folder = tmp_path_factory.mktemp("mid") / "qwen2vl-mid"
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"):
        shutil.copyfile(qwen2_vl_dir / name, folder / name)
    return folder


def _image(folder: Path) -> Path:
    import numpy as np
    from PIL import Image

    path = folder / "photo.png"
    Image.fromarray((np.indices((112, 140)).sum(0) * 3 % 256).astype("uint8")).convert("RGB").save(path)
    return path


def _anon_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


WRONG = """
from fusion_core.families.patch_embeddings import PatchEmbeddingsFusion


class ShiftedPatch(PatchEmbeddingsFusion):
    name = "test_shifted_patch"

    def make_fused_class(self, original_cls):
        fused = super().make_fused_class(original_cls)

        def forward(module, *args, **kwargs):
            return fused.forward(module, *args, **kwargs) + 1.0

        return type(fused.__name__, (fused,), {"forward": forward, "__module__": fused.__module__})
"""


def _check(
    folder: Path,
    image: Path,
    *extra: str,
    patch: str = "patch_embeddings",
    rc: int = 0,
    family_file: Path | None = None,
) -> tuple[dict, int]:
    """``fusion-core check --json`` in a fresh process: (its answer, its peak anonymous memory in bytes)."""
    cmd = [sys.executable, "-m", "fusion_core", *(["--family-file", str(family_file)] if family_file else [])]
    cmd += ["check", str(folder), "--fusion", patch, "--fusion", "gate_up"]
    cmd += ["--dtype", "bfloat16", "--image", str(image), "--no-upstream"]
    cmd += ["--time-budget", "0", "--json", *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    peak = 0

    def sample() -> None:
        nonlocal peak
        while proc.poll() is None:
            peak = max(peak, _anon_kb(proc.pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    out, err = proc.communicate(timeout=600)
    sampler.join()
    assert proc.returncode == rc, err[-2000:]
    return json.loads(out), peak * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RssAnon from /proc")
def test_a_check_beyond_max_memory_is_offloaded_and_runs_end_to_end(mid_vlm: Path, tmp_path: Path) -> None:
    image = _image(tmp_path)
    weights = sum(f.stat().st_size for f in mid_vlm.glob("*.safetensors")) // 2  # in bfloat16
    budget = weights // 3
    bounded, peak_bounded = _check(mid_vlm, image, "--max-memory", str(budget))
    free, peak_free = _check(mid_vlm, image)

    for answer in (bounded, free):
        assert answer["passed"], answer
        e = answer["end_to_end"]
        assert e["ran"] and [i["source"] for i in e["inputs"] if i["modality"] == "image"] == ["photo.png"]
    memory = [m for m in bounded["messages"] if m.startswith("memory: ")]
    assert len(memory) == 1 and "offloaded to disk through accelerate" in memory[0], bounded["messages"]
    assert any(n.startswith("offloaded: ") for n in bounded["end_to_end"]["notes"])
    assert not any("offloaded" in m for m in free["messages"])
    # modules on disk are checked alone, on the inputs the end-to-end run gave them
    assert {m["verified_by"] for m in bounded["modules"]} == {"end-to-end inputs"}
    # the converted weights are anonymous memory: bounded by the budget, not by the model
    print(
        f"peak anonymous memory: {peak_free / MB:.0f} MB unbounded, {peak_bounded / MB:.0f} MB with {budget / MB:.0f} MB"
    )
    assert peak_free - peak_bounded > 0.4 * weights, (peak_free / MB, peak_bounded / MB, weights / MB)


def test_a_wrong_fusion_fails_when_offloaded(mid_vlm: Path, tmp_path: Path) -> None:
    """Blocks kept in memory under a device_map carry accelerate's hooks, which replace the
    instance's forward: a fused twin must run its own forward, never the original's copied
    hook (that would compare the original with itself and pass anything)."""
    family = tmp_path / "shifted.py"
    family.write_text(WRONG)
    weights = sum(f.stat().st_size for f in mid_vlm.glob("*.safetensors")) // 2
    answer, _ = _check(
        mid_vlm, _image(tmp_path), "--max-memory", str(weights // 2),
        patch="test_shifted_patch", rc=1, family_file=family,
    )  # fmt: skip
    assert any(m.startswith("memory: ") and "offloaded" in m for m in answer["messages"])
    patch = next(m for m in answer["modules"] if m["family"] == "test_shifted_patch")
    assert patch["verified_by"] == "end-to-end inputs" and not patch["passed"]
    assert patch["comparison"]["max_abs_diff"] >= 0.99


def test_load_beyond_max_memory_fuses_what_is_in_memory(mid_vlm: Path) -> None:
    """``load(max_memory=...)``: blocks beyond the budget stay on disk; matched modules among
    them stay unfused (said), the others are fused, and the model computes what the stock one does."""
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    from fusion_core import load

    weights = sum(f.stat().st_size for f in mid_vlm.glob("*.safetensors")) // 2
    result = load(str(mid_vlm), {"patch_embeddings": True, "gate_up": True}, dtype="bfloat16", max_memory=weights // 3)
    assert any(m.startswith("memory: ") and "offloaded to disk" in m for m in result.messages)
    unfused = next(m for m in result.messages if "left unfused" in m)
    assert "model.visual.patch_embed" in result.fused_modules
    left = [f"model.language_model.layers.{i}.mlp" for i in range(6)]
    left = [p for p in left if p not in result.fused_modules]
    assert left and f"({left[0]}, …)" in unfused
    model = result.model
    assert type(model.get_submodule("model.visual.patch_embed")).__name__ == "FusedPatchEmbed"
    stock = Qwen2VLForConditionalGeneration.from_pretrained(mid_vlm, dtype=torch.bfloat16).eval()
    ids = torch.arange(3, 40).reshape(1, 37)
    pixels = torch.randn(16, 1176, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    grid = torch.tensor([[1, 4, 4]])
    with torch.inference_mode():
        assert torch.equal(model(input_ids=ids).logits, stock(input_ids=ids).logits)
        ours = model.get_submodule("model.visual.patch_embed")(pixels)
        theirs = stock.get_submodule("model.visual.patch_embed")(pixels)
        assert (ours.double() - theirs.double()).abs().max().item() <= 0.02 * theirs.abs().max().item()
        assert model.model.visual(pixels, grid_thw=grid) is not None


def test_export_verified_beyond_max_memory(mid_vlm: Path, tmp_path: Path) -> None:
    """``export(max_memory=...)``: the consumers' child loads the source and each consumer with
    blocks beyond the budget on disk, and both consumers still load the export exactly."""
    from fusion_core import export
    from fusion_core.plan.fusion_plan import as_plan
    from fusion_core.run.offload import memory_plan

    weights = sum(f.stat().st_size for f in mid_vlm.glob("*.safetensors"))
    assert memory_plan(as_plan(str(mid_vlm)), "float32", "cpu", weights // 3).offloaded  # what the child loads by
    result = export(str(mid_vlm), tmp_path / "out", {"patch_embeddings": True}, max_memory=weights // 3)
    statuses = {c.name.split()[0]: c.status for c in result.consumers}
    assert statuses == {"fusion_core": "loads exactly", "transformers": "loads exactly"}, result.consumers
    assert result.verification.outputs["passed"] and "image+text" in result.verification.outputs["compared"]
