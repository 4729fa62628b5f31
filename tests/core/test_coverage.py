"""Coverage: which model types each family applies to, scanned in worker processes."""

from __future__ import annotations

import json

import pytest

import fusion_core.coverage.pool as coverage_pool
import fusion_core.coverage.scan as coverage
from fusion_core import UnknownFamilyError, UsageError
from fusion_core.boundary.convert import to_plain
from fusion_core.coverage.scan import CoverageReport, coverage_scan, format_report, scan
from fusion_core.progress import CancelToken, drive

CONV3D_TYPES = {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "videomae", "vivit"}


FAMILIES = ["patch_embeddings", "patch_embeddings_2d"]
REAL = ["qwen2_vl", "llama", "vit", "autoformer", "qwen2_vl_vision", "qwen2_5_omni"]
# per type: the SLOW fault must hit it, the real types never (qwen2_5_omni took over 2 s on a
# machine loaded 4x over its cores)
TIMEOUT = 8.0


@pytest.fixture(scope="module")
def report() -> CoverageReport:
    """One scan in a worker process: real types, plus types made to hang or kill their worker.

    Real: a fusable VL model, a plain decoder, a ViT (Conv2d: rejected), a model whose default
    config cannot be built, a sub-config without an Auto class, an omni model (vision tower
    under the thinker). Faults (``_coverage_faults``): one hangs in Python, and the last one
    kills its worker, so the test needs one pool only.
    """
    from _coverage_faults import CRASH, HOOK, SLOW

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(coverage_pool, "_fault_hook", HOOK)
        return drive(coverage_scan(FAMILIES, 1, [*REAL, SLOW, CRASH], timeout=TIMEOUT))


def test_fusable_types_with_module_paths_and_classes(report):
    assert report.families == FAMILIES
    assert [r.model_type for r in report.results] == sorted(r.model_type for r in report.results)
    fusable = {r.model_type: r.matches("patch_embeddings") for r in report.fusable("patch_embeddings")}
    assert set(fusable) == {"qwen2_vl", "qwen2_vl_vision", "qwen2_5_omni"}
    assert fusable["qwen2_vl"] == [
        {"class": "PatchEmbed", "fused_class": "FusedPatchEmbed", "modules": ["visual.patch_embed"]}
    ]
    assert fusable["qwen2_5_omni"][0]["modules"] == ["thinker.model.visual.patch_embed"]
    by_type = {r.model_type: r for r in report.results}
    assert by_type["qwen2_vl_vision"].class_source == "config_class"
    assert by_type["qwen2_vl"].class_source == "auto"
    assert by_type["llama"].ok and not by_type["llama"].matches("patch_embeddings")


def test_reasons_under_the_right_family_and_every_convolution_decided(report):
    # ViT's Conv2d is the 2-D family's: the Conv3d family neither matches nor explains it
    assert not report.rejected("patch_embeddings")
    by_type = {r.model_type: r for r in report.results}
    [entry] = by_type["vit"].matches("patch_embeddings_2d")
    assert entry["modules"] == ["embeddings.patch_embeddings"]
    # the convolution census, folded into the same pass: every one matched or with a reason
    assert by_type["vit"].convolutions == {"non_overlapping": 1, "unexplained": []}
    assert by_type["qwen2_vl"].convolutions["non_overlapping"] == 1
    assert by_type["llama"].convolutions == {"non_overlapping": 0, "unexplained": []}
    assert "non-overlapping convolutions:" in format_report(report)


def test_types_that_cannot_be_instantiated_say_why(report):
    failed = {r.model_type: r for r in report.failed}
    auto = failed["autoformer"]
    assert (auto.stage, auto.error_type) == ("init", "ValueError")
    assert "prediction_length" in auto.error and "\n" not in auto.error


def test_hung_and_crashing_types_do_not_stop_the_scan(report):
    from _coverage_faults import CRASH, SLOW

    by_type = {r.model_type: r for r in report.results}
    assert (by_type[SLOW].stage, by_type[SLOW].error_type) == ("timeout", "TimeoutError")
    assert by_type[CRASH].stage == "crash" and "died" in by_type[CRASH].error
    assert {r.model_type for r in report.failed} == {"autoformer", SLOW, CRASH}
    assert all(by_type[t].ok for t in REAL if t != "autoformer")


@pytest.mark.slow
def test_a_worker_stuck_in_native_code_is_killed(monkeypatch):
    from _coverage_faults import CRASH, HOOK, STUCK

    monkeypatch.setattr(coverage_pool, "_HARD_GRACE", 1.0)  # killed 1.5 x timeout + 1 s after it started
    monkeypatch.setattr(coverage_pool, "_fault_hook", HOOK)
    gen = coverage_scan(["patch_embeddings"], 2, [STUCK, CRASH, "llama"], timeout=1.0)
    by_type = {r.model_type: r for r in drive(gen).results}
    assert by_type[STUCK].stage == "timeout" and "killed" in by_type[STUCK].error
    assert by_type[CRASH].stage == "crash"
    assert by_type["llama"].ok


def test_json_is_stable_and_complete(report):
    data = json.loads(json.dumps(to_plain(report)))
    assert data["schema_version"] == 1
    assert (data["model_types"], data["instantiated"], data["failed_count"]) == (8, 5, 3)
    fam, fam2d = data["families"]
    assert fam["name"] == "patch_embeddings"
    assert [f["model_type"] for f in fam["fusable"]] == ["qwen2_5_omni", "qwen2_vl", "qwen2_vl_vision"]
    assert fam["fusable"][1]["classes"][0]["modules"] == ["visual.patch_embed"]
    assert fam2d["name"] == "patch_embeddings_2d" and "vit" in {f["model_type"] for f in fam2d["fusable"]}
    assert {f["model_type"]: f["stage"] for f in data["failed"]}["autoformer"] == "init"
    assert {s["model_type"] for s in data["scanned"]} == {"qwen2_vl", "llama", "vit", "qwen2_vl_vision", "qwen2_5_omni"}
    # the same report gives the same JSON
    assert json.dumps(to_plain(report)) == json.dumps(to_plain(report))


def test_text_report(report):
    text = format_report(report)
    assert "[patch_embeddings] fusable in 3 model type(s)" in text
    assert "PatchEmbed (visual.patch_embed)" in text
    assert "could not instantiate: 3 model type(s)" in text and "autoformer" in text


def test_fault_hook_is_not_public_api():
    import inspect

    assert list(inspect.signature(coverage_scan).parameters) == ["families", "jobs", "only", "timeout"]
    assert coverage_pool._fault_hook is None


def test_bad_arguments():
    with pytest.raises(UnknownFamilyError):
        scan(families=["nope"], jobs=0, only=["llama"])
    with pytest.raises(UsageError, match="no_such_type"):
        scan(jobs=0, only=["no_such_type"])
    with pytest.raises(UsageError, match="jobs must be 0 or more"):
        scan(jobs=-1, only=["llama"])


def test_cancel_stops_the_workers():
    token = CancelToken()
    steps = []

    def on_progress(p):
        steps.append(p)
        token.cancel()

    from fusion_core import Cancelled

    with pytest.raises(Cancelled):
        drive(coverage_scan(["patch_embeddings"], 2, ["llama", "bert"]), on_progress, token)
    assert steps


@pytest.mark.slow
def test_full_scan_lists_the_conv3d_architectures_and_decides_every_convolution():
    # one pass for both convolution families: the census rides on the same meta builds
    report = scan(families=FAMILIES)
    fusable = {r.model_type for r in report.fusable("patch_embeddings")}
    assert fusable >= CONV3D_TYPES
    assert len(report.results) == len(coverage._model_types(None))
    assert len(report.instantiated) > 0.8 * len(report.results)
    loose = {r.model_type: r.convolutions["unexplained"] for r in report.instantiated if r.convolutions["unexplained"]}
    assert not loose, loose
    with_convs = {r.model_type for r in report.instantiated if r.convolutions["non_overlapping"]}
    assert len(with_convs) > 150 and {"pixtral", "mllama", "glm4v", "segformer", "convnext", "sam"} <= with_convs
    # no Conv2d is explained by the Conv3d family
    assert not any("Conv2d" in c["reason"] for r in report.results for c in r.rejected("patch_embeddings"))


@pytest.mark.slow
def test_workers_that_cannot_start_end_the_scan_with_a_message(monkeypatch):
    from fusion_core import FusionError

    monkeypatch.setattr(coverage_pool, "_fault_hook", "no_such_module_here:inject")
    with pytest.raises(FusionError, match=r"could not start .*no_such_module_here"):  # the worker's own words
        drive(coverage_scan(["patch_embeddings"], 1, ["llama"]))


def test_workers_are_isolated_children_forked_from_the_zygote(monkeypatch, tmp_path):
    """A coverage worker starts as every other child of ours: ``python -I`` from an empty folder,
    forked from the test worker's zygote (tests/conftest.py turns it on), speaking JSON lines."""
    from _coverage_faults import HOOK, WHERE

    from fusion_core.run import isolated

    monkeypatch.setattr(coverage_pool, "_fault_hook", HOOK)  # reaches the child in its start request
    monkeypatch.setenv(WHERE, str(tmp_path / "where.jsonl"))
    report = drive(coverage_scan(["patch_embeddings"], 2, ["llama", "vit"]))
    assert all(r.ok for r in report.results)
    seen = [json.loads(line) for line in (tmp_path / "where.jsonl").read_text().splitlines()]
    assert sorted(s["type"] for s in seen) == ["llama", "vit"]
    assert all(s["isolated"] == 1 and "fusion-coverage-" in s["cwd"] for s in seen)
    assert {s["ppid"] for s in seen} <= {z.proc.pid for z in isolated._zygotes}
