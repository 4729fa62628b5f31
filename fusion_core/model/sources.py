"""Model sources: what a user names -> config, model class and checkpoint index.

Accepted specs:

* a local folder with ``config.json`` (weights optional), or a path to a ``config.json``;
* ``arch:<model_type>``: any architecture transformers knows, default config, no weights;
* ``demo:<name>``: a built-in tiny checkpoint (see :mod:`fusion_core.model.demo`);
* a hub id ``org/name``: read from the local Hugging Face cache (``config.json`` is
  downloaded when online and not cached).

A model folder is data, never code:

* a config with ``auto_map`` (custom modeling code shipped with the model) is refused
  unless ``trust_remote_code=True``; even then the folder's code is never imported: the
  model is built from the class transformers ships for its ``model_type``, and the
  source's ``notes`` say so;
* an ``attn_implementation``/``experts_implementation`` in the config that could pull
  kernels from the hub is dropped (the default is used);
* pickle checkpoints (``.bin``, ``.pt``, ``.pth``, ``.ckpt``) are never unpickled;
* ``config.json`` is read bounded in size and depth, and a config whose layer
  counts would make a model of more than ``MAX_MODULES`` modules is refused before any
  config object or model is built (:func:`check_model_size`); :func:`module_budget`
  stops a build that grows past the limit anyway; label counts and numpy position tables
  are bounded too (:mod:`fusion_core.model.limits`);
* the bytes validated are the bytes loaded: ``transformers_weights`` naming another file,
  an index beside ``model.safetensors``, and weights, index, ``config.json`` or
  ``generation_config.json`` linking out of the folder are refused; side files
  transformers reads whole are size-limited (:func:`check_side_files`).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import (
    QUOTE_LIMIT,
    CheckpointError,
    ConfigError,
    ModelSourceError,
    RemoteCodeError,
    UnsafeModelError,
    naming,
    one_line,
    quoted,
)
from .checkpoint import CheckpointIndex, identify, read_index, safe_member
from .classes import model_class_for, resolve_model_class
from .limits import GENERATION_CONFIG, check_config_costs, side_file_limit
from .safety import (
    MAX_CONFIG_DEPTH,
    MAX_LAYERS,
    MAX_MODULES,
    check_model_size,
    estimate_modules,
    module_budget,
    read_json_object,
    remote_code_files,
    without_remote_code,
)
from .side_files import check_processor_files

if TYPE_CHECKING:
    from transformers import PretrainedConfig

__all__ = [
    "MAX_LAYERS",
    "MAX_MODULES",
    "ModelSource",
    "cached_hub_models",
    "check_model_size",
    "config_from_dict",
    "estimate_modules",
    "known_model_types",
    "model_class_for",
    "module_budget",
    "read_config_dict",
    "remote_code_files",
    "resolve",
]

CONFIG_FILE = "config.json"
MAX_CONFIG_BYTES = 8 * 1024 * 1024
# weight files in pickle formats: unpickling runs code, so they are never read
PICKLE_WEIGHTS = ("pytorch_model*.bin", "pytorch_model.bin.index.json", "model*.bin", "*.pt", "*.pth", "*.ckpt")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class ModelSource:
    """A resolved model: its config, the class to build, and its checkpoint (if any)."""

    spec: str
    kind: str  # "folder" | "arch" | "demo" | "hub"
    name: str
    config: PretrainedConfig
    model_class: type
    folder: Path | None = None
    checkpoint: CheckpointIndex | None = None
    trust_remote_code: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def has_weights(self) -> bool:
        return self.checkpoint is not None

    @cached_property
    def fingerprint(self) -> str:
        """A digest of the config and class: the cache key for discovery."""
        text = self.config.to_json_string(use_diff=False)
        return hashlib.sha1(f"{self.model_class.__qualname__}\n{text}".encode()).hexdigest()[:16]

    def describe(self) -> str:
        weights = (
            f"{len(self.checkpoint.tensors)} tensors in {len(self.checkpoint.files)} file(s); "
            f"weights: {self.checkpoint.reason}"
            if self.checkpoint
            else "no weights (config only)"
        )
        return f"{self.name} [{self.model_class.__name__}, {weights}]"


def resolve(spec: str, *, trust_remote_code: bool = False, model_class: str | None = None) -> ModelSource:
    """Resolve a model spec (see module docstring) into a :class:`ModelSource`.

    Args:
        spec: what the user named.
        trust_remote_code: allow configs that point at custom code in the folder. Even then
            we only build classes transformers itself ships.
        model_class: override the class (a transformers class name).

    Raises:
        ModelSourceError: the spec cannot be resolved; the message says why.
    """
    spec = str(spec).strip()
    if not spec:
        raise ModelSourceError("empty model name: give a folder, config.json, arch:<type>, demo:<name> or org/name")
    if spec.startswith("arch:"):
        return _from_arch(spec, spec[len("arch:") :].strip(), model_class)
    if spec.startswith("demo:"):
        from .demo import DEMO_NOTES, demo_path

        name = spec[len("demo:") :].strip()
        folder = demo_path(name)
        source = _from_folder(spec, folder, trust_remote_code, model_class)
        if name in DEMO_NOTES:  # a planted or shared cache entry was replaced (issue 32)
            source.notes.append(DEMO_NOTES[name])
        source.kind = "demo"
        source.name = spec
        return source
    try:
        path = Path(spec).expanduser()
        exists = path.exists()
    except (OSError, ValueError, RuntimeError):  # NUL bytes, unknown ~user, names too long
        exists = False
        path = Path()
    if exists:
        if not path.is_dir():  # a file, or a pipe/device that reading will refuse
            if path.suffix != ".json":
                raise ModelSourceError(f"{path}: not a config.json or a model folder")
            return _from_config_file(spec, path, trust_remote_code, model_class)
        return _from_folder(spec, path, trust_remote_code, model_class)
    if _HUB_ID.match(spec) and not spec.startswith((".", "/", "~")):
        return _from_hub(spec, trust_remote_code, model_class)
    raise ModelSourceError(
        f"{spec}: no such folder or file (give a model folder, a config.json, arch:<model_type>, "
        "demo:<name> or a hub id org/name)"
    )


def read_config_dict(path: Path) -> dict[str, Any]:
    """Read ``config.json`` as data, bounded in size and depth.

    Args:
        path: the config file (a regular file; pipes and devices are refused).

    Returns:
        The JSON object.

    Raises:
        ConfigError: unreadable, too large, not JSON, not an object, too deeply nested, a
            repeated key or a NaN/Infinity (strict JSON: two parsers must not disagree).
    """
    data = read_json_object(path, MAX_CONFIG_BYTES, ConfigError)
    if _depth(data) > MAX_CONFIG_DEPTH:
        raise ConfigError(f"{path}: nested too deeply (more than {MAX_CONFIG_DEPTH} levels)")
    return data


def _depth(value: Any, level: int = 0) -> int:
    if level > MAX_CONFIG_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


def config_from_dict(
    data: dict[str, Any], where: str, *, trust_remote_code: bool = False, notes: list[str] | None = None
) -> PretrainedConfig:
    """Build the transformers config for ``data`` without running any code from the folder.

    Args:
        data: the parsed ``config.json``.
        where: the file or spec, for messages.
        trust_remote_code: open a config with ``auto_map`` anyway. Its code is still not
            run: the config and model are the classes transformers ships for ``model_type``.
        notes: a list to append what was ignored to (custom code, hub kernels).

    Returns:
        The config object.

    Raises:
        RemoteCodeError: ``auto_map`` (custom code) without ``trust_remote_code``.
        ConfigError: missing or unknown ``model_type``, layer counts that would
            build an enormous model, or values the config class rejects.
    """
    from transformers import CONFIG_MAPPING

    notes = [] if notes is None else notes
    files = remote_code_files(data)
    if files and not trust_remote_code:
        raise naming(
            RemoteCodeError(
                f"{where}: config.json asks for custom code ({_named(files)}), which could do anything "
                "on this machine, so it is not opened. Fusion Inspector never runs a model's own code: "
                "to inspect it with the class transformers ships for its model_type instead, opt in with "
                "trust_remote_code (or by confirming in the app)",
                files,
            ),
            "trust_remote_code",
        )
    model_type = data.get("model_type")
    if not model_type or not isinstance(model_type, str):
        raise ConfigError(f"{where}: config.json has no 'model_type'; cannot tell the architecture")
    if model_type not in CONFIG_MAPPING:
        custom = f"; its custom code ({_named(files)}) is never run by Fusion Inspector" if files else ""
        raise ConfigError(
            f"{where}: unknown model_type {quoted(model_type)}: this transformers does not know it{custom} "
            "(upgrade transformers, or check the config)"
        )
    # transformers writes floats JSON cannot hold as {"__float__": "Infinity"} (Falcon-H1's
    # time_step_limit) and decodes them in from_pretrained, not in from_dict: its own decoder here
    data = CONFIG_MAPPING[model_type]._decode_special_floats(data)
    check_model_size(data, where)
    check_config_costs(data, where)
    if files:
        notes.append(
            f"custom code in config.json ({_named(files)}) was not run: shown with the class transformers "
            f"ships for model_type {quoted(model_type)}, which may differ from the custom code"
        )
    data = without_remote_code(data, notes)
    try:
        return CONFIG_MAPPING[model_type].from_dict(data)
    except Exception as e:  # config classes raise many types on bad values
        raise ConfigError(
            f"{where}: config values rejected by {quoted(model_type)}: {one_line(e, limit=REJECTED_LIMIT)}"
        ) from e


#: the most characters of a config class's own reason a rejection quotes (its whole report, bounded)
REJECTED_LIMIT = 600


def _named(files: list[str], most: int = 8) -> str:
    """The custom code files a config names, for a message: bounded in count and length."""
    shown = [f if len(f) <= QUOTE_LIMIT else quoted(f) for f in files[:most]]
    more = f" and {len(files) - most:,} more" if len(files) > most else ""
    return ", ".join(shown) + more


def _close_types(model_type: str, known: list[str], most: int = 5) -> list[str]:
    """Known model types a mistyped one likely meant, best first: the same name without
    separators (``qwen25_vl`` is ``qwen2_5_vl``), then the closest spellings (difflib)."""
    import difflib

    def bare(name: str) -> str:
        return name.replace("_", "").replace("-", "").lower()

    by_bare: dict[str, str] = {}
    for t in known:
        by_bare.setdefault(bare(t), t)
    wanted = bare(model_type[:100])
    out = [by_bare[wanted]] if wanted in by_bare else []
    out += [by_bare[b] for b in difflib.get_close_matches(wanted, list(by_bare), n=most, cutoff=0.75)]
    return list(dict.fromkeys(out))[:most]


def _from_arch(spec: str, model_type: str, model_class: str | None) -> ModelSource:
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        close = _close_types(model_type, list(CONFIG_MAPPING.keys()))
        hint = f" (did you mean: {', '.join(close)}?)" if close else ""
        raise ConfigError(f"arch:{model_type}: unknown model_type{hint}; `fusion-core coverage` lists them all")
    try:
        config = CONFIG_MAPPING[model_type]()
    except Exception as e:
        raise ConfigError(f"arch:{model_type}: the default config cannot be built: {e}") from e
    check_model_size(config, spec)
    if model_class:
        cls = model_class_for(config, model_class)
    else:
        # also task mappings and sub-configs (arch:qwen2_vl_vision), as the coverage scan resolves them
        cls, _how = resolve_model_class(config)
    return ModelSource(spec=spec, kind="arch", name=spec, config=config, model_class=cls)


def _from_config_file(spec: str, path: Path, trust: bool, model_class: str | None) -> ModelSource:
    notes: list[str] = []
    folder = path.parent
    _inside(folder, path.name, "config.json")
    data = read_config_dict(path)
    config = config_from_dict(data, str(path), trust_remote_code=trust, notes=notes)
    cls = model_class_for(config, model_class)
    checkpoint = None
    if path.name == CONFIG_FILE:
        checkpoint = _checkpoint_of(folder)
        _check_explicit_weights(data, folder, checkpoint)
        check_side_files(folder)
        generation = folder / GENERATION_CONFIG
        if checkpoint is not None:  # a load reads config.json (for generation defaults) and generation_config.json
            checkpoint.identities[CONFIG_FILE] = identify(path, MAX_CONFIG_BYTES, ConfigError)
        if checkpoint is not None and os.path.lexists(generation):
            checkpoint.identities[GENERATION_CONFIG] = identify(
                generation, side_file_limit(GENERATION_CONFIG) or 0, ConfigError
            )
    return ModelSource(
        spec=spec,
        kind="folder",
        name=str(path),
        config=config,
        model_class=cls,
        folder=folder,
        checkpoint=checkpoint,
        trust_remote_code=trust,
        notes=notes,
    )


def _inside(folder: Path, name: str, what: str) -> Path:
    """``folder / name``, refused when it is a link resolving outside the folder."""
    try:
        return safe_member(folder, name, f"{folder}: {what}")
    except CheckpointError as e:
        raise UnsafeModelError(str(e).replace("shard ", "file ", 1)) from None


def _check_explicit_weights(data: dict[str, Any], folder: Path, checkpoint: CheckpointIndex | None) -> None:
    """Refuse ``transformers_weights`` naming anything but the checkpoint we validated.

    transformers loads the file it names instead of ``model.safetensors`` (even a pickle
    ``adapter_model.bin``): the bytes validated would not be the bytes loaded.
    """
    if "transformers_weights" not in data or data["transformers_weights"] is None:
        return
    named = data["transformers_weights"]
    ours = None if checkpoint is None else (checkpoint.index_file or checkpoint.files[0])
    if named == ours:
        return
    used = f"{ours}, the checkpoint Fusion Inspector validates" if ours else "no safetensors checkpoint"
    raise UnsafeModelError(
        f"{folder / CONFIG_FILE}: transformers_weights names {quoted(named)}, so transformers would load "
        f"that file instead of {used}; refused (the weights checked must be the weights loaded). Remove the "
        "field, or convert that file to model.safetensors"
    )


def check_side_files(folder: Path) -> None:
    """Refuse side files transformers reads (generation config, tokenizer, processor) that are unsafe to read.

    Each must be a regular file within its size limit
    (:func:`~fusion_core.model.safety.side_file_limit`). ``generation_config.json``, which
    every load reads, must also stay inside the folder and parse strictly. (Other links
    out of the folder are not copied by an export.)

    Raises:
        UnsafeModelError: ``generation_config.json`` links out of the folder.
        ConfigError: a side file too large, not a regular file, or an invalid generation config.
    """
    try:
        with os.scandir(folder) as it:
            entries = [(e.name, Path(e.path)) for e in it]
    except OSError as e:
        raise ModelSourceError(f"{folder}: cannot be listed ({e.strerror or e})") from None
    for name, path in sorted(entries):
        limit = side_file_limit(name)
        if limit is None:
            continue
        if name == GENERATION_CONFIG:  # read by every load: it must be the folder's own
            _inside(folder, name, name)
        try:
            st = path.stat()
        except OSError:
            raise ConfigError(f"{path}: cannot be read (a broken link?); remove it or fix it") from None
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file; refused")
        if st.st_size > limit:
            raise ConfigError(
                f"{path}: {st.st_size:,} bytes, larger than the {limit:,} byte limit for this file; refused "
                "(transformers would read it whole)"
            )
        if name == GENERATION_CONFIG:
            read_json_object(path, limit, ConfigError)
    check_processor_files(folder)  # files configs name, templates, classes, vocabulary counts (issue 32)


def _from_folder(spec: str, folder: Path, trust: bool, model_class: str | None) -> ModelSource:
    cfg = folder / CONFIG_FILE
    if not os.path.lexists(cfg):  # a pipe, folder or broken link is refused when read
        raise ModelSourceError(f"{folder}: no config.json in this folder; is it a transformers model folder?")
    source = _from_config_file(spec, cfg, trust, model_class)
    source.name = folder.name or str(folder)
    return source


def _checkpoint_of(folder: Path) -> CheckpointIndex | None:
    index = read_index(folder)
    if index is None:
        pickles = sorted({p.name for pattern in PICKLE_WEIGHTS for p in folder.glob(pattern)})
        if pickles:
            shown = ", ".join(pickles[:4]) + (f" and {len(pickles) - 4} more" if len(pickles) > 4 else "")
            raise UnsafeModelError(
                f"{folder}: only pickle weights ({shown}); loading a pickle can run any code, so they are "
                "never read. Convert them to safetensors (model.safetensors) with a tool you trust first"
            )
    return index


def _from_hub(repo_id: str, trust: bool, model_class: str | None) -> ModelSource:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}
    try:
        folder = Path(snapshot_download(repo_id, local_files_only=True))
    except LocalEntryNotFoundError:
        folder = None
    except Exception as e:
        raise ModelSourceError(f"{repo_id}: cannot read it from the local Hugging Face cache: {e}") from e
    if folder is None or not (folder / CONFIG_FILE).is_file():
        if offline:
            raise ModelSourceError(
                f"{repo_id}: not in the local Hugging Face cache, and the hub is offline (HF_HUB_OFFLINE)"
            )
        import logging

        from huggingface_hub import hf_hub_download

        hub_log = logging.getLogger("huggingface_hub")
        level = hub_log.level
        hub_log.setLevel(logging.ERROR)  # its retries log a warning each: the error below says it once
        try:
            folder = Path(hf_hub_download(repo_id, CONFIG_FILE)).parent
        except Exception as e:
            reason = one_line(e, first=True, limit=300).split(". ")[0][:200]
            raise ModelSourceError(
                f"{repo_id}: not in the local Hugging Face cache, and config.json could not be downloaded "
                f"({type(e).__name__}: {reason}); check the name and the connection"
            ) from None
        finally:
            hub_log.setLevel(level)
    source = _from_folder(repo_id, folder, trust, model_class)
    source.kind = "hub"
    source.name = repo_id
    return source


def cached_hub_models() -> list[str]:
    """Model repo ids found in the local Hugging Face cache (for the Open dialog)."""
    try:
        from huggingface_hub import scan_cache_dir

        info = scan_cache_dir()
    except Exception:
        return []
    return sorted(repo.repo_id for repo in info.repos if repo.repo_type == "model")


def known_model_types() -> list[str]:
    """Every model_type this transformers knows (for ``arch:`` completion)."""
    from transformers import CONFIG_MAPPING

    return sorted(CONFIG_MAPPING.keys())
