"""``coverage --check``: a tiny random model of each architecture, checked end to end.

For each model type: the shrunk config (:mod:`fusion_core.coverage.tiny`), its model built
with seeded random weights and saved with ``save_pretrained``, then the same ``check`` a
user runs, with every family that fuses something in it, on the inputs the check makes for
each modality the model takes. One of four words per type:

- ``verified end to end``: every fused module verified on end-to-end inputs, and a run of
  every modality the model takes (``input_kinds``);
- ``fallback``: the check passed, but a module was verified on inputs its family made, or a
  modality the model takes got no run (``reason`` quotes the check's own "not run" line);
- ``failed``: the check failed or raised (``reason``);
- ``not built tiny``: no shrunk config could be built, saved and loaded back by stock
  transformers within :data:`MAX_PARAMS` parameters, or the one built runs on no input made
  for it even unfused (nothing to compare: an architecture whose default config does not
  run) (``reason``).

A variant that fails or falls back is tried again less shrunk (the next of
:data:`fusion_core.coverage.tiny.VARIANTS` within the size limit): a tiny model the
architecture cannot run is the shrinker's defect, not the check's. Results are plain dicts
(they come back from worker processes; see :mod:`fusion_core.coverage.pool`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

VERIFIED = "verified end to end"
FALLBACK = "fallback"
FAILED = "failed"
NOT_BUILT = "not built tiny"
STATUSES = (VERIFIED, FALLBACK, FAILED, NOT_BUILT)
MAX_PARAMS = 100_000_000  # a "tiny" model larger than this is not built (memory and time per type)
_RANK = {VERIFIED: 0, FALLBACK: 1, FAILED: 2, NOT_BUILT: 3}


def check_types(model_types: Sequence[str], family_names: Sequence[str], timeout: float) -> list[dict[str, Any]]:
    """Check ``model_types`` one after the other (the task a worker runs)."""
    from .worker import heartbeat

    out = []
    for model_type in model_types:
        heartbeat(model_type)
        out.append(check_type(model_type, family_names, timeout))
    return out


def _fault(model_type: str) -> None:
    from .worker import _state

    if _state["hook"] is not None:  # fault injection of the coverage tests (pool._fault_hook)
        _state["hook"](model_type)


def check_type(model_type: str, family_names: Sequence[str], timeout: float) -> dict[str, Any]:
    """Build, save and check a tiny ``model_type`` (see the module docstring), as a plain dict.

    Never raises for a model's own failure: the result's ``status`` and ``reason`` say it.
    """
    from ..errors import one_line
    from .tiny import tiny_configs
    from .worker import TypeTimeout, alarm

    t0 = time.perf_counter()
    best: dict[str, Any] | None = None
    tried: list[str] = []
    try:
        with alarm(timeout):
            _fault(model_type)
            for how, config in tiny_configs(model_type):
                result = _check_variant(model_type, how, config, family_names)
                if result is None:  # too large: the next variant is larger still
                    continue
                tried.append(f"{how}: {result['status']}")
                if best is None or _RANK[result["status"]] < _RANK[best["status"]]:
                    best = result
                if best["status"] == VERIFIED:
                    break
    except TypeTimeout:
        best = best or _result(model_type, FAILED, f"took longer than {timeout:g} s")
    except Exception as e:  # every shrunk config refused by its class
        best = best or _result(
            model_type, NOT_BUILT, f"config refused: {one_line(e, first=True, named=True, limit=300)}"
        )
    if best is None:
        best = _result(model_type, NOT_BUILT, f"every shrunk config has more than {MAX_PARAMS / 1e6:.0f}M parameters")
    if len(tried) > 1:
        best["tried"] = tried
    best["seconds"] = round(time.perf_counter() - t0, 2)
    return best


def _result(model_type: str, status: str, reason: str = "", **more: Any) -> dict[str, Any]:
    return {"model_type": model_type, "status": status, "reason": reason[:500], **more}


def _check_variant(model_type: str, how: str, config: Any, family_names: Sequence[str]) -> dict[str, Any] | None:
    """One shrunk config built, saved, planned and checked; ``None`` when it is too large to build."""
    import torch

    from ..errors import one_line
    from ..model.classes import resolve_model_class
    from .tiny import fit_rotary_sections

    why = ""
    try:
        cls, _ = resolve_model_class(config)
        with torch.device("meta"):
            meta = cls(config)
            if fit_rotary_sections(meta):  # sections a default config leaves to the code, for another head size
                meta = cls(config)
        params = sum(p.numel() for p in meta.parameters())
        del meta
    except Exception as e:
        why = f"{how} model cannot be built: {one_line(e, first=True, named=True, limit=300)}"
        return _result(model_type, NOT_BUILT, why, variant=how)
    if params > MAX_PARAMS:
        return None
    folder = tempfile.mkdtemp(prefix=f"fusion-coverage-{model_type[:40]}-")
    try:
        try:
            torch.manual_seed(0)
            model = cls(config).eval()
            model.save_pretrained(folder)
            del model
        except Exception as e:
            why = f"{how} model cannot be built or saved: {one_line(e, first=True, named=True, limit=300)}"
            return _result(model_type, NOT_BUILT, why, variant=how, params=params)
        result = _checked(model_type, folder, family_names)
        result.update(variant=how, params=params, model_class=cls.__name__)
        if result["status"] == FAILED and not _stock_loads(cls, folder):
            result["status"] = NOT_BUILT
            result["reason"] = (
                f"stock transformers does not load the saved tiny model exactly either ({result['reason']})"
            )
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _stock_loads(cls: type, folder: str) -> bool:
    """Whether stock transformers loads the saved tiny model back exactly (no key missing or left over)."""
    try:
        _model, info = cls.from_pretrained(folder, output_loading_info=True)
    except Exception:
        return False
    return not info.get("missing_keys") and not info.get("unexpected_keys")


def _checked(model_type: str, folder: str, family_names: Sequence[str]) -> dict[str, Any]:
    """``check`` on the saved folder with every family that fuses something there, classified."""
    from ..api import check
    from ..errors import one_line
    from ..plan.fusion_plan import inspect_model

    try:
        ins = inspect_model(folder)
        families = [f for f in family_names if ins.discovery(f).matches]
        if not families:
            return _result(model_type, NOT_BUILT, "no family fuses a module of the tiny model", families=[])
        result = check(ins.plan({f: True for f in families}), upstream=False, repeats=1, time_budget=0, threads=1)
    except Exception as e:
        return _result(
            model_type, FAILED, one_line(e, first=True, named=True, limit=400), families=locals().get("families", [])
        )
    return classify(model_type, result, families)


def classify(model_type: str, result: Any, families: list[str]) -> dict[str, Any]:
    """A :class:`~fusion_core.run.results.CheckResult` as one of the four words, with its reason."""
    from ..run.checks import BY_END_TO_END

    e2e = result.end_to_end
    kinds = sorted({f.modality for f in e2e.inputs}) if e2e is not None else []
    base = {"families": families, "input_kinds": kinds}
    if not result.passed:
        if _runs_nothing(result):  # not the fusion's fault: stock transformers runs none of it either
            why = f"the tiny model runs on no input made for it, unfused included ({e2e.skipped.removeprefix('not run: ')})"
            return _result(model_type, NOT_BUILT, why, **base)
        return _result(model_type, FAILED, _failure(result), **base)
    reasons = []
    if e2e is None or not e2e.ran:
        reasons.append(f"end to end not run ({(e2e.skipped if e2e else '') or 'no end-to-end run'})")
    else:
        reasons += [n for n in e2e.notes if ": not run" in n]
    by_samples = [m.path for m in result.modules if m.verified_by != BY_END_TO_END]
    if by_samples:
        more = f" and {len(by_samples) - 1} more" if len(by_samples) > 1 else ""
        reasons.append(f"{by_samples[0]}{more} verified on module sample inputs only")
    if reasons:
        return _result(model_type, FALLBACK, "; ".join(reasons), **base)
    return _result(model_type, VERIFIED, "", **base)


def _runs_nothing(result: Any) -> bool:
    """The original model raised on every input made for it, and so no module was verified
    (nothing was compared: no module failed a comparison)."""
    e2e = result.end_to_end
    skipped = (e2e.skipped if e2e is not None and not e2e.ran else "") or ""
    if "no input it accepts" not in skipped or "none could be made" in skipped:
        return False
    return all(m.passed or (m.error or "").startswith("not verified:") for m in result.modules)


def _failure(result: Any) -> str:
    """What failed in a check, in one bounded line."""
    bad = [m for m in result.modules if not m.passed]
    if bad:
        m = bad[0]
        what = m.error or (
            f"max abs diff {m.comparison.max_abs_diff:.3g} > limit {m.comparison.limit:.3g}"
            if m.comparison
            else "not run"
        )
        return f"{m.path} ({m.family}): {what}"
    e2e = result.end_to_end
    if e2e is not None and not e2e.passed and e2e.comparison is not None:
        c = e2e.comparison
        if c.max_abs_diff == float("inf") and c.note:
            return f"end to end ({e2e.input_kind}): {c.note}"
        return f"end to end ({e2e.input_kind}): max abs diff {c.max_abs_diff:.3g} > limit {c.limit:.3g}"
    if result.nothing_to_fuse:
        return "nothing to fuse"
    return "; ".join(result.messages)[:300] or "check failed"
