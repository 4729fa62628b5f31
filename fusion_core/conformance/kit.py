"""The conformance kit's properties, run on the demos and on a family's sample models.

For each model the family matches (its discovery on the meta model finds something):

- ``rejections_have_reasons``: every rejected candidate and every near miss says why
  (checked on every model, matched or not);
- ``transforms_invert``: each key transform, on random tensors of its source shapes (float32
  and bfloat16), gives the shapes it announces and ``inverse(forward(x))`` is bitwise ``x``;
- ``fused_forward_equals_original``: the model fused in place gives the original's outputs,
  end to end and per fused module on the inputs captured during the end-to-end run;
- ``sample_inputs_forward``: each fused module equals the original on the family's own
  ``sample_inputs`` (skipped when the family supplies none);
- ``export_round_trip``: export original -> fused -> original is bitwise the source;
- ``in_place_equals_fused_layout``: loading the fused layout written through the family's
  transforms gives the outputs of the in-place fusion (a family whose transforms disagree
  with its fused forward fails here);
- ``no_leak``: afterwards, a plain ``from_pretrained`` builds no fused class and every
  patched class is back in its module.

Plus ``models_build`` (each sample config builds and saves) and ``matches_a_model`` (the
family fuses something on at least one model: a kit that checks nothing must not pass).
"""

from __future__ import annotations

import contextlib
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import one_line
from .report import ConformanceReport, PropertyResult

if TYPE_CHECKING:
    import torch

    from ..families.base import FusionSpec
    from ..plan.fusion_plan import FusionPlan

PROPERTIES = (
    "models_build",
    "matches_a_model",
    "rejections_have_reasons",
    "transforms_invert",
    "fused_forward_equals_original",
    "sample_inputs_forward",
    "export_round_trip",
    "in_place_equals_fused_layout",
    "no_leak",
)
_DTYPE = "float32"


def check_family(
    spec: FusionSpec,
    *,
    options: Mapping[str, Any] | None = None,
    demos: Sequence[str] | None = None,
    samples: bool = True,
    seed: int = 0,
) -> ConformanceReport:
    """Run ``spec`` through every property of the kit (see the module docstring).

    The family need not be registered: it is registered for the duration of the call
    (and whatever had its name before is put back). Models are built and exported in a
    temporary folder that is removed afterwards.

    Args:
        spec: the family.
        options: its options (``fusion_config={name: options}``), validated against its schema.
        demos: names of the demos to run on (default: every demo of :mod:`fusion_core.model.demo`).
        samples: also run on the models of ``spec.sample_configs()``.
        seed: seeds the sample models' weights, the inputs and the random tensors.

    Returns:
        The :class:`ConformanceReport`; ``report.passed`` and ``report.failures`` say the verdict.

    Raises:
        InvalidFusionConfigError: ``options`` do not fit the family's schema.
        ModelSourceError: an unknown demo name.
    """
    from ..plan.fusion_config import configured_family

    t0 = time.perf_counter()
    report = ConformanceReport(spec.name)
    with _registered(spec), tempfile.TemporaryDirectory(prefix="fusion-conformance-") as tmp:
        configured_family(spec.name, options)  # bad options: a usage error before any work
        root = Path(tmp)
        models = _demo_models(demos) + (_sample_models(spec, root, seed, report) if samples else [])
        matched = [label for label, folder in models if _check_model(spec, options, label, folder, root, seed, report)]
        if not matched:
            names = ", ".join(label for label, _ in models) or "no model"
            report.properties.append(
                PropertyResult(
                    "matches_a_model",
                    False,
                    f"fuses no module of {names}: declare sample_configs() with a model it fuses",
                    "(all)",
                )
            )
        else:
            report.properties.append(PropertyResult("matches_a_model", True, ", ".join(matched), "(all)"))
    report.seconds = time.perf_counter() - t0
    return report


@contextlib.contextmanager
def _registered(spec: FusionSpec) -> Iterator[None]:
    from ..families.registry import REGISTRY, register, unregister

    existing = REGISTRY.get(spec.name)
    if existing is spec:
        yield
        return
    register(spec, origin=getattr(spec, "origin", "") or "conformance kit", replace=True)
    try:
        yield
    finally:
        if existing is not None:  # back in its own place: the registry's order is what users see
            register(existing, origin=getattr(existing, "origin", ""), replace=True)
        else:
            unregister(spec.name)


def _demo_models(names: Sequence[str] | None) -> list[tuple[str, Path]]:
    from ..model.demo import DEMOS, demo_path

    return [(f"demo:{name}", demo_path(name)) for name in (DEMOS if names is None else names)]


def _sample_models(spec: FusionSpec, root: Path, seed: int, report: ConformanceReport) -> list[tuple[str, Path]]:
    """Each sample config built with seeded weights and saved under ``root``."""
    import torch

    from ..model.classes import model_class_for
    from ..patching import patch_lock

    try:
        configs = list(spec.sample_configs())
    except Exception as e:
        report.properties.append(PropertyResult("models_build", False, f"sample_configs(): {_error(e)}", "(samples)"))
        return []
    out = []
    for i, config in enumerate(configs):
        label = f"sample:{getattr(config, 'model_type', '') or i}"
        if any(label == seen for seen, _ in out):
            label = f"{label}#{i}"
        folder = root / "samples" / re.sub(r"[^\w.-]", "_", label)
        try:
            cls = model_class_for(config)
            state = torch.random.get_rng_state()
            torch.manual_seed(seed)
            try:
                with patch_lock():  # a plain model: never built while another thread patches
                    model = cls(config)
            finally:
                torch.random.set_rng_state(state)
            model.save_pretrained(folder)
        except Exception as e:
            report.properties.append(PropertyResult("models_build", False, _error(e), label))
            continue
        report.properties.append(PropertyResult("models_build", True, cls.__name__, label))
        out.append((label, folder))
    return out


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {one_line(e)}"[:300]


class _Recorder:
    """Adds results for one model; runs each property so that an exception is its failure."""

    def __init__(self, report: ConformanceReport, model: str) -> None:
        self.report = report
        self.model = model

    def add(self, name: str, passed: bool, detail: str, skipped: bool = False) -> None:
        self.report.properties.append(PropertyResult(name, passed, detail, self.model, skipped))

    def run(self, name: str, fn: Callable[[], tuple[bool, str] | None]) -> bool:
        try:
            outcome = fn()
        except Exception as e:
            self.add(name, False, _error(e))
            return False
        if outcome is not None:
            passed, detail = outcome
            self.add(name, passed, detail, skipped=passed and detail.startswith("skipped"))
            return passed
        return True


def _check_model(
    spec: FusionSpec,
    options: Mapping[str, Any] | None,
    label: str,
    folder: Path,
    root: Path,
    seed: int,
    report: ConformanceReport,
) -> bool:
    """Every property on one model; returns whether the family matched anything there."""
    from ..plan.fusion_plan import inspect_model

    rec = _Recorder(report, label)
    plans: list[FusionPlan] = []

    def discover() -> tuple[bool, str] | None:
        plan = inspect_model(str(folder)).plan({spec.name: dict(options) if options else True})
        plans.append(plan)
        d = plan.families[0].discovery
        silent = [r.path or "(root)" for r in d.rejected + d.near_misses if not r.reason.strip()]
        if silent:
            return False, f"rejected without a reason: {', '.join(silent[:5])}"
        return True, f"{len(d.matches)} matched, {len(d.rejected)} rejected, {len(d.near_misses)} near misses"

    if not rec.run("rejections_have_reasons", discover) or not plans[0].families[0].discovery.matches:
        return False
    plan = plans[0]
    work = root / re.sub(r"[^\w.-]", "_", label)
    rec.run("transforms_invert", lambda: _transforms_invert(plan, seed))
    runs: dict[str, Any] = {}
    rec.run("fused_forward_equals_original", lambda: _fused_forward(plan, seed, runs))
    if "plain" in runs:
        _sample_inputs_forward(plan, runs, rec)
    exported = rec.run("export_round_trip", lambda: _export_round_trip(plan, folder, work))
    if exported and "inputs" in runs:
        rec.run("in_place_equals_fused_layout", lambda: _fused_layout(work / "fused", runs))
    elif exported:
        rec.add("in_place_equals_fused_layout", True, "skipped: no end-to-end inputs for this model", skipped=True)
    runs.clear()  # the loaded models go before the leak check builds another
    rec.run("no_leak", lambda: _no_leak(plan, folder))
    return True


def _bitwise(a: torch.Tensor, b: torch.Tensor) -> bool:
    import torch

    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _transforms_invert(plan: FusionPlan, seed: int) -> tuple[bool, str]:
    import torch

    model = plan.inspection.model
    shapes_of = {k: tuple(v.shape) for k, v in model.state_dict(keep_vars=True).items()}
    transforms = plan.transforms
    if not transforms:
        return False, "the family matched modules but made no key transform"
    gen = torch.Generator().manual_seed(seed)
    for t in transforms:
        unknown = [k for k in t.sources if k not in shapes_of]
        if unknown:
            return False, f"{t.describe()}: source key {unknown[0]} is not in the model's state dict"
        shapes = [shapes_of[k] for k in t.sources]
        want = [tuple(s) for s in t.forward_shapes(shapes)]
        if [tuple(s) for s in t.inverse_shapes(want)] != shapes:
            return False, f"{t.describe()}: inverse_shapes({want}) != {shapes}"
        for dtype in (torch.float32, torch.bfloat16):
            xs = [torch.randn(s, generator=gen).to(dtype) for s in shapes]
            ys = t.forward(xs)
            if [tuple(y.shape) for y in ys] != want:
                return False, f"{t.describe()}: forward gave {[tuple(y.shape) for y in ys]}, announced {want}"
            back = t.inverse(ys)
            for key, x, y in zip(t.sources, xs, back):
                if not _bitwise(x, y):
                    return False, f"{t.describe()}: inverse(forward(x)) is not bitwise x for {key} ({dtype})"
    return True, f"{len(transforms)} transform(s), float32 and bfloat16"


def _run_on(model: Any, inputs: Any) -> Any:
    import torch

    entry = model.get_submodule(inputs.entry) if inputs.entry else model
    with torch.inference_mode():
        return entry(**inputs.kwargs)


def _compare(a: Any, b: Any) -> tuple[bool, str]:
    from ..run.results import compare

    c = compare(a, b, _DTYPE)
    scale = f"{c.max_original:.3g}"
    rule = f"limit {c.limit:.3g} = {c.atol:g} x min(1, {scale}) + {c.rtol:g} x {scale}"
    return c.passed, f"max abs diff {c.max_abs_diff:.3g} ({rule})" + (f"; {c.note}" if c.note else "")


def _module_outputs(module: Any, captured: tuple[tuple, dict]) -> Any:
    import torch

    from ..run.capture import _clone

    args, kwargs = _clone(captured)
    with torch.inference_mode():
        return module(*args, **kwargs)


def _fused_forward(plan: FusionPlan, seed: int, runs: dict[str, Any]) -> tuple[bool, str]:
    from ..api import load, load_plain
    from ..errors import CheckError
    from ..run.capture import capture_and_run
    from ..run.inputs import patch_conv
    from ..run.results import main_output

    paths = [m.path for m in plan.families[0].discovery.matches]
    plain = load_plain(plan)
    # a patch embedding tells the input maker the image size: without one among the fused
    # modules (qkv on a ViT), its inputs would be text only
    convs = [p for p, m in plain.named_modules() if p and p not in paths and patch_conv(m) is not None][:1]
    try:
        inputs, captured, out_plain = capture_and_run(plain, paths + convs, seed, "cpu")
    except CheckError as e:
        runs["plain"] = plain
        runs["fused"] = load(plan).model
        return True, f"skipped: no end-to-end inputs for this model ({one_line(e)})"
    runs.update(plain=plain, inputs=inputs)
    fused = load(plan).model
    runs["fused"] = fused
    out_fused = _run_on(fused, inputs)
    name, reference = main_output(out_plain)
    runs["output"] = main_output(out_fused)[1]
    ok, detail = _compare(reference, runs["output"])
    if not ok:
        return False, f"end to end ({name}, {inputs.kind} inputs): {detail}"
    for path in paths:
        if path not in captured:
            continue  # not reached by this run; sample_inputs_forward covers it when it can
        ok, detail = _compare(
            _module_outputs(plain.get_submodule(path), captured[path]),
            _module_outputs(fused.get_submodule(path), captured[path]),
        )
        if not ok:
            return False, f"{path}: {detail}"
    reached = sum(p in captured for p in paths)
    return True, f"end to end ({name}, {inputs.kind} inputs) and {reached}/{len(paths)} module(s): {detail}"


def _sample_inputs_forward(plan: FusionPlan, runs: dict[str, Any], rec: _Recorder) -> None:
    """Each fused module against the original on the family's own sample inputs."""
    from ..boundary.options import Workload

    fam = plan.families[0]
    spec = fam.spec
    config = plan.source.config

    def run() -> tuple[bool, str] | None:
        checked = 0
        for m in fam.discovery.matches:
            original = runs["plain"].get_submodule(m.path)
            try:
                args, kwargs = spec.sample_inputs(original, config, Workload())
            except NotImplementedError:
                return True, "skipped: no sample inputs"
            ok, detail = _compare(
                _module_outputs(original, (args, kwargs)),
                _module_outputs(runs["fused"].get_submodule(m.path), (args, kwargs)),
            )
            if not ok:
                return False, f"{m.path}: {detail}"
            checked += 1
        return True, f"{checked} module(s) on their sample inputs"

    rec.run("sample_inputs_forward", run)


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def _export_round_trip(plan: FusionPlan, folder: Path, work: Path) -> tuple[bool, str]:
    from ..export.pipeline import export

    fused = export(plan, work / "fused", layout="fused", verify_outputs=False)
    if not fused.transformed:
        return False, "the fused export transformed no tensor"
    export(work / "fused", work / "back", plan.fusion_config, layout="original", verify_outputs=False)
    before, after = _tensors(folder), _tensors(work / "back")
    if sorted(before) != sorted(after):
        lost, new = sorted(set(before) - set(after)), sorted(set(after) - set(before))
        return False, f"original -> fused -> original changed the keys (lost {lost[:3]}, new {new[:3]})"
    differ = [k for k in before if not _bitwise(before[k], after[k])]
    if differ:
        return False, f"original -> fused -> original is not bitwise for {', '.join(differ[:3])}"
    return True, f"{len(fused.transformed)} tensor(s) transformed, {len(before)} bitwise after the round trip"


def _fused_layout(fused_dir: Path, runs: dict[str, Any]) -> tuple[bool, str]:
    from ..api import load
    from ..run.results import main_output

    built = load(str(fused_dir))
    if built.layout != "fused":
        return False, f"the exported folder loads as layout {built.layout!r}, not 'fused'"
    ok, detail = _compare(runs["output"], main_output(_run_on(built.model, runs["inputs"]))[1])
    if not ok:
        return False, f"the fused layout loads to other outputs than the in-place fusion: {detail}"
    return True, detail


def _no_leak(plan: FusionPlan, folder: Path) -> tuple[bool, str]:
    cls = plan.inspection.source.model_class
    moved = [
        c.__name__
        for c in plan.patch_mapping
        if c.__module__ in sys.modules and getattr(sys.modules[c.__module__], c.__name__, c) is not c
    ]
    if moved:
        return False, f"still patched after the kit: {', '.join(moved)}"
    model = cls.from_pretrained(str(folder))
    fused = [
        f"{p or '(root)'} ({type(m).__name__})" for p, m in model.named_modules() if hasattr(type(m), "_fusion_family")
    ]
    if fused:
        return False, f"a plain from_pretrained built fused classes: {', '.join(fused[:3])}"
    if getattr(model.config, "fusion_config", None):
        return False, "a plain from_pretrained has a fusion_config in its config"
    return True, f"plain {cls.__name__}.from_pretrained is unfused"
