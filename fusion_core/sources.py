"""Model sources: what a user names -> config, model class and checkpoint index.

Accepted specs:

* a local folder with ``config.json`` (weights optional), or a path to a ``config.json``;
* ``arch:<model_type>``: any architecture transformers knows, default config, no weights;
* ``demo:<name>``: a built-in tiny checkpoint (see :mod:`fusion_core.demo`);
* a hub id ``org/name``: read from the local Hugging Face cache (``config.json`` is
  downloaded when online and not cached).

A model folder is data, never code: configs with ``auto_map`` (custom modeling code) are
refused unless ``trust_remote_code=True``, pickle checkpoints are never unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .checkpoint import CheckpointIndex, read_index
from .errors import ConfigError, ModelSourceError, UnsafeModelError

if TYPE_CHECKING:
    from transformers import PretrainedConfig

CONFIG_FILE = "config.json"
MAX_CONFIG_BYTES = 8 * 1024 * 1024
MAX_CONFIG_DEPTH = 32
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.bin")
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
            f"{len(self.checkpoint.tensors)} tensors in {len(self.checkpoint.files)} file(s)"
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
        from .demo import demo_path

        folder = demo_path(spec[len("demo:") :].strip())
        source = _from_folder(spec, folder, trust_remote_code, model_class)
        source.kind = "demo"
        source.name = spec
        return source
    path = Path(spec).expanduser()
    if path.exists():
        if path.is_file():
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

    Raises:
        ConfigError: unreadable, too large, not JSON, not an object, or too deeply nested.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {size} bytes, larger than the {MAX_CONFIG_BYTES} byte limit for a config")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply (more than {MAX_CONFIG_DEPTH} levels)") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must hold a JSON object, found {type(data).__name__}")
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


def config_from_dict(data: dict[str, Any], where: str, *, trust_remote_code: bool = False) -> PretrainedConfig:
    """Build the transformers config for ``data`` without running any code from the folder.

    Raises:
        ConfigError: missing or unknown ``model_type``, or values the config class rejects.
        UnsafeModelError: ``auto_map`` (custom code) without ``trust_remote_code``.
    """
    from transformers import CONFIG_MAPPING

    if "auto_map" in data and not trust_remote_code:
        files = sorted({str(v).split(".")[0] + ".py" for v in _flat_values(data["auto_map"])})
        raise UnsafeModelError(
            f"{where}: config.json asks for custom code ({', '.join(files) or 'auto_map'}); "
            "it is not run by default. Inspect the files, then opt in with --trust-remote-code"
        )
    model_type = data.get("model_type")
    if not model_type:
        raise ConfigError(f"{where}: config.json has no 'model_type'; cannot tell the architecture")
    if model_type not in CONFIG_MAPPING:
        raise ConfigError(
            f"{where}: unknown model_type {model_type!r}: this transformers does not know it "
            "(upgrade transformers, or check the config)"
        )
    data = {k: v for k, v in data.items() if k != "auto_map"}
    try:
        return CONFIG_MAPPING[model_type].from_dict(data)
    except Exception as e:  # config classes raise many types on bad values
        raise ConfigError(f"{where}: config values rejected by {model_type!r}: {e}") from e


def _flat_values(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flat_values(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat_values(v)]
    return [value]


def model_class_for(config: PretrainedConfig, override: str | None = None) -> type:
    """The class to build: ``override``, else ``config.architectures[0]``, else the Auto class.

    Raises:
        ConfigError: no transformers class can be found for the config.
    """
    import transformers

    names = [override] if override else list(getattr(config, "architectures", None) or [])
    for name in names:
        cls = getattr(transformers, name, None) if isinstance(name, str) else None
        if isinstance(cls, type):
            return cls
        if override:
            raise ConfigError(f"unknown model class {override!r}: not a class transformers ships")
    from transformers.models.auto import modeling_auto as ma

    for mapping_name in (
        "MODEL_MAPPING",
        "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING",
        "MODEL_FOR_CAUSAL_LM_MAPPING",
        "MODEL_FOR_PRETRAINING_MAPPING",
        "MODEL_WITH_LM_HEAD_MAPPING",
    ):
        mapping = getattr(ma, mapping_name, None)
        if mapping is None:
            continue
        try:
            cls = mapping[type(config)]
        except (KeyError, ValueError, AttributeError, ImportError):
            continue
        if isinstance(cls, (list, tuple)):
            cls = cls[0]
        return cls
    raise ConfigError(f"no transformers model class for model_type {config.model_type!r}")


def _from_arch(spec: str, model_type: str, model_class: str | None) -> ModelSource:
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        close = [t for t in CONFIG_MAPPING if model_type and (model_type in t or t in model_type)][:5]
        hint = f" (did you mean: {', '.join(close)}?)" if close else ""
        raise ConfigError(f"arch:{model_type}: unknown model_type{hint}; `fusion-core coverage` lists them all")
    try:
        config = CONFIG_MAPPING[model_type]()
    except Exception as e:
        raise ConfigError(f"arch:{model_type}: the default config cannot be built: {e}") from e
    cls = model_class_for(config, model_class)
    return ModelSource(spec=spec, kind="arch", name=spec, config=config, model_class=cls)


def _from_config_file(spec: str, path: Path, trust: bool, model_class: str | None) -> ModelSource:
    config = config_from_dict(read_config_dict(path), str(path), trust_remote_code=trust)
    cls = model_class_for(config, model_class)
    folder = path.parent
    checkpoint = _checkpoint_of(folder) if path.name == CONFIG_FILE else None
    return ModelSource(
        spec=spec,
        kind="folder",
        name=str(path),
        config=config,
        model_class=cls,
        folder=folder,
        checkpoint=checkpoint,
        trust_remote_code=trust,
    )


def _from_folder(spec: str, folder: Path, trust: bool, model_class: str | None) -> ModelSource:
    cfg = folder / CONFIG_FILE
    if not cfg.is_file():
        raise ModelSourceError(f"{folder}: no config.json in this folder; is it a transformers model folder?")
    source = _from_config_file(spec, cfg, trust, model_class)
    source.name = folder.name or str(folder)
    return source


def _checkpoint_of(folder: Path) -> CheckpointIndex | None:
    index = read_index(folder)
    if index is None:
        pickles = [name for name in PICKLE_WEIGHTS if (folder / name).exists()]
        if pickles:
            raise UnsafeModelError(
                f"{folder}: only pickle weights ({', '.join(pickles)}); they can run code when loaded and "
                "are not read. Convert them to safetensors with a tool you trust first"
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
        from huggingface_hub import hf_hub_download

        try:
            folder = Path(hf_hub_download(repo_id, CONFIG_FILE)).parent
        except Exception as e:
            raise ModelSourceError(f"{repo_id}: not in the local Hugging Face cache, and download failed: {e}") from e
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
