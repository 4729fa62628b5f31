"""A reviewed plan, run as reviewed: ``plan --json`` writes it, ``check --plan`` and ``export --plan`` run it.

``fusion-core plan MODEL --fusion qkv --json > plan.json`` records, besides what the plan
shows, the identity of what it was made from (:class:`SourceIdentity`: the model spec, its
class, a digest of its config, and each weight file's size and SHA-256) and the modules it
fuses (``matched``: path -> family). ``check --plan plan.json`` and
``export --plan plan.json OUT`` then open that source again and refuse to run unless it is
the same (the first file that differs is named: one byte changed in a shard is enough) and
the families match exactly the modules the file lists. A plan reviewed in a pull request is
the plan CI runs.

The weight files are hashed in full: about 10 s for 16 GB here. A plan file is data, read
with bounded size; nothing in it is executed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..boundary.convert import PlainDataError, from_plain, to_plain
from ..errors import PlanMismatchError, UsageError
from ..text import printable
from .plan_data import PlanData, SourceIdentity, WeightFile, plan_data

if TYPE_CHECKING:
    from ..model.sources import ModelSource
    from .fusion_config import FusionConfig
    from .fusion_plan import FusionPlan, Inspection

__all__ = ["PlanData", "SourceIdentity", "WeightFile", "identity_of", "plan_document", "plan_from_file", "preview_plan",
           "read_plan", "resolve_plan"]  # fmt: skip

#: a plan file larger than this is not a plan file (a 200k-module plan is ~60 MB)
MAX_PLAN_BYTES = 256 * 1024 * 1024
_CHUNK = 8 * 1024 * 1024


#: called with the bytes hashed so far and the total (a progress bar: 16 GB take 20-40 s here)
Hashed = Callable[[int, int], None]


def identity_of(source: ModelSource, hashed: Hashed | None = None, *, hash_files: bool = True) -> SourceIdentity:
    """The identity of ``source`` now (every weight file read once, to hash it; without
    ``hash_files`` only their sizes: what the engine's plans for its window record)."""
    files: list[WeightFile] = []
    if source.checkpoint is not None and source.folder is not None:
        paths = [Path(source.folder) / name for name in sorted(source.checkpoint.files)]
        sizes = [p.stat().st_size for p in paths]
        counter = _Counter(sum(sizes), hashed)
        files = [WeightFile(p.name, size, _sha256(p, counter) if hash_files else "") for p, size in zip(paths, sizes)]
    # a folder by its absolute path: the file may be read from another working directory
    spec = str(Path(source.folder).resolve()) if source.kind == "folder" and source.folder is not None else source.spec
    return SourceIdentity(spec, _qualname(source), _config_digest(source), tuple(files))


def plan_document(plan: FusionPlan, hashed: Hashed | None = None) -> dict[str, Any]:
    """``plan --json``: the plan's data with its source's identity (the weights hashed)."""
    return to_plain(plan_data(plan, identity_of(plan.source, hashed)))


def preview_plan(insp: Inspection, fusion_config: FusionConfig | None) -> PlanData:
    """The plan of ``fusion_config`` on the opened model, as the window previews it and sends it
    back to run: its identity records the weight files' sizes, not their hashes (the engine
    checks them against the model it has open)."""
    return plan_data(insp.plan(fusion_config), identity_of(insp.source, hash_files=False))


def plan_from_file(
    path: str | os.PathLike[str],
    model: str | None = None,
    *,
    trust_remote_code: bool = False,
    hashed: Hashed | None = None,
) -> FusionPlan:
    """The plan a ``plan --json`` file describes, after checking its source is the same.

    Args:
        path: the file ``plan --json`` wrote.
        model: where the model is now, when not where the plan was made (a checkout in CI);
            its identity is checked all the same.
        trust_remote_code: as for :func:`fusion_core.model.sources.resolve`.
        hashed: told the bytes hashed so far and the total, while the weights are hashed.

    Raises:
        UsageError: not a plan file.
        PlanMismatchError: the model, its config or a weight file changed since the plan,
            or the families no longer match the modules the plan lists.
    """
    from ..model.sources import resolve
    from .fusion_plan import inspect_model

    data = read_plan(path)
    name = Path(path).name
    if data.identity is None:
        raise UsageError(f"{printable(str(path))} is not a plan file (its identity is null)")
    if any(not f.sha256 for f in data.identity.files):
        raise PlanMismatchError(f"{name}: the plan does not record its weight files' SHA-256")
    source = resolve(model or data.identity.spec, trust_remote_code=trust_remote_code)
    _same_source(data.identity, source, name, _Counter(sum(f.size for f in data.identity.files), hashed))
    return _live(data, inspect_model(source), name)


def resolve_plan(data: PlanData, insp: Inspection, name: str = "the plan") -> FusionPlan:
    """The live plan ``data`` describes on the opened model ``insp``: the model checked against
    the plan's identity (the first file that differs is named), then each family's spec and
    classes resolved by name, and the result refused unless it is exactly what ``data`` says
    (its modules, options and key transforms).

    Raises:
        PlanMismatchError: the model is not the one planned, or the plan differs from it.
    """
    if data.identity is None:
        raise PlanMismatchError(f"{name}: the plan does not say which model it was made from")
    _same_source(data.identity, insp.source, name, _Counter(sum(f.size for f in data.identity.files), None))
    return _live(data, insp, name)


def _live(data: PlanData, insp: Inspection, name: str) -> FusionPlan:
    plan = insp.plan(data.fusion_config)
    planned, now = dict(data.matched), dict(plan.matched_paths)
    if planned != now:
        gone = sorted(set(planned) - set(now))
        new = sorted(set(now) - set(planned))
        moved = sorted(p for p in set(planned) & set(now) if planned[p] != now[p])
        parts = [f"{label}: {', '.join(printable(p) for p in paths[:5])}" + (" ..." if len(paths) > 5 else "")
                 for label, paths in (("no longer matched", gone), ("newly matched", new), ("other family", moved))
                 if paths]  # fmt: skip
        raise PlanMismatchError(f"{name}: the families no longer match the planned modules ({'; '.join(parts)})")
    again = replace(plan_data(plan, data.identity), model=data.model)
    if again != data:
        differ = next(f.name for f in fields(PlanData) if getattr(again, f.name) != getattr(data, f.name))
        raise PlanMismatchError(f"{name}: the plan's {differ} differ from what the model gives now")
    return plan


def read_plan(path: str | os.PathLike[str]) -> PlanData:
    """A ``plan --json`` file as :class:`PlanData` (no model is opened).

    Raises:
        UsageError: not a plan file (the message says why).
    """
    path = Path(path)
    data = _read(path)
    try:
        return from_plain(PlanData, data)
    except PlainDataError as e:
        raise UsageError(f"{printable(str(path))} is not a plan file ({str(e)[:200]})") from None


def _read(path: Path) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        if size > MAX_PLAN_BYTES:
            raise UsageError(f"{printable(str(path))}: {size:,} bytes is not a plan file (at most {MAX_PLAN_BYTES:,})")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"cannot read the plan {printable(str(path))}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{printable(str(path))} is not a plan file (not JSON: {str(e)[:120]})") from None
    missing = [
        k
        for k in ("schema_version", "fusion_config", "matched", "identity")
        if not isinstance(data, dict) or k not in data
    ]
    if missing:
        raise UsageError(
            f"{printable(str(path))} is not a plan file written by `fusion-core plan` in JSON (no {', '.join(missing)})"
        )
    if data["schema_version"] != 1:
        raise UsageError(
            f"{printable(str(path))}: plan schema {data['schema_version']!r:.20} is not one this version reads (1)"
        )
    if not isinstance(data["matched"], dict) or not isinstance(data["fusion_config"], dict):
        raise UsageError(f"{printable(str(path))} is not a plan file (matched and fusion_config must be objects)")
    return data


def _same_source(expected: SourceIdentity, source: ModelSource, plan_name: str, counter: _Counter) -> None:
    """Refuse ``source`` unless it is what ``expected`` recorded, naming the first difference."""
    now_class = _qualname(source)
    if now_class != expected.model_class:
        raise PlanMismatchError(f"{plan_name}: planned for {expected.model_class}, the model is now {now_class}")
    if _config_digest(source) != expected.config_sha256:
        raise PlanMismatchError(f"{plan_name}: the model's config changed since the plan")
    names = sorted(source.checkpoint.files) if source.checkpoint is not None else []
    planned = {f.name: f for f in expected.files}
    extra = next((n for n in names if n not in planned), None)
    if extra is not None:
        raise PlanMismatchError(f"{plan_name}: {printable(extra)} was added to the model since the plan")
    for name, f in planned.items():
        if name not in names or source.folder is None:
            raise PlanMismatchError(f"{plan_name}: {printable(name)} is gone from the model since the plan")
        file = Path(source.folder) / name
        size = file.stat().st_size
        if size != f.size:
            raise PlanMismatchError(
                f"{plan_name}: {printable(name)} changed since the plan ({f.size:,} bytes then, {size:,} now)"
            )
        if f.sha256 and _sha256(file, counter) != f.sha256:  # "": not hashed, its size checked
            raise PlanMismatchError(f"{plan_name}: {printable(name)} changed since the plan (its SHA-256 differs)")


def _qualname(source: ModelSource) -> str:
    cls = source.model_class
    return f"{cls.__module__}.{cls.__qualname__}"


#: config keys that name where and by which transformers it was read, not what the model is
_VOLATILE = frozenset({"_name_or_path", "transformers_version", "_commit_hash"})


def _config_digest(source: ModelSource) -> str:
    """The config's values (sub-configs included), not where or by which version it was read."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in _VOLATILE}
        if isinstance(value, (list, tuple)):
            return [strip(v) for v in value]
        return value

    text = json.dumps(strip(source.config.to_dict()), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _Counter:
    def __init__(self, total: int, hashed: Hashed | None) -> None:
        self.total, self.done, self.hashed = total, 0, hashed

    def add(self, n: int) -> None:
        self.done += n
        if self.hashed is not None:
            self.hashed(self.done, self.total)


def _sha256(path: Path, counter: _Counter) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            counter.add(len(chunk))
    return digest.hexdigest()
