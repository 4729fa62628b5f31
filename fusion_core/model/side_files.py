"""The processor and tokenizer files of a model folder: every file transformers may read, bounded and pinned.

transformers and tokenizers read more than the names a loader asks for: files a config
names (``fast_tokenizer_files``, ``vocab_file``, ``tokenizer_file``), every template in
``additional_chat_templates/``, and classes a config names (``processor_class``). A folder
controls all of them, so (issue 32):

* :func:`check_processor_files`: at open, every file named by a ``*_file`` / ``*_files``
  key by a plain name is inside the folder, regular and within its size limit (a path,
  ``../outside/tokenizer.json`` or an absolute one left by an old save, is left out of
  every load: :func:`pinned_side_files` writes the config without it); the templates
  folder holds at most :data:`MAX_TEMPLATES` regular files of at most
  :data:`~fusion_core.model.limits.MAX_SMALL_SIDE_FILE` bytes; a class a config names is a
  processor, tokenizer, image processor, feature extractor or video processor (by name),
  never a model; a tokenizer's vocabulary and added tokens are counted from its bytes
  (streamed, nothing parsed) and bounded before any tokenizer parses them;
* :func:`pinned_side_files`: a private folder holding exactly those files, opened once and
  checked on the open descriptor, for ``AutoProcessor`` / ``AutoTokenizer``: a name that
  leads elsewhere finds nothing, and a file swapped after the check is not read.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, ConfigError, UnsafeModelError, quoted
from .checkpoint import fd_path, safe_member
from .limits import MAX_SMALL_SIDE_FILE, MAX_VOCAB_FILE, SMALL_SIDE_FILES, VOCAB_FILES, side_file_limit
from .safety import MAX_CONFIG_DEPTH, open_regular, read_json_object, strict_json_loads

#: the files a processor or tokenizer load may read, by name (beside those a config names)
PROCESSOR_SIDE_FILES = tuple(n for n in (*SMALL_SIDE_FILES, *VOCAB_FILES) if n != "adapter_config.json")
TEMPLATE_FOLDER = "additional_chat_templates"
MAX_TEMPLATES = 64
#: strings in a tokenizer file (each vocabulary entry, merge and added-token field is one or two):
#: the largest public tokenizers (Gemma 3: 262k entries, 33 MB) have about 1.5 M
MAX_TOKENIZER_STRINGS = 6_000_000
#: lines of a text vocabulary (vocab.txt, merges.txt)
MAX_VOCAB_LINES = 4_000_000
#: added tokens of a tokenizer (``added_tokens`` of tokenizer.json, ``added_tokens_decoder``)
MAX_ADDED_TOKENS = 300_000
_JSON_SIDE_FILES = (
    "tokenizer_config.json",
    "processor_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    "feature_extractor_config.json",
    "special_tokens_map.json",
)
_FILE_KEY = re.compile(r"(_file|_files)$")
_CLASS_KEYS = (
    "processor_class",
    "tokenizer_class",
    "image_processor_type",
    "image_processor_class",
    "feature_extractor_type",
    "feature_extractor_class",
    "video_processor_type",
    "video_processor_class",
)
_CLASS_NAME = re.compile(
    r"[A-Za-z][A-Za-z0-9_]{0,99}(Processor|ProcessorFast|ProcessorPil|Tokenizer|TokenizerFast|Backend|FeatureExtractor)"
)
_CHUNK = 8 * 2**20
MAX_CONFIG_BYTES = 8 * 1024 * 1024  # as fusion_core.model.sources reads it


def check_processor_files(folder: Path, strict: bool = False) -> list[str]:
    """Check every processor and tokenizer file of ``folder`` that a load may read (see the module docstring).

    Args:
        folder: the model folder.
        strict: refuse a file of a known name that links out of the folder too (a load
            would read it); when opening a folder such a link is left out instead (an export
            does not copy it, and a processor load refuses it).

    Returns:
        The names (relative to ``folder``) a processor or tokenizer load may read.

    Raises:
        UnsafeModelError: a name leaving the folder, or a class that is not a processor.
        ConfigError: a file too large, not a regular file, too many templates, or a
            vocabulary or added-token count over its bound.
    """
    names = [n for n in PROCESSOR_SIDE_FILES if os.path.lexists(folder / n) and (strict or _inside(folder, n))]
    for name in [n for n in names if n in _JSON_SIDE_FILES]:
        data = read_json_object(_member(folder, name), side_file_limit(name) or MAX_SMALL_SIDE_FILE, ConfigError)
        for key, value in _walk(data):
            classes = value if isinstance(value, list) else [value]
            if key in _CLASS_KEYS and not all(
                c is None or (isinstance(c, str) and _CLASS_NAME.fullmatch(c)) for c in classes
            ):
                raise UnsafeModelError(
                    f"{folder / name}: {key} names {quoted(value, 60)}, not a processor or tokenizer class; refused "
                    "(transformers would build that class from the folder)"
                )
            if _FILE_KEY.search(key):
                for named in value if isinstance(value, list) else [value]:
                    if _plain(named) and named not in names and os.path.lexists(folder / named):
                        _member(folder, named)  # a plain name linking out of the folder is refused
                        names.append(named)
                    # a path (``../x``, ``/abs``) is left out of the load (:func:`_without_paths`)
    templates = folder / TEMPLATE_FOLDER
    if os.path.lexists(templates):
        _member(folder, TEMPLATE_FOLDER)
        try:
            entries = sorted(os.listdir(templates))
        except OSError as e:
            raise ConfigError(f"{templates}: cannot be listed ({e.strerror or e})") from None
        if len(entries) > MAX_TEMPLATES:
            raise ConfigError(f"{templates}: {len(entries)} entries, more than {MAX_TEMPLATES} templates; refused")
        names += [f"{TEMPLATE_FOLDER}/{e}" for e in entries]
    for name in names:
        size = _regular_size(folder, name)
        limit = _limit(name)
        if size > limit:
            raise ConfigError(
                f"{folder / name}: {size:,} bytes, larger than the {limit:,} byte limit for this file; refused "
                "(transformers would read it whole)"
            )
        if name.endswith((".json", ".txt")) and name not in ("special_tokens_map.json",):
            _check_counts(folder / name, name)
    return names


@contextmanager
def pinned_side_files(folder: Path) -> Iterator[Path]:
    """A private folder of exactly the processor and tokenizer files :func:`check_processor_files` allows.

    Each file is opened once and checked on its descriptor (regular, within its limit); on
    Linux the private folder's entries are links to those descriptors, so a load reads the
    files that were checked and no other. Elsewhere: ``folder`` itself, after the checks.

    Raises:
        The errors of :func:`check_processor_files`.
    """
    names = check_processor_files(folder, strict=True)
    if os.path.lexists(folder / "config.json"):  # the Auto classes pick the processor by the model type
        names.append("config.json")
    if fd_path(0) is None:
        yield folder
        return
    fds: list[int] = []
    try:
        with tempfile.TemporaryDirectory(prefix="fusion-side-files-") as tmp:
            for name in names:
                link = Path(tmp) / name
                link.parent.mkdir(parents=True, exist_ok=True)
                with open_regular(_member(folder, name), ConfigError) as (f, size):
                    if size > _limit(name):
                        raise ConfigError(f"{folder / name}: larger than the {_limit(name):,} byte limit; refused")
                    if name in _JSON_SIDE_FILES:  # read once here; written without paths to other files
                        data, dropped = _without_paths(_json(f.read(size + 1), folder / name))
                        if dropped:
                            link.write_text(json.dumps(data), encoding="utf-8")
                            continue
                    fds.append(os.dup(f.fileno()))
                os.symlink(fd_path(fds[-1]), link)
            yield Path(tmp)
    finally:
        for fd in fds:
            os.close(fd)


def _json(raw: bytes, path: Path) -> Any:
    try:
        return strict_json_loads(raw)
    except (ValueError, RecursionError):
        raise ConfigError(f"{path}: not valid JSON (changed since it was opened?)") from None


def _limit(name: str) -> int:
    if name == "config.json":
        return MAX_CONFIG_BYTES
    return side_file_limit(name.rsplit("/", 1)[-1]) or (
        MAX_SMALL_SIDE_FILE if name.startswith(TEMPLATE_FOLDER) or name.endswith(".jinja") else MAX_VOCAB_FILE
    )


def _walk(value: Any, level: int = 0) -> Iterator[tuple[str, Any]]:
    if level > MAX_CONFIG_DEPTH or not isinstance(value, dict):
        return
    for key, v in value.items():
        yield str(key), v
        if isinstance(v, dict):
            yield from _walk(v, level + 1)


def _member(folder: Path, name: str) -> Path:
    try:
        return safe_member(folder, name, str(folder))
    except CheckpointError as e:
        raise UnsafeModelError(str(e).replace("shard ", "file ", 1)) from None


def _inside(folder: Path, name: str) -> bool:
    try:
        _member(folder, name)
    except UnsafeModelError:
        return False
    return True


def _plain(named: Any) -> bool:
    """A plain file name of the folder (no ``/``, ``\\``, ``..``, controls)."""
    return (
        isinstance(named, str)
        and bool(named)
        and not ("/" in named or "\\" in named or named in (".", "..") or any(ord(c) < 32 for c in named))
    )


def _without_paths(data: Any, level: int = 0) -> tuple[Any, list[str]]:
    """``data`` without the values of ``*_file(s)`` keys that are paths, and those values.

    transformers reads a file a tokenizer config names (``fast_tokenizer_files``,
    ``tokenizer_file``) from wherever it points: ``../outside/tokenizer.json`` or an
    absolute path left by an old save. A load sees the config without them and reads the
    folder's own files.
    """
    if level > MAX_CONFIG_DEPTH or not isinstance(data, dict):
        return data, []
    out: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in data.items():
        if _FILE_KEY.search(str(key)):
            items = value if isinstance(value, list) else [value]
            paths = [v for v in items if isinstance(v, str) and v and not _plain(v)]
            if paths:
                dropped += paths
                kept = [v for v in items if v not in paths]
                if isinstance(value, list):
                    out[key] = kept
                continue
        if isinstance(value, dict):
            value, more = _without_paths(value, level + 1)
            dropped += more
        out[key] = value
    return out, dropped


def _regular_size(folder: Path, name: str) -> int:
    path = _member(folder, name)
    try:
        st = path.stat()
    except OSError:
        raise ConfigError(f"{path}: cannot be read (a broken link?); remove it or fix it") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path}: not a regular file; refused")
    return st.st_size


def _check_counts(path: Path, name: str) -> None:
    """Bound a tokenizer file's entries from its bytes, streamed: nothing is parsed or held."""
    quotes = escaped = lines = added = 0
    carry = b""
    with open_regular(path, ConfigError) as (f, _size):
        while chunk := f.read(_CHUNK):
            quotes += chunk.count(b'"')
            escaped += chunk.count(b'\\"')
            lines += chunk.count(b"\n")
            window = carry + chunk
            added += window.count(b'"content"') - carry.count(b'"content"')
            carry = chunk[-16:]
    strings = (quotes - escaped) // 2
    if name.endswith(".txt") and lines > MAX_VOCAB_LINES:
        raise ConfigError(f"{path}: {lines:,} lines, more than the {MAX_VOCAB_LINES:,} of a vocabulary; refused")
    if name.endswith(".json") and strings > MAX_TOKENIZER_STRINGS:
        raise ConfigError(
            f"{path}: about {strings:,} strings, more than the {MAX_TOKENIZER_STRINGS:,} of the largest tokenizers; "
            "refused before parsing (its vocabulary alone would take gigabytes)"
        )
    if added > MAX_ADDED_TOKENS:
        raise ConfigError(f"{path}: {added:,} added tokens, more than {MAX_ADDED_TOKENS:,}; refused before parsing")
