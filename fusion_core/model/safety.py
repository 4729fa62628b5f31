"""Guards that keep a model folder data, never code, and a config bounded in cost.

* :func:`remote_code_files`: the custom code a config asks for (``auto_map``); it is
  never imported (see :func:`fusion_core.model.sources.config_from_dict`);
* :func:`without_remote_code`: a config without ``auto_map`` and without attention or
  experts implementations that could pull kernels from the hub;
* :func:`check_model_size` / :func:`estimate_modules`: refuse configs whose layer
  counts would make a meta model so large that building it freezes the app, before any
  config object or model exists;
* :func:`module_budget`: the backstop while a model is built, for sizes the estimate
  does not know;
* :func:`read_regular_file` / :func:`strict_json_loads` / :func:`read_json_object`: small
  files read without blocking on pipes or devices, and JSON parsed as strictly as
  safetensors does (repeated keys and NaN/Infinity refused, naming the key).

Label and position-table sizes and side-file limits are in :mod:`fusion_core.model.limits`.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointError, ConfigError, ModelSourceError, quoted

if TYPE_CHECKING:
    from transformers import PretrainedConfig

MAX_CONFIG_DEPTH = 32
# Guards against configs that would build enormous meta models (minutes, gigabytes).
MAX_MODULES = 200_000
MAX_LAYERS = 10_000  # per layer-count field; real models have < 200
# a lower bound of the modules one layer adds (a Llama layer has 13). Experts are not
# counted: transformers fuses most of them into one module (Doge has 16384 in embeddings).
_MODULES_PER_LAYER = 4
_LAYER_KEY = re.compile(r"(layers|layer|depths?|blocks)$", re.IGNORECASE)
_LAYER_LIST_KEY = re.compile(r"^(layer_types|layers_block_type|block_types)$")
# attention/experts implementations that run code shipped with torch/transformers; any
# other value (a hub kernel "org/name", flash attention's hub fallback) is dropped
_IMPL_KEYS = (
    "attn_implementation",
    "_attn_implementation",
    "_attn_implementation_internal",
    "experts_implementation",
    "_experts_implementation",
    "_experts_implementation_internal",
)
_LOCAL_IMPLS = {"eager", "sdpa", "flex_attention", "paged|eager", "grouped_mm", "batched_mm"}


def remote_code_files(data: dict[str, Any]) -> list[str]:
    """The custom code files a config asks for (``auto_map`` at any level), sorted.

    ``auto_map`` values are ``module.Class`` (a file in the model folder) or
    ``org/repo--module.Class`` (a file in another hub repository); lists hold several.

    Returns:
        File names like ``modeling_x.py`` or ``org/repo:modeling_x.py``; empty when the
        config asks for no custom code.
    """
    found: set[str] = set()
    for mapping in _find_key(data, "auto_map"):
        if not mapping:  # an empty auto_map asks for nothing
            continue
        values = _flat_values(mapping) if isinstance(mapping, (dict, list, tuple)) else [mapping]
        for value in values:
            if not isinstance(value, str) or not value:
                continue
            repo, _, ref = value.rpartition("--")
            module = ref.rsplit(".", 1)[0] if "." in ref else ref
            found.add(f"{repo}:{module}.py" if repo else f"{module}.py")
        if not found:
            found.add("auto_map")
    return sorted(found)


def _find_key(value: Any, key: str, level: int = 0) -> Iterator[Any]:
    if level > MAX_CONFIG_DEPTH:
        return
    if isinstance(value, dict):
        if key in value:
            yield value[key]
        for v in value.values():
            yield from _find_key(v, key, level + 1)
    elif isinstance(value, list):
        for v in value:
            yield from _find_key(v, key, level + 1)


def without_remote_code(value: Any, notes: list[str], level: int = 0) -> Any:
    """A copy of a parsed config without ``auto_map`` and without implementations from the hub.

    Args:
        value: the parsed ``config.json`` (or a part of it).
        notes: a list to append a line to for each implementation dropped.

    Returns:
        The cleaned copy (``value`` itself is not changed).
    """
    if level > MAX_CONFIG_DEPTH:
        return value
    if isinstance(value, list):
        return [without_remote_code(v, notes, level + 1) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, v in value.items():
        if key == "auto_map":
            continue
        if key in _IMPL_KEYS and v is not None and not (isinstance(v, str) and v in _LOCAL_IMPLS):
            notes.append(
                f"config.json asks for {key.lstrip('_')} {_short(v)}; ignored (it can load kernels from the hub), "
                "the default is used"
            )
            continue
        out[key] = without_remote_code(v, notes, level + 1)
    return out


def _short(value: Any, limit: int = 60) -> str:
    return quoted(value, limit)


def _flat_values(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flat_values(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat_values(v)]
    return [value]


def estimate_modules(config: PretrainedConfig | dict[str, Any]) -> tuple[int, str]:
    """A lower bound of the modules a config's model has, from its layer counts.

    Every (sub-)config contributes ``4 * layers`` (its largest layer-count field; a Llama
    layer has 13 modules), so a real model has more; the estimate only has to catch
    configs that are absurd (``num_hidden_layers=10**7``, or many deep sub-configs)
    before anything is built. Sizes it does not know are left to :func:`module_budget`.

    Args:
        config: a config object or a parsed ``config.json``.

    Returns:
        The estimate and the dotted name of the largest layer-count field ('' if none).
    """
    data = config if isinstance(config, dict) else config.to_dict()
    total, biggest, biggest_field = 0, -1, ""
    stack: list[tuple[str, Any, int]] = [("", data, 0)]
    while stack:
        prefix, d, level = stack.pop()
        if not isinstance(d, dict) or level > MAX_CONFIG_DEPTH:
            continue
        layers, layer_field = 0, ""
        for key, v in d.items():
            name = str(key)
            if isinstance(v, dict):
                stack.append((f"{prefix}{name}.", v, level + 1))
                continue
            if isinstance(v, list):
                stack.extend((f"{prefix}{name}[{i}].", x, level + 1) for i, x in enumerate(v) if isinstance(x, dict))
            count = _layer_count(name, v)
            if count > layers:
                layers, layer_field = count, prefix + name
        total += layers * _MODULES_PER_LAYER
        if layers > biggest:
            biggest, biggest_field = layers, layer_field
    return total, biggest_field


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _layer_count(name: str, v: Any) -> int:
    if _LAYER_KEY.search(name):
        if _is_int(v):
            return v
        if isinstance(v, list) and name.lower().endswith("depths") and all(_is_int(x) for x in v):
            return sum(v)
        if isinstance(v, list):
            return len(v)
    if _LAYER_LIST_KEY.match(name) and isinstance(v, list):
        return len(v)
    return 0


def check_model_size(config: PretrainedConfig | dict[str, Any], where: str, limit: int = MAX_MODULES) -> None:
    """Refuse a config whose model would be too large to build, before building anything.

    Args:
        config: a config object or a parsed ``config.json``.
        where: the file or spec, for messages.
        limit: the most modules accepted.

    Raises:
        ConfigError: a layer-count field beyond ``MAX_LAYERS``, or an estimate (see
            :func:`estimate_modules`) beyond ``limit``; the message names the field.
    """
    data = config if isinstance(config, dict) else config.to_dict()
    stack: list[tuple[str, Any, int]] = [("", data, 0)]
    while stack:
        prefix, d, level = stack.pop()
        if not isinstance(d, dict) or level > MAX_CONFIG_DEPTH:
            continue
        for key, v in d.items():
            if isinstance(v, dict):
                stack.append((f"{prefix}{key}.", v, level + 1))
            elif _layer_count(str(key), v) > MAX_LAYERS:
                raise ConfigError(
                    f"{where}: {prefix}{key} = {_short(v)} is more than {MAX_LAYERS} layers; a model that deep "
                    "cannot be inspected (it would take hours to build even without weights). Check the config"
                )
    estimate, field_name = estimate_modules(data)
    if estimate > limit:
        raise ConfigError(
            f"{where}: its layer counts ({field_name or 'layers'} and others) make a model of at least "
            f"{estimate} modules, more than the {limit} that can be inspected; refused. Check the config"
        )


@contextmanager
def module_budget(limit: int = MAX_MODULES, where: str = "the model") -> Iterator[None]:
    """Stop a model build in this thread once it has registered more than ``limit`` submodules.

    The backstop of :func:`check_model_size` for configs whose size fields it does not
    know: the model's own constructor is interrupted with an error instead of running for
    minutes. Other threads building modules at the same time are not counted.

    Args:
        limit: the most submodule registrations accepted.
        where: the model's name, for the message.

    Raises:
        ModelSourceError: from inside the build, when it grows past ``limit``.
    """
    from torch.nn.modules.module import register_module_module_registration_hook

    me = threading.get_ident()
    count = 0

    def hook(module: Any, name: str, submodule: Any) -> None:
        nonlocal count
        if threading.get_ident() == me:
            count += 1
            if count > limit:
                raise ModelSourceError(
                    f"{where}: the model grows past {limit} modules while being built; refused "
                    "(check the layer and expert counts in its config)"
                )

    handle = register_module_module_registration_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def read_regular_file(path: Path, limit: int, error: type[Exception] = CheckpointError) -> bytes:
    """Read a whole small file, refusing anything that is not a regular file or is too large.

    A FIFO or a device (e.g. a ``config.json`` linked to ``/dev/zero``) would block or never
    end, so the file is opened non-blocking and checked with ``fstat`` on the open handle.

    Args:
        path: the file.
        limit: the most bytes accepted.
        error: the exception class to raise (``CheckpointError``, ``ConfigError``...).

    Returns:
        The file's bytes.

    Raises:
        error: missing, not a regular file, unreadable, or larger than ``limit``.
    """
    with open_regular(path, error) as (f, size):
        if size > limit:
            raise error(f"{path}: {size} bytes, larger than the {limit} byte limit for this file; refused")
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise error(f"{path}: cannot be read ({e.strerror or e})") from None
    if len(data) > limit:  # grew after fstat
        raise error(f"{path}: larger than the {limit} byte limit for this file; refused")
    return data


@contextmanager
def open_regular(path: Path, error: type[Exception]) -> Iterator[tuple[Any, int]]:
    """Open a regular file for reading without ever blocking; yields (binary file, size).

    Raises:
        error: missing (or a broken link), a folder, a pipe or device, or unreadable.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        hint = " (a broken link)" if os.path.islink(path) else ""
        raise error(f"{path}: file not found{hint}") from None
    except PermissionError:
        raise error(f"{path}: permission denied") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise error(f"{path}: cannot be opened ({getattr(e, 'strerror', None) or e})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{path}: is a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: not a regular file (a pipe or a device?); refused")
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f, st.st_size


class DuplicateKeyError(ValueError):
    """A JSON object repeats a key (raised by :func:`strict_json_loads`)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {quoted(key)} appears twice")
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def strict_json_loads(data: bytes | str) -> Any:
    """Parse JSON as strict parsers (safetensors' serde, most tools) do.

    Repeated keys, ``NaN``/``Infinity`` and out-of-range numbers are refused: two parsers
    that disagree on one file are how a checked file turns into a different file when
    read again.

    Raises:
        ValueError: not valid (strict) JSON; ``UnicodeDecodeError`` for non-UTF-8 bytes.
        RecursionError: nested too deeply.
    """
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_float=_finite, parse_constant=_no_constant)


def nonfinite_key(value: Any, prefix: str = "", level: int = 0) -> str | None:
    """The dotted name of the first NaN/Infinity value in parsed JSON (``None`` if none)."""
    if level > MAX_CONFIG_DEPTH:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return prefix or "(the document)"
    items: Any = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, v in items:
        name = f"{prefix}[{key}]" if isinstance(key, int) else f"{prefix}.{key}" if prefix else str(key)
        found = nonfinite_key(v, name, level + 1)
        if found:
            return found
    return None


def read_json_object(path: Path, limit: int, error: type[Exception] = ConfigError) -> dict[str, Any]:
    """Read a small JSON object strictly (:func:`strict_json_loads`), naming what is wrong.

    Args:
        path: the file (a regular file; pipes and devices are refused).
        limit: the most bytes accepted.
        error: the exception class to raise.

    Returns:
        The JSON object.

    Raises:
        error: unreadable, too large, not UTF-8, not (strict) JSON, a repeated key or a
            NaN/Infinity (named), too deeply nested, or not an object.
    """
    raw = read_regular_file(path, limit, error)
    try:
        data = strict_json_loads(raw)
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None
    except DuplicateKeyError as e:
        raise error(
            f"{path}: key {quoted(e.key)} appears twice; refused (tools disagree on which value counts)"
        ) from None
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise error(f"{path}: nested too deeply (more than {MAX_CONFIG_DEPTH} levels)") from None
    except ValueError as e:  # NaN/Infinity, out-of-range numbers, integers with too many digits
        raise error(
            f"{path}: {_nonfinite_reason(raw) or 'not a usable JSON document (' + str(e)[:120] + ')'}"
        ) from None
    if not isinstance(data, dict):
        raise error(f"{path}: must hold a JSON object, found {type(data).__name__}")
    return data


def _nonfinite_reason(raw: bytes) -> str | None:
    try:
        loose = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    key = nonfinite_key(loose)
    return f"{key} is NaN or Infinity, which JSON does not allow; refused" if key else None
