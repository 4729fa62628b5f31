"""Tiny random models of any architecture: a default config shrunk, keeping its ratios.

``coverage --check`` (:mod:`fusion_core.coverage.checked`) needs a model of every type
transformers ships, small enough to build, save and check in seconds. Transformers' own
test suite has a hand-written tiny config per model, but it is not installed with the
package; so the default config is shrunk here, by rules on its field names, in its plain
(dict) form, and built back through the config class, whose own validation then runs:

- **depth**: layer counts to at most 2 (per-layer lists cut to match, keeping every kind
  of layer; layer indices clamped into range; the indices of one kind's layers listed
  anew from the cut list), stage depths to 1; Zamba's hybrid layers, which share one
  block, twice;
- **width**: 4 attention heads (key/value heads 1 or 2, so grouping still divides), head
  size 16 (rotary sections scaled with it), hidden size heads x head size, feed-forward
  and every other width scaled by the same factor (a width another config quotes, a
  projector's output for instance, follows the config it quotes; a projector's
  ``encoder_hidden_size`` that quotes none follows its sibling encoder), multipliers
  (``feedforward_mult``) kept, one layer's overrides (``per_layer_config``) shrunk as
  their fields are; relations the architecture needs kept: equal shares of the width
  (LayoutLM's ``coordinate_size``) still make it up, a pixel-shuffled MLP takes width /
  ratio ** 2, a VQ-GAN's attention width stays its deepest stage, a convolution's output
  size over channels no rule shrank stays, a codec's stack that doubles ``num_filters``
  per stride is at most :data:`MAX_STACK` channels wide, a backbone's stage channel lists
  (and the ``hidden_sizes`` it reports) shrink alike and the channel counts other configs
  take from its outputs follow them, and a Mamba mixer's heads stay a multiple of its groups;
- **experts**: at most 4, 2 per token, one group;
- **vocabulary**: 1024 tokens; special token ids beyond it move to its top (not a
  vocabulary that holds codebooks at stated token offsets: kept whole); a token id the
  model's code reads off its config and the default config lacks (:func:`read_token_ids`)
  is set: the id another config of the model names, else a free one.

Image sizes and patch sizes are kept: the image-token counts a config states (576 for a
336 px CLIP tower) stay right, and with a width of 64 the compute is small anyway; an
image size whose patch grid a pixel shuffle or a backbone's windows do not divide is
raised to the next grid they do.

:func:`tiny_configs` yields the shrunk config and then fallbacks that shrink less (depth
and experts only), for a caller that finds the first one cannot be built or run.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from typing import Any

HEADS = 4
HEAD_DIM = 16
MAX_LAYERS = 2
MAX_EXPERTS = 4
VOCAB = 1024

_WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "embed_dim", "hidden_dim", "dim", "model_dim", "width")
_HEAD_KEYS = (
    "num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "num_heads", "attention_heads",
    "decoder_attention_heads", "n_attention_heads",
)  # fmt: skip
_KV_KEYS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num", "n_head_kv")
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts")
_PER_TOKEN_KEYS = ("num_experts_per_tok", "moe_k", "moe_topk", "num_experts_per_token", "top_k", "moe_top_k")
_GROUP_KEYS = ("n_group", "topk_group", "num_expert_group", "topk_groups")
_LAYER_RE = re.compile(
    r"^(num_(hidden_|encoder_|decoder_|text_|vision_|global_)?layers|n_layers?|(encoder|decoder|text|vision)_layers"
    r"|num_hidden_layers_.*|depth|num_blocks|[a-z]+_num_hidden_layers)$"
)  # (a second stack's, under a prefix: V-JEPA 2's pred_num_hidden_layers, ViT-MAE's decoder_num_hidden_layers)
_INDEX_RE = re.compile(
    r"(layer|block).*(ind|idx|index|indexes|indices)|(ind|idx|index|indexes|indices)$"
    r"|^(moe|cross_attention|mlp_only|full_attn|full_attention|global_attn|sliding_window|kv_source|dense)_layers$"
)  # layer indices (not feature levels: RT-DETR's encode_proj_layers)
_HEAD_DIM_RE = re.compile(r"(^|_)(head_dim|dim_head|rope_head_dim|nope_head_dim|rotary_dim)$")
_FFN_RE = re.compile(r"intermediate|ffn|(^|_)d_ff$|^n_inner$|feedforward|mlp_dim|lora_rank")
#: a feed-forward multiplier, not a width (Granite Speech's feedforward_mult, VibeVoice's ffn_expansion)
_MULTIPLIER_RE = re.compile(r"(_|^)(mult|multiplier|expansion|ratio|factor)$")
#: one layer's index (SegGPT's merge_index, MiniCPM-V's insert_layer_id: where its merger runs)
_LAYER_POINT_RE = re.compile(r"^(merge|layer|block|insert_layer)_(index|idx|id)$")
_WIDTHISH_RE = re.compile(r"(hidden|dim|size|channels)")
_NOT_WIDTH_RE = re.compile(
    r"vocab|image|patch|position|window|chunk|kernel|max_|^num_|sampling|pool|stride|token|length|"
    r"bins|frames|temporal|merge|mel|spatial|batch|codebook_size|rope|cache|seq|crop"
)  # fmt: skip
_SSM_RE = re.compile(r"(mamba|ssm|linear)_?(d_ssm|n_heads|num_heads|expand_dim|headdim)$|^mamba_d_ssm$")
_SSM_HEADS_RE = re.compile(r"heads$")
_STAGE_WIDTHS_RE = re.compile(r"(dim|width|hidden_size)s?_per_stage$")
#: equal shares of the width, concatenated into it (LayoutLM's 2-D position embeddings: 4 x 128 + 2 x 128 = 768)
_SHARE_KEYS = ("coordinate_size", "shape_size")
_CHANNELS_RE = re.compile(r"(^|_)(channels?|filters|channel_list|dims?)$|channels$")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _first(d: dict[str, Any], keys: tuple[str, ...]) -> tuple[str | None, int | None]:
    for k in keys:
        if _int(d.get(k)) and d[k] > 0:
            return k, d[k]
    return None, None


def _round_up(value: float, multiple: int) -> int:
    return max(multiple, math.ceil(value / multiple) * multiple)


def _sub_dicts(d: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The nested config dicts of ``d`` (sub-configs carry a ``model_type``)."""
    for value in d.values():
        if isinstance(value, dict) and ("model_type" in value or any(k in value for k in _WIDTH_KEYS)):
            yield value


def _plan_width(d: dict[str, Any], widths: dict[int, int], head_size: int) -> dict[str, Any]:
    """Decide one config's new heads, head size and width (recorded in ``widths``); return the decisions.

    Its width is the smallest of its width fields that its heads divide (a vision tower's
    ``embed_dim``, not the ``hidden_size`` it projects to); a width another config already
    shrank keeps that config's new value, so widths that must match still do.
    """
    hkey, heads = _first(d, _HEAD_KEYS)
    candidates = [(d[k], k) for k in _WIDTH_KEYS if _int(d.get(k)) and d[k] > 0]
    if not candidates:
        return {}
    fits = [(w, k) for w, k in candidates if heads and w % heads == 0 and 8 <= w // heads <= 512]
    width, wkey = min(fits or candidates)
    head_dim = d.get("head_dim") if _int(d.get("head_dim")) and d.get("head_dim") else None
    if heads and not head_dim:
        head_dim = width // heads if width % heads == 0 else None
    new_heads = min(heads, HEADS) if heads else None
    new_head_dim = min(head_dim, head_size) if head_dim else None
    if width in widths:
        new_width = widths[width]
        if new_heads and new_width % new_heads == 0 and head_dim and head_dim * heads == width:
            new_head_dim = new_width // new_heads
    elif heads and head_dim and new_heads and new_head_dim:
        inner = heads * head_dim
        new_width = (
            new_heads * new_head_dim if inner == width else _round_up(width * new_heads * new_head_dim / inner, 8)
        )
    else:
        new_width = min(width, HEADS * head_size)
    new_width = min(new_width, width)
    parts = [width // d[k] for k in _SHARE_KEYS if _int(d.get(k)) and 0 < d[k] < width and width % d[k] == 0]
    if parts and width not in widths and new_heads and new_head_dim and heads * head_dim == width:
        # shares of the width (LayoutLM's 4 x coordinate_size + 2 x shape_size): a width they still divide
        whole = math.lcm(*parts)
        sizes = [h for h in range(new_head_dim, 1, -1) if h % 2 == 0 and new_heads * h % whole == 0]
        if sizes:
            new_head_dim, new_width = sizes[0], new_heads * sizes[0]
    widths.setdefault(width, new_width)
    for key, value in d.items():  # stage widths from this width up (SAM 2's Hiera: 96, 192, 384, 768), scaled alike
        if _STAGE_WIDTHS_RE.search(key) and isinstance(value, (list, tuple)) and value and value[0] == width:
            for v in value:
                if _int(v) and v > 0:
                    widths.setdefault(v, max(1, round(v * new_width / width)))
    return {
        "width_key": wkey,
        "width": width,
        "new_width": new_width,
        "heads_key": hkey,
        "heads": heads,
        "new_heads": new_heads,
        "head_dim": head_dim,
        "new_head_dim": new_head_dim,
    }


def _is_indices(value: Any) -> bool:
    """Distinct increasing ints: layer indices (``moe_layers``), not one flag per layer."""
    return all(_int(v) for v in value) and all(a < b for a, b in itertools.pairwise(value))


def _shrink_depth(d: dict[str, Any]) -> dict[str, int]:
    """Layer counts cut in ``d``; returns ``{key: old count}``."""
    staged = isinstance(d.get("depths"), (list, tuple))  # stages: its layer count counts stages
    old_layers = {}
    for key, value in list(d.items()):
        if _int(value) and value > MAX_LAYERS and _LAYER_RE.match(key) and not staged:
            old_layers[key] = value
        elif key in ("depths", "blocks_per_stage", "stage_num_blocks", "stage_numb_of_layers") and isinstance(
            value, (list, tuple)
        ):
            d[key] = type(value)(min(1, v) if _int(v) else v for v in value)
    counts = set(old_layers.values())
    per_layer = [
        k for k, v in d.items() if isinstance(v, (list, tuple)) and v and len(v) in counts and not _is_indices(v)
    ]
    kinds = max((len({repr(x) for x in d[k]}) for k in per_layer), default=1)
    # the layers of one kind, listed (Zamba 2's hybrid_layer_ids: where layers_block_type is "hybrid"): listed anew
    where = {
        key: (k, kind)
        for key, v in d.items()
        if key not in per_layer and isinstance(v, (list, tuple)) and v and _is_indices(v)
        for k in per_layer
        for kind in {repr(x) for x in d[k]}
        if list(v) == [i for i, x in enumerate(d[k]) if repr(x) == kind]
    }
    # Zamba's hybrid layers share one transformer block, tied by name from the first to the others: two of them
    twice = [k for k in per_layer if k == "layers_block_type" and d[k].count("hybrid") > 1]
    outputs = [d[k] for k in ("out_indices", "_out_indices") if isinstance(d.get(k), (list, tuple))]
    n = max(MAX_LAYERS, min(kinds, 4), *(min(len(o), 4) for o in outputs))  # backbone outputs stay distinct
    points = [k for k, v in d.items() if _int(v) and _LAYER_POINT_RE.search(k) and counts and v < max(counts)]
    if points:  # a layer index below a list of them (SegGPT: merge_index 2 < min([5, 11, 17, 23])): both stay apart
        lists = [v for k, v in d.items() if isinstance(v, (list, tuple)) and v and _INDEX_RE.search(k)]
        n = max(n, *(min(len(set(v)), 4) + 1 for v in lists)) if lists else n
    shared = d.get("num_kv_shared_layers")
    # the last layers reuse the caches of earlier ones (Gemma 3n, Gemma 4): a producer of each kind first
    sharing = _int(shared) and counts and 0 < shared < max(counts)
    if sharing:
        n = max(n, 2 * kinds)
    if twice:
        n = max(n, kinds + 1)
    for key in old_layers:
        d[key] = min(n, old_layers[key])
    for key in per_layer:  # one entry per layer: one of each kind first, in their order
        value = d[key]
        firsts = [i for i, x in enumerate(value) if repr(x) not in {repr(y) for y in value[:i]}]
        if sharing and len(firsts) * 2 <= n:  # each kind once as producer, then once as consumer
            d[key] = type(value)([value[i] for i in firsts] * (n // len(firsts)))
            continue
        seconds = [i for i, x in enumerate(value) if x == "hybrid" and i not in firsts][:1] if key in twice else []
        picked = sorted((firsts + seconds + [i for i in range(len(value)) if i not in firsts + seconds])[:n])
        d[key] = type(value)(value[i] for i in picked)
    for key, (k, kind) in where.items():
        d[key] = type(d[key])(i for i, x in enumerate(d[k]) if repr(x) == kind)
    if _int(shared) and counts and shared > 0:
        d["num_kv_shared_layers"] = min(n, kinds) if sharing else n  # all shared stays all shared
    if counts:
        old = max(counts)
        for key, value in list(d.items()):
            if key in old_layers or key in per_layer or key in where:
                continue
            if isinstance(value, (list, tuple)) and value and all(_int(v) for v in value) and _INDEX_RE.search(key):
                # every layer listed (Mistral Large 4's kv_source_layers: each layer its own) stays every layer
                d[key] = type(value)(range(n)) if list(value) == list(range(old)) else _moved_list(value, old, n)
            elif key in points:
                d[key] = _moved(value, old, n)
            elif key == "per_layer_config" and isinstance(value, dict):
                kept = {}
                for k in sorted(value, key=lambda k: int(k)):
                    kept.setdefault(str(min(int(k), n - 1)), value[k])
                d[key] = kept
        for key in ("stage_names", "out_features"):
            if isinstance(d.get(key), list) and all(isinstance(x, str) for x in d[key]):
                d.pop(key)
    return old_layers


def _moved(index: int, old: int, new: int) -> int:
    """A layer index of ``old`` layers mapped to ``new`` layers, keeping its relative place."""
    if index < 0:
        return max(index, -new)
    if index >= old:  # "one past the last" (stage numbering: stem is 0)
        return new
    return min(new - 1, index * new // old) if index < old - 1 else new - 1


def _moved_list(values: Any, old: int, new: int) -> Any:
    """Layer indices moved by :func:`_moved`; distinct ones stay distinct (consecutive, ending where the last went)."""
    moved = [_moved(v, old, new) for v in values]
    if len(set(values)) == len(values) and len(set(moved)) < len(moved) and all(v >= 0 for v in values):
        top = max(moved)
        order = sorted(range(len(values)), key=lambda i: values[i])
        for rank, i in enumerate(order):
            moved[i] = max(0, top - (len(values) - 1 - rank))
    return type(values)(moved)


def _feature_layers(d: dict[str, Any], n: int, old: int, moved: bool) -> None:
    """Indices into another config's layers (``vision_feature_layer``) follow its new depth."""
    for key, value in list(d.items()):
        if not re.search(r"feature_layer|hidden_state_indices|layer_ind|hook_ids", key) or (
            moved and _INDEX_RE.search(key)
        ):
            continue
        if _int(value):
            d[key] = _moved(value, old, n)
        elif isinstance(value, (list, tuple)) and value and all(_int(v) for v in value):
            d[key] = _moved_list(value, old, n)


def _shrink_experts(d: dict[str, Any]) -> None:
    for key in _EXPERT_KEYS:
        if _int(d.get(key)) and d[key] > MAX_EXPERTS:
            d[key] = MAX_EXPERTS
    # a router's counts the default config leaves unset and checkpoints name (DeepSeek-V2): set
    routed = any(_int(d.get(key)) and d[key] > 1 for key in _EXPERT_KEYS)
    grouped = routed and d.get("topk_method") == "group_limited_greedy"
    for key in _PER_TOKEN_KEYS:
        unset = key in d and d[key] is None and routed
        if unset or (_int(d.get(key)) and d[key] > 2):
            d[key] = 2
    for key in _GROUP_KEYS:
        unset = key in d and d[key] is None and grouped
        if unset or (_int(d.get(key)) and d[key] > 1):
            d[key] = 1
    if _int(d.get("n_shared_experts")) and d["n_shared_experts"] > 1:
        d["n_shared_experts"] = 1


def _special_id_keys(key: str) -> bool:
    return "token" in key and ("id" in key or "index" in key)


def _special_ids(d: dict[str, Any]) -> list[int]:
    ids: list[int] = []
    for key, value in d.items():
        if _special_id_keys(key):
            if _int(value):
                ids.append(value)
            elif isinstance(value, (list, tuple)):
                ids += [v for v in value if _int(v)]
    for sub in _sub_dicts(d):
        ids += _special_ids(sub)
    return ids


def _remap_ids(d: dict[str, Any], moved: dict[int, int]) -> None:
    for key, value in list(d.items()):
        if _special_id_keys(key):
            if _int(value):
                d[key] = moved.get(value, value)
            elif isinstance(value, (list, tuple)) and all(_int(v) for v in value):
                d[key] = type(value)(moved.get(v, v) for v in value)
    for sub in _sub_dicts(d):
        _remap_ids(sub, moved)


def _shrink_width(d: dict[str, Any], plan: dict[str, Any]) -> None:
    if not plan:
        return
    factor = plan["new_width"] / plan["width"]
    dim_factor = plan["new_head_dim"] / plan["head_dim"] if plan["head_dim"] else factor
    d[plan["width_key"]] = plan["new_width"]
    if plan["heads_key"]:
        d[plan["heads_key"]] = plan["new_heads"]
        for key in _HEAD_KEYS:  # every head count of this config (encoder and decoder)
            if key != plan["heads_key"] and _int(d.get(key)) and d[key] == plan["heads"]:
                d[key] = plan["new_heads"]
        kv_key, kv = _first(d, _KV_KEYS)
        if kv_key and kv:
            d[kv_key] = plan["new_heads"] if kv >= plan["heads"] else min(kv, 2)
    for key, value in list(d.items()):
        if key in (plan["width_key"], plan["heads_key"]) or isinstance(value, dict):
            continue
        if _INDEX_RE.search(key):  # layer indices, not sizes (Mllama's ``intermediate_layers_indices``)
            continue
        if _HEAD_DIM_RE.search(key) and _int(value) and value > 0:
            d[key] = max(2, round(value * dim_factor / 2) * 2)
        elif _MULTIPLIER_RE.search(key):
            continue
        elif (_FFN_RE.search(key) or _SSM_RE.search(key)) and _int(value) and value > 0:
            d[key] = _round_up(value * factor, 8) if not _SSM_HEADS_RE.search(key) else max(1, round(value * factor))
        elif _FFN_RE.search(key) and isinstance(value, (list, tuple)) and value and all(_int(v) for v in value):
            d[key] = type(value)(_round_up(v * factor, 8) for v in value)
    overrides = d.get("per_layer_config")
    for layer in overrides.values() if isinstance(overrides, dict) else ():
        if isinstance(layer, dict):  # one layer's own values of these fields (Dots 3's sliding layers): alike
            _shrink_override(layer, plan, factor, dim_factor)
    for key in _SHARE_KEYS:
        value = d.get(key)
        if _int(value) and 0 < value < plan["width"] and plan["width"] % value == 0:
            d[key] = max(1, plan["new_width"] // (plan["width"] // value))
    _scale_sections(d, dim_factor)


def _shrink_override(layer: dict[str, Any], plan: dict[str, Any], factor: float, dim_factor: float) -> None:
    """One layer's overrides of its config's fields, shrunk as those fields are: heads to the new
    count (key/value heads as in :func:`_shrink_width`), head sizes by the head factor, widths and ranks by the width factor."""
    heads = layer.get(plan["heads_key"]) if plan["heads_key"] else None
    for key, value in list(layer.items()):
        if not _int(value) or value <= 0:
            continue
        if key in _HEAD_KEYS:
            layer[key] = min(value, plan["new_heads"] or HEADS)
        elif key in _KV_KEYS:
            layer[key] = min(value, plan["new_heads"] or HEADS) if _int(heads) and value >= heads else min(value, 2)
        elif _HEAD_DIM_RE.search(key):
            layer[key] = max(2, round(value * dim_factor / 2) * 2)
        elif key in _WIDTH_KEYS or ((_FFN_RE.search(key) or _SSM_RE.search(key)) and not _MULTIPLIER_RE.search(key)):
            layer[key] = _round_up(value * factor, 8)


def _channels(d: dict[str, Any], skip: set[str]) -> None:
    """Convolution stacks (audio codecs, VQ-GANs): channel counts over 64 divided by 8 (not a
    count no 8 divides: SuperPoint's keypoint_decoder_dim, 8 x 8 cells and a dustbin)."""
    for key, value in list(d.items()):
        if not _CHANNELS_RE.search(key) or key in skip:
            continue
        if _int(value) and value > 64 and value % 8 == 0:
            d[key] = _channel(value)
        elif isinstance(value, (list, tuple)) and value and all(_int(v) for v in value) and max(value) > 64:
            d[key] = type(value)(_channel(v) for v in value)


#: a convolution backbone's own stage channel lists (HGNetV2's stem_channels, stage_in/mid/out_channels)
_STAGE_CHANNELS_RE = re.compile(r"^(stage|stem)_\w*channels$")


def _channel(value: int) -> int:
    """One channel count of a stack :func:`_channels` shrinks: over 64, divided by 8."""
    return _round_up(value / 8, 8) if value > 64 else value


def _stage_channels(d: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """A backbone's stage channel lists shrunk alike, each count as :func:`_channels` shrinks it, never
    as a width another config has (PP-DocLayoutV2's reading-order model is 512 wide: its HGNetV2's
    stage_in_channels 512 is not that width); the stage widths it reports (``hidden_sizes``, what its
    ``channels`` are made of) alike when they are the same counts. Returns the old lists by key, and
    the old lists of what it outputs (``hidden_sizes``, ``stage_out_channels``) when it reports them."""
    lists = {
        k: v
        for k, v in d.items()
        if _STAGE_CHANNELS_RE.match(k) and isinstance(v, (list, tuple)) and v and all(_int(x) for x in v)
    }
    sizes = d.get("hidden_sizes")
    reported = (
        isinstance(sizes, (list, tuple))
        and sizes
        and all(_int(x) for x in sizes)
        and bool(set(sizes) & {x for v in lists.values() for x in v})
    )
    if reported:
        lists["hidden_sizes"] = sizes
    for key, value in lists.items():
        d[key] = type(value)(_channel(x) for x in value)
    outputs = {k: list(v) for k, v in lists.items() if k == "hidden_sizes" or "out" in k} if reported else {}
    return lists, outputs


def _backbone_outputs(
    d: dict[str, Any], outputs: list[dict[str, list[int]]], own: set[str], widths: dict[int, int]
) -> set[str]:
    """Channel counts of ``d`` that are a backbone's outputs follow them, as :func:`_stage_channels`
    shrank them: a list that is a run of its reported stage widths (D-FINE's encoder_in_channels 512,
    1024, 2048: its HGNetV2's hidden_sizes from the second), a count that is one stage's output
    channels and no width (PP-DocLayoutV3's x4_feat_dim 128: its first stage's). Returns the keys changed."""
    changed = set()
    for key, value in list(d.items()):
        if key in own or not _CHANNELS_RE.search(key):
            continue
        for lists in outputs:
            if _int(value) and value not in widths and any(value in v for k, v in lists.items() if "out" in k):
                d[key] = _channel(value)
            elif (
                isinstance(value, (list, tuple))
                and value
                and any(
                    list(value) == v[i : i + len(value)] for v in lists.values() for i in range(len(v) - len(value) + 1)
                )
            ):
                d[key] = type(value)(_channel(x) for x in value)
            else:
                continue
            changed.add(key)
            break
    return changed


def _scale_sections(d: dict[str, Any], dim_factor: float) -> None:
    """Rotary sections (``mrope_section``) scaled with the head size, still summing to half of it."""
    for holder in (d.get("rope_scaling"), d.get("rope_parameters"), d):
        if not isinstance(holder, dict):
            continue
        for key in ("mrope_section", "mrope_sections"):
            sections = holder.get(key)
            if isinstance(sections, (list, tuple)) and sections and all(_int(v) for v in sections):
                total = sum(sections)
                target = max(len(sections), round(total * dim_factor))
                scaled = [max(1, int(v * dim_factor)) for v in sections]
                scaled[-1] += target - sum(scaled)
                holder[key] = type(sections)(scaled) if scaled[-1] > 0 else sections


def fit_rotary_sections(model: Any) -> bool:
    """Multimodal rotary sections that do not cover the frequencies their module makes, set in
    the config to ones that do (scaled, in the same proportions); True when one was set.

    A model may default its sections in code (GLM-4V: ``[8, 12, 12]``, for a head of 128 with
    half of it rotated) while its default config rotates a whole head of another size: no input
    runs, original included. Read off the built (meta) model, so it holds for any architecture
    whose rotary module keeps ``mrope_section`` beside its ``inv_freq``.
    """
    changed = False
    for module in model.modules():
        sections, inv_freq, config = (getattr(module, k, None) for k in ("mrope_section", "inv_freq", "config"))
        if not isinstance(sections, (list, tuple)) or not sections or not all(_int(v) for v in sections):
            continue
        total = getattr(inv_freq, "shape", (None,))[-1]
        holder = getattr(config, "rope_parameters", None)
        if not _int(total) or total == sum(sections) or total < len(sections) or not isinstance(holder, dict):
            continue
        scaled = [max(1, v * total // sum(sections)) for v in sections]
        scaled[-1] += total - sum(scaled)
        if scaled[-1] < 1:
            continue
        holder["mrope_section"] = scaled
        changed = True
    return changed


def _vocab(d: dict[str, Any]) -> None:
    """Every vocabulary to :data:`VOCAB` tokens; special token ids beyond it move to its top.

    The same id moves to the same place in every config (an image token the language model
    and the processor both name); the ids below :data:`VOCAB` stay where they are. A vocabulary
    that holds codebooks at stated offsets (Apertus 1.5: image codes from ``image_token_offset``,
    audio codes from ``audio_token_offset``, up to its end) is kept whole, ids and all.
    """
    if any(_int(v) and k.endswith("_token_offset") for sub in _all_dicts(d) for k, v in sub.items()):
        return
    ids = sorted({i for i in _special_ids(d) if i >= 0})
    low = {i for i in ids if i < VOCAB}
    free = (i for i in range(VOCAB - 1, -1, -1) if i not in low)
    moved = {i: next(free) for i in ids if i >= VOCAB}
    if moved:
        _remap_ids(d, moved)
    for sub in _all_dicts(d):
        for key, value in list(sub.items()):
            if "vocab" in key and _int(value) and value > VOCAB:
                sub[key] = VOCAB


def _all_dicts(d: dict[str, Any]) -> list[dict[str, Any]]:
    out = [d]
    for sub in _sub_dicts(d):
        out += _all_dicts(sub)
    return out


UNSET_WINDOW = 4096  # a default config's unset sliding window, in its tiny config (wider than any check's input)


def shrink(data: dict[str, Any], *, width: bool = True, head_size: int = HEAD_DIM) -> dict[str, Any]:
    """The plain config ``data`` shrunk (a new dict; see the module docstring).

    Args:
        data: a config's ``to_dict()``.
        width: also shrink widths, heads and vocabularies (else depth and experts only).
        head_size: the largest head size kept.
    """
    import copy

    d = copy.deepcopy(data)
    dicts = _all_dicts(d)
    cut: dict[int, int] = {}
    cuts = [_shrink_depth(sub) for sub in dicts]
    for sub, own in zip(dicts, cuts, strict=True):
        for key, old in own.items():
            cut[old] = sub[key]
        _shrink_experts(sub)
    if cut:
        old = max(cut)
        for sub, own in zip(dicts, cuts, strict=True):
            _feature_layers(sub, cut[old], old, bool(own))
    for key, value in list(d.items()):  # a layer index the top level hands down (MiniCPM-V's insert_layer_id)
        moved = [s[key] for s in dicts[1:] if _int(s.get(key)) and s[key] != value]
        if _int(value) and _LAYER_POINT_RE.search(key) and moved:
            d[key] = moved[0]
    _pixel_shuffle_grid(dicts)
    _window_grid(dicts)
    for sub in dicts:
        if "sliding_window" in sub and sub["sliding_window"] is None and "layer_types" in sub:
            # a window the code reads whatever the layer types (Step3.7 builds a sliding mask for
            # every config) and the default leaves unset: wider than any input, so no layer's
            # attention changes
            sub["sliding_window"] = UNSET_WINDOW
    _pooled_grid(dicts)  # (widths leave image, patch and token counts as they are)
    for sub in dicts:
        _unset_lists(sub)
    if not width:
        _media_tokens(d)
        return d
    widths: dict[int, int] = {}
    plans = [_plan_width(sub, widths, head_size) for sub in dicts]
    for sub, plan in zip(dicts, plans, strict=True):
        _shrink_width(sub, plan)
    text = d.get("text_config") if isinstance(d.get("text_config"), dict) else None
    text_plan = plans[dicts.index(text)] if text is not None and text in dicts else {}
    staged = [_stage_channels(sub) if not plan else ({}, {}) for sub, plan in zip(dicts, plans, strict=True)]
    outputs = [out for _, out in staged if out]
    for sub, plan, (stages, _) in zip(dicts, plans, staged, strict=True):
        own = {plan.get("width_key"), plan.get("heads_key")} if plan else set()
        own |= {k for k, v in sub.items() if _FFN_RE.search(k) or _HEAD_DIM_RE.search(k) or isinstance(v, dict)}
        own |= set(stages) | _backbone_outputs(sub, outputs, own | set(stages), widths)
        if plan and text_plan and sub is not text:
            # a tower's second width, quoted from no config (a default config whose tower
            # projects to another size of the language model): the language model's width
            for key in (*_WIDTH_KEYS, "out_hidden_size", "text_hidden_size", "output_hidden_size", "output_dim"):
                if key in own or not _int(sub.get(key)) or sub[key] in widths or sub[key] == plan["width"]:
                    continue
                sub[key] = text_plan["new_width"]
                own.add(key)
        quoted = _quoted_widths(sub, widths, own)
        if not plan:  # (not a width it quotes: an FPN's channels are its backbone's stage widths)
            _channels(sub, skip=quoted | set(stages))
    _encoder_widths(dicts, plans, widths)
    for sub, plan in zip(dicts, plans, strict=True):
        _shuffled_mlp(sub, plan)
    for sub, original in zip(dicts, _all_dicts(data), strict=True):
        _ssm_groups(sub)
        _filter_stack(sub)
        _vq_stack(sub, original)
    _vocab(d)
    _media_tokens(d)
    return d


def _vq_stack(d: dict[str, Any], original: dict[str, Any]) -> None:
    """A VQ-GAN whose attention runs at its deepest stage (Emu3's: ``hidden_size`` 1024 =
    ``base_channels`` 256 x ``channel_multiplier[-1]`` 4): ``base_channels`` divided by 8 (a
    multiple of 32, its group norms' groups) and that width following it (so: 32 x 4 = 128)."""
    base, mult = original.get("base_channels"), original.get("channel_multiplier")
    if not _int(base) or base <= 32 or not isinstance(mult, (list, tuple)) or not mult or not _int(mult[-1]):
        return
    keys = [k for k in _WIDTH_KEYS if _int(original.get(k)) and original[k] == base * mult[-1]]
    if keys:
        d["base_channels"] = _round_up(base / 8, 32)
        for key in keys:
            d[key] = d["base_channels"] * mult[-1]


#: a state-space mixer's groups (Mamba 2's ``n_groups``; not ``n_group``, a router's) and its heads
_SSM_GROUPS_RE = re.compile(r"^(mamba_|ssm_)?n_?groups$")
_SSM_HEAD_KEYS = ("mamba_num_heads", "mamba_n_heads", "n_mamba_heads", "ssm_num_heads", "num_heads")


def _ssm_groups(d: dict[str, Any]) -> None:
    """A Mamba 2 mixer shares its B and C among ``n_groups`` groups of heads (``repeat_interleave(heads
    // groups)``): its heads stay a multiple of its groups. Heads shrunk below them (Nemotron-H: 128
    heads, 8 groups; 2 heads tiny) keep the groups that divide them (their greatest common divisor)."""
    gkey = next((k for k, v in d.items() if _SSM_GROUPS_RE.match(k) and _int(v) and v > 1), None)
    hkey, heads = _first(d, _SSM_HEAD_KEYS)
    if gkey and hkey and heads and heads % d[gkey]:
        d[gkey] = math.gcd(heads, d[gkey])


MAX_STACK = 1024  # the widest stage of a convolution stack that doubles its channels per stride


def _filter_stack(d: dict[str, Any]) -> None:
    """A codec's convolution stack doubles ``num_filters`` at each stride: its widest stage has
    ``num_filters x 2 ** len(downsampling_ratios)`` channels (VibeVoice's tokenizers: 32 x 2 ** 6 =
    2048, hundreds of millions of weights); ``num_filters`` halves until that is at most :data:`MAX_STACK`."""
    ratios = d.get("downsampling_ratios", d.get("upsampling_ratios"))
    filters = d.get("num_filters")
    if not _int(filters) or not isinstance(ratios, (list, tuple)):
        return
    while filters % 2 == 0 and filters * 2 ** len(ratios) > MAX_STACK:
        filters //= 2
    d["num_filters"] = filters


def _shuffled_mlp(d: dict[str, Any], plan: dict[str, Any]) -> None:
    """A tower that pixel-shuffles its patches (``pixel_shuffle_ratio`` r: 1 / r ** 2 patches'
    features into one) feeds an MLP of width / r ** 2 inputs: Llama 4's ``intermediate_size``
    (5632 = 1408 x 4 in its checkpoints; its default config's 768 wide tower breaks that already),
    whose projector widths (``projector_input_dim``, ``projector_output_dim``, ``vision_output_dim``:
    7680 against 4096 in the default) are then one width, the tower's."""
    ratio = d.get("pixel_shuffle_ratio")
    if not plan or not isinstance(ratio, float) or not 0 < ratio < 1 or not _int(d.get("intermediate_size")):
        return
    packed = plan["new_width"] / ratio**2
    if packed != int(packed):
        return
    d["intermediate_size"] = int(packed)
    for key in ("projector_input_dim", "projector_output_dim", "vision_output_dim"):
        if _int(d.get(key)):
            d[key] = plan["new_width"]


#: the sub-configs a sibling's ``encoder_hidden_size`` can name: the encoder it cross-attends
_ENCODER_TOWERS = ("encoder_config", "audio_config", "speech_config", "vision_config")


def _encoder_widths(dicts: list[dict[str, Any]], plans: list[dict[str, Any]], widths: dict[int, int]) -> None:
    """A sub-config's ``encoder_hidden_size`` that quotes no width (Granite Speech's Q-Former
    projector: 1408, a BLIP-2 default, beside an encoder of 1024) follows its one sibling
    encoder tower's new width: the projector cross-attends that encoder's output. So does the
    last of a neck's ``downsample_channels`` that quotes no width: the neck hands its features to
    that encoder (DeepSeek-OCR 2's SAM neck ends at 896 beside a 4096 wide encoder by default)."""
    for d in dicts:
        towers = [d[k] for k in _ENCODER_TOWERS if isinstance(d.get(k), dict)]
        planned = [plans[i] for i, s in enumerate(dicts) if any(s is t for t in towers) and plans[i]]
        if len(planned) != 1:
            continue
        for sub in _sub_dicts(d):
            necks = sub.get("downsample_channels")
            neck = not any(sub is t for t in towers) and isinstance(necks, list) and necks and _int(necks[-1])
            if neck and necks[-1] not in widths.values():
                sub["downsample_channels"] = [*necks[:-1], planned[0]["new_width"]]
            value = sub.get("encoder_hidden_size")
            if any(sub is t for t in towers) or not _int(value) or value in widths.values():
                continue
            sub["encoder_hidden_size"] = planned[0]["new_width"]


_MEDIA_TOKENS = {
    "audio_token_id": "audio_config",
    "image_token_id": "vision_config",
    "image_token_index": "vision_config",
    "video_token_id": "vision_config",
    "video_token_index": "vision_config",
}


def _media_tokens(d: dict[str, Any]) -> None:
    """A medium's placeholder token the default config leaves unset although it has that medium's
    tower (Voxtral's ``audio_token_id``: its checkpoints name one): the highest free id of the
    language model's vocabulary, so the model can take that medium."""
    text = d.get("text_config") if isinstance(d.get("text_config"), dict) else d
    vocab = text.get("vocab_size") if _int(text.get("vocab_size")) else d.get("vocab_size")
    if not _int(vocab) or vocab < 2:
        return
    used = set(_special_ids(d))
    for key, tower in _MEDIA_TOKENS.items():
        if key in d and d[key] is None and isinstance(d.get(tower), dict):
            d[key] = next(i for i in range(vocab - 1, 0, -1) if i not in used)
            used.add(d[key])


#: a token id its modeling code reads off its own config (``self.config.vision_start_token_id``; not a
#: sub-config's: ``config.text_config.pad_token_id``)
_READ_TOKEN_RE = re.compile(r"(?:(?<![\w.])|(?<=self\.))config\.(\w+_token_(?:id|index))\b")


def read_token_ids(config: Any) -> dict[tuple[str, ...], list[str]]:
    """The token ids the model classes of ``config`` and of each of its sub-configs read off their
    config and neither it nor its own sub-configs have, by the sub-config's path (``()``: ``config`` itself):
    Qwen2.5-Omni's thinker reads ``vision_start_token_id`` in ``get_rope_index``, its default config
    class defines none (its checkpoints' config.json name one).

    Read in the source of every class of the model class's modeling module that takes exactly that
    config class (and of their bases in that module), not the module's other classes (a talker's
    reads are off the talker's config).
    """
    from transformers import PretrainedConfig

    tree: list[tuple[tuple[str, ...], Any]] = [((), config)]
    for path, cfg in tree:
        tree += [((*path, k), v) for k, v in vars(cfg).items() if isinstance(v, PretrainedConfig)]
    found = {
        path: [n for n in _token_reads(cfg) if not any(hasattr(c, n) for p, c in tree if p[: len(path)] == path)]
        for path, cfg in tree
    }  # (a name it or a sub-config of it has is read there: Qwen2.5-Omni's image_token_id, the thinker's)
    return {path: names for path, names in found.items() if names}


def _token_reads(config: Any) -> list[str]:
    """The ``*_token_id`` / ``*_token_index`` names the model classes of ``config`` read off it
    without a fallback (none when no model class or source is found)."""
    import inspect
    import sys

    from ..model.classes import resolve_model_class

    try:
        model_class = resolve_model_class(config)[0]
        module = sys.modules[model_class.__module__]
        takers = [
            c for c in vars(module).values() if isinstance(c, type) and c.__dict__.get("config_class") is type(config)
        ]
        owners = {b for c in (model_class, *takers) for b in c.__mro__ if b.__module__ == module.__name__}
        source = "\n".join(inspect.getsource(c) for c in sorted(owners, key=lambda c: c.__qualname__))
    except Exception:  # no model class, or no source: nothing read
        return []
    # not a name the code also quotes: hasattr(config, "decoder_pad_token_id") guards a fallback (BLIP)
    return [
        n for n in dict.fromkeys(_READ_TOKEN_RE.findall(source)) if f'"{n}"' not in source and f"'{n}'" not in source
    ]


def _free_token_ids(d: dict[str, Any], unset: dict[tuple[str, ...], list[str]]) -> None:
    """The token ids ``unset`` names (see :func:`read_token_ids`) set in ``d``'s configs: the id another
    config of ``d`` gives that name, else the highest free id of that config's language model's
    vocabulary (as :func:`_media_tokens` picks them); one name one id."""
    if not unset:
        return
    used = set(_special_ids(d))
    # a name another config of the tree gives (Pix2Struct's text config: pad_token_id) is that id, the same token
    given: dict[str, int] = {
        name: sub[name]
        for sub in reversed(_all_dicts(d))
        for names in unset.values()
        for name in names
        if _int(sub.get(name))
    }
    for path, names in unset.items():
        sub: Any = d
        for key in path:
            sub = sub.get(key) if isinstance(sub, dict) else None
        if not isinstance(sub, dict):
            continue
        vocab = _text_vocab(sub) or _text_vocab(d)
        for name in names:
            if name not in given and vocab > 1:
                i = next((i for i in range(vocab - 1, 0, -1) if i not in used), None)
                if i is None:
                    continue
                given[name] = i
                used.add(i)
            if name not in sub and name in given:
                sub[name] = given[name]


def _text_vocab(d: dict[str, Any]) -> int:
    """The vocabulary size of ``d``'s language model (its ``text_config``'s, else its own; 0: none)."""
    text = d.get("text_config") if isinstance(d.get("text_config"), dict) else d
    vocab = text.get("vocab_size") if _int(text.get("vocab_size")) else d.get("vocab_size")
    return vocab if _int(vocab) else 0


def _unset_lists(d: dict[str, Any]) -> None:
    """Lists a default config leaves unset or empty that the model's forward reads, set as a
    checkpoint's would be: one score threshold per class (0.5) and the classes' order
    (PP-DocLayout-V2's ``class_thresholds`` and ``class_order``, None by default: its forward
    fails on them), and one feature level at scale 1 for a projector with no scale factors
    (LW-DETR's ``projector_scale_factors=[]``: no image runs)."""
    labels = d.get("id2label") if isinstance(d.get("id2label"), dict) else None
    classes = len(labels) if labels else d.get("num_labels") if _int(d.get("num_labels")) else None
    for key in list(d):
        if key not in d:  # (derived from a list set before it: popped)
            continue
        if d[key] is None and classes and key.startswith("class_"):
            if key.endswith("_thresholds"):
                d[key] = [0.5] * classes
            elif key.endswith("_order"):
                d[key] = list(range(classes))
        elif key.endswith("scale_factors") and isinstance(d[key], (list, tuple)) and not d[key]:
            d[key] = [1.0]
            for derived in [
                k for k, v in d.items() if (k.endswith("_channels") and v == []) or k == "num_feature_levels"
            ]:
                d.pop(derived)  # (what the config class derives from the factors: derived anew)


def _pooled_grid(dicts: list[dict[str, Any]]) -> None:
    """A projector that pools the patch grid to ``mm_tokens_per_image`` tokens needs a token grid
    that divides the patch grid (Gemma 3 pools 64 x 64 patches to 16 x 16 tokens; its default
    config's tower has 14 x 14 patches, so its pooling kernel is 0): the token side becomes the largest
    divisor of the patch side at most the old one, pooling at least 2 x 2 where the grid allows."""
    import math

    for sub in dicts:
        tokens = sub.get("mm_tokens_per_image")
        if not _int(tokens) or tokens < 1 or math.isqrt(tokens) ** 2 != tokens:
            continue
        side = math.isqrt(tokens)
        for target in (sub, *(v for v in sub.values() if isinstance(v, dict))):
            size, patch = target.get("image_size"), target.get("patch_size")
            if not (_int(size) and _int(patch) and patch > 0 and size >= patch):
                continue
            grid = size // patch
            if side <= grid and grid % side == 0:
                break
            fits = [t for t in range(1, min(side, grid) + 1) if grid % t == 0]
            pooled = [t for t in fits if grid // t >= 2]
            sub["mm_tokens_per_image"] = (pooled or fits)[-1] ** 2
            break


def _window_grid(dicts: list[dict[str, Any]]) -> None:
    """A backbone that splits its patch grid into windows (``num_windows_side`` a side, else
    ``num_windows`` a side: RF-DETR's default config has 518 / 14 = 37 patches a side and 4
    windows, so no image runs) needs a grid they divide: the image size is raised to the next one."""
    for sub in dicts:
        side = sub.get("num_windows_side", sub.get("num_windows"))
        size, patch = sub.get("image_size"), sub.get("patch_size")
        if _int(side) and side > 1 and _int(size) and _int(patch) and patch > 0 and (size // patch) % side:
            sub["image_size"] = -(-(size // patch) // side) * side * patch


def _pixel_shuffle_grid(dicts: list[dict[str, Any]]) -> None:
    """A connector that shuffles ``scale_factor`` x ``scale_factor`` patches into one needs a patch
    grid it divides (Idefics3's default config has 224 / 32 = 7 patches a side and factor 2, so
    no image runs): the image size is raised to the next grid that divides."""
    for sub in dicts:
        factor = sub.get("scale_factor", sub.get("pixel_shuffle_factor"))  # (ModernVBERT's: 14 patches, factor 4)
        if not _int(factor) or factor < 2:
            continue
        for target in (sub, *(v for v in sub.values() if isinstance(v, dict))):
            size, patch = target.get("image_size"), target.get("patch_size")
            if _int(size) and _int(patch) and patch > 0 and (size // patch) % factor:
                target["image_size"] = -(-(size // patch) // factor) * factor * patch


def _quoted_widths(d: dict[str, Any], widths: dict[int, int], own: set[str]) -> set[str]:
    """A width this config quotes from another (a projector's output size) follows that config;
    returns the keys changed."""
    before = dict(d)
    # channels no rule shrank (Dots 3's audio stem: downsample_hidden_size 480): a convolution's output
    # size that is a multiple of one is their product (conv_output_size: 480 channels x 16 bins), kept
    kept = [
        v for k, v in d.items()
        if _int(v) and v > 64 and k.endswith(("hidden_size", "channels")) and v not in widths and v not in widths.values()
    ]  # fmt: skip
    for key, value in list(d.items()):
        if key in own or not (
            _WIDTHISH_RE.search(key) or key.endswith(("groups", "features", "pos_feats", "channel_list"))
        ):
            continue
        if key.startswith("conv") and _int(value) and any(value % v == 0 and value > v for v in kept):
            continue
        if key.endswith("pos_feats") and _int(value) and 2 * value in widths:
            d[key] = widths[2 * value] // 2  # sine positions: half the width per axis (SAM's num_pos_feats)
            continue
        if _NOT_WIDTH_RE.search(key):
            continue
        if _int(value) and value in widths:
            d[key] = widths[value]
        elif _int(value) and (k := _multiple(value, widths)):
            # a concatenation of one width's features (Mllama's vision_output_dim: 6 x 1280)
            d[key] = k * widths[value // k]
        elif isinstance(value, (list, tuple)) and value and all(_int(v) for v in value) and not key.endswith("sizes"):
            d[key] = type(value)(widths.get(v, v) for v in value)  # not stage widths (a backbone's hidden_sizes)
    return {k for k, v in d.items() if v != before.get(k)}


def _multiple(value: int, widths: dict[int, int]) -> int:
    """The ``k`` (2 to 8) for which ``value`` is ``k`` times one of ``widths`` (0: none)."""
    return next((k for k in range(2, 9) if value % k == 0 and value // k in widths), 0)


#: the variants tried, most shrunk first: (name, shrink's keyword arguments)
VARIANTS = (
    ("tiny", {"width": True, "head_size": HEAD_DIM}),
    ("tiny, wider heads", {"width": True, "head_size": 128}),
    ("shallow", {"width": False}),
)


def tiny_configs(model_type: str) -> Iterator[tuple[str, Any]]:
    """Shrunk configs of ``model_type``, most shrunk first: ``(how, config)`` (:data:`VARIANTS`).

    ``"tiny"`` shrinks depth, width, experts and vocabulary; ``"tiny, wider heads"`` keeps
    heads of up to 128 (rotary layouts that need more than 16); ``"shallow"`` shrinks depth
    and experts only, at the widths the architecture was designed with. A variant whose
    config class refuses it is skipped; when every one is refused, the first refusal is raised.
    """
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    default = cls()
    base = default.to_dict()
    unset = read_token_ids(default)
    first: Exception | None = None
    seen: list[dict[str, Any]] = []
    yielded = False
    for how, kwargs in VARIANTS:
        data = shrink(base, **kwargs)
        data.pop("transformers_version", None)
        _free_token_ids(data, unset)
        if data in seen:
            continue
        seen.append(data)
        try:
            config = cls.from_dict(data)
        except Exception as e:  # the config class refuses these values: try the next variant
            first = first or e
            continue
        yielded = True
        yield how, config
    if first is not None and not yielded:
        raise first
