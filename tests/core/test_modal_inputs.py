"""End-to-end inputs of every modality, through the model's own processor (issue 18).

Tiny real checkpoints (seeded random weights, no processor files: the processor is built
from the config): every fused module, vision and audio towers and cross-attention
included, is verified on end-to-end inputs. Then the user's files on the demo, which ships
real processor and tokenizer files: an image, a video, a prompt, and the files that
cannot be used (errors, never a pass on synthetic inputs).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import _modal_models as models
import pytest

from fusion_core import check
from fusion_core.cli.main import main

ALL = {"patch_embeddings_2d": True, "qkv": True, "gate_up": True}
GRID = {"patch_embeddings": True, "qkv": True, "gate_up": True}
FAST = {"repeats": 1, "time_budget": 0.0, "upstream": False}
CLI_FAST = ["--no-upstream", "--repeats", "1", "--time-budget", "0"]

# name: (builder, families, the runs the check must make, modules that must be among the fused)
CASES = {
    "llava": (models.llava, ALL, ["image+text"], ["model.vision_tower.embeddings"]),
    "gemma3": (models.gemma3, ALL, ["image+text"], ["model.vision_tower.embeddings"]),
    "mllama": (models.mllama, {"qkv": True, "gate_up": True}, ["image+text"], ["model.language_model.layers.1.cross_attn"]),
    "smolvlm": (models.smolvlm, ALL, ["image+text"], ["model.vision_model.embeddings"]),
    "qwen2_vl": (models.qwen2_vl, GRID, ["image+text", "video+text"], ["model.visual.patch_embed"]),
    "qwen2_audio": (models.qwen2_audio, {"qkv": True, "gate_up": True}, ["audio+text"], ["model.language_model.layers.0.mlp"]),
    "qwen25_omni_thinker": (
        models.qwen25_omni_thinker, GRID, ["image+text", "video+text", "audio+text"],
        ["model.visual.patch_embed", "model.visual.blocks.0.mlp"],
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("modal")
    return {name: case[0](root / name) for name, case in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_every_fused_module_verified_end_to_end(folders: dict[str, Path], name: str) -> None:
    _, families, runs, must = CASES[name]
    result = check(folders[name], families, **FAST)
    assert result.passed, [(m.path, m.error) for m in result.modules]
    e = result.end_to_end
    assert e.ran and e.input_kind == ", ".join(runs)
    assert all(m.verified_by == "end-to-end inputs" for m in result.modules), [
        (m.path, m.verified_by) for m in result.modules if m.verified_by != "end-to-end inputs"
    ]
    paths = {m.path for m in result.modules}
    assert set(must) <= paths, sorted(paths)
    fed = [(f.run, f.modality) for f in e.inputs]
    for run in runs:
        media = run.split("+")[0]
        assert (run, media) in fed and (run, "text") in fed
    assert all(f.count == 1 and f.source == "synthetic" for f in e.inputs)


def test_smolvlm_patch_mask_and_mllama_cross_attention_inputs(folders: dict[str, Path]) -> None:
    """Image inputs reach SmolVLM's patch attention mask and Mllama's cross-attention mask."""
    smol = check(folders["smolvlm"], {"patch_embeddings_2d": True}, **FAST)
    assert {"pixel_values", "pixel_attention_mask"} <= set(smol.end_to_end.input_shapes)
    mllama = check(folders["mllama"], {"qkv": True}, **FAST)
    shapes = mllama.end_to_end.input_shapes
    assert {"cross_attention_mask", "aspect_ratio_ids", "aspect_ratio_mask"} <= set(shapes)
    assert shapes["pixel_values"][-2:] == [16, 16]  # the tower's own tile size


def _png(path: Path, width: int = 64, height: int = 48) -> Path:
    import numpy as np
    from PIL import Image

    pixels = (np.indices((height, width)).sum(0) * 3 % 256).astype("uint8")
    Image.fromarray(pixels).convert("RGB").save(path)
    return path


@pytest.mark.smoke
def test_image_and_prompt_through_the_demos_processor(qwen2_vl_dir: Path, tmp_path: Path, capsys) -> None:
    assert (qwen2_vl_dir / "preprocessor_config.json").is_file() and (qwen2_vl_dir / "tokenizer.json").is_file()
    photo = _png(tmp_path / "photo.png")
    code = main(["check", "demo:qwen2-vl", "--fusion", "patch_embeddings", "--image", str(photo),
                 "--prompt", "Describe", *CLI_FAST, "--json"])  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    e = data["end_to_end"]
    assert code == 0 and data["passed"] and e["input_kind"] == "image+text"
    assert e["input_shapes"]["pixel_values"] == [4 * 4, 1176]  # 64x48 px -> 56x56 px: a 4 x 4 grid of 14 px
    assert e["input_shapes"]["image_grid_thw"] == [1, 3]
    assert e["inputs"] == [
        {"run": "image+text", "modality": "image", "count": 1, "size": "64x48 px", "source": "photo.png"},
        {"run": "image+text", "modality": "text", "count": 1, "size": e["inputs"][1]["size"], "source": "prompt"},
    ]
    (module,) = data["modules"]
    assert module["verified_by"] == "end-to-end inputs" and module["input_shapes"] == [[16, 1176]]


def test_video_through_the_demo(tmp_path: Path, capsys) -> None:
    import av
    import numpy as np

    clip = tmp_path / "clip.mp4"
    with av.open(str(clip), "w") as out:
        stream = out.add_stream("mpeg4", rate=4)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        for i in range(6):
            frame = av.VideoFrame.from_ndarray(np.full((64, 64, 3), 40 * i, dtype=np.uint8), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    code = main(["check", "demo:qwen2-vl", "--fusion", "patch_embeddings", "--video", str(clip), *CLI_FAST, "--json"])
    data = json.loads(capsys.readouterr().out)
    e = data["end_to_end"]
    assert code == 0 and data["passed"] and e["input_kind"] == "video+text"
    assert e["input_shapes"]["video_grid_thw"] == [1, 3] and "pixel_values_videos" in e["input_shapes"]
    assert e["inputs"][0] == {
        "run": "video+text", "modality": "video", "count": 1, "size": "4 frames of 64x64 px", "source": "clip.mp4"
    }  # fmt: skip
    assert data["modules"][0]["verified_by"] == "end-to-end inputs"


def test_audio_file_through_a_config_built_processor(folders: dict[str, Path], tmp_path: Path) -> None:
    import numpy as np
    import soundfile

    wav = tmp_path / "tone.wav"
    t = np.arange(8000) / 8000
    soundfile.write(str(wav), (0.3 * np.sin(2 * np.pi * 440 * t)).astype("float32"), 8000)
    result = check(folders["qwen2_audio"], {"qkv": True}, audio=str(wav), prompt="hi", **FAST)
    e = result.end_to_end
    assert result.passed and e.input_kind == "audio+text"
    assert (e.inputs[0].modality, e.inputs[0].size, e.inputs[0].source) == ("audio", "1.00 s at 16000 Hz", "tone.wav")
    assert all(m.verified_by == "end-to-end inputs" for m in result.modules)


@pytest.mark.parametrize(
    "model, args, code, says",
    [
        ("demo:qwen2-vl", ["--image", "/no/such.png"], 2, "--image '/no/such.png': no such file"),
        ("demo:qwen2-vl", ["--image", "BAD"], 1, "image file bad.png: not an image Pillow can read"),
        ("demo:llama", ["--image", "PHOTO"], 1, "--image: LlamaForCausalLM takes no image"),
        ("demo:qwen2-vl", ["--audio", "PHOTO"], 1, "--audio: Qwen2VLForConditionalGeneration takes no audio"),
    ],
    ids=["missing", "unreadable", "text-only-model", "no-audio-tower"],
)
def test_unusable_files_are_errors(tmp_path: Path, capsys, model: str, args: list[str], code: int, says: str) -> None:
    (tmp_path / "bad.png").write_text("not an image")
    photo = str(_png(tmp_path / "photo.png"))
    args = [{"BAD": str(tmp_path / "bad.png"), "PHOTO": photo}.get(a, a) for a in args]
    family = "qkv" if model == "demo:llama" else "patch_embeddings"
    got = main(["check", model, "--fusion", family, *args, *CLI_FAST])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert got == code and "PASSED" not in captured.out
    assert len(lines) == 1 and says in lines[0], lines


def test_processor_failure_is_an_error(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    """A checkpoint whose processor files do not load: the given image is an error, not a fallback."""
    import shutil

    from fusion_core.errors import CheckError

    folder = tmp_path / "q"
    shutil.copytree(qwen2_vl_dir, folder)
    (folder / "preprocessor_config.json").write_text('{"image_processor_type": "NoSuchImageProcessor"}')
    with pytest.raises(CheckError, match="processor"):
        check(folder, {"patch_embeddings": True}, image=str(_png(tmp_path / "p.png")), **FAST)


def test_vlm_export_compares_image_conditioned_outputs(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    """The export is verified on the check's runs: per run, the logits and the vision tower's output."""
    from fusion_core import export

    result = export(qwen2_vl_dir, tmp_path / "out", {"patch_embeddings": True})
    compared = "image+text: logits, vision tower; video+text: logits, vision tower"
    outputs = result.verification.outputs
    assert outputs["passed"] and outputs["compared"] == compared and outputs["input_kind"] == "image+text, video+text"
    ours = next(c for c in result.consumers if c.name.startswith("fusion_core"))
    assert ours.status == "loads exactly" and ours.compared == compared and ours.max_abs_diff <= 1e-5


def test_nothing_to_run_is_not_loads_exactly(llama_dir: Path, tmp_path: Path) -> None:
    """A consumer that loads when no input could be run is "loads, outputs not compared", never "loads exactly"."""
    from transformers import LlamaForCausalLM

    from fusion_core import export
    from fusion_core.export.consumers import LOADS_NOT_COMPARED, ConsumersTryParams, _probe, comparison_dtype

    export(llama_dir, tmp_path / "out", {"qkv": True}, verify_outputs=False)
    spec = ConsumersTryParams(str(tmp_path / "out"), str(tmp_path / "out"))
    answer = _probe((LlamaForCausalLM, [], False, comparison_dtype(llama_dir)), spec)
    ours = answer.consumers[0]
    assert ours.status == LOADS_NOT_COMPARED == "loads, outputs not compared" and ours.compared == ""
    assert "no input could be made" in ours.detail
    assert answer.outputs["passed"] is None and answer.outputs["summary"].startswith("outputs not compared")


def test_the_output_check_is_our_loaders_comparison_in_the_consumers_child(llama_dir: Path) -> None:
    """The export's output check is made where the consumers load the export (the child's
    ``_probe``): exact for the original layout, within tolerance for a fused one; a difference
    stops the export with its first difference, a failed load with the loader's reason."""
    import torch

    from fusion_core import ExportError
    from fusion_core.export.consumers import (
        LOADS_EXACTLY,
        LOADS_WRONG,
        REFUSES,
        ConsumersSourceParams,
        ConsumersTryParams,
        _prepare,
        _probe,
    )
    from fusion_core.export.pipeline import _require_outputs as require_outputs
    from fusion_core.export.result import Consumer

    prepared = _prepare(ConsumersSourceParams(str(llama_dir), []))
    runs = prepared[1]  # (model class, runs with their reference outputs, trust)
    name = next(iter(runs[0].outputs))
    spec = ConsumersTryParams(str(llama_dir), str(llama_dir))
    exact = dataclasses.replace(spec, exact=True)
    same = _probe(prepared, exact)
    assert same.outputs["passed"] and same.outputs["tolerance"] == "exact" and same.outputs["max_abs_diff"] == 0.0
    assert require_outputs(same.outputs, same.consumers[0]) is same.outputs

    reference = runs[0].outputs[name]
    runs[0].outputs[name] = torch.nextafter(reference, reference + 1)  # one float32 step away
    near = _probe(prepared, exact)
    assert near.outputs["passed"] is False and near.consumers[0].status == LOADS_WRONG
    with pytest.raises(ExportError, match=r"outputs differ from the source model's \(.*logits.*; tolerance exact\)"):
        require_outputs(near.outputs, near.consumers[0])
    tolerated = _probe(prepared, spec)  # a fused export: within float32 rounding
    assert tolerated.outputs["passed"] and tolerated.consumers[0].status == LOADS_EXACTLY
    assert 0 < tolerated.outputs["max_abs_diff"] < 1e-5

    runs[0].outputs[name] = reference * 1.01
    far = _probe(prepared, spec)
    assert far.outputs["passed"] is False and "differs" in far.outputs
    with pytest.raises(ExportError, match="outputs differ"):
        require_outputs(far.outputs, far.consumers[0])
    refused = Consumer("fusion_core 0", REFUSES, "fusion_core.load(OUT)", "UnknownFamilyError: no family 'x'")
    with pytest.raises(ExportError, match="the export does not load back: UnknownFamilyError: no family 'x'"):
        require_outputs(None, refused)


def test_a_home_relative_image_is_the_same_file_everywhere(
    qwen2_vl_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~/photo.png`` passes validation and is the file the run reads: paths are expanded once,
    in the options (issue 31: the check stage did not expand ``~`` and failed after validation)."""
    from fusion_core import check

    _png(tmp_path / "photo.png")
    monkeypatch.setenv("HOME", str(tmp_path))
    result = check(str(qwen2_vl_dir), {"patch_embeddings": True}, upstream=False, time_budget=0,
                   images=("~/photo.png",))  # fmt: skip
    fed = [i for i in result.end_to_end.inputs if i.modality == "image"]
    assert result.passed and [i.source for i in fed] == ["photo.png"] and fed[0].size == "64x48 px"
