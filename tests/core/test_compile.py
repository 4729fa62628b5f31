"""Fused models under the compiler: ``torch._dynamo.explain``, ``torch.compile(fullgraph=True)``,
``torch.export`` and static-cache generation, against the original model (issue 30).

Every family on real tiny models: ``qkv`` and ``gate_up`` on the Llama demo, ``qkv``,
``gate_up`` and ``patch_embeddings`` on the Qwen2-VL demo, ``qkv`` and
``patch_embeddings_2d`` on the ViT demo, and ``qkv`` with cross attention on BART. The
backend is ``"eager"`` (Dynamo's trace, no code generation): what breaks a graph is the
trace, and inductor compiles take minutes here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
from _family_cases import checkpoint
from torch import nn
from torch._dynamo.utils import counters

from fusion_core.api import load, load_plain
from fusion_core.model.demo import demo_path

IMAGE, VIDEO_START, VIDEO_END = 500, 502, 503


@dataclass
class Pair:
    fused: nn.Module
    original: nn.Module


def _pair(folder: Any, families: list[str]) -> Pair:
    fused = load(str(folder), {f: True for f in families}).model.eval()
    original = load_plain(str(folder)).eval()
    return Pair(fused, original)


@pytest.fixture(scope="module")
def llama() -> Pair:
    return _pair(demo_path("llama"), ["qkv", "gate_up"])


@pytest.fixture(scope="module")
def qwen2_vl() -> Pair:
    return _pair(demo_path("qwen2-vl"), ["qkv", "gate_up", "patch_embeddings"])


@pytest.fixture(scope="module")
def vit() -> Pair:
    return _pair(demo_path("vit"), ["qkv", "patch_embeddings_2d"])


@pytest.fixture(scope="module")
def bart(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    return _pair(checkpoint("bart", tmp_path_factory.mktemp("compile-models")), ["qkv"])


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()  # no compiled code or recompile budget carried between tests


def _text() -> dict[str, Any]:
    return {"input_ids": torch.randint(3, 400, (1, 8), generator=torch.Generator().manual_seed(0))}


def _image() -> dict[str, Any]:
    # one 56x56 image: a 1x4x4 grid of 14 px patches (two frames each), 2x2 merged into 4 tokens
    ids = torch.tensor([[1, VIDEO_START, *[IMAGE] * 4, VIDEO_END, 7, 8]])
    pixels = torch.randn(16, 3 * 2 * 14 * 14, generator=torch.Generator().manual_seed(0))
    grid = torch.tensor([[1, 4, 4]])
    return {"input_ids": ids, "pixel_values": pixels, "image_grid_thw": grid, "mm_token_type_ids": (ids == IMAGE).int()}


def _pixels() -> dict[str, Any]:
    return {"pixel_values": torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))}


def _seq2seq() -> dict[str, Any]:
    gen = torch.Generator().manual_seed(0)
    return {
        "input_ids": torch.randint(3, 250, (1, 7), generator=gen),
        "decoder_input_ids": torch.randint(3, 250, (1, 5), generator=gen),
    }


CASES = {
    "llama": ("llama", _text),
    "qwen2-vl text": ("qwen2_vl", _text),
    "qwen2-vl image": ("qwen2_vl", _image),
    "vit": ("vit", _pixels),
    "bart": ("bart", _seq2seq),
}


def _main(out: Any) -> torch.Tensor:
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


def _explain(model: nn.Module, inputs: dict[str, Any]) -> tuple[int, int, int]:
    """(graphs, breaks, linear ops in the graphs) of one traced forward."""
    torch._dynamo.reset()
    with torch.no_grad():
        found = torch._dynamo.explain(model)(**inputs)
    linears = sum(
        1
        for g in found.graphs
        for n in g.graph.nodes
        if n.op == "call_function" and getattr(n.target, "__name__", "") == "linear"
    )
    return found.graph_count, found.graph_break_count, linears


@pytest.mark.parametrize("case", sorted(CASES))
def test_explain_no_more_graphs_or_breaks_than_the_original(case, request):
    fixture, make = CASES[case]
    pair: Pair = request.getfixturevalue(fixture)
    inputs = make()
    graphs, breaks, linears = _explain(pair.original, inputs)
    fused_graphs, fused_breaks, fused_linears = _explain(pair.fused, inputs)
    assert (fused_graphs, fused_breaks) <= (graphs, breaks), (case, graphs, breaks, fused_graphs, fused_breaks)
    assert fused_graphs <= graphs and fused_breaks <= breaks
    # the traced graph holds the fused product, not one per member: fewer Linears than the original
    assert fused_linears < linears


@pytest.mark.parametrize("case", ["llama", "qwen2-vl text", "vit", "bart"])
def test_fullgraph_compile_equals_eager(case, request):
    fixture, make = CASES[case]
    pair: Pair = request.getfixturevalue(fixture)
    inputs = make()
    with torch.no_grad():
        expected = _main(pair.fused(**inputs))
        original = _main(pair.original(**inputs))
        compiled = torch.compile(pair.fused, fullgraph=True, backend="eager")
        got = _main(compiled(**inputs))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(got, original, rtol=1e-5, atol=1e-5)


def test_cross_attention_traces_per_member_products(bart):
    """Cross attention (``q_proj(decoder)``, ``k_proj(encoder)``) is exact under the trace too."""
    attn = bart.fused.model.decoder.layers[0].encoder_attn
    plain = bart.original.model.decoder.layers[0].encoder_attn
    gen = torch.Generator().manual_seed(1)
    dec, enc = torch.randn(1, 5, 32, generator=gen), torch.randn(1, 7, 32, generator=gen)
    with torch.no_grad():
        compiled = torch.compile(attn, fullgraph=True, backend="eager")
        got = compiled(dec, key_value_states=enc)[0]
        torch.testing.assert_close(got, plain(dec, key_value_states=enc)[0], rtol=1e-5, atol=1e-5)


def _export_ops(program: torch.export.ExportedProgram) -> list[str]:
    return [str(n.target) for n in program.graph.nodes if n.op == "call_function"]


def test_export_fused_modules_of_every_family(llama, qwen2_vl, vit):
    gen = torch.Generator().manual_seed(2)
    layer, plain_layer = llama.fused.model.layers[0], llama.original.model.layers[0]
    x = torch.randn(2, 5, 64, generator=gen)
    program = torch.export.export(layer.mlp, (x,))  # gate_up
    assert _export_ops(program).count("aten.linear.default") == 2  # gate_up_proj and down_proj
    torch.testing.assert_close(program.module()(x), plain_layer.mlp(x), rtol=0, atol=1e-6)

    angles = torch.randn(2, 5, 16, generator=gen)
    kwargs = {"position_embeddings": (angles.cos(), angles.sin()), "attention_mask": None}
    program = torch.export.export(layer.self_attn, (x,), kwargs)  # qkv
    assert _export_ops(program).count("aten.linear.default") == 2  # qkv_proj and o_proj
    torch.testing.assert_close(
        program.module()(x, **kwargs)[0], plain_layer.self_attn(x, **kwargs)[0], rtol=1e-5, atol=1e-6
    )

    patches = torch.randn(16, 3 * 2 * 14 * 14, generator=gen)  # patch_embeddings (Conv3d)
    embed, plain_embed = qwen2_vl.fused.model.visual.patch_embed, qwen2_vl.original.model.visual.patch_embed
    program = torch.export.export(embed, (patches,))
    assert "aten.linear.default" in _export_ops(program) and not any("conv" in op for op in _export_ops(program))
    torch.testing.assert_close(program.module()(patches), plain_embed(patches), rtol=1e-5, atol=1e-5)

    image = _pixels()["pixel_values"]  # patch_embeddings_2d (Conv2d)
    embed, plain_embed = vit.fused.embeddings, vit.original.embeddings
    program = torch.export.export(embed, (image,))
    assert not any("conv" in op for op in _export_ops(program))
    torch.testing.assert_close(program.module()(image), plain_embed(image), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["llama", "vit"])
def test_export_fused_model_where_the_original_exports(case, request):
    fixture, make = CASES[case]
    pair: Pair = request.getfixturevalue(fixture)
    inputs = make()
    if case == "llama":
        inputs["use_cache"] = False
    original = torch.export.export(pair.original, (), inputs)
    fused = torch.export.export(pair.fused, (), inputs)
    assert _export_ops(fused).count("aten.linear.default") < _export_ops(original).count("aten.linear.default")
    with torch.no_grad():
        expected = _main(pair.original(**inputs))
    torch.testing.assert_close(_main(fused.module()(**inputs)), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fixture", ["llama", "qwen2_vl"])
def test_static_cache_generate_with_fullgraph_compile_gives_eager_tokens(fixture, request):
    from transformers import CompileConfig

    pair: Pair = request.getfixturevalue(fixture)
    ids = _text()["input_ids"][:, :6]
    settings = {"max_new_tokens": 6, "do_sample": False, "cache_implementation": "static"}
    expected = pair.original.generate(ids, **settings, disable_compile=True)
    config = CompileConfig(fullgraph=True, backend="eager")
    config._compile_all_devices = True  # transformers compiles on accelerators only, unless told
    counters.clear()
    got = pair.fused.generate(ids, **settings, compile_config=config)
    assert counters["stats"]["unique_graphs"] >= 1  # the decoding steps did run compiled
    assert got.tolist() == expected.tolist()
