"""Near misses: modules that look like a family's target under other names are reported as
``not a candidate: ...`` (``Discovery.near_misses``), in ``plan`` text and JSON (meta only)."""

from __future__ import annotations

import json

import pytest

from fusion_core import inspect_model
from fusion_core.cli.main import main


@pytest.fixture(scope="module")
def t5():
    return inspect_model("arch:t5")


def _reasons(discovery) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for r in discovery.near_misses:
        out.setdefault(r.class_name, set()).add(r.reason)
    return out


def test_t5_attention_has_q_k_v(t5):
    d = t5.discovery("qkv")
    assert not d.matches and not d.rejected
    assert _reasons(d) == {
        "T5Attention": {
            "not a candidate: projections named q, k, v (T5, Qwen2.5-Omni vision); "
            "this family fuses q_proj, k_proj, v_proj"
        }
    }
    paths = [r.path for r in d.near_misses]
    assert "encoder.block.0.layer.0.SelfAttention" in paths and "decoder.block.0.layer.1.EncDecAttention" in paths
    assert len(paths) == 3 * t5.source.config.num_layers  # encoder self, decoder self and cross


def test_deepseek_v3_latent_attention_and_fused_experts():
    insp = inspect_model("arch:deepseek_v3")
    qkv = _reasons(insp.discovery("qkv"))
    assert list(qkv) == ["DeepseekV3Attention"]
    assert "multi-head latent attention" in next(iter(qkv["DeepseekV3Attention"]))
    gate_up = insp.discovery("gate_up")
    assert gate_up.matches  # the dense MLPs and the shared experts
    assert _reasons(gate_up) == {"DeepseekV3Experts": {"not a candidate: already one fused gate_up_proj"}}


def test_qwen2_5_omni_vision_and_audio():
    insp = inspect_model("arch:qwen2_5_omni")
    qkv = insp.discovery("qkv")
    assert qkv.matches  # the thinker's text attention
    vision = [r for r in qkv.near_misses if ".visual." in r.path]
    assert vision and all("projections named q, k, v" in r.reason for r in vision)
    assert not {r.path for r in qkv.near_misses} & {r.path for r in qkv.rejected}
    gate_up = insp.discovery("gate_up")
    audio = [r for r in gate_up.near_misses if ".audio_tower." in r.path]
    assert audio and all("not gated" in r.reason for r in audio)


def test_already_fused_projections_phi3():
    insp = inspect_model("arch:phi3")
    assert _reasons(insp.discovery("qkv")) == {
        "Phi3Attention": {"not a candidate: already one fused projection qkv_proj (Phi-3 style)"}
    }
    assert _reasons(insp.discovery("gate_up")) == {"Phi3MLP": {"not a candidate: already one fused gate_up_proj"}}


def test_bert_and_gpt2_names():
    bert = inspect_model("arch:bert").discovery("qkv")
    assert bert.near_misses and all("query, key, value" in r.reason for r in bert.near_misses)
    gpt2 = inspect_model("arch:gpt2").discovery("qkv")
    assert gpt2.near_misses and all("already one fused projection c_attn" in r.reason for r in gpt2.near_misses)


def test_plan_text_and_json(capsys):
    assert main(["plan", "arch:t5", "--fusion", "qkv"]) == 0
    out = capsys.readouterr().out
    assert "[qkv] 0 module(s) matched, 0 rejected, 18 near miss(es)" in out
    assert "not a candidate: projections named q, k, v" in out
    assert main(["plan", "arch:t5", "--fusion", "qkv", "--json"]) == 0
    [fam] = json.loads(capsys.readouterr().out)["families"]
    assert fam["near_misses"][0]["reason"].startswith("not a candidate: ")
    assert set(fam["near_misses"][0]) == {"module", "class", "reason"}
