"""Family options: validated against the family's schema (exit 2 naming family and option),
passed to the family, part of the discovery cache key, shown by ``plan`` and ``families``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fusion_core import InvalidFusionConfigError, check, inspect_model, validate_fusion_config
from fusion_core.api import load
from fusion_core.cli.main import main
from fusion_core.families import Option, get_family, load_family_file, register, unregister

KV_FILE = Path(__file__).resolve().parents[1] / "plugin_example" / "fi_kv_family" / "kv_family.py"
ATTENTION = ["model.layers.0.self_attn", "model.layers.1.self_attn"]


@pytest.fixture
def kv_family():
    [spec] = load_family_file(KV_FILE)
    yield spec.name
    unregister(spec.name)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_unknown_option_of_a_builtin_is_a_usage_error(capsys, llama_dir):
    with pytest.raises(
        InvalidFusionConfigError, match=r"fusion 'qkv' has no option 'bogus_option' \(its options: none\)"
    ):
        validate_fusion_config({"qkv": {"bogus_option": 123}})
    with pytest.raises(InvalidFusionConfigError, match="bogus_option"):
        inspect_model(str(llama_dir)).plan({"qkv": {"bogus_option": 123}})
    code, out, err = run(capsys, "plan", str(llama_dir), "--fusion", "qkv:bogus_option=123")
    assert code == 2 and out == ""
    assert err.strip() == "fusion-core: error: fusion 'qkv' has no option 'bogus_option' (its options: none)"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "option 'min_in_features': expected int, default 0"),
        ("true", "got True"),  # a bool is not an int
        ("1.5", "got 1.5"),
    ],
)
def test_wrong_type_exits_2_naming_family_and_option(capsys, llama_dir, kv_family, value, message):
    code, _out, err = run(capsys, "plan", str(llama_dir), "--fusion", f"kv_proj:min_in_features={value}")
    assert code == 2 and "fusion 'kv_proj'" in err and message in err and len(err.strip().splitlines()) == 1


def test_options_reach_the_family_and_key_the_cache(llama_dir, kv_family):
    insp = inspect_model(str(llama_dir))
    default = insp.plan({"kv_proj": True})
    assert [m.path for m in default.families[0].discovery.matches] == ATTENTION
    assert default.families[0].effective_options == {"min_in_features": 0}
    strict = insp.plan({"kv_proj": {"min_in_features": 128}})
    d = strict.families[0].discovery
    assert not d.matches and d.empty_message
    assert {r.reason for r in d.rejected} == {"in_features 64 < min_in_features 128"}
    # the same model and family, other options: its own discovery, never the cached one
    assert insp.plan({"kv_proj": True}).families[0].discovery.matches
    assert strict.fusion_config == {"kv_proj": {"min_in_features": 128}}  # as the user gave it
    assert default.fusion_config == {"kv_proj": True}


def test_load_fuses_with_the_configured_family(llama_dir, kv_family, tmp_path):
    plan = inspect_model(str(llama_dir)).plan({"kv_proj": {"min_in_features": 32}})
    fused_class = plan.families[0].discovery.matches[0].fused_class
    assert plan.families[0].spec.options == {"min_in_features": 32}
    result = load(plan)
    attn = result.model.get_submodule(ATTENTION[0])
    assert type(attn) is fused_class and attn.kv_proj.weight.shape == (64, 64)  # k 32 + v 32 rows
    assert result.model.config.fusion_config == {"kv_proj": {"min_in_features": 32}}
    from fusion_core import export

    export(plan, tmp_path / "fused", verify_outputs=False)
    config = json.loads((tmp_path / "fused" / "config.json").read_text())
    assert config["fusion_config"] == {"kv_proj": {"min_in_features": 32}}
    again = load(str(tmp_path / "fused"))  # the recorded options are validated and used again
    assert again.layout == "fused" and again.fused_modules == ATTENTION
    with torch.no_grad():
        ids = torch.tensor([[5, 6, 7]])
        torch.testing.assert_close(again.model(ids).logits, result.model(ids).logits)


@pytest.fixture
def sampled_kv(kv_family):
    """``kv_proj`` plus an option that sets the tokens of its sample inputs."""

    class SampledKV(type(get_family(kv_family))):
        name = "kv_sampled"

        def options_schema(self):
            tokens = Option(int, 0, "tokens of the sample inputs (0: the workload's)")
            return {**super().options_schema(), "sample_tokens": tokens}

        def sample_inputs(self, module, config, workload):
            n = self.options["sample_tokens"]
            return super().sample_inputs(module, config, replace(workload, seq_len=n) if n else workload)

    spec = register(SampledKV(), origin="test")
    yield spec.name
    unregister(spec.name)


def test_modules_only_check_runs_the_configured_family(llama_dir, sampled_kv):
    """A modules-only check fuses and feeds each module with the family as the plan configured
    it: its options reach the sample inputs (the default spec would make 128 tokens)."""
    insp = inspect_model(str(llama_dir))
    plan = insp.plan({sampled_kv: {"min_in_features": 32, "sample_tokens": 7}})
    result = check(plan, modules_only=True, upstream=False, repeats=1, time_budget=0)
    assert result.passed and result.modules_only and [m.path for m in result.modules] == ATTENTION
    for m in result.modules:
        assert m.verified_by == "module sample inputs" and m.input_shapes[0] == [1, 7, 64]
        assert m.fused_class == plan.families[0].discovery.matches[0].fused_class.__name__
    default = check(insp.plan({sampled_kv: True}), modules_only=True, upstream=False, repeats=1, time_budget=0)
    assert default.passed and default.modules[0].input_shapes[0] == [1, 128, 64]
    # an option that leaves the modules unfused: nothing to check, with the family's reason
    strict = check(insp.plan({sampled_kv: {"min_in_features": 128}}), modules_only=True, upstream=False)
    assert strict.nothing_to_fuse and any("can be fused" in m for m in strict.messages)


def test_plan_and_families_show_options(capsys, llama_dir, kv_family):
    code, out, _ = run(capsys, "plan", str(llama_dir), "--fusion", "kv_proj:min_in_features=16", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["fusion_config"] == {"kv_proj": {"min_in_features": 16}}
    assert data["families"][0]["options"] == {"min_in_features": 16}
    code, out, _ = run(capsys, "plan", str(llama_dir), "--fusion", "kv_proj", "--fusion", "qkv")
    assert code == 2  # both replace the attention modules
    code, out, _ = run(capsys, "plan", str(llama_dir), "--fusion", "kv_proj")
    assert code == 0 and "  options: min_in_features=0" in out
    code, out, _ = run(capsys, "families", "--json")
    by_name = {f["name"]: f for f in json.loads(out)}
    assert by_name["kv_proj"]["options"] == {
        "min_in_features": {
            "type": "int",
            "default": 0,
            "help": "leave projections with fewer input features unfused",
            "choices": [],
        }
    }
    assert by_name["qkv"]["options"] == {}
    code, out, _ = run(capsys, "families")
    assert "min_in_features (int, default 0)" in out
    code, _out, err = run(capsys, "plan", str(llama_dir), "--fusion", "kv_proj:min_in_features")
    assert code == 2 and "kv_proj:OPTION=VALUE" in err


def test_option_values():
    opt = Option(int, 0, "n", choices=(0, 8))
    assert opt.accepts(8) and not opt.accepts(4) and not opt.accepts(True) and not opt.accepts("8")
    assert Option(float, 0.5).accepts(1) and not Option(float, 0.5).accepts(False)
    assert Option(str, "a").accepts("b") and Option(bool, False).accepts(True) and not Option(bool, False).accepts(1)


def test_check_and_export_commands_take_options(capsys, llama_dir, kv_family, tmp_path):
    code, _out, err = run(capsys, "check", str(llama_dir), "--fusion", "qkv:bogus_option=1", "--no-upstream")
    assert code == 2 and "fusion 'qkv' has no option 'bogus_option'" in err
    out_dir = tmp_path / "fused"
    code, _out, err = run(
        capsys, "export", str(llama_dir), str(out_dir), "--fusion", "kv_proj:min_in_features=32", "--no-verify-outputs"
    )
    assert code == 0, err
    config = json.loads((out_dir / "config.json").read_text())
    assert config["fusion_config"] == {"kv_proj": {"min_in_features": 32}}


def test_option_declarations_are_checked():
    with pytest.raises(TypeError, match="bool, int, float or str"):
        Option(list, [])
    with pytest.raises(TypeError, match="default '0' is not a int"):
        Option(int, "0")
