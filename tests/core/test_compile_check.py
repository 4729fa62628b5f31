"""``check --compile`` (issue 30, item 4): the original and the fused model under
``torch.compile``, compared and timed side by side on one copy of the weights.

The backend here is ``"eager"`` (Dynamo's trace, no code generation: what decides the
graphs and the switching is the trace); one run with inductor, the default, shows the
real compiler takes the fused model too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fusion_core import check
from fusion_core.boundary.options import OptionError
from fusion_core.cli import main


def test_check_compile_compares_and_times_both_forms(llama_dir: Path, capsys) -> None:
    argv = ["check", str(llama_dir), "--fusion", "qkv", "--fusion", "gate_up", "--compile", "eager"]
    assert main([*argv, "--no-upstream", "--time-budget", "0", "--json"]) == 0
    c = json.loads(capsys.readouterr().out)["compiled"]
    assert c["backend"] == "eager" and c["passed"] is True and c["skipped"] == ""
    # each form compiled to graphs of its own (the fused form was not the original's graph
    # reused), and the fusion adds no graph break
    assert c["graphs_original"] == 1 and c["graphs_fused"] == 1
    assert c["comparison"]["max_abs_diff"] <= c["comparison"]["limit"]
    assert c["timing"]["repeats"] >= 1 and c["compile_s_original"] > 0 and c["compile_s_fused"] > 0
    assert main([*argv, "--no-upstream", "--time-budget", "0"]) == 0
    text = capsys.readouterr().out
    assert "compiled (eager): " in text and "graphs original 1, fused 1" in text


def test_a_wrong_fusion_fails_compiled(llama_dir: Path) -> None:
    """The compiled fused model is compared, not only timed: a wrong fusion fails there too."""
    from _wrong_family import scaled_gate_up

    with scaled_gate_up(1.01, "test_scaled_gate_up_compiled") as name:
        result = check(str(llama_dir), {name: True}, upstream=False, time_budget=0, compile="eager")
    c = result.compiled
    assert c is not None and c.comparison is not None and not c.passed and not result.passed
    assert c.comparison.max_abs_diff > c.comparison.limit
    assert "outputs DIFFER" in c.line


def test_an_unknown_backend_is_refused_before_loading(llama_dir: Path) -> None:
    with pytest.raises(OptionError, match=r"not a torch\.compile backend"):
        check(str(llama_dir), {"qkv": True}, upstream=False, compile="no-such-backend")


def test_modules_only_says_compiled_did_not_run(llama_dir: Path) -> None:
    result = check(str(llama_dir), {"qkv": True}, upstream=False, time_budget=0, compile="eager", modules_only=True)
    assert result.passed and result.compiled is not None and result.compiled.comparison is None
    assert result.compiled.skipped.startswith("not run: modules only")
    assert result.compiled.line == f"compiled (eager): {result.compiled.skipped}"


@pytest.mark.slow
def test_inductor_takes_the_fused_vlm(qwen2_vl_dir: Path) -> None:
    """The default backend generates code for both forms of a VLM (image and text inputs)."""
    result = check(
        str(qwen2_vl_dir), {"qkv": True, "gate_up": True, "patch_embeddings": True}, upstream=False, time_budget=0,
        compile="inductor",
    )  # fmt: skip
    c = result.compiled
    assert c is not None and not c.skipped, c.line
    assert c.passed and c.graphs_fused >= 1 and c.graphs_fused <= c.graphs_original
