"""Issue 32, "untrusted folders, round four": files and names a folder or a user hands us (holes 3, 5-9).

Tokenizer and processor side files, adapter regexes, sparse shards in ``diff --values``,
the export's parent, the shared cache and the escaping of names. CLI attacks run bounded
(``tests/core/_bounded.py``).
"""

from __future__ import annotations

import json
import shutil
import struct
import time
from pathlib import Path

import _forked
import pytest
from _bounded import copy_folder, edit_json, llava_with_processor, one_line, probe, sparse

__all__ = ["llava_with_processor"]  # a fixture of _bounded, imported for pytest to find


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


def test_fast_tokenizer_files_are_size_limited(llava_with_processor: Path, tmp_path: Path) -> None:
    folder = copy_folder(llava_with_processor, tmp_path / "fast")
    edit_json(folder / "tokenizer_config.json", fast_tokenizer_files=["tokenizer.0.json"])
    sparse(folder / "tokenizer.0.json", 6 * 2**30)
    result, _out, err = probe("tree", str(folder))
    assert result["code"] == 1
    one_line(err, "tokenizer.0.json", "byte limit", "refused")


def test_fast_tokenizer_files_outside_the_folder_are_never_read(llava_with_processor: Path, tmp_path: Path) -> None:
    """Paths a tokenizer config names (relative and absolute) are left out of the load: both lead to a FIFO
    here, which would block the load for good if it were opened."""
    import os

    folder = copy_folder(llava_with_processor, tmp_path / "model")
    outside = tmp_path / "outside_tok"
    outside.mkdir()
    os.mkfifo(outside / "tokenizer.1.json")
    os.mkfifo(outside / "tokenizer.2.json")
    names = ["../outside_tok/tokenizer.1.json", str(outside / "tokenizer.2.json")]
    edit_json(folder / "tokenizer_config.json", fast_tokenizer_files=names, tokenizer_file=names[1])
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
    folder = copy_folder(llava_with_processor, tmp_path / "templates")
    sparse(folder / "additional_chat_templates" / "big.jinja", 4 * 2**30)
    result, _out, err = probe("tree", str(folder))
    assert result["code"] == 1
    one_line(err, "big.jinja", "byte limit")


def test_processor_class_naming_a_model_is_refused(llava_with_processor: Path, tmp_path: Path) -> None:
    folder = copy_folder(llava_with_processor, tmp_path / "cls")
    edit_json(folder / "processor_config.json", processor_class="LlavaForConditionalGeneration")
    result, _out, err = probe("tree", str(folder))
    assert result["code"] == 1
    one_line(err, "processor_class", "LlavaForConditionalGeneration", "not a processor or tokenizer class")


def test_tokenizer_vocabulary_count_is_bounded_before_parsing(llava_with_processor: Path, tmp_path: Path) -> None:
    """6.5 M vocabulary entries in 60 MB (under the byte limit): counted from the bytes, refused unparsed."""
    from fusion_core.model.side_files import MAX_TOKENIZER_STRINGS

    folder = copy_folder(llava_with_processor, tmp_path / "vocab")
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

    folder = copy_folder(llava_with_processor, tmp_path / "added")
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

    folder = copy_folder(llava_with_processor, tmp_path / "ok")
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

    folder = copy_folder(llama_dir, tmp_path / _HOSTILE)
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

    src = copy_folder(llama_dir, tmp_path / "src")
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

    folder = copy_folder(llava_with_processor, tmp_path / "spm")
    sparse(folder / "tokenizer.model", MAX_SENTENCEPIECE_FILE + 1)
    result, _out, err = probe("tree", str(folder))
    assert result["code"] == 1
    one_line(err, "tokenizer.model", f"{MAX_SENTENCEPIECE_FILE:,} byte limit")
