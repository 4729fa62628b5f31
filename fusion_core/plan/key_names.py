"""Which checkpoint key loads into which model key, decided the way transformers decides it.

transformers renames checkpoint keys on load with each model's conversion mapping
(:func:`transformers.conversion_mapping.get_model_conversion_mapping`): ViT and DINOv2
checkpoints store ``...attention.attention.query.weight`` for the model's
``...attention.q_proj.weight``, Qwen2-VL stores ``visual.`` for ``model.visual.``; then it
adds or strips the model's base prefix. A few entries are converters that compute a model
tensor from other tensors (chunk, concatenate, transpose...). :class:`KeyMatcher` runs
the model's own renamings over every checkpoint key once (linear in the number of keys),
so a model key finds the checkpoint key that transformers would load into it; a key that
only a converter produces is reported as such (:class:`Converted`), and a fusion family
must refuse it rather than guess its bytes. A dotted-suffix match stays as the fallback
for prefixes no rule covers (a task model's ``model.``), and is the only matching when
there is no model.

Naming the keys of the other layout of a transform (the rule, also in docs):

* **fused keys** keep the checkpoint's naming of what the fusion does not change: when the
  source keys differ from the model's keys by a prefix swap that also covers the fused
  key (Qwen2-VL: ``visual.patch_embed.linear_proj.weight``), that swap is applied;
  otherwise (transformers renames inside the key, e.g. ViT's ``attention.attention.query``)
  the fused key is written in the model's own naming, with the checkpoint's base-prefix
  convention (``layers.0.attention.qkv_proj.weight``). Either way the name must load back
  into the fused model key through the same renamings, which is checked.
* **original keys** (restoring a fused checkpoint) are named the way ``save_pretrained``
  names them: where the checkpoint uses legacy names, the reverse renamings are applied,
  so original -> fused -> original gives back the very same keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class Found:
    """A checkpoint key that loads into the model key looked up."""

    key: str  # as stored in the checkpoint
    renamed: str  # after transformers' renamings, before the base-prefix adjustment


@dataclass(frozen=True)
class Converted:
    """A model key that transformers computes from checkpoint tensors with real operations."""

    model_key: str
    sources: tuple[str, ...]  # the checkpoint keys the converter reads
    operations: str  # e.g. "Chunk"

    def reason(self) -> str:
        srcs = ", ".join(self.sources[:3]) + (f" (and {len(self.sources) - 3} more)" if len(self.sources) > 3 else "")
        return (
            f"transformers computes {self.model_key} from {srcs} with {self.operations} on load; "
            "a fusion of keys that a conversion computes is refused (their bytes are not in the checkpoint)"
        )


class KeyMatcher:
    """Maps model state-dict keys onto a checkpoint's key names, and names new keys.

    Args:
        checkpoint_keys: every key of the checkpoint.
        model: the (meta) model the checkpoint is for; without it (or when transformers
            has no mapping for it) keys are matched by dotted suffix only.
    """

    def __init__(self, checkpoint_keys: Iterable[str], model: nn.Module | None = None) -> None:
        self.keys = set(checkpoint_keys)
        self.note = ""  # why transformers' renamings could not be followed, if so
        self._prefix = ""  # the model's base_model_prefix
        self._model_keys: set[str] = set()
        self._loads: dict[str, list[str]] = {}  # model key -> checkpoint keys renamed into it
        self._unmatched: dict[str, list[str]] = {}  # renamed form -> checkpoint keys loading into no model key
        self._renamed: dict[str, str] = {}  # checkpoint key -> renamed form, where they differ
        self._converted: dict[str, Converted] = {}
        self._spoken: set[str] = set()  # checkpoint keys transformers renames or loads somewhere
        self._forward: tuple[list[Any], list[Any]] | None = None  # (renamings, converters)
        self._reversible: list[Any] = []  # the transforms save_pretrained would reverse for this checkpoint
        self._reverse: tuple[list[Any], list[Any]] | None = None
        self.legacy_names = False  # the checkpoint uses names that the model's own renamings change
        if model is not None:
            self._follow_renames(model)
        fallback = [k for k in self.keys if k not in self._spoken]
        self._fallback = set(fallback)
        self._by_tail: dict[str, list[str]] = {}
        for k in fallback:
            self._by_tail.setdefault(_tail(k), []).append(k)

    # -- transformers' renamings ---------------------------------------------------------

    def _follow_renames(self, model: nn.Module) -> None:
        try:
            from transformers import PreTrainedModel
            from transformers.conversion_mapping import (
                get_checkpoint_conversion_mapping,
                get_model_conversion_mapping,
            )
            from transformers.core_model_loading import (
                GroupWeightRename,
                PrefixChange,
                WeightConverter,
                WeightRenaming,
                dot_natural_key,
            )
        except ImportError as e:  # another transformers version: names only
            self.note = f"transformers' key renamings are unavailable ({e}); checkpoint keys are matched by name"
            return
        if not isinstance(model, PreTrainedModel):
            return
        try:
            specific = list(get_model_conversion_mapping(model, add_legacy=False))
            legacy = list(get_checkpoint_conversion_mapping("legacy") or [])
        except Exception as e:  # a third-party registry: matching by name still works without it
            self.note = (
                f"transformers' key renamings for {type(model).__name__} could not be read "
                f"({type(e).__name__}: {e}); checkpoint keys are matched by name"
            )
            return
        transforms = specific + legacy
        renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
        converters = [t for t in transforms if isinstance(t, WeightConverter)]
        by_pattern = {p: c for c in converters for p in c.source_patterns}
        self._forward = (renamings, converters)
        self._prefix = model.base_model_prefix or ""
        self._model_keys = set(model.state_dict())
        # a grouped renaming keeps state across keys: then the order transformers renames in
        stateful = any(isinstance(t, GroupWeightRename) for t in renamings)
        for key in sorted(self.keys, key=dot_natural_key) if stateful else sorted(self.keys):
            renamed, pattern = self._rename(key)
            target = self._with_prefix(renamed)
            if target not in self._model_keys and key in self._model_keys:
                # transformers keeps a key of the model that its renamings would lose
                renamed, target, pattern = key, self._with_prefix(key), None
            if renamed != key:
                self._renamed[key] = renamed
            if renamed != key or pattern is not None or target in self._model_keys:
                self._spoken.add(key)
            if pattern is not None:
                conv = by_pattern[pattern]
                ops = ", ".join(type(op).__name__ for op in conv.operations)
                for produced in _produced(renamed, conv.target_patterns):
                    model_key = self._with_prefix(produced)
                    old = self._converted.get(model_key)
                    sources = (old.sources if old else ()) + (key,)
                    self._converted[model_key] = Converted(model_key, sources, ops)
            elif target in self._model_keys:
                self._loads.setdefault(target, []).append(key)
            else:
                self._unmatched.setdefault(renamed, []).append(key)
        self.legacy_names = any(t.was_used() for t in specific)
        # reversed as save_pretrained reverses: every model-specific renaming (a prefix change
        # only when it was used: it cannot tell otherwise), the generic legacy ones when used
        self._reversible = [t for t in specific if t.was_used() or not isinstance(t, PrefixChange)]
        self._reversible += [t for t in legacy if t.was_used()]

    def _rename(self, key: str) -> tuple[str, str | None]:
        """transformers' renaming of one checkpoint key: (renamed, matched converter pattern or None)."""
        if self._forward is None:
            return key, None
        from transformers.core_model_loading import rename_source_key

        return rename_source_key(key, *self._forward)

    def _with_prefix(self, key: str) -> str:
        """transformers' base-prefix adjustment of a renamed key against the model's keys."""
        p = self._prefix
        if not p:
            return key
        if key.startswith(p + ".") and key[len(p) + 1 :] in self._model_keys:
            return key[len(p) + 1 :]
        if f"{p}.{key}" in self._model_keys:
            return f"{p}.{key}"
        return key

    def _reverse_rename(self, key: str) -> str | None:
        """The name ``save_pretrained`` would write for ``key`` (None: a converter produces it)."""
        if self._reverse is None:
            from transformers.core_model_loading import WeightConverter, WeightRenaming

            try:
                rev = [t.reverse_transform() for t in reversed(self._reversible)]
            except (ValueError, TypeError, AttributeError):  # a transform transformers cannot reverse
                rev = []
            self._reverse = (
                [t for t in rev if isinstance(t, WeightRenaming)],
                [t for t in rev if isinstance(t, WeightConverter)],
            )
        from transformers.core_model_loading import rename_source_key

        name, pattern = rename_source_key(key, *self._reverse, reverse=True)
        return None if pattern is not None else name

    # -- lookups -------------------------------------------------------------------------

    def lookup(self, model_key: str) -> Found | Converted | None:
        """The checkpoint key that loads into ``model_key`` (a key of the model, or a fused key).

        Returns:
            :class:`Found`, :class:`Converted` (transformers computes it from other
            tensors), or None (absent, or ambiguous: several keys would load into it).
        """
        if self._forward is not None:
            keys = self._loads.get(model_key)
            if keys:
                return Found(keys[0], self._renamed.get(keys[0], keys[0])) if len(keys) == 1 else None
            converted = self._converted.get(model_key)
            if converted is not None:
                return converted
            if model_key not in self._model_keys:  # a key of the fused model: by its renamed form
                for renamed in self._prefix_variants(model_key):
                    keys = self._unmatched.get(renamed)
                    if keys:
                        return Found(keys[0], renamed) if len(keys) == 1 else None
        found = self._by_suffix(model_key)
        return Found(found, found) if found is not None else None

    def find(self, model_key: str) -> tuple[str, str, str] | None:
        """(checkpoint key, prefix to strip, prefix to add) for ``model_key``, or None.

        The prefixes are those around the longest dotted suffix both keys share (see
        :func:`translate`).
        """
        hit = self.lookup(model_key)
        return (hit.key, *prefix_swap(model_key, hit.key)) if isinstance(hit, Found) else None

    def _prefix_variants(self, key: str) -> list[str]:
        p = self._prefix
        out = [key]
        if p:
            out.append(f"{p}.{key}")
            if key.startswith(p + "."):
                out.append(key[len(p) + 1 :])
        return out

    def _by_suffix(self, model_key: str) -> str | None:
        """A checkpoint key naming ``model_key`` with another prefix (keys no renaming claims)."""
        if model_key in self._fallback:
            return model_key
        found = []
        candidates = self._by_tail.get(_tail(model_key), [])
        for k in candidates:
            if model_key.endswith("." + k) or k.endswith("." + model_key):
                found.append(k)
        if not found and candidates:
            # a prefix renamed in the middle (omni models save ``thinker.visual.`` for the
            # model's ``thinker.model.visual.``): the checkpoint key sharing the longest
            # dotted suffix, when exactly one does
            scored = [(len(_common_suffix(model_key.split("."), k.split("."))), k) for k in candidates]
            best = max(n for n, _ in scored)
            found = [k for n, k in scored if n == best]
        return found[0] if len(found) == 1 else None

    # -- naming the other layout ---------------------------------------------------------

    def loads_into(self, checkpoint_key: str, model_key: str) -> bool:
        """Whether transformers would load ``checkpoint_key`` into ``model_key`` of a model having it.

        Without the model's renamings this cannot be told, and is assumed (names by suffix only).
        """
        if self._forward is None:
            return True
        renamed, pattern = self._rename(checkpoint_key)
        if pattern is not None:
            return False
        if model_key in self._prefix_variants(renamed):
            return True
        # transformers keeps a key that its renamings turn into nothing the model has
        return checkpoint_key == model_key and renamed not in self._model_keys

    def fused_names(self, model_keys: Sequence[str], ref_key: str, ref: Found) -> tuple[tuple[str, ...], str]:
        """Checkpoint names for the fused ``model_keys`` of a transform whose source ``ref_key`` is ``ref``.

        Returns:
            The names and a problem ('' when transformers would load each name into its key).
        """
        candidates = []
        for stored in (ref.key, ref.renamed):
            swap = prefix_swap(ref_key, stored)
            if covers(swap, model_keys):
                candidates.append(tuple(translate(k, *swap) for k in model_keys))
        return self._first_loadable(candidates, model_keys)

    def original_names(self, model_keys: Sequence[str], ref_key: str, ref: Found) -> tuple[tuple[str, ...], str]:
        """Checkpoint names for the original ``model_keys`` of a transform whose fused ``ref_key`` is ``ref``.

        Returns:
            The names and a problem ('' when transformers would load each name into its key).
        """
        candidates = []
        swap = prefix_swap(ref_key, ref.renamed)
        if self.legacy_names and covers(swap, model_keys):
            legacy = tuple(self._reverse_rename(translate(k, *swap)) for k in model_keys)
            if all(legacy):
                candidates.append(legacy)
        for stored in (ref.key, ref.renamed):
            swap = prefix_swap(ref_key, stored)
            if covers(swap, model_keys):
                candidates.append(tuple(translate(k, *swap) for k in model_keys))
        return self._first_loadable(candidates, model_keys)  # type: ignore[arg-type]

    def _first_loadable(
        self, candidates: list[tuple[str, ...]], model_keys: Sequence[str]
    ) -> tuple[tuple[str, ...], str]:
        for names in candidates:
            if all(self.loads_into(n, k) for n, k in zip(names, model_keys)):
                return names, ""
        names = candidates[0] if candidates else tuple(model_keys)
        bad = next((n, k) for n, k in zip(names, model_keys) if not self.loads_into(n, k))
        renamed, pattern = self._rename(bad[0])
        what = "a conversion would consume it" if pattern is not None else f"it would load as {renamed}"
        return (
            names,
            f"no checkpoint name for {bad[1]} loads back into it with transformers' renamings ({bad[0]}: {what})",
        )


def prefix_swap(model_key: str, checkpoint_key: str) -> tuple[str, str]:
    """(strip, add): the prefixes around the longest dotted suffix the two keys share."""
    m, c = model_key.split("."), checkpoint_key.split(".")
    n = len(_common_suffix(m, c))
    strip, add = ".".join(m[: len(m) - n]), ".".join(c[: len(c) - n])
    return (strip + "." if strip else "", add + "." if add else "")


def covers(swap: tuple[str, str], keys: Iterable[str]) -> bool:
    """Whether the prefix swap applies to every key (each starts with the prefix to strip)."""
    strip = swap[0]
    return all(k.startswith(strip) for k in keys)


def translate(model_key: str, strip: str, add: str) -> str:
    """``model_key`` with ``strip`` removed from its start and ``add`` put there."""
    if strip and model_key.startswith(strip):
        model_key = model_key[len(strip) :]
    return add + model_key


def _common_suffix(a: list[str], b: list[str]) -> list[str]:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return a[len(a) - n :]


def _produced(renamed: str, targets: Sequence[str]) -> list[str]:
    """The keys a converter writes: the renamed key with its first target pattern swapped for each."""
    head, sep, tail = renamed.partition(targets[0])
    if not sep or len(targets) == 1:
        return [renamed]
    return [head + t + tail for t in targets]


def _tail(key: str) -> str:
    return ".".join(key.rsplit(".", 3)[-3:])
