"""One copy of the weights for the original and the fused model (issue 35): fused twins that
share storage, switched in place, and the rounding floor of a bfloat16 end-to-end comparison."""

from __future__ import annotations

from pathlib import Path

import torch

from fusion_core import inspect_model, load
from fusion_core.run.checks import _rounding_floor
from fusion_core.run.loading import load_original
from fusion_core.run.results import Comparison, main_output
from fusion_core.run.switch import Precise, Switch

FAMILIES = {"qkv": True, "gate_up": True}


def _storages(model: torch.nn.Module) -> dict[int, int]:
    return {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}


def _ids(folder: Path) -> torch.Tensor:
    return torch.arange(3, 19).reshape(1, 16)


def test_twins_share_the_weights_and_switch_in_place(llama_dir: Path) -> None:
    plan = inspect_model(str(llama_dir)).plan(FAMILIES)
    model = load_original(plan, dtype="float32")
    ids = _ids(llama_dir)
    with torch.inference_mode():
        before = model(input_ids=ids).logits
    bytes_before = sum(_storages(model).values())

    switch = Switch(model, plan, list(plan.matched_paths))
    assert set(switch.fused) == set(plan.matched_paths) and len(switch.fused) == 4  # 2 layers x (qkv, gate_up)
    attn, twin = switch.original["model.layers.0.self_attn"], switch.fused["model.layers.0.self_attn"]
    assert type(attn).__name__ == "LlamaAttention" and type(twin).__name__ == "FusedLlamaAttention"
    fused_weight = twin.qkv_proj.weight
    for member in (attn.q_proj, attn.k_proj, attn.v_proj):  # the originals read rows of the fused tensor
        assert member.weight.untyped_storage().data_ptr() == fused_weight.untyped_storage().data_ptr()
    # one copy: the members' own tensors were freed for the fused ones, so both forms together
    # hold the bytes the original held alone
    both = _storages(model)
    with switch.using(True):
        assert model.get_submodule("model.layers.0.self_attn") is twin
        both.update(_storages(model))
    assert sum(both.values()) == bytes_before
    assert model.get_submodule("model.layers.0.self_attn") is attn

    with torch.inference_mode():
        after = model(input_ids=ids).logits
        with switch.using(True):
            fused = model(input_ids=ids).logits
    assert torch.equal(before, after)  # the original is exactly what it was
    reference = load(str(llama_dir), FAMILIES, dtype="float32").model  # the real fused load
    with torch.inference_mode():
        assert torch.equal(fused, reference(input_ids=ids).logits)
    switch.close()
    assert not switch.fused and model.get_submodule("model.layers.0.self_attn") is attn


def test_precise_computes_in_float32_and_rounds_back() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32).to(torch.bfloat16)
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    want = torch.nn.functional.linear(x.float(), lin.weight.float(), lin.bias.float()).to(torch.bfloat16)
    got = Precise(lin, torch.bfloat16)(x)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    assert lin.weight.dtype == torch.bfloat16  # upcast for the call only
    assert Precise(lin, torch.bfloat16).out_features == 32


def test_the_rounding_floor_of_a_bfloat16_run(llama_dir: Path) -> None:
    """A reduced-precision difference beyond the dtype's tolerance is judged against the floor:
    within twice the floor passes, beyond it fails, and the note says which."""
    from fusion_core.run.inputs import ModelInputs

    plan = inspect_model(str(llama_dir)).plan(FAMILIES)
    model = load_original(plan, dtype="bfloat16")
    switch = Switch(model, plan, list(plan.matched_paths))
    inputs = ModelInputs(entry="", kwargs={"input_ids": _ids(llama_dir)}, kind="text")
    with torch.inference_mode():
        main = main_output(model(**inputs.kwargs))[1]
        with switch.precise(torch.bfloat16):
            precise = main_output(model(**inputs.kwargs))[1]
    floor = (main.double() - precise.double()).abs().max().item()
    assert floor > 0  # float32 compute rounds differently from bfloat16

    inside = Comparison(1.5 * floor, 0.0, 0.0, 0.0, list(main.shape), 0.0)
    _rounding_floor((inputs, main), model, switch, inside, "bfloat16")
    assert inside.floor == floor and inside.passed and "within 2x the rounding floor" in inside.note
    beyond = Comparison(3 * floor, 0.0, 0.0, 0.0, list(main.shape), 0.0)
    _rounding_floor((inputs, main), model, switch, beyond, "bfloat16")
    assert not beyond.passed and "beyond 2x the rounding floor" in beyond.note
    assert model.get_submodule("model.layers.0.mlp") is switch.original["model.layers.0.mlp"]


def test_export_verification_measures_the_rounding_floor(llama_dir: Path) -> None:
    """The export's consumers compare at bfloat16 when float32 does not fit: each output gets
    its rounding floor, which widens the limit of a fused export's comparison."""
    from fusion_core.export.verify import compare_runs, export_runs, rounding_floors

    plan = inspect_model(str(llama_dir)).plan(FAMILIES)
    model = load_original(plan, dtype="bfloat16").eval()
    paths = list(plan.matched_paths)
    with torch.inference_mode():
        runs = export_runs(model, paths, llama_dir)
    assert runs and not runs[0].floors
    rounding_floors(model, runs, paths, "bfloat16")
    name = next(iter(runs[0].outputs))
    assert runs[0].floors[name] > 0
    assert isinstance(model.get_submodule(paths[0]), torch.nn.Module)  # the originals are back in place
    fused = load(str(llama_dir), FAMILIES, dtype="bfloat16").model
    passed, _worst, _rel, compared, bad = compare_runs(runs, fused, exact=False, dtype="bfloat16")
    assert passed and not bad and name in compared
