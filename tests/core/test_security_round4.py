"""Issue 32, "untrusted folders, round four": each hole rebuilt, bounded in memory and time.

An attack that runs the CLI runs in a forked process of its own (``tests/_forked.py``)
under an address-space limit of its size at the start plus 2 GiB (``RLIMIT_AS``), so a
regression fails with a MemoryError instead of taking the machine's memory; its peak
growth (from a reset high-water mark) must stay under 2 GB and its time under 60 s, and it
ends in one line. Attacks on one function run in this process on inputs whose refusal
allocates nothing.
"""

from __future__ import annotations

import json
import shutil
import struct
import time
from pathlib import Path

import _forked
import pytest

from fusion_core.errors import CheckError

_PROBE = """
import json, resource, sys, time
import torch, transformers
from fusion_core.cli.main import main
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + 2 * 2**30, resource.RLIM_INFINITY))
open("/proc/self/clear_refs", "w").write("5")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
code = main(sys.argv[1:])
seconds = time.perf_counter() - t0
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(json.dumps({"code": code, "grown": grown, "seconds": seconds}))
"""


def probe(*argv: str) -> tuple[dict, str, str]:
    """Run ``fusion-core *argv`` forked and bounded: (measures, stdout before them, stderr)."""
    done = _forked.run(argv, code=_PROBE, timeout=120)
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-2000:]
    result = json.loads(lines[-1])
    print(f"bound: {argv[0]}: {result['seconds']:.1f} s, {result['grown'] / 1e6:.0f} MB grown")  # shown with -s
    assert result["grown"] <= 2e9, result
    assert result["seconds"] <= 60, result
    return result, "\n".join(lines[:-1]), done.stderr


def one_line(err: str, *words: str) -> None:
    assert err.count("\n") == 1 and err.startswith("fusion-core: error: "), err
    for word in words:
        assert word in err, err


# --- a tiny LLaVA with its processor files (L of the issue) ----------------------------------


@pytest.fixture(scope="module")
def llava_with_processor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from _check_models import llava
    from transformers import AutoConfig, CLIPImageProcessorPil, LlavaProcessor

    from fusion_core.model.tokenizer import synthetic_tokenizer

    folder = llava(tmp_path_factory.mktemp("round4") / "llava")
    config = AutoConfig.from_pretrained(folder)
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessorPil(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}),
        tokenizer=synthetic_tokenizer(config, {"image_token": "<image>"}),
        patch_size=7,
        vision_feature_select_strategy="default",
        chat_template="{% for m in messages %}{{ m['role'] }}{% endfor %}",
    )
    processor.save_pretrained(folder)
    return folder


def _copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


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
    folder = _copy(llava_with_processor, tmp_path / "template")
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
    folder = _copy(llava_with_processor, tmp_path / "sizes")
    proc_cfg = json.loads((folder / "processor_config.json").read_text())
    proc_cfg["image_processor"]["size"] = {"shortest_edge": 40000}
    (folder / "processor_config.json").write_text(json.dumps(proc_cfg))
    _edit_json(folder / "config.json", num_frames=1_000_000_000)
    result, out, err = probe("check", str(folder), "--no-upstream", "--fusion", "patch_embeddings_2d")
    assert result["code"] == 0, err
    assert "shortest_edge = 40000 is beyond the 2,048 a check feeds" in out


def test_config_image_size_is_clamped_in_a_check(llava_with_processor: Path, tmp_path: Path) -> None:
    """``image_size: 40000`` beside the vision config: the first one the synthetic inputs find."""
    folder = _copy(llava_with_processor, tmp_path / "image_size")
    _edit_json(folder / "config.json", image_size=40000)
    result, out, err = probe("check", str(folder), "--no-upstream", "--fusion", "patch_embeddings_2d")
    assert result["code"] == 0, err
    assert "PASSED" in out and "MemoryError" not in out + err


def test_qwen_min_pixels_are_clamped(qwen2_vl_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoConfig

    from fusion_core.model.limits import MAX_MIN_PIXELS
    from fusion_core.run.media import synthetic_image
    from fusion_core.run.processors import image_processor_for

    folder = _copy(qwen2_vl_dir, tmp_path / "qwen")
    _edit_json(
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


# --- hole 5: regular expressions from an adapter's config ---------------------------------------


def _adapter(folder: Path, names: list[str], **config) -> Path:
    from _hostile import write_safetensors

    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8, **config}))
    header, pos = {}, 0
    for name in names:
        for part, shape in (("lora_A", [4, 8]), ("lora_B", [8, 4])):
            header[f"base_model.model.{name}.{part}.weight"] = {
                "dtype": "F32",
                "shape": shape,
                "data_offsets": [pos, pos + 128],
            }
            pos += 128
    write_safetensors(folder / "adapter_model.safetensors", header, pos)
    return folder


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("rank_pattern", {"(a+)+$": 4}, "repeats a part that repeats"),
        ("alpha_pattern", {"(.|.)*Z": 4}, "repeats an alternation"),
        ("target_modules", "(.|.)*Z", "repeats an alternation"),
        ("exclude_modules", r"(\w+\.)*x", "repeats a part that repeats"),
        ("target_modules", r".*a.*a.*a.*a", "more than 3 repeated parts"),
    ],
)
def test_adapter_regexes_with_unbounded_match_time_are_refused(
    llama_dir: Path, tmp_path: Path, key: str, value, says: str
) -> None:
    adapter = _adapter(tmp_path / "adapter", ["a" * 48 + "!"], **{key: value})
    result, _out, err = probe("adapter", str(adapter), str(tmp_path / "out"), "--base", str(llama_dir))
    assert result["code"] != 0 and result["seconds"] < 30
    one_line(err, key, says, "refused")
    assert not (tmp_path / "out").exists()


def test_real_adapter_patterns_pass() -> None:
    from fusion_core.adapter.patterns import check_config_patterns

    check_config_patterns(
        {
            "target_modules": r".*decoder.*(SelfAttention|EncDecAttention).*(q|v)$",
            "rank_pattern": {r"model.layers.\d+.self_attn.(q|k|v)_proj": 8, "model.layers.0.mlp.down_proj": 4},
            "alpha_pattern": {r"^model.decoder.layers.0.encoder_attn.k_proj": 16},
            "layers_pattern": ["layers", "h"],
        },
        "adapter_config.json",
    )


def test_long_adapter_names_are_refused_before_matching(tmp_path: Path) -> None:
    from fusion_core.adapter.source import open_adapter
    from fusion_core.errors import AdapterError

    adapter = _adapter(tmp_path / "adapter", ["a" * 5000], rank_pattern={".*a.*a.*a": 4})
    t0 = time.perf_counter()
    with pytest.raises(AdapterError, match="a module name of 5000 characters"):
        open_adapter(adapter)
    assert time.perf_counter() - t0 < 5


# --- hole 3: every file a processor or tokenizer load reads -------------------------------------


def _sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)  # no disk used
    return path


def test_fast_tokenizer_files_are_size_limited(llava_with_processor: Path, tmp_path: Path) -> None:
    folder = _copy(llava_with_processor, tmp_path / "fast")
    _edit_json(folder / "tokenizer_config.json", fast_tokenizer_files=["tokenizer.0.json"])
    _sparse(folder / "tokenizer.0.json", 6 * 2**30)
    result, _out, err = probe("tree", str(folder))
    assert result["code"] == 1
    one_line(err, "tokenizer.0.json", "byte limit", "refused")


def test_fast_tokenizer_files_outside_the_folder_are_never_read(llava_with_processor: Path, tmp_path: Path) -> None:
    """Paths a tokenizer config names (relative and absolute) are left out of the load: both lead to a FIFO
    here, which would block the load for good if it were opened."""
    import os

    folder = _copy(llava_with_processor, tmp_path / "model")
    outside = tmp_path / "outside_tok"
    outside.mkdir()
    os.mkfifo(outside / "tokenizer.1.json")
    os.mkfifo(outside / "tokenizer.2.json")
    names = ["../outside_tok/tokenizer.1.json", str(outside / "tokenizer.2.json")]
    _edit_json(folder / "tokenizer_config.json", fast_tokenizer_files=names, tokenizer_file=names[1])
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from transformers import AutoConfig\n"
        "from fusion_core import resolve\n"
        "from fusion_core.run.processors import processor_for, tokenizer_for\n"
        "folder = Path(sys.argv[1])\n"
        "resolve(str(folder))\n"
        "proc, where = processor_for(folder, AutoConfig.from_pretrained(folder))\n"
        "tok, _ = tokenizer_for(folder, AutoConfig.from_pretrained(folder))\n"
        "print(type(proc).__name__, len(tok.get_vocab()))\n"
    )
    t0 = time.perf_counter()
    done = _forked.run([str(folder)], code=code, timeout=60)
    assert time.perf_counter() - t0 < 60
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("LlavaProcessor "), done.stdout


def test_chat_templates_folder_is_size_limited(llava_with_processor: Path, tmp_path: Path) -> None:
    folder = _copy(llava_with_processor, tmp_path / "templates")
    _sparse(folder / "additional_chat_templates" / "big.jinja", 4 * 2**30)
    result, _out, err = probe("tree", str(folder))
    assert result["code"] == 1
    one_line(err, "big.jinja", "byte limit")


def test_processor_class_naming_a_model_is_refused(llava_with_processor: Path, tmp_path: Path) -> None:
    folder = _copy(llava_with_processor, tmp_path / "cls")
    _edit_json(folder / "processor_config.json", processor_class="LlavaForConditionalGeneration")
    result, _out, err = probe("tree", str(folder))
    assert result["code"] == 1
    one_line(err, "processor_class", "LlavaForConditionalGeneration", "not a processor or tokenizer class")


def test_tokenizer_vocabulary_count_is_bounded_before_parsing(llava_with_processor: Path, tmp_path: Path) -> None:
    """6.5 M vocabulary entries in 60 MB (under the byte limit): counted from the bytes, refused unparsed."""
    from fusion_core.model.side_files import MAX_TOKENIZER_STRINGS

    folder = _copy(llava_with_processor, tmp_path / "vocab")
    entries = 6_500_000
    assert entries > MAX_TOKENIZER_STRINGS
    with open(folder / "tokenizer.json", "wb") as f:
        f.write(b'{"model": {"type": "WordLevel", "unk_token": "0", "vocab": {')
        f.write(b",".join(b'"%x":%d' % (i, i) for i in range(entries)))
        f.write(b"}}}")
    result, _out, err = probe("tree", str(folder))
    assert result["code"] == 1
    one_line(err, "tokenizer.json", "strings", "refused before parsing")


def test_added_token_count_is_bounded_before_parsing(llava_with_processor: Path, tmp_path: Path) -> None:
    from fusion_core.model.side_files import MAX_ADDED_TOKENS

    folder = _copy(llava_with_processor, tmp_path / "added")
    data = json.loads((folder / "tokenizer.json").read_text())
    data["added_tokens"] = [{"id": 200 + i, "content": f"<t{i}>", "special": True} for i in range(MAX_ADDED_TOKENS + 1)]
    (folder / "tokenizer.json").write_text(json.dumps(data))
    result, _out, err = probe("tree", str(folder))
    assert result["code"] == 1
    one_line(err, "tokenizer.json", f"{MAX_ADDED_TOKENS + 1:,} added tokens")


def test_processor_loads_from_the_pinned_files_only(llava_with_processor: Path, tmp_path: Path) -> None:
    """The folder's processor still loads; a file beside it that no name allows is not there to read."""
    from transformers import AutoConfig

    from fusion_core.model.side_files import pinned_side_files
    from fusion_core.run.processors import processor_for

    folder = _copy(llava_with_processor, tmp_path / "ok")
    (folder / "stray.json").write_text("{}")
    with pinned_side_files(folder) as pinned:
        assert not (pinned / "stray.json").exists() and (pinned / "tokenizer.json").is_file()
    proc, where = processor_for(folder, AutoConfig.from_pretrained(folder))
    assert type(proc).__name__ == "LlavaProcessor", where


# --- hole 9: noncharacters and bidirectional controls ---------------------------------------------

_HOSTILE = "evil\u202egpj.exe\ufffe\uffff\u2066x\u2069"


def test_printable_escapes_noncharacters_and_bidi_controls() -> None:
    from fusion_core.text import printable, table

    shown = printable(_HOSTILE + "\u200f\U0001fffe\ufdd0")
    assert shown == "evil\\u202egpj.exe\\ufffe\\uffff\\u2066x\\u2069\\u200f\\U0001fffe\\ufdd0"
    assert printable("model.layers.0 — ünïcode ok") == "model.layers.0 — ünïcode ok"
    assert "\u202e" not in table([[_HOSTILE]], ["name"])


def test_svg_and_text_of_a_hostile_module_name_are_valid_and_escaped(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    from torch import nn

    from fusion_core.model.tree import module_tree
    from fusion_core.report.tree_image import tree_rows, tree_svg, tree_text

    model = nn.Module()
    model.add_module(_HOSTILE.replace(".", "_"), nn.Linear(2, 2))
    rows = tree_rows(module_tree(model))
    svg = tree_svg(rows, title=_HOSTILE, subtitle=_HOSTILE)
    ET.fromstring(svg)  # well-formed XML: a browser shows the image
    text = tree_text(rows)
    for shown in (svg, text):
        assert not any(c in shown for c in "\u202e\ufffe\uffff\u2066\u2069"), shown
        assert "evil\\u202egpj" in shown


def test_cli_prints_a_hostile_folder_name_escaped(llama_dir: Path, tmp_path: Path, capsys) -> None:
    from fusion_core.cli.main import main

    folder = _copy(llama_dir, tmp_path / _HOSTILE)
    assert main(["tree", str(folder), "--depth", "1", "--svg", str(tmp_path / "t.svg")]) == 0
    out, err = capsys.readouterr()
    assert "\u202e" not in out + err and "\ufffe" not in out + err
    import xml.etree.ElementTree as ET

    ET.parse(tmp_path / "t.svg")


# --- hole 8: the shared cache -------------------------------------------------------------------


def test_demo_open_to_others_is_generated_again(tmp_path: Path, monkeypatch) -> None:
    """A demo folder others can write (as in a shared cache) is not used: it is made again, and said."""
    import transformers

    from fusion_core import resolve
    from fusion_core.model.demo import DEMO_NOTES, DEMO_VERSION

    monkeypatch.setenv("FUSION_INSPECTOR_CACHE", str(tmp_path / "cache"))
    DEMO_NOTES.clear()
    planted = tmp_path / "cache" / "demos" / f"llama-v{DEMO_VERSION}-tf{transformers.__version__}"
    planted.mkdir(parents=True)
    llava_config = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"]}
    (planted / "config.json").write_text(json.dumps(llava_config))
    planted.chmod(0o777)  # what another user's umask, or their hand, leaves in a shared folder
    (planted.parent).chmod(0o777)
    t0 = time.perf_counter()
    source = resolve("demo:llama")
    assert time.perf_counter() - t0 < 60
    assert source.config.model_type == "llama"
    assert any("was not used" in n and "written by other users" in n for n in source.notes), source.notes
    assert not (planted.parent.stat().st_mode & 0o022)  # our demos folder: closed to others
    DEMO_NOTES.clear()
    assert resolve("demo:llama").notes == []  # generated by us: trusted from now on


def test_demo_of_another_user_is_not_trusted(tmp_path: Path) -> None:
    import os

    from fusion_core.model.demo import _not_ours

    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert _not_ours(folder) is None
    (folder / "link.json").symlink_to(folder / "config.json")
    assert "link.json is a link" in (_not_ours(folder) or "")
    if os.getuid() == 0:  # root can hand a file to another user: the real case of a shared cache
        (folder / "link.json").unlink()
        os.chown(folder / "config.json", 12345, 12345)
        assert "belongs to another user (uid 12345)" in (_not_ours(folder) or "")


# --- hole 7: the export's parent swapped during the export ----------------------------------------


def test_a_parent_link_flipped_to_the_source_is_never_written_into(llama_dir: Path, tmp_path: Path) -> None:
    """The race of the issue made deterministic: the link flips between the check and each later step."""
    from fusion_core.export.files import check_destination, move_into_place
    from fusion_core.export.staging import make_temp_sibling

    src = _copy(llama_dir, tmp_path / "src")
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    dest = check_destination(src, link / "out", overwrite=False)
    assert dest.path == real.resolve() / "out"  # the checked, resolved folder from here on
    link.unlink()
    link.symlink_to(src)  # flipped to the source
    tmp = make_temp_sibling(dest.path)
    (tmp / "config.json").write_text("{}")
    link.unlink()
    link.symlink_to(real)
    move_into_place(tmp, dest)
    assert sorted(p.name for p in src.iterdir()) == sorted(p.name for p in llama_dir.iterdir())
    assert (real / "out" / "config.json").is_file()


def test_a_parent_folder_replaced_during_the_export_is_refused(tmp_path: Path) -> None:
    from fusion_core.errors import ExportError
    from fusion_core.export.staging import make_temp_sibling, move_into_place

    parent = tmp_path / "parent"
    parent.mkdir()
    tmp = make_temp_sibling(parent / "out")
    parent.rename(tmp_path / "moved")  # the folder the export began in, moved away...
    parent.mkdir()  # ...and another one put in its place
    with pytest.raises(ExportError, match="was replaced during the export"):
        move_into_place(tmp, parent / "out", False)
    assert list(parent.iterdir()) == []


# --- hole 6: diff --values on sparse files ----------------------------------------------------------


def _sparse_checkpoint(folder: Path, config: Path, elements: int) -> Path:
    """``config`` with a checkpoint of one U8 tensor of ``elements`` values, all a hole (no disk used)."""
    folder.mkdir()
    shutil.copy(config, folder / "config.json")
    header = json.dumps({"big": {"dtype": "U8", "shape": [elements], "data_offsets": [0, elements]}}).encode()
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + elements)
    return folder


def test_diff_values_of_sparse_files_is_refused_up_front(llama_dir: Path, tmp_path: Path) -> None:
    elements = 10**12  # the tensor: 26 minutes of zeros to read
    a = _sparse_checkpoint(tmp_path / "a", llama_dir / "config.json", elements)
    b = _sparse_checkpoint(tmp_path / "b", llama_dir / "config.json", elements)
    result, _out, err = probe("diff", str(a), str(b), "--values")
    assert result["code"] != 0 and result["seconds"] < 30
    one_line(err, "model.safetensors", "sparse file", "refused before reading")


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


def test_an_inspection_cache_entry_others_can_write_is_not_read(llama_dir: Path) -> None:
    """Hole 8 for the window's cache: a valid entry that another user could have written is removed unread."""
    import os

    from fusion_core import inspect_model
    from fusion_core.model import cache
    from fusion_core.plan.view import cached_view, inspection_data

    spec = str(llama_dir)
    data = inspection_data(spec, inspect_model(spec))
    path = cache.save(spec, data)
    assert path is not None and cached_view(spec) is not None
    path.chmod(0o666)
    assert cached_view(spec) is None and not path.exists()
    path = cache.save(spec, data)
    if os.getuid() == 0:
        os.chown(path, 12345, 12345)
        assert cached_view(spec) is None and not path.exists()


def test_sentencepiece_model_is_size_limited(llava_with_processor: Path, tmp_path: Path) -> None:
    """A SentencePiece model is parsed whole and its pieces are not countable unparsed: 64 MiB at most."""
    from fusion_core.model.limits import MAX_SENTENCEPIECE_FILE

    folder = _copy(llava_with_processor, tmp_path / "spm")
    _sparse(folder / "tokenizer.model", MAX_SENTENCEPIECE_FILE + 1)
    result, _out, err = probe("tree", str(folder))
    assert result["code"] == 1
    one_line(err, "tokenizer.model", f"{MAX_SENTENCEPIECE_FILE:,} byte limit")


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
