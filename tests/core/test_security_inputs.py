"""Issue 32, "untrusted folders, round four": the inputs a check makes, bounded (holes 1, 2 and 4).

The folder's chat template (never rendered), the sizes a processor or config sets for
synthetic inputs (clamped, and said), and the user's media files (checked from their
headers before decoding). CLI attacks run bounded (``tests/core/_bounded.py``).
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import _forked
import pytest
from _bounded import copy_folder, edit_json, llava_with_processor, one_line, probe

from fusion_core.errors import CheckError

__all__ = ["llava_with_processor"]  # a fixture of _bounded, imported for pytest to find


# --- hole 1: the folder's chat template ------------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        "{{ 'x' * 6000000000 }}",  # 6 GB of output in one step
        "{% for i in range(100000) %}" * 3 + "x" + "{% endfor %}" * 3,  # 10^15 steps
    ],
    ids=["six-gigabytes", "nested-loops"],
)
def test_chat_template_bombs_are_never_rendered(llava_with_processor: Path, tmp_path: Path, template: str) -> None:
    """The prompt is built by us from the processor's placeholder tokens; the folder's template never runs."""
    folder = copy_folder(llava_with_processor, tmp_path / "template")
    (folder / "chat_template.jinja").write_text(template)
    result, out, err = probe("check", str(folder), "--no-upstream", "--fusion", "patch_embeddings_2d")
    assert result["code"] == 0, err
    assert "PASSED" in out and "MemoryError" not in out + err


def test_prompt_is_built_without_the_template(llava_with_processor: Path) -> None:
    from transformers import AutoProcessor

    from fusion_core.boundary.options import Workload
    from fusion_core.run.media import synthetic_image
    from fusion_core.run.modal import _processed

    proc = AutoProcessor.from_pretrained(str(llava_with_processor), local_files_only=True)
    proc.chat_template = "{{ raise_exception('the folder template ran') }}"
    made = _processed(
        proc, synthetic_image(28, 28, 0), "abc", {"input_ids": None, "pixel_values": None}, None, Workload(), "", "x"
    )
    assert made.kwargs["input_ids"].shape[-1] < 1000


# --- hole 2: processor and config values that size synthetic inputs --------------------------


def test_processor_size_and_config_frames_are_clamped(llava_with_processor: Path, tmp_path: Path) -> None:
    folder = copy_folder(llava_with_processor, tmp_path / "sizes")
    proc_cfg = json.loads((folder / "processor_config.json").read_text())
    proc_cfg["image_processor"]["size"] = {"shortest_edge": 40000}
    (folder / "processor_config.json").write_text(json.dumps(proc_cfg))
    edit_json(folder / "config.json", num_frames=1_000_000_000)
    result, out, err = probe("check", str(folder), "--no-upstream", "--fusion", "patch_embeddings_2d")
    assert result["code"] == 0, err
    assert "shortest_edge = 40000 is beyond the 2,048 a check feeds" in out


def test_config_image_size_is_clamped_in_a_check(llava_with_processor: Path, tmp_path: Path) -> None:
    """``image_size: 40000`` beside the vision config: the first one the synthetic inputs find."""
    folder = copy_folder(llava_with_processor, tmp_path / "image_size")
    edit_json(folder / "config.json", image_size=40000)
    result, out, err = probe("check", str(folder), "--no-upstream", "--fusion", "patch_embeddings_2d")
    assert result["code"] == 0, err
    assert "PASSED" in out and "MemoryError" not in out + err


def test_qwen_min_pixels_are_clamped(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoConfig

    from fusion_core.model.limits import MAX_MIN_PIXELS
    from fusion_core.run.media import synthetic_image
    from fusion_core.run.processors import image_processor_for

    folder = copy_folder(qwen2_vl_dir, tmp_path / "qwen")
    edit_json(
        folder / "preprocessor_config.json",
        min_pixels=4_000_000_000,
        size={"shortest_edge": 4_000_000_000, "longest_edge": 10**12},
    )
    image_proc = image_processor_for(folder, AutoConfig.from_pretrained(folder))
    assert image_proc.size["shortest_edge"] == MAX_MIN_PIXELS
    out = image_proc(images=synthetic_image(56, 56, 0).items, return_tensors="pt")
    h, w = out["image_grid_thw"][0, 1:].tolist()
    assert h * w * 14 * 14 <= 2 * MAX_MIN_PIXELS  # scaled up to the bound, not to 4e9 pixels


def test_config_sizes_of_synthetic_inputs_are_clamped() -> None:
    from transformers import LlavaConfig

    from fusion_core.boundary.options import Workload
    from fusion_core.model.limits import MAX_INPUT_FRAMES, MAX_INPUT_SIDE
    from fusion_core.run.modal import _synthetic

    config = LlavaConfig()
    config.vision_config.image_size = 40000
    config.num_frames = 10**9
    notes: list[str] = []
    video = _synthetic("video", config, Workload(), False, 0, notes)
    assert len(video.items[0]) == MAX_INPUT_FRAMES
    image = _synthetic("image", config, Workload(), False, 0, notes)
    assert image.items[0].width == MAX_INPUT_SIDE
    assert any("num_frames" in n for n in notes) and any("image_size" in n for n in notes)


# --- hole 4: media -----------------------------------------------------------------------------


def test_eps_image_never_reaches_ghostscript(tmp_path: Path, capfd) -> None:
    from fusion_core.run.media import read_image

    eps = tmp_path / "x.eps"
    eps.write_text("%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n(stray) print flush\n{} loop\n")
    t0 = time.perf_counter()
    with pytest.raises(CheckError, match="EPS and PostScript are never opened"):
        read_image(str(eps))
    assert time.perf_counter() - t0 < 5
    assert "stray" not in capfd.readouterr().out


def test_image_decompression_bomb_is_refused_from_its_header(tmp_path: Path) -> None:
    """A PNG whose header says 20000x20000 (its data a few bytes): refused before decoding."""
    import zlib

    from fusion_core.run.media import read_image

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = tmp_path / "bomb.png"
    header = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    png.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )
    with pytest.raises(CheckError, match="over the limit"):
        read_image(str(png))


def _gif_claiming(path: Path, width: int, height: int) -> Path:
    """A real two-frame 8x8 GIF whose logical screen (the header PyAV reads) says ``width`` x ``height``."""
    from PIL import Image

    frames = [Image.new("RGB", (8, 8), (i * 100, 0, 0)) for i in range(2)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=40)
    raw = bytearray(path.read_bytes())
    raw[6:10] = struct.pack("<HH", width, height)
    path.write_bytes(bytes(raw))
    return path


def test_video_frame_size_is_checked_from_the_header(tmp_path: Path) -> None:
    code = (
        "import resource, sys\n"
        "vm = int(next(l for l in open('/proc/self/status') if l.startswith('VmSize')).split()[1]) * 1024\n"
        "resource.setrlimit(resource.RLIMIT_AS, (vm + 2 * 2**30, resource.RLIM_INFINITY))\n"
        "from fusion_core.run.media import read_video\n"
        "from fusion_core.errors import CheckError\n"
        "try:\n    read_video(sys.argv[1])\nexcept CheckError as e:\n    print(e)\n"
    )
    video = _gif_claiming(tmp_path / "big.gif", 16000, 16000)
    t0 = time.perf_counter()
    done = _forked.run([str(video)], code=code, timeout=60)
    assert time.perf_counter() - t0 < 60
    assert "16000x16000 px are over the limit" in done.stdout, done.stdout + done.stderr
    assert "refused before decoding" in done.stdout


def test_real_small_video_still_reads(tmp_path: Path) -> None:
    from fusion_core.run.media import read_video

    video = _gif_claiming(tmp_path / "small.gif", 8, 8)
    media = read_video(str(video), frames=2)
    assert media.size() == "2 frames of 8x8 px"


def _sparse_wav(path: Path, channels: int, rate: int, seconds: int) -> Path:
    """A 16-bit PCM WAV header for ``seconds`` of audio; the data is a hole (no disk used)."""
    size = seconds * rate * channels * 2
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * channels * 2, channels * 2, 16)
    head = b"RIFF" + struct.pack("<I", 36 + size) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
    with open(path, "wb") as f:
        f.write(head + b"data" + struct.pack("<I", size))
        f.truncate(44 + size)
    return path


@pytest.mark.parametrize(("channels", "rate"), [(8, 655_350), (64, 192_000)])
def test_audio_channels_rate_seconds_are_bounded_before_decoding(tmp_path: Path, channels: int, rate: int) -> None:
    import resource

    from fusion_core.run.media import read_audio

    wav = _sparse_wav(tmp_path / "a.wav", channels, rate, 30)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with pytest.raises(CheckError, match=rf"{channels} channels x {rate:,} Hz .* refused before decoding"):
        read_audio(str(wav), 16000)
    assert time.perf_counter() - t0 < 5
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 100e6


def test_ordinary_audio_still_reads(tmp_path: Path) -> None:
    import numpy as np
    import soundfile

    from fusion_core.run.media import read_audio

    soundfile.write(tmp_path / "ok.flac", np.zeros((8000, 2), dtype=np.float32), 8000)
    assert read_audio(str(tmp_path / "ok.flac"), 16000).size() == "1.00 s at 16000 Hz"


def test_feature_extractor_chunk_length_is_clamped() -> None:
    """Hole 2 for audio: Whisper pads every clip to ``chunk_length`` seconds; 10^7 s is clamped to 600."""
    import numpy as np
    from transformers import WhisperFeatureExtractor

    from fusion_core.run.processors import MAX_AUDIO_CHUNK_S, bound_sizes

    fe = WhisperFeatureExtractor(chunk_length=10**7, sampling_rate=10**9)
    notes = bound_sizes(fe)
    assert fe.chunk_length * fe.sampling_rate <= MAX_AUDIO_CHUNK_S * 16_000 and len(notes) == 2
    out = fe(np.zeros(1600, dtype=np.float32), sampling_rate=fe.sampling_rate, return_tensors="np")
    assert out["input_features"].nbytes < 100e6


def test_llava_next_pinpoints_are_clamped() -> None:
    """Hole 2 for tiling processors: a 40000 px grid pinpoint would cut any picture into 40000 px of tiles."""
    from transformers import LlavaNextImageProcessorPil

    from fusion_core.model.limits import MAX_INPUT_SIDE
    from fusion_core.run.media import synthetic_image
    from fusion_core.run.processors import bound_sizes

    proc = LlavaNextImageProcessorPil(image_grid_pinpoints=[[40000, 40000]])
    assert bound_sizes(proc)
    assert proc.image_grid_pinpoints == [[MAX_INPUT_SIDE, MAX_INPUT_SIDE]]
    out = proc(images=synthetic_image(64, 64, 0).items, return_tensors="np")
    assert out["pixel_values"].nbytes < 1e9


def test_eps_image_in_a_json_check_ends_in_one_line(llava_with_processor: Path, tmp_path: Path) -> None:
    """Hole 4 through the CLI: ``--image x.eps --json`` is one error line; stdout holds nothing stray."""
    eps = tmp_path / "x.eps"
    eps.write_text("%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n(stray) print flush\n{} loop\n")
    argv = ["check", str(llava_with_processor), "--no-upstream", "--fusion", "patch_embeddings_2d"]
    result, out, err = probe(*argv, "--image", str(eps), "--json")
    assert result["code"] != 0 and out == ""
    one_line(err, "x.eps", "EPS and PostScript are never opened")
