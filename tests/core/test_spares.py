"""Spare children: started between operations with their imports done, each serving one job."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusion_core import check, export
from fusion_core.run import isolated

PE = {"patch_embeddings": True}


@pytest.fixture
def one_spare():
    isolated.keep_spares(1)
    try:
        yield
    finally:
        isolated.keep_spares(0)


def test_a_spare_serves_the_next_job_and_only_that_one(one_spare, qwen2_vl_dir: Path, tmp_path: Path) -> None:
    isolated.refill_spares()
    (spare,) = isolated._spares
    assert spare.module is None and spare.proc.poll() is None  # importing, serving nothing yet

    result = check(qwen2_vl_dir, PE, repeats=1, time_budget=0)  # the upstream reference takes the spare
    assert result.passed and result.upstream.max_abs_diff is not None and not result.upstream.error, result.upstream
    assert isolated._spares == [] and spare.module == "fusion_core.run.upstream"
    assert spare.proc.poll() is not None  # one job, then it ended

    isolated.refill_spares()
    (second,) = isolated._spares
    assert second is not spare
    out = export(qwen2_vl_dir, tmp_path / "out", PE)  # the consumers take the new spare
    assert [c.status for c in out.consumers] == ["loads exactly", "loads exactly"], out.consumers
    assert isolated._spares == [] and second.module == "fusion_core.export.consumers"


def test_a_spare_refuses_a_module_it_does_not_serve(one_spare) -> None:
    isolated.refill_spares()
    child = isolated.child_for("fusion_core.host.worker")  # not a child's job
    done = child.finish(120)
    assert done.returncode == 2 and "serves one of" in done.stderr
    with pytest.raises(ValueError, match="already serves"):
        child.assign("fusion_core.run.upstream")
