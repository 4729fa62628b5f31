"""Which transformers class builds a config: only classes transformers ships, never the folder's code."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from transformers import PretrainedConfig

__all__ = ["model_class_for", "resolve_model_class"]

#: task mappings tried after :func:`model_class_for` finds no class;
#: the omni models, for instance, are only in the multimodal LM mapping.
_PREFERRED_TASK_MAPPINGS = (
    "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
)


def model_class_for(config: PretrainedConfig, override: str | None = None) -> type:
    """The class to build: ``override``, else ``config.architectures[0]``, else the Auto class.

    Names from the config only ever select ``PreTrainedModel`` subclasses exported by
    transformers, or defined for exactly this config class in transformers' own modeling
    module of it (a part saved alone: a vision tower, a decoder); custom classes
    (``auto_map``) fall through to the Auto class.

    Args:
        config: the config object.
        override: a transformers class name chosen by the user.

    Returns:
        The model class.

    Raises:
        ConfigError: no transformers class can be found for the config.
    """
    import transformers

    names = [override] if override else list(getattr(config, "architectures", None) or [])
    for name in names:
        # only model classes transformers ships: a name from config.json never reaches anything else
        ok = isinstance(name, str) and name.isidentifier() and not name.startswith("_")
        cls = getattr(transformers, name, None) if ok else None
        if (
            isinstance(cls, type)
            and issubclass(cls, transformers.PreTrainedModel)
            and cls is not transformers.PreTrainedModel
        ):
            return cls
        part = _declared_class(config, name) if ok else None
        if part is not None:  # a part saved alone (a vision tower): its class is not exported
            return part
        if override:
            raise ConfigError(f"unknown model class {override!r}: not a model class transformers ships")
    from transformers.models.auto import modeling_auto as ma

    for mapping_name in (
        "MODEL_MAPPING",
        "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING",
        "MODEL_FOR_MULTIMODAL_LM_MAPPING",  # the omni models have no base class
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


def resolve_model_class(config: Any) -> tuple[type, str]:
    """The class to scan for ``config``, and where it came from.

    ``model_class_for`` first (architectures, base Auto mapping and a few task mappings:
    ``"auto"``), then every other task mapping of ``modeling_auto`` (its name), then a
    model class of the config's own modeling module declared for exactly this config
    class (``"config_class"``; sub-configs such as vision encoders have no Auto entry).

    Raises:
        ConfigError: no class found.
    """
    try:
        return model_class_for(config), "auto"
    except ConfigError:
        pass
    import transformers
    from transformers.models.auto import modeling_auto

    names = sorted(n for n in dir(modeling_auto) if n.startswith("MODEL_FOR_") and n.endswith("_MAPPING_NAMES"))
    ordered = [n for n in _PREFERRED_TASK_MAPPINGS if n in names] + [
        n for n in names if n not in _PREFERRED_TASK_MAPPINGS
    ]
    for mapping_name in ordered:
        entry = getattr(modeling_auto, mapping_name).get(config.model_type)
        for class_name in entry if isinstance(entry, (list, tuple)) else [entry]:
            cls = getattr(transformers, class_name, None) if isinstance(class_name, str) else None
            if isinstance(cls, type):
                return cls, mapping_name.removesuffix("_NAMES")
    cls = _declared_class(config)
    if cls is not None:
        return cls, "config_class"
    raise ConfigError(f"no transformers model class for model_type {config.model_type!r}")


def _declared_class(config: Any, name: str | None = None) -> type | None:
    """A model class of transformers' own modeling module for ``config``'s class (named ``name``).

    Sub-configs (a vision encoder's) have no Auto entry and their classes are not exported;
    only a ``PreTrainedModel`` subclass defined in that module for exactly this config class
    is returned, so a name from config.json never reaches anything else.
    """
    from transformers import PreTrainedModel

    config_module = type(config).__module__
    if ".configuration_" not in config_module:
        return None
    try:
        modeling = importlib.import_module(config_module.replace(".configuration_", ".modeling_"))
    except ImportError:
        return None
    found = [
        v
        for v in vars(modeling).values()
        if isinstance(v, type)
        and issubclass(v, PreTrainedModel)
        and v.__module__ == modeling.__name__
        and getattr(v, "config_class", None) is type(config)
        and (name is None or v.__name__ == name)
    ]
    # a bare model before one with a head ("...ForXxx")
    found.sort(key=lambda c: ("For" in c.__name__, c.__name__.endswith("PreTrainedModel")))
    return found[0] if found else None
