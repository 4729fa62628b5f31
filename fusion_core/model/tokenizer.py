"""A tokenizer for a checkpoint that ships none, made offline with the ``tokenizers`` library.

One token a printable character, plus every special token the config names
(``image_token_index`` -> ``image_token``, ``vision_start_token_id`` -> ``vision_start_token``)
at its id; processors find them under those names. Names that share an id share its string
(CSM's ``pad_token_id`` is its ``audio_token_id``), so each keeps the config's id. The demos
save one beside their weights (:mod:`fusion_core.model.demo`); checks build one for a config
without tokenizer files (:mod:`fusion_core.run.processors`). Deterministic: the same config
gives the same tokenizer.
"""

from __future__ import annotations

import string
from typing import Any

_ID_SUFFIXES = ("_token_index", "_token_id", "_index", "_id")
#: config keys whose value is a token id but whose name says nothing of a token
_NOT_TOKENS = {"layer_index", "vision_feature_layer_index", "pad_token_id_for_loss"}


def _vocab_size(config: Any) -> int:
    """``vocab_size`` of the config or its nearest sub-config (the text model's), breadth first."""
    from transformers import PretrainedConfig

    getter = getattr(config, "get_text_config", None)
    text = getter() if callable(getter) else None
    if isinstance(getattr(text, "vocab_size", None), int) and text.vocab_size > 0:
        return int(text.vocab_size)
    queue = [config]
    while queue:
        cfg = queue.pop(0)
        value = getattr(cfg, "vocab_size", None)
        if isinstance(value, int) and value > 0:
            return value
        queue += [v for v in vars(cfg).values() if isinstance(v, PretrainedConfig)]
    return 1000


def special_tokens(config: Any) -> dict[str, int]:
    """Token names the processor may look for (``image_token``, ``boi_token``...) -> the config's id."""
    from transformers import PretrainedConfig

    found: dict[str, int] = {}
    stack = [config]
    while stack:
        cfg = stack.pop(0)
        for key, value in vars(cfg).items():
            if isinstance(value, PretrainedConfig):
                stack.append(value)
                continue
            if key in _NOT_TOKENS or not isinstance(value, int) or isinstance(value, bool) or value < 0:
                continue
            for suffix in _ID_SUFFIXES:
                if key.endswith(suffix) and (
                    "token" in key or key.startswith(("boi", "eoi", "image", "video", "audio"))
                ):
                    base = key[: -len(suffix)]
                    name = base if base.endswith("_token") else base + "_token"
                    found.setdefault(name, value)
                    break
    return found


def synthetic_tokenizer(config: Any, strings: dict[str, str] | None = None) -> Any:
    """A tokenizer for a checkpoint that ships none: characters as tokens, plus the config's special tokens.

    Args:
        config: the model config (vocab size, special token ids).
        strings: token name -> the text the processor writes for it (default ``<|name|>``).
    """
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab_size = _vocab_size(config)
    ids = special_tokens(config)
    strings = dict(strings or {})
    # one string an id: names that share one (CSM's pad and audio tokens) share its string, else only one
    # of them would keep the id; the string a processor writes for one of them, else the first name's
    shared: dict[int, str] = {}
    for name, i in ids.items():
        if name in strings and i not in shared:
            shared[i] = strings[name]
    for name, i in ids.items():
        shared.setdefault(i, f"<|{name.removesuffix('_token')}|>")
    names = {name: shared[i] for name, i in ids.items()}
    vocab: dict[str, int] = {}
    taken = set(ids.values())
    for name, i in ids.items():
        vocab.setdefault(names[name], i)
    free = (i for i in range(vocab_size) if i not in taken)
    unk = next(free, 0)
    vocab.setdefault("<unk>", unk)
    for text in strings.values():  # a token the processor writes that the config gives no id
        if text not in vocab:
            vocab[text] = next(free, unk)
    for ch in string.printable:
        if ch not in vocab:
            nxt = next(free, None)
            if nxt is None:
                break
            vocab[ch] = nxt
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    roles = {"bos_token": "bos_token", "eos_token": "eos_token", "pad_token": "pad_token"}
    named = {role: names[key] for key, role in roles.items() if key in names}
    extra = {n: s for n, s in names.items() if n not in roles}
    for name, text in list(extra.items()):  # vision_start_token is vision_bos_token to another processor
        for a, b in (("_start_token", "_bos_token"), ("_end_token", "_eos_token")):
            if name.endswith(a):
                extra.setdefault(name.removesuffix(a) + b, text)
    extra.update({n: s for n, s in strings.items() if n not in names and n not in roles})
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", extra_special_tokens=extra, **named)
    fast.add_special_tokens({"additional_special_tokens": sorted(set(names.values()) | set(strings.values()))})
    return fast
