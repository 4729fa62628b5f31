"""Find, at run time, every model family of the installed transformers with a fusable
Conv3d patch embedding, and build a tiny config for each (test support, not a test).

Families: model types whose modeling package mentions ``Conv3d`` (a cheap text filter),
confirmed by meta-initializing their model classes with the default config and running
our ``patch_embeddings`` discovery. Omni models whose top-level class has no default
config that builds are still found through their thinker type.

Tiny configs shrink sizes generically, by field name, on the config's dict (sub-configs
included): 1-2 layers, width 64, 4 heads, vocab 512 (special token ids remapped into it,
equal ids stay equal), lists indexed by layer cut to the new depth; patch and kernel sizes
are kept. A family that cannot be shrunk this way is reported with the reason.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAMILY = "patch_embeddings"
WIDTH = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = WIDTH // HEADS
VOCAB = 512
LAYERS = 2

_LAYER_KEYS = {
    "num_hidden_layers": LAYERS,
    "depth": LAYERS,
    "num_layers": LAYERS,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "decoder_num_hidden_layers": 1,
    "pred_num_hidden_layers": 1,
    "num_spatial_layers": 1,
    "num_temporal_layers": 1,
    "num_auxiliary_layers": 1,
    "num_pooler_layers": 1,
    "max_window_layers": LAYERS,
}
_WIDTH_KEYS = (
    "hidden_size",
    "embed_dim",
    "out_hidden_size",
    "d_model",
    "output_dim",
    "thinker_hidden_size",
    "embedding_size",
    "decoder_hidden_size",
    "pred_hidden_size",
    "text_hidden_size",
    "vision_hidden_size",
    "projection_dim",
    "projector_hidden_size",
)
_FFN_KEYS = (
    "intermediate_size",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "decoder_intermediate_size",
    "projection_intermediate_size",
    "dense_intermediate_size",
)
_SMALL_FFN_KEYS = ("moe_intermediate_size", "shared_expert_intermediate_size", "shared_intermediate_size")
_HEAD_KEYS = (
    "num_attention_heads",
    "num_heads",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "decoder_num_attention_heads",
    "pred_num_attention_heads",
)
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
_HEAD_DIM_KEYS = (
    "head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "qk_head_dim",
    "index_head_dim",
    "linear_head_dim",
    "linear_key_head_dim",
    "linear_value_head_dim",
)


@dataclass
class FamilyCase:
    """One model type with fusable modules, and the classes to test for it."""

    model_type: str
    classes: list[str]
    tiny_error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.model_type


def _mentions_conv3d(model_type: str) -> bool:
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    spec = importlib.util.find_spec(f"transformers.models.{model_type_to_module_name(model_type)}")
    if spec is None or not spec.submodule_search_locations:
        return False
    folder = Path(next(iter(spec.submodule_search_locations)))
    return any("Conv3d" in f.read_text(encoding="utf-8") for f in folder.glob("modeling_*.py"))


_MAPPINGS = (
    "MODEL_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
    "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES",
)


def _classes_for(model_type: str) -> list[str]:
    """The base class and task class(es) of ``model_type`` (order: base first)."""
    from transformers.models.auto import modeling_auto as ma

    names: list[str] = []
    for mapping_name in _MAPPINGS:
        value = getattr(ma, mapping_name, {}).get(model_type)
        for name in value if isinstance(value, (list, tuple)) else [value]:
            if name and name not in names:
                names.append(name)
    return names


def _matches(cls: type, config: Any) -> list[str]:
    import torch

    from fusion_core.families import get_family
    from fusion_core.plan.discovery import discover

    with torch.device("meta"):
        model = cls(config)
    return discover(model, get_family(FAMILY), config=config).matched_paths


def _scan_type(model_type: str, classes: list[str]) -> tuple[list[str], list[str]]:
    """(classes to test, problems): scanned with the tiny config, the default one as fallback.

    A class that shows a fusable module only with the default config (its tiny config does
    not build) is a family member we cannot test tiny: it goes to the problems, by name.
    """
    import transformers
    from transformers import CONFIG_MAPPING

    found, problems = [], []
    try:
        tiny = tiny_config(model_type)
        tiny_error = ""
    except Exception as e:
        tiny, tiny_error = None, f"tiny config: {type(e).__name__}: {_short(e)}"
    for name in classes:
        cls = getattr(transformers, name)
        if tiny is not None:
            try:
                if _matches(cls, tiny):
                    found.append(name)
                continue
            except Exception as e:
                tiny_error = f"{name} (tiny config): {type(e).__name__}: {_short(e)}"
        try:
            default = CONFIG_MAPPING[model_type]()
            if _matches(cls, default):
                problems.append(f"{name} has a fusable patch embedding, but {tiny_error}")
        except Exception as e:
            problems.append(f"{tiny_error}; {name} (default config): {type(e).__name__}: {_short(e)}")
    return found, problems


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:160]


@functools.cache
def fusable_families() -> tuple[FamilyCase, ...]:
    """Every model type whose model classes have a fusable Conv3d patch embedding.

    Sub-model types (a vision tower alone, ``glm4v_vision``) are covered by their parent
    model and kept only when the parent yields nothing or when they bring a task class of
    their own. A type whose classes cannot be built at all is returned with ``tiny_error``.
    """
    import transformers
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto as ma
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    base_names = set(ma.MODEL_MAPPING_NAMES.values())
    scanned: dict[str, tuple[list[str], list[str]]] = {}
    for model_type in sorted(CONFIG_MAPPING.keys()):
        if not _mentions_conv3d(model_type):
            continue
        classes = [c for c in _classes_for(model_type) if getattr(transformers, c, None) is not None]
        if classes:
            scanned[model_type] = _scan_type(model_type, classes)
    cases = []
    for model_type, (found, errors) in scanned.items():
        module = model_type_to_module_name(model_type)
        parent = scanned.get(module)
        is_sub = model_type != module and parent is not None
        if found:
            if is_sub and parent[0] and all(c in base_names for c in found):
                continue
            cases.append(FamilyCase(model_type, found, notes=errors))
        elif errors and not is_sub:  # a sub-type's failure is its parent's
            cases.append(FamilyCase(model_type, [], tiny_error="; ".join(errors[:3])))
    return tuple(cases)


# -- tiny configs ------------------------------------------------------------------------


def tiny_config(model_type: str) -> Any:
    """A tiny config of ``model_type``: the default one, shrunk by field name."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    try:
        data = cls().to_dict()
    except Exception:
        data = {"model_type": model_type}
    ids: dict[int, int] = {}
    data = _shrink(data, ids, cls)
    return cls.from_dict(data)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _sub_config(key: str, value: Any) -> bool:
    return isinstance(value, dict) and ("model_type" in value or key.endswith("_config"))


def _shrink(d: dict[str, Any], ids: dict[int, int], cls: type | None) -> dict[str, Any]:
    out = dict(d)
    subs = getattr(cls, "sub_configs", None) or {}
    old_layers = {k: v for k, v in d.items() if k in _LAYER_KEYS and _int(v)}
    for key, value in d.items():
        if _sub_config(key, value):
            out[key] = _shrink(value, ids, subs.get(key))
        elif key in _LAYER_KEYS and _int(value):
            out[key] = min(value, _LAYER_KEYS[key])
        elif key in _WIDTH_KEYS and _int(value):
            out[key] = WIDTH
        elif key in _FFN_KEYS and _int(value):
            out[key] = 2 * WIDTH
        elif key in _SMALL_FFN_KEYS and _int(value):
            out[key] = WIDTH // 2
        elif key in _HEAD_KEYS and _int(value):
            out[key] = HEADS
        elif key == "num_key_value_heads" and _int(value):
            # some families require as many KV heads as query heads
            out[key] = HEADS if value == d.get("num_attention_heads") else KV_HEADS
        elif key in _HEAD_DIM_KEYS and _int(value) and value > 0:
            out[key] = HEAD_DIM
        elif key in _EXPERT_KEYS and _int(value):
            out[key] = 4
        elif key == "num_experts_per_tok" and _int(value):
            out[key] = 2
        elif key == "vocab_size" and _int(value):
            out[key] = VOCAB
        elif key.endswith(("token_id", "token_index")) and _int(value) and value >= VOCAB // 2:
            out[key] = _special(ids, value)
        elif key in ("image_size", "crop_size") and _int(value):
            out[key] = 2 * _patch(d)
        elif key in ("num_frames", "frames_per_clip") and _int(value):
            out[key] = 2 * _tubelet(d)
        elif key == "enable_audio_output" and value is True:
            # audio output heads (talker, vocoder) are large and fusion never touches them
            out[key] = False
    n_new = {k: out[k] for k in old_layers}
    depth = max(n_new.values(), default=LAYERS)
    for key, value in d.items():
        if not isinstance(value, list) or not value:
            continue
        for layer_key, old in old_layers.items():
            if len(value) == old and old != n_new[layer_key]:
                out[key] = _cut(value, n_new[layer_key])
                break
        if all(_int(v) for v in value) and ("index" in key or "indices" in key or "layer_ids" in key):
            out[key] = sorted({min(v, depth - 1) for v in value})[: max(depth - 1, 1)]
    _fix_rope(out, cls)
    _add_vision_tokens(out, ids)
    return out


def _special(ids: dict[int, int], value: int) -> int:
    """Remap a special token id into the tiny vocabulary (equal ids stay equal)."""
    return ids.setdefault(value, VOCAB - 1 - len(ids))


def _cut(values: list[Any], n: int) -> list[Any]:
    """The first ``n`` per-layer entries, keeping one layer of each distinct kind (hybrid models)."""
    first: dict[Any, int] = {}
    for i, v in enumerate(values):
        first.setdefault(v if not isinstance(v, (list, dict)) else repr(v), i)
    keep = sorted(first.values())[:n]
    keep += [i for i in range(len(values)) if i not in keep][: n - len(keep)]
    return [values[i] for i in sorted(keep)]


def _fix_rope(out: dict[str, Any], cls: type | None) -> None:
    key = "rope_parameters" if "rope_parameters" in out else "rope_scaling" if "rope_scaling" in out else None
    if key is None:
        return
    rope = out[key]
    if not rope and isinstance(out.get("layer_types"), list):
        # per-layer-type rope left empty by the default config: a default one per type
        out[key] = {t: {"rope_type": "default", "rope_theta": 10000.0} for t in dict.fromkeys(out["layer_types"])}
        return
    if not isinstance(rope, dict):
        return
    uses_mrope = "mrope_section" in rope or "mrope_section" in getattr(cls, "ignore_keys_at_rope_validation", ())
    if uses_mrope:
        rotary = int(HEAD_DIM * float(rope.get("partial_rotary_factor", 1.0)))
        rope = dict(rope)
        rope["mrope_section"] = _rescale(rope.get("mrope_section") or [2, 3, 3], rotary // 2)
        out[key] = rope


def _add_vision_tokens(out: dict[str, Any], ids: dict[int, int]) -> None:
    """Configs with an image token but no vision start/end tokens (default omni thinkers) get them."""
    if not any(k in out for k in ("image_token_id", "image_token_index")):
        return
    if any(k in out for k in ("vision_start_token_id", "image_start_token_id")):
        return
    out["vision_start_token_id"] = _special(ids, -1)
    out["vision_end_token_id"] = _special(ids, -2)


def _patch(d: dict[str, Any]) -> int:
    p = d.get("patch_size", d.get("tubelet_size", 16))
    return int(p[-1] if isinstance(p, (list, tuple)) else p)


def _tubelet(d: dict[str, Any]) -> int:
    t = d.get("tubelet_size", d.get("temporal_patch_size", 2))
    return int(t[0] if isinstance(t, (list, tuple)) else t)


def _rescale(parts: list[int], total: int) -> list[int]:
    """Scale ``parts`` to sum to ``total`` (largest remainder), each at least 1."""
    s = sum(parts)
    raw = [p * total / s for p in parts]
    out = [max(1, math.floor(r)) for r in raw]
    order = sorted(range(len(parts)), key=lambda i: raw[i] - math.floor(raw[i]), reverse=True)
    i = 0
    while sum(out) < total:
        out[order[i % len(order)]] += 1
        i += 1
    while sum(out) > total:
        j = max(range(len(out)), key=lambda k: out[k])
        out[j] -= 1
    return out
