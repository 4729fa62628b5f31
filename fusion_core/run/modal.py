"""End-to-end inputs for every modality a model takes: image+text, video+text, audio+text.

:func:`end_to_end_groups` returns one *group* of candidate inputs per run: for each
modality the model's forward takes (``pixel_values`` -> image, ``pixel_values_videos`` ->
video, ``input_features`` / ``input_values`` -> audio) the media (the user's files, else
seeded synthetic ones) go through the model's own processor
(:mod:`fusion_core.run.processors`: the checkpoint's files, else built from the config);
inputs made from the config (:mod:`fusion_core.run.inputs`) follow as the next candidate.
The runner keeps the first candidate of each group that the model accepts and verifies
each fused module on the first run that reaches it.

The user's files are never replaced by synthetic ones: a file the model cannot take (no
such modality, a processor that fails, inputs the model refuses) is an error.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import CheckError, one_line
from ..families._sample_inputs import config_value, patch_grids
from ..text import printable
from .audio_inputs import _AUDIO_LENGTHS
from .candidates import candidate_inputs
from .inputs import (
    DEFAULT_GRID_IMAGE_SIZE,
    ModelInputs,
    decoder_ids,
    entry_module,
    key_modality,
    patch_conv,
    pixel_conv,
    token_types,
)
from .media import DEFAULT_AUDIO_SECONDS, DEFAULT_FRAMES, Media
from .part_inputs import flat_grid_pixels
from .results import FedInput

if TYPE_CHECKING:
    from torch import nn

    from ..boundary.options import CheckOptions, Workload
    from ..model.sources import ModelSource

MODALITY_KEYS = {  # the usual names; a model's own come from its forward (:func:`modality_keys`)
    "image": ("pixel_values",),
    "video": ("pixel_values_videos",),
    "audio": ("input_features", "input_values", "input_audio_features"),
}
PROCESSOR_KIND = "processor"  # input_kind of a run on the user's files or prompt


@dataclass
class Group:
    """One run to make: candidates in order; ``required``: the user's files, an error if none runs."""

    label: str  # "image+text", "video+text", "audio+text", "text", "image"
    candidates: list[ModelInputs] = field(default_factory=list)
    required: bool = False
    notes: list[str] = field(default_factory=list)


def modality_keys(params: Any) -> dict[str, tuple[str, ...]]:
    """The media inputs a forward takes, read from its parameter names (``inspect.signature``), in the
    order image, video, audio: each medium with the names it is fed under (Video-LLaVA:
    ``pixel_values_images``, ``pixel_values_videos``)."""
    found: dict[str, list[str]] = {"image": [], "video": [], "audio": []}
    for name in params:
        kind = key_modality(name)
        if kind is not None:
            found[kind].append(name)
    return {kind: tuple(names) for kind, names in found.items() if names}


def taken_modalities(entry: nn.Module) -> list[str]:
    """The media ``entry``'s forward takes, in the order image, video, audio; a medium whose tower
    the config leaves out (``vision_config`` / ``audio_config`` None: EmbeddingGemma 2's forward
    takes pixels, its default config has no vision tower) is not taken."""
    config = getattr(entry, "config", None)
    absent = {
        kind
        for kind, key in (("image", "vision_config"), ("video", "vision_config"), ("audio", "audio_config"))
        if config is not None and key in vars(config) and vars(config)[key] is None
    }
    return [k for k in modality_keys(inspect.signature(entry.forward).parameters) if k not in absent]


def _entry(model: nn.Module, paths: list[str]) -> tuple[str, nn.Module]:
    path = entry_module(model, paths)
    return path, (model.get_submodule(path) if path else model)


def _user_media(options: CheckOptions, sampling_rate: int) -> list[Media]:
    from .media import read_audio, read_image, read_video

    media = []
    if options.images:
        read = [read_image(p) for p in options.images]
        media.append(Media("image", [m.items[0] for m in read], ", ".join(m.source for m in read)))
    if options.video:
        media.append(read_video(options.video, options.workload.frames))
    if options.audio:
        media.append(read_audio(options.audio, sampling_rate or 16000))
    return media


def _sampling_rate(proc: Any) -> int:
    fe = getattr(proc, "feature_extractor", None) or proc
    return int(getattr(fe, "sampling_rate", 0) or 0)


def _synthetic(kind: str, config: Any, workload: Workload, grid: bool, rate: int, notes: list[str]) -> Media:
    from ..model.limits import MAX_INPUT_FRAMES, MAX_INPUT_SIDE, MAX_SAMPLING_RATE, clamped
    from .media import synthetic_audio, synthetic_image, synthetic_video

    side = config_value(config, "image_size")
    side = side[0] if isinstance(side, (list, tuple)) and side else side
    side = int(clamped(side, MAX_INPUT_SIDE, "config image_size", notes)) if _number(side) else None
    n = max(1, workload.batch)
    if kind == "image":
        size = workload.image_size or side or DEFAULT_GRID_IMAGE_SIZE
        # a grid model takes any size: one merge unit wider than high, so a swapped (h, w) layout shows
        wide = 28 if grid and not workload.image_size else 0
        return synthetic_image(size + wide, size, workload.seed, n)
    if kind == "video":
        size = workload.image_size or min(side or 56, 56)
        frames = config_value(config, "num_frames")
        frames = int(clamped(frames, MAX_INPUT_FRAMES, "config num_frames", notes)) if _number(frames) else None
        return synthetic_video(size, size, workload.frames or frames or DEFAULT_FRAMES, workload.seed, n)
    rate = int(clamped(rate, MAX_SAMPLING_RATE, "the processor's sampling_rate", notes)) if rate else 16000
    return synthetic_audio(DEFAULT_AUDIO_SECONDS, rate, workload.seed, n)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1


def _prompt(workload: Workload, given: str | None) -> str:
    if given is not None:
        return given
    import random

    rng = random.Random(workload.seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(workload.seq_len or 8))


def _wrapped(proc: Any, kind: str) -> str:
    """The placeholder of one ``kind`` item, between the start/end tokens the tokenizer names."""
    placeholder = getattr(proc, f"{kind}_token", None) or ""
    tok = getattr(proc, "tokenizer", None)
    group = "vision" if kind in ("image", "video") else kind
    start = end = ""
    for name in (f"{kind}_start_token", f"{group}_start_token", f"{group}_bos_token"):
        value = getattr(tok, name, None) if tok is not None else None
        if isinstance(value, str) and value and value != placeholder:
            start = value
            break
    for name in (f"{kind}_end_token", f"{group}_end_token", f"{group}_eos_token"):
        value = getattr(tok, name, None) if tok is not None else None
        if isinstance(value, str) and value and value != placeholder:
            end = value
            break
    return f"{start}{placeholder}{end}"


def _processed(
    proc: Any,
    media: Media,
    prompt: str,
    params: dict,
    dtype: Any,
    workload: Workload,
    entry_path: str,
    label: str,
    given: bool = False,
) -> ModelInputs:
    """``media`` and ``prompt`` through ``proc``: the model's keyword arguments, and what was fed."""
    import torch

    arg = {"image": "images", "video": "videos", "audio": "audio"}[media.kind]
    n = max(1, workload.batch)
    items = media.items if len(media.items) >= n or media.source != "synthetic" else media.items * n
    kwargs: dict[str, Any] = {arg: items}
    if media.kind == "audio":
        kwargs["sampling_rate"] = media.sampling_rate
    per_row = max(1, len(items) // n)
    own_tokens = ""  # a note where the processor writes its own placeholders
    if "input_ids" in params and getattr(proc, "tokenizer", None) is not None:
        # the prompt is built here, never by the folder's chat template: a Jinja template is
        # unbounded in time and memory ('x' * 6000000000, nested loops), and the check
        # compares fused with original on the same tokens whatever the layout of the turn
        ours = _wrapped(proc, media.kind) * per_row
        try:
            out = proc(text=[ours + prompt] * n, return_tensors="pt", **kwargs)
        except Exception as e:  # a processor that writes its own placeholders (Florence-2): without ours
            if not ours:
                raise
            out = _own_placeholders(proc, media.kind, prompt, n, kwargs, e)
            own_tokens = (
                f"{label}: the processor inserts its own {media.kind} tokens (with ours too: {one_line(e, limit=160)})"
            )
    elif media.kind == "audio":  # an audio model alone: its feature extractor
        out = proc(items, sampling_rate=media.sampling_rate, return_tensors="pt")
    else:  # a vision tower alone: its image processor
        out = proc(**{("images" if arg == "images" else arg): items}, return_tensors="pt")
    kept: dict[str, Any] = {}
    for key, value in _as_taken(dict(out), params).items():
        if key in params and isinstance(value, torch.Tensor):
            kept[key] = value.to(dtype) if value.is_floating_point() and dtype is not None else value
    text_keys = ("input_ids", "mm_token_type_ids", "token_type_ids", "attention_mask")
    order = [k for k in kept if k not in text_keys] + [k for k in text_keys if k in kept]
    kept = {k: kept[k] for k in order}  # media first, as the inputs made from the config
    token_id = _token_id(proc, media.kind) if "mm_token_type_ids" in params and "input_ids" in kept else None
    if token_id is not None and "mm_token_type_ids" not in kept:  # the multimodal rotary positions (MiniCPM-V 4.7)
        kept["mm_token_type_ids"] = token_types(kept["input_ids"], token_id, media.kind)
    missing = [k for k in out if key_modality(k) == media.kind and k not in kept]
    if not any(key_modality(k) == media.kind for k in kept):
        raise CheckError(f"the processor made no {media.kind} inputs this model takes ({', '.join(missing) or 'none'})")
    if "use_cache" in params:
        kept["use_cache"] = False
    if "return_dict" in params:
        kept["return_dict"] = True
    fed = [FedInput(label, media.kind, len(items), media.size(), media.source)]
    if "input_ids" in kept:
        ids = kept["input_ids"]
        fed.append(
            FedInput(label, "text", int(ids.shape[0]), f"{ids.shape[-1]} tokens", "prompt" if given else "synthetic")
        )
    inputs = ModelInputs(entry_path, kept, label, [], fed=fed)
    if own_tokens:
        inputs.notes.append(own_tokens)
    return inputs


def _as_taken(out: dict[str, Any], params: Any) -> dict[str, Any]:
    """A processor's outputs under the names the forward takes: a medium the forward takes under
    one name that the processor wrote under another (Video-LLaVA's processor writes
    ``pixel_values_images``, its model takes ``pixel_values``) is renamed."""
    taken = modality_keys(params)
    renamed = dict(out)
    for key in out:
        kind = key_modality(key)
        if kind is None or key in params:
            continue
        free = [k for k in taken.get(kind, ()) if k not in out]
        same = [k for k in out if key_modality(k) == kind and k not in params]
        if len(free) == 1 and len(same) == 1:
            renamed[free[0]] = renamed.pop(key)
    for key in out:  # a vision tower alone takes its medium's grid as ``grid_thw`` (Cosmos3-Edge, VideoLLaMA 3)
        bare = key.removeprefix("image_").removeprefix("video_")
        if bare in _BARE_GRID and bare != key and key not in params and bare in params and bare not in renamed:
            renamed[bare] = renamed.pop(key)
    return renamed


_BARE_GRID = ("grid_thw", "merge_sizes")


def _own_placeholders(proc: Any, kind: str, prompt: str, n: int, kwargs: dict[str, Any], error: Exception) -> Any:
    """``proc``'s output on the prompt alone, for a processor that inserts its own ``kind`` tokens
    (Florence-2 writes ``<image>`` before every prompt, so ours doubles it); ``error`` (the
    first attempt's) is raised again unless the output holds the processor's own ``kind`` tokens."""
    import torch

    try:
        out = proc(text=[prompt] * n, return_tensors="pt", **kwargs)
    except Exception:
        raise error from None
    token_id = _token_id(proc, kind)
    ids = dict(out).get("input_ids")
    if not isinstance(token_id, int) or not isinstance(ids, torch.Tensor) or not bool((ids == token_id).any()):
        raise error
    return out


def _token_id(proc: Any, kind: str) -> int | None:
    """The id of ``proc``'s own ``kind`` placeholder token (``image_token_id``, else its ``image_token``)."""
    token_id = getattr(proc, f"{kind}_token_id", None)
    token = getattr(proc, f"{kind}_token", None)
    tok = getattr(proc, "tokenizer", None)
    if not isinstance(token_id, int) and isinstance(token, str) and tok is not None:
        token_id = tok.convert_tokens_to_ids(token)
    return token_id if isinstance(token_id, int) and not isinstance(token_id, bool) else None


def _fed_of(inputs: ModelInputs, label: str) -> list[FedInput]:
    """What config-built inputs feed, read from their tensors."""
    kw = inputs.kwargs
    fed = []
    if "image_grid_thw" in kw or "grid_thw" in kw:  # grid_thw: a vision tower alone
        g = kw.get("image_grid_thw", kw.get("grid_thw"))
        fed.append(
            FedInput(label, "image", int(g.shape[0]), f"grid {'x'.join(map(str, g[0].tolist()))} patches", "synthetic")
        )
    if "video_grid_thw" in kw:
        g = kw["video_grid_thw"]
        fed.append(
            FedInput(label, "video", int(g.shape[0]), f"grid {'x'.join(map(str, g[0].tolist()))} tubelets", "synthetic")
        )
    for key in [k for k in kw if key_modality(k) in ("image", "video")]:
        v = kw.get(key)
        grids = ("image_grid_thw", "video_grid_thw", "grid_thw")
        if v is not None and v.dim() >= 4 and not any(g in kw for g in grids):
            clip = key_modality(key) == "video" or (v.dim() == 5 and inputs.kind == "video")
            # (five dimensions and no clip: several images per sample, a keypoint matcher's pairs)
            count = int(v.shape[0]) if clip or v.dim() == 4 else int(v.shape[0] * v.shape[1])
            fed.append(
                FedInput(label, "video" if clip else "image", count, f"{v.shape[-1]}x{v.shape[-2]} px", "synthetic")
            )
    for key in [k for k in kw if key_modality(k) == "audio"][:1]:
        v = kw.get(key)
        if v is not None and hasattr(v, "shape") and v.dim() >= 2:
            lengths = next((kw[k] for k in _AUDIO_LENGTHS if k in kw and v.dim() == 2), None)
            count, dims = (len(lengths), v.shape) if lengths is not None else (int(v.shape[0]), v.shape[1:])
            fed.append(FedInput(label, "audio", count, f"{key} {'x'.join(map(str, dims))}", "synthetic"))
    ids = kw.get("input_ids")
    if ids is not None:
        fed.append(FedInput(label, "text", int(ids.shape[0]), f"{ids.shape[-1]} tokens", "synthetic"))
    return fed


def _label(inputs: ModelInputs) -> str:
    kw = inputs.kwargs
    kinds = []
    if any(key_modality(k) == "image" for k in kw):  # (a clip in pixel_values: VideoMAE's, ViViT's)
        kinds.append("video" if inputs.kind == "video" else "image")
    if any(key_modality(k) == "video" for k in kw):
        kinds.append("video")
    if any(key_modality(k) == "audio" for k in kw):
        kinds.append("audio")
    if "grid_thw" in kw:  # a vision tower alone: flattened patches and their grid
        kinds.append("image")
    kinds = list(dict.fromkeys(kinds))
    if "input_ids" in kw:
        kinds.append("text")
    return "+".join(kinds) or inputs.kind


def end_to_end_groups(model: nn.Module, paths: list[str], source: ModelSource, options: CheckOptions) -> list[Group]:
    """The runs of a check's end-to-end stage (see the module docstring).

    Raises:
        OptionError: a given file does not exist.
        CheckError: a given file cannot be read, the model takes no such input, or the
            processor cannot make inputs of it.
    """
    from .processors import processor_for, tokenizer_for

    workload = options.workload
    entry_path, entry = _entry(model, paths)
    params = dict(inspect.signature(entry.forward).parameters)
    config = getattr(entry, "config", None) or source.config
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    taken = taken_modalities(entry)
    user = bool(options.images or options.video or options.audio)
    name = type(entry).__name__
    for kind, given in (("image", options.images), ("video", options.video), ("audio", options.audio)):
        if given and kind not in taken:
            keys = " / ".join(MODALITY_KEYS[kind])
            raise CheckError(f"--{kind}: {name} takes no {kind} (its forward has no {keys})")
    folder = getattr(source, "folder", None)
    proc, proc_note = None, ""
    if taken:
        try:
            proc, proc_note = processor_for(folder, config)
        except Exception as e:  # the checkpoint's processor files do not load
            proc_note = f"the checkpoint's processor failed ({one_line(e, first=True, named=True, limit=200)})"
            if user or options.prompt is not None:
                raise CheckError(f"{proc_note}: the given files cannot be processed") from None
        if proc is not None and "input_ids" not in params:  # a vision tower alone: the image processor
            proc = getattr(proc, "image_processor", proc)
    groups: list[Group] = []
    media = _user_media(options, _sampling_rate(proc)) if user else []
    sized: list[str] = list(getattr(proc, "fusion_size_notes", None) or [])  # sizes clamped (issue 32)
    if not user:
        grid = "image_grid_thw" in params
        media = [_synthetic(k, config, workload, grid, _sampling_rate(proc), sized) for k in taken]
    prompt = _prompt(workload, options.prompt)
    fallback = [] if user else list(_config_candidates(model, paths, workload))
    absent = set(modality_keys(params)) - set(taken)  # a medium whose tower the config leaves out
    fallback = [c for c in fallback if not set(_label(c).split("+")) & absent]  # (Nemotron-H Omni's audio)
    for m in media:
        label = f"{m.kind}+text" if "input_ids" in params else m.kind
        group = Group(label, required=user)
        handles = proc is not None and (
            (m.kind == "image" and getattr(proc, "image_processor", proc) is not None and _has(proc, "image"))
            or (m.kind == "audio" and _has(proc, "audio"))
        )
        if handles:
            try:
                made = _processed(
                    proc, m, prompt, params, dtype, workload, entry_path, label, options.prompt is not None
                )
                where = printable(m.source) if user else f"synthetic {m.kind} ({m.size()})"
                made.notes.append(f"{label}: {where} through {proc_note}")
                if getattr(proc, "chat_template", None) and "input_ids" in params:
                    made.notes.append(
                        f"{label}: prompt built by Fusion Inspector (the folder's chat template is not run)"
                    )
                if user or options.prompt is not None:
                    made.kind = PROCESSOR_KIND
                group.candidates += [made, *_with_decoder(made, config, params)]
            except CheckError as e:
                if user:
                    raise CheckError(f"--{m.kind}: {e}") from None
                group.notes.append(f"{label}: {e}")
            except Exception as e:  # the processor failed on these media
                why = one_line(e, first=True, named=True, limit=200)
                if user:
                    raise CheckError(f"--{m.kind}: the processor failed on {m.source} ({why})") from None
                group.notes.append(f"{label}: the processor failed ({why})")
        elif proc_note and proc is None and not (m.kind == "image" and "input_ids" in params):
            group.notes.append(f"{label}: no processor ({proc_note}); inputs made from the config")
        elif user and m.kind == "video":
            text_ids = None
            if options.prompt is not None:
                text_ids = tokenizer_for(folder, config)[0](options.prompt)["input_ids"]
            group.candidates += _user_video_grid(model, paths, m, workload, params, text_ids)
        if m.kind == "image" and "input_ids" in params:
            # next (or where the processor cannot be built): the image processor alone, and as
            # many image tokens as the model makes image features (its token strings may not be
            # the config's: a processor built from the config can miscount)
            try:
                made = _counted(model, paths, folder, config, m, prompt, params, dtype, workload, label)
                how = f"no processor ({proc_note}); " if proc is None else ""
                made.notes.append(
                    f"{label}: {how}{printable(m.source)} image through the model's image processor, "
                    "as many image tokens as its image features"
                )
                if user or options.prompt is not None:
                    made.kind = PROCESSOR_KIND
                group.candidates += [made, *_with_decoder(made, config, params)]
            except Exception as e:  # no image processor either: inputs from the config
                why = one_line(e, first=True, named=True, limit=200)
                if not user and not group.candidates:
                    try:  # pictures of the tower's size, as many image tokens as the model makes features
                        made = _counted_clip(model, paths, config, params, dtype, workload, label, "image")
                        made.notes[0] += f" (no processor: {proc_note}; image processor: {why})"
                        group.candidates += [made, *_with_decoder(made, config, params)]
                    except Exception as e2:
                        why += f"; none from the config either ({one_line(e2, first=True, named=True, limit=150)})"
                if user and not group.candidates:
                    raise CheckError(
                        f"image: no processor ({proc_note}), and its image processor failed ({why})"
                    ) from None
                if not group.candidates:
                    group.notes.append(
                        f"{label}: no processor ({proc_note}; image processor: {why}); inputs from the config"
                    )
        if user and not group.candidates:
            raise CheckError(f"--{m.kind}: {name}'s processor takes no {m.kind} here ({proc_note or 'none'})")
        if not user:
            # a video model fed through its image input (TimeSformer: clips in ``pixel_values``)
            # takes the config's clips here too, first where the config made them first
            clips = m.kind == "image" and "video" not in taken
            made_before, failed = len(group.candidates), list(group.notes)
            group.candidates += [
                c for c in fallback if _label(c).split("+")[0] == m.kind or (clips and _label(c).startswith("video"))
            ]
            if m.kind == "video" and "input_ids" in params:
                # a clip of the vision tower's size, as many video tokens as the model makes features
                # (after the config's clips: a clip in ``pixel_values`` with text but no video tokens
                # runs nowhere in LLaVA-NeXT-Video)
                try:
                    made = _counted_clip(model, paths, config, params, dtype, workload, label, "video")
                    group.candidates += [made, *_per_step_spans(made, config, params)]
                except Exception as e:
                    group.notes.append(f"{label}: none from the config ({one_line(e, first=True, named=True)})")
            if m.kind == "audio" and "input_ids" in params:
                try:  # audio features of the encoder's shape, as many audio tokens as the model makes features
                    group.candidates.append(_counted_audio(model, paths, config, params, dtype, workload, label))
                except Exception as e:
                    group.notes.append(f"{label}: none from the config ({one_line(e, first=True, named=True)})")
            said = failed[-1].endswith(("inputs made from the config", "inputs from the config")) if failed else True
            if not said and len(group.candidates) > made_before:  # the processor's failure, and what runs instead
                group.notes[len(failed) - 1] += "; inputs made from the config instead"
        groups.append(group)
    for c in groups[0].candidates if groups and sized else []:
        c.notes.extend(dict.fromkeys(sized))
    if not user:
        # a media run nothing was made for takes the config's inputs of another kind the model
        # takes in the same tensor (a video model's clip in ``pixel_values``: VideoMAE, ViViT)
        used = {id(c) for g in groups for c in g.candidates}
        spare = [c for c in fallback if id(c) not in used and _label(c) != "text"]
        for group in groups:
            if not group.candidates and spare:
                group.label, group.candidates, spare = _label(spare[0]), spare, []
        text = Group("text")
        if options.prompt is not None and "input_ids" in params:
            tok, where = tokenizer_for(folder, config)
            ids = tok(options.prompt, return_tensors="pt")["input_ids"].repeat(max(1, workload.batch), 1)
            kw: dict[str, Any] = {"input_ids": ids}
            if "attention_mask" in params:
                import torch

                kw["attention_mask"] = torch.ones_like(ids)
            if "use_cache" in params:
                kw["use_cache"] = False
            fed = [FedInput("text", "text", int(ids.shape[0]), f"{ids.shape[-1]} tokens", "prompt")]
            text.candidates.append(
                ModelInputs(entry_path, kw, PROCESSOR_KIND, [f"text: a prompt through {where}"], fed=fed)
            )
        text.candidates += [c for c in fallback if _label(c) == "text" or not taken]
        text.required = options.prompt is not None and not taken
        if not groups or (options.prompt is not None and not taken):
            groups.append(text)
        else:
            groups.append(Group("text", text.candidates, notes=["fallback"]))
    for g in groups:
        for c in g.candidates:
            if not c.fed:
                c.fed = _fed_of(c, _label(c))
            # each run is named by what it feeds (the user's files: their source is in ``fed``)
            c.kind = "+".join(dict.fromkeys(f.modality for f in c.fed)) if c.kind == PROCESSOR_KIND else _label(c)
        if not g.candidates and "fallback" not in g.notes:
            kind = g.label.split("+")[0]
            why = "; ".join(g.notes) or (
                f"the processor makes no {kind} inputs here"
                + (" (transformers' video processors need torchvision)" if kind == "video" else "")
                + f", and none could be made from the config ({type(entry).__name__})"
            )
            g.notes.append(f"{g.label}: not run ({why})")
    if groups and user:  # the media the model takes that no given file is of
        skipped = [k for k in taken if k not in {m.kind for m in media}]
        given = ", ".join(f"--{m.kind}" for m in media)
        groups[0].notes += [f"{k}: not run (only the given files are run: {given})" for k in skipped]
    return groups


def _rows(features: Any) -> int:
    """How many feature vectors (= image tokens) ``get_image_features`` made."""
    import torch

    if isinstance(features, torch.Tensor):
        return int(features.shape[:-1].numel())
    if isinstance(features, (list, tuple)):
        return sum(_rows(f) for f in features)
    for key in ("pooler_output", "image_embeds", "last_hidden_state"):
        value = getattr(features, key, None)
        if value is not None:
            return _rows(value)
    raise CheckError(f"cannot count the image features ({type(features).__name__})")


def _features(entry: nn.Module, kind: str) -> Any:
    """``entry``'s ``get_{kind}_features``, else its base model's (DeepSeek-VL's generation class
    has none of its own; its ``model`` has)."""
    for owner in (entry, getattr(entry, "base_model", None)):
        method = getattr(owner, f"get_{kind}_features", None)
        if callable(method):
            return method
    raise CheckError(f"{type(entry).__name__} has no get_{kind}_features to count {kind} tokens by")


def _counted(
    model: nn.Module, paths: list[str], folder: Any, config: Any, media: Media, prompt: str, params: dict,
    dtype: Any, workload: Workload, label: str,
) -> ModelInputs:  # fmt: skip
    """Image inputs from the model's image processor, text with one image token per image feature."""
    import torch

    from .inputs import _generator, _text_ids
    from .processors import image_processor_for, synthetic_tokenizer

    image_proc = image_processor_for(folder, config)
    if image_proc is None:
        raise CheckError("transformers maps no image processor to this model type")
    n = max(1, workload.batch)
    items = media.items * n if media.source == "synthetic" else media.items
    out = image_proc(images=items, return_tensors="pt")
    kept = {k: v for k, v in _as_taken(dict(out), params).items() if k in params and isinstance(v, torch.Tensor)}
    for key, value in kept.items():
        if value.is_floating_point() and dtype is not None:
            kept[key] = value.to(dtype)
    entry_path, entry = _entry(model, paths)
    with torch.inference_mode():
        count = _rows(_features(entry, "image")(**kept))
    image_id = config_value(config, "image_token_id", "image_token_index")
    if image_id is None:
        raise CheckError("the config names no image token")
    per_row = count // n
    start = config_value(config, "boi_token_index", "vision_start_token_id", "image_start_token_id")
    end = config_value(config, "eoi_token_index", "vision_end_token_id", "image_end_token_id")
    if prompt and media.source != "synthetic":
        text = synthetic_tokenizer(config)(prompt)["input_ids"]
    else:
        text = _text_ids(config, len(prompt) or 8, _generator(workload.seed))
    ids = ([start] if start is not None else []) + [image_id] * per_row + ([end] if end is not None else []) + text
    kept["input_ids"] = torch.tensor([ids] * n)
    if "attention_mask" in params:
        kept["attention_mask"] = torch.ones_like(kept["input_ids"])
    if "mm_token_type_ids" in params:  # the multimodal rotary positions (Qwen-VL, GLM-4V): 1 marks an image token
        kept["mm_token_type_ids"] = token_types(kept["input_ids"], image_id, "image")
    if "use_cache" in params:
        kept["use_cache"] = False
    if "return_dict" in params:
        kept["return_dict"] = True
    fed = [FedInput(label, "image", len(items), media.size(), media.source)]
    fed.append(
        FedInput(label, "text", n, f"{len(ids)} tokens", "synthetic" if media.source == "synthetic" else "prompt")
    )
    return ModelInputs(entry_path, kept, label, [], fed=fed)


def _counted_audio(
    model: nn.Module, paths: list[str], config: Any, params: dict, dtype: Any, workload: Workload, label: str
) -> ModelInputs:
    """Audio features made from the config and text with one audio token per audio feature the
    model makes, for a processor that makes no audio inputs here (Voxtral's takes audio only in
    its chat template). The features are the shapes :func:`~fusion_core.run.audio_inputs.audio_inputs`
    makes (mel bins, stacked frames, both layouts), the first the model's ``get_audio_features``
    takes, with the masks it takes.

    A ``get_audio_features`` that reads the text's audio tokens (MusicFlamingo's time embedding
    reads their spans) is given as many as its audio tower makes frames; a model whose config
    names no audio token adds its audio features to the text position by position (Voxtral
    Realtime): a text of as many tokens as audio features, no placeholders."""

    from .audio_inputs import AUDIO_CODE_FRAMES, audio_inputs, codebooks
    from .inputs import _generator

    audio_id = config_value(config, "audio_token_id", "audio_token_index")
    if not isinstance(audio_id, int) or isinstance(audio_id, bool):
        audio_id = None
    n = max(1, workload.batch)
    entry_path, entry = _entry(model, paths)
    try:
        features_of = _features(entry, "audio")
    except CheckError:
        if audio_id is None or codebooks(config) is None:
            raise
        features_of = None  # a codec's tokens in place of audio: one audio token per frame (Higgs Audio)
    if features_of is None:
        made_all = audio_inputs(entry, params, _generator(workload.seed), dtype, workload)
        made = next((m for m in made_all if next(iter(m.kwargs)).endswith("_ids")), None)
        if made is None:
            raise CheckError(f"{type(entry).__name__} has no get_audio_features to count audio tokens by")
        kept, count, how = dict(made.kwargs), AUDIO_CODE_FRAMES * n, "one audio token per frame"
    else:
        taken = dict(inspect.signature(features_of).parameters)
        if not any(key_modality(k) == "audio" for k in taken):  # a wrapper's (*args, **kwargs): the forward's names
            taken = params
        elif "input_ids" in taken:  # the text's audio tokens, given below: the audio's own masks are made
            if audio_id is None:
                raise CheckError("the config names no audio token, and get_audio_features reads them")
            taken = {k: v for k, v in taken.items() if k != "input_ids"}
            features_of = _with_audio_tokens(features_of, entry, config, workload, audio_id, n)
        made_all = audio_inputs(entry, taken, _generator(workload.seed), dtype, workload)
        tries = (  # (not those the forward names otherwise)
            (m, kept)
            for m in made_all
            if len(kept := {k: v for k, v in m.kwargs.items() if k in params}) == len(m.kwargs)
        )
        made, kept, count = _first_counted(features_of, tries, "audio")
        how = "as many audio tokens as its audio features"
    ids = _with_tokens(kept, params, config, workload, audio_id, count, n)
    if audio_id is None:
        how = "the config names no audio token: a text of as many tokens as its audio features"
    key, value = next(iter(kept.items()))
    fed = [
        FedInput(label, "audio", n, f"{key} {'x'.join(str(int(d)) for d in value.shape[1:])}", "synthetic"),
        FedInput(label, "text", n, f"{len(ids)} tokens", "synthetic"),
    ]
    note = f"{label}: {made.notes[0]}; {how}"
    return ModelInputs(entry_path, kept, label, [note], fed=fed)


def _with_audio_tokens(
    features_of: Any, entry: nn.Module, config: Any, workload: Workload, audio_id: int, n: int
) -> Any:
    """``features_of`` for a ``get_audio_features`` that also reads the text's audio tokens
    (``input_ids``): given as many audio tokens as the model's audio tower makes frames of the
    audio (its ``last_hidden_state``: one token per frame the projector keeps)."""
    import torch

    from .inputs import _generator, _text_ids

    tower = next(
        (m for owner in (entry, getattr(entry, "base_model", None)) for name in _AUDIO_TOWERS
         if isinstance(m := getattr(owner, name, None), torch.nn.Module)),
        None,
    )  # fmt: skip
    if tower is None:
        raise CheckError(f"get_audio_features reads audio tokens, and {type(entry).__name__} has no audio tower")
    own = set(inspect.signature(tower.forward).parameters)

    def counted(**kwargs: Any) -> Any:
        out = tower(**{k: v for k, v in kwargs.items() if k in own})
        frames = getattr(out, "last_hidden_state", None)
        frames = frames if frames is not None else (out[0] if isinstance(out, (tuple, list)) else out)
        per_row = int(frames.shape[:-1].numel()) // n
        text = _text_ids(config, max(4, workload.seq_len or 8), _generator(workload.seed))
        return features_of(**kwargs, input_ids=torch.tensor([[audio_id] * per_row + text] * n))

    counted.__name__ = getattr(features_of, "__name__", "get_audio_features")
    return counted


_AUDIO_TOWERS = ("audio_tower", "audio_encoder", "audio_model", "speech_encoder", "encoder")


def _first_counted(features_of: Any, tries: Iterable[tuple[Any, dict[str, Any]]], what: str) -> tuple[Any, dict, int]:
    """The first of ``tries`` (``(what was made, the keyword arguments)``, made as they are
    tried) that ``features_of`` takes, with how many features it made.

    Raises:
        CheckError: it takes none of them (the first two errors are named).
    """
    import torch

    errors: list[str] = []
    for made, kwargs in tries:
        try:
            with torch.inference_mode():
                return made, kwargs, _rows(features_of(**kwargs))
        except Exception as e:
            errors.append(one_line(e, first=True, named=True, limit=150))
    name = getattr(features_of, "__name__", "its feature method")
    raise CheckError(f"{name} takes none of the {what} made from the config ({'; '.join(errors[:2])})")


def _with_tokens(
    kept: dict[str, Any], params: dict, config: Any, workload: Workload, token_id: int | None, count: int, n: int
) -> list[int]:
    """``kept`` completed with text of one ``token_id`` per feature (``count`` over ``n`` rows)
    before some synthetic text, and the switches the forward takes; returns one row's ids.
    ``token_id`` None: features the model adds to the text position by position, so a text of
    as many tokens as features, no placeholders (Voxtral Realtime)."""
    import torch

    from .inputs import _generator, _text_ids

    if token_id is None:
        ids = _text_ids(config, max(1, count // n), _generator(workload.seed))
    else:
        ids = [token_id] * (count // n) + _text_ids(config, max(4, workload.seq_len or 8), _generator(workload.seed))
    kept["input_ids"] = torch.tensor([ids] * n)
    if "attention_mask" in params:
        kept["attention_mask"] = torch.ones_like(kept["input_ids"])
    if "use_cache" in params:
        kept["use_cache"] = False
    if "return_dict" in params:
        kept["return_dict"] = True
    return ids


def _counted_clip(
    model: nn.Module, paths: list[str], config: Any, params: dict, dtype: Any, workload: Workload, label: str,
    kind: str,
) -> ModelInputs:  # fmt: skip
    """Pixels made from the config (``kind`` "image": pictures of the vision tower's image size;
    "video": a clip of them, in the layout the model's ``get_video_features`` takes) and text
    with one image or video token per feature the model makes, for a model whose processor
    cannot be built here (transformers' video processors, and some models' only image
    processor, need torchvision: LLaVA-NeXT-Video, Cohere2-Vision)."""
    import torch

    from ..model.limits import MAX_INPUT_FRAMES, MAX_INPUT_SIDE
    from .inputs import _generator

    token_id = config_value(config, f"{kind}_token_id", f"{kind}_token_index")
    if not isinstance(token_id, int) or isinstance(token_id, bool):
        raise CheckError(f"the config names no {kind} token")
    keys = [k for k in params if key_modality(k) == kind]
    if not keys:
        raise CheckError(f"{type(model).__name__}'s forward takes no {kind}")
    entry_path, entry = _entry(model, paths)
    features_of = _features(entry, kind)
    taken = list(inspect.signature(features_of).parameters)
    arg = next((k for k in taken if key_modality(k) == kind), keys[0])  # its own name for the pixels
    vision = getattr(config, "vision_config", None) or config
    side = config_value(vision, "image_size")
    side = side[0] if isinstance(side, (list, tuple)) and side else side
    side = workload.image_size or (min(int(side), MAX_INPUT_SIDE) if _number(side) else DEFAULT_GRID_IMAGE_SIZE)
    channels = config_value(vision, "num_channels")
    channels = int(channels) if _number(channels) else 3
    frames = config_value(config, "num_frames")
    frames = workload.frames or (min(int(frames), MAX_INPUT_FRAMES) if _number(frames) else DEFAULT_FRAMES)
    n = max(1, workload.batch)
    if kind == "image":
        # then one image per sample on an images axis (Idefics3's, ModernVBERT's (batch, images, C, H, W))
        shapes: tuple[tuple[int, ...], ...] = ((n, channels, side, side), (n, 1, channels, side, side))
        size = f"{side}x{side} px"
    else:
        shapes = ((n, frames, channels, side, side), (n, channels, frames, side, side))
        size = f"{frames} frames of {side}x{side} px"
    gen = _generator(workload.seed)
    float_dtype = dtype if dtype is not None else torch.float32
    grid = f"{kind}_grid_thw"

    def tries() -> Iterator[tuple[tuple[dict[str, Any], str], dict[str, Any]]]:
        """((the forward's pixels, their size), get_*_features' arguments), made as they are tried."""
        patch = config_value(vision, "patch_size")
        for shape in shapes:
            pixels = torch.randn(shape, generator=gen).to(float_dtype)
            yield ({keys[0]: pixels}, size), {arg: pixels}
            if kind == "image" and _number(patch) and len(shape) == 4:  # with its patch grid (MiniCPM-o's target_sizes)
                side_patches = side // int(patch)
                own, forward = (patch_grids(names, n, side_patches, side_patches) for names in (taken, params))
                if own and forward:
                    yield ({keys[0]: pixels, **forward}, size), {arg: pixels, **own}
            if kind == "image" and len(shape) == 4 and "image_sizes" in taken and "image_sizes" in params:
                sizes = torch.tensor([[side, side]] * n)  # each image's (height, width) in pixels (Apertus 1.5)
                yield ({keys[0]: pixels, "image_sizes": sizes}, size), {arg: pixels, "image_sizes": sizes}
        if kind == "image" and _number(patch):
            p, g = int(patch), side // int(patch)
            if "spatial_shapes" in taken and "spatial_shapes" in params:
                # NaFlex patches (SigLIP 2's towers: LFM2-VL): each image's patches flattened, its grid, their mask
                made = {arg: torch.randn(n, g * g, channels * p * p, generator=gen).to(float_dtype)}
                made["spatial_shapes"] = torch.tensor([[g, g]] * n)
                if "pixel_attention_mask" in taken:
                    made["pixel_attention_mask"] = torch.ones(n, g * g, dtype=torch.bool)
                yield ({keys[0]: made[arg], **{k: v for k, v in made.items() if k != arg}}, size), made
            # every image's patches flattened into one batch of patch vectors (NeoMME's patch embedding)
            flat = torch.randn(n * g * g, channels * p * p, generator=gen).to(float_dtype)
            yield ({keys[0]: flat}, f"{size} as {g * g} patches of {channels * p * p} values"), {arg: flat}
        grid_keys = [k for k in _VIDEO_PATCH_GRIDS if k in taken and k in params]
        if kind == "video" and _number(patch) and grid_keys:
            # every frame's patches in one row, one patch grid per frame (MiniCPM-o's packed clip), at
            # the tower's image size, then at the model's (MiniCPM-V 4.6 merges 448 px frames' patches)
            outer = config_value(config, "image_size")
            for each in dict.fromkeys([side, *([min(int(outer), MAX_INPUT_SIDE)] if _number(outer) else [])]):
                p, grid_side = int(patch), each // int(patch)
                pixels = torch.randn(1, channels, p, frames * grid_side**2 * p, generator=gen).to(float_dtype)
                thw = torch.tensor([[grid_side] * 2] * frames, dtype=torch.int32)
                what = f"{frames} frames of {each}x{each} px"
                yield ({keys[0]: pixels, grid_keys[0]: thw}, what), {arg: pixels, grid_keys[0]: thw}
        if grid in taken and grid in params:  # a grid model whose tower embeds flat patches with a Linear (MuseSpark)
            from torch import nn

            tower = next((m for name in _TOWERS if isinstance(m := getattr(entry, name, None), nn.Module)), entry)
            steps = 1 if kind == "image" else 2
            conv = pixel_conv(model, paths)
            small = (int(conv.in_channels), *map(int, conv.kernel_size)) if conv is not None else ()
            for flat, thw, what in flat_grid_pixels(tower, vision, gen, dtype, workload, steps=steps):
                yield ({keys[0]: flat, grid: thw}, what), {arg: flat, grid: thw}
                if len(small) == 3 and flat.shape[-1] == math.prod(small):  # each patch a small image (Kimi-K2.5)
                    shaped = flat.reshape(-1, *small)
                    yield ({keys[0]: shaped, grid: thw}, f"{what}, each a small image"), {arg: shaped, grid: thw}

    (made, size), _, count = _first_counted(features_of, tries(), f"{kind} pixels")
    kept: dict[str, Any] = dict(made)
    ids = _with_tokens(kept, params, config, workload, token_id, count, n)
    if "mm_token_type_ids" in params:
        kept["mm_token_type_ids"] = token_types(kept["input_ids"], token_id, kind)
    fed = [
        FedInput(label, kind, n, size, "synthetic"),
        FedInput(label, "text", n, f"{len(ids)} tokens", "synthetic"),
    ]
    note = f"{label}: {kind} of {size} made from the config; as many {kind} tokens as its {kind} features"
    return ModelInputs(entry_path, kept, label, [note], fed=fed)


def _per_step_spans(made: ModelInputs, config: Any, params: dict) -> list[ModelInputs]:
    """``made`` (a counted clip on a ``video_grid_thw``, or on one patch grid per frame) with its
    video tokens in one span per temporal step or frame, a text token after each, as a processor
    that stamps each frame's time writes them (Cosmos 3 Edge, MiniCPM-V 4.7: their positions
    count one span per frame); none for one step."""
    import torch

    ids, grid = made.kwargs.get("input_ids"), made.kwargs.get("video_grid_thw")
    frames = next((made.kwargs[k] for k in _VIDEO_PATCH_GRIDS if k in made.kwargs), None)  # a grid per frame
    steps = int(grid[0, 0]) if grid is not None else len(frames) if frames is not None else 0
    video_id = config_value(config, "video_token_id", "video_token_index")
    if ids is None or not isinstance(video_id, int) or steps < 2 or (ids.shape[0] != 1 and frames is not None):
        return []
    row = ids[0].tolist()
    count = row.count(video_id)
    text = [t for t in row if t != video_id]
    if count % steps or not text:
        return []
    span = [video_id] * (count // steps)
    spaced = [t for _ in range(steps) for t in (*span, text[0])] + text[1:]
    kwargs = {**made.kwargs, "input_ids": torch.tensor([spaced] * ids.shape[0])}
    if "attention_mask" in kwargs:
        kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
    if "mm_token_type_ids" in params:
        kwargs["mm_token_type_ids"] = token_types(kwargs["input_ids"], video_id, "video")
    fed = [f if f.modality != "text" else replace(f, size=f"{len(spaced)} tokens") for f in made.fed]
    note = f"the video tokens in {steps} spans, one per step, a text token after each"
    return [ModelInputs(made.entry, kwargs, made.kind, [*made.notes, note], fed=fed)]


def _with_decoder(made: ModelInputs, config: Any, params: dict) -> list[ModelInputs]:
    """``made`` with a few decoder tokens from the decoder's start token, for an encoder-decoder
    that does not derive them itself (T5Gemma 2); none where the forward takes no decoder ids."""
    ids = made.kwargs.get("input_ids")
    if "decoder_input_ids" not in params or "decoder_input_ids" in made.kwargs or ids is None:
        return []
    decoder, start = decoder_ids(ids, config)
    note = f"{decoder.shape[1]} decoder tokens from token {start}"
    return [
        ModelInputs(
            made.entry,
            {**made.kwargs, "decoder_input_ids": decoder},
            made.kind,
            [*made.notes, note],
            fed=list(made.fed),
        )
    ]


_TOWERS = ("vision_tower", "visual", "vision_model", "vision_encoder", "vision")
_VIDEO_PATCH_GRIDS = ("target_sizes_videos",)  # one frame's patch grid, shared by every frame of a clip


def _has(proc: Any, kind: str) -> bool:
    if kind == "image":
        return getattr(proc, "image_processor", None) is not None or not hasattr(proc, "tokenizer")
    # a processor's feature extractor, or a bare one (an audio model with no processor class)
    return getattr(proc, "feature_extractor", None) is not None or callable(getattr(proc, "pad", None))


def _config_candidates(model: nn.Module, paths: list[str], workload: Workload) -> list[ModelInputs]:
    try:
        return list(candidate_inputs(model, paths, seed=workload.seed, workload=workload))
    except ValueError:
        return []


def _user_video_grid(
    model: nn.Module, paths: list[str], media: Media, workload: Workload, params: dict, text_ids: list[int] | None
) -> list:
    """A Qwen-VL-like grid model's video inputs from real frames (its video processor needs torchvision)."""
    from .inputs import video_grid_inputs

    conv = next((c for p in paths if (c := patch_conv(model.get_submodule(p))) is not None), None)
    if conv is None or "video_grid_thw" not in params:
        return []
    entry_path, entry = _entry(model, paths)
    out = []
    for per_frame in (False, True):  # the two token layouts of the grid models (see video_grid_inputs)
        made = video_grid_inputs(
            entry, conv, params, workload, frames=media.items[0], text_ids=text_ids, per_frame=per_frame
        )
        if per_frame and ("input_ids" not in made.kwargs or int(made.kwargs["video_grid_thw"][0, 0]) < 2):
            break
        made.entry = entry_path
        made.fed = [FedInput("video+text", "video", 1, media.size(), media.source)]
        made.fed += _fed_of(made, "video+text")[-1:]
        made.fed[-1].source = "prompt" if text_ids is not None else "synthetic"
        made.kind = PROCESSOR_KIND
        made.notes.append(f"video+text: frames of {media.source} patched as the model's video processor would")
        out.append(made)
    return out
