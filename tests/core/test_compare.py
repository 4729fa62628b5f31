"""Any two checkpoints compared (fusion_core.compare, ``fusion-core diff A B``): real tiny
checkpoints that differ in one tensor, one dtype, one key name and one added layer; a fused
export against its source; legacy-named keys against the model's names and a re-save."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from fusion_core import compare
from fusion_core.boundary.convert import from_plain, to_plain
from fusion_core.cli import main
from fusion_core.compare.result import Comparison

CHANGED = "model.layers.1.mlp.down_proj.weight"


def _variant(base: Path, dest: Path, tensors: dict[str, torch.Tensor], **config: object) -> Path:
    dest.mkdir(parents=True)
    data = json.loads((base / "config.json").read_text())
    data.update(config)
    (dest / "config.json").write_text(json.dumps(data))
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})
    return dest


@pytest.fixture(scope="module")
def pairs(llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo Llama and variants of it, each differing from it in one way."""
    root = tmp_path_factory.mktemp("compare-pairs")
    sd = load_file(llama_dir / "model.safetensors")
    out = {"base": llama_dir, "copy": _variant(llama_dir, root / "copy", dict(sd))}
    t = dict(sd)
    t[CHANGED] = t[CHANGED].clone()
    t[CHANGED][0, :4] += torch.tensor([1.0, 0.5, 0.0, -2.0])  # 3 of 8192 elements differ
    out["tensor"] = _variant(llama_dir, root / "tensor", t)
    t = dict(sd)
    t["model.norm.weight"] = (t["model.norm.weight"] * 1.001).half()
    out["dtype"] = _variant(llama_dir, root / "dtype", t)
    t = dict(sd)
    t["model.norm.scale"] = t.pop("model.norm.weight")
    out["key"] = _variant(llama_dir, root / "key", t)
    t = dict(sd)
    t.update({k.replace("layers.1.", "layers.2."): v.clone() for k, v in sd.items() if "layers.1." in k})
    out["layer"] = _variant(llama_dir, root / "layer", t, num_hidden_layers=3)
    return out


def test_a_copy_is_equal_bitwise_by_bytes(pairs):
    c = compare(pairs["base"], pairs["copy"], values=True)
    assert c.equal and c.verdict == "equal"
    assert [f.text for f in c.folds] == ["model.layers 0–1: equal"]
    assert {v.how for v in c.values} == {"bytes"} and len(c.values) == 21


def test_one_tensor_differs(pairs):
    c = compare(pairs["base"], pairs["tensor"], values=True)
    assert c.structure_equal and c.keys_equal and not c.equal
    (row,) = [v for v in c.values if v.status != "equal"]
    assert row.name == CHANGED and row.status == "different" and row.how == "decoded"
    assert row.max_abs == pytest.approx(2.0) and row.differing == pytest.approx(3 / 8192)
    a = load_file(pairs["base"] / "model.safetensors")[CHANGED].double()
    b = load_file(pairs["tensor"] / "model.safetensors")[CHANGED].double()
    assert row.max_rel == pytest.approx(float(((a - b).abs() / a.abs()).nan_to_num(0).max()), rel=1e-5)
    # a tolerance wide enough makes it close, and the comparison equal
    wide = compare(pairs["base"], pairs["tensor"], values=True, atol=2.5)
    assert wide.value_of(CHANGED).status == "close" and wide.equal


def test_one_dtype_differs(pairs):
    c = compare(pairs["base"], pairs["dtype"], values=True)
    (key,) = [k for k in c.keys if k.status != "equal"]
    assert (key.name, key.status, key.changes, key.dtype_a, key.dtype_b) == (
        "model.norm.weight", "changed", ("dtype",), "F32", "F16",
    )  # fmt: skip
    v = c.value_of("model.norm.weight")
    assert v.how == "decoded" and v.status == "close"  # within float16's tolerance, but not bitwise
    assert v.rtol == pytest.approx(1e-3) and v.max_abs == pytest.approx(0.001, rel=0.3)
    assert not c.equal


def test_one_key_name_differs(pairs):
    c = compare(pairs["base"], pairs["key"], values=True)
    odd = [(k.status, k.key_a, k.key_b) for k in c.keys if k.status != "equal"]
    assert odd == [("removed", "model.norm.weight", None), ("added", None, "model.norm.scale")]
    assert not c.equal and c.values_equal


def test_one_added_layer(pairs):
    c = compare(pairs["base"], pairs["layer"])
    assert [f.text for f in c.folds] == ["model.layers 0–1: equal", "model.layers 2: added"]
    added = [m.path for m in c.modules if m.status == "added"]
    assert added[0] == "model.layers.2" and len(added) == 13
    assert {m.path: m.changes for m in c.modules if m.status == "changed"}["model.layers"] == ("params", "children")
    assert sorted(k.name for k in c.keys if k.status == "added")[0] == "model.layers.2.input_layernorm.weight"
    assert c.values is None and c.verdict == "different: modules (3 changed, 13 added); keys (9 added)"


def test_cli_exit_codes_and_json(pairs, capsys):
    assert main(["diff", str(pairs["base"]), str(pairs["copy"]), "--values"]) == 0
    assert "verdict: equal" in capsys.readouterr().out
    assert main(["diff", str(pairs["base"]), str(pairs["tensor"]), "--values", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["equal"] is False and data["summary"]["values"]["different"] == 1
    data["seconds"] = 0.0
    assert to_plain(from_plain(Comparison, data)) == data  # the documented form reads back as the same classes
    # one model: today's diff; flags of two models refused as usage errors (exit 2), one line
    assert main(["diff", str(pairs["base"]), "--values"]) == 2
    assert main(["diff", "demo:llama", "demo:qwen2-vl", "--bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "fusion-core: error: unrecognized arguments: --bogus"


def test_fused_export_against_its_source(llama_dir, tmp_path):
    import fusion_core

    fusion_core.export(str(llama_dir), tmp_path / "fused", {"qkv": True, "gate_up": True}, verify_outputs=False)
    for a, b in ((llama_dir, tmp_path / "fused"), (tmp_path / "fused", llama_dir)):
        c = compare(a, b, values=True)
        assert c.equal and c.verdict == "equal after transforms: qkv, gate_up"
        transformed = {k.name for k in c.keys if k.status == "transformed"}
        assert {v.how for v in c.values if v.name in transformed} == {"transform"}
        assert {v.how for v in c.values if v.name not in transformed} == {"bytes"}
    assert c.key_counts()["transformed"] == 10
    # each side's stored shape: the fused side holds the whole qkv_proj (64 q + 32 k + 32 v rows)
    q = next(k for k in c.keys if k.name == "model.layers.0.self_attn.q_proj.weight")
    assert (q.shape_a, q.stored_shape_a, q.stored("a")) == ((64, 64), (128, 64), (128, 64))
    assert (q.shape_b, q.stored_shape_b, q.stored("b")) == ((64, 64), None, (64, 64))
    # a changed fused tensor is found through the inverse transform, on the source's key
    sd = load_file(tmp_path / "fused" / "model.safetensors")
    sd["model.layers.0.self_attn.qkv_proj.weight"][100, 0] += 1  # a row of v_proj (64 q + 32 k rows first)
    shutil.copytree(tmp_path / "fused", tmp_path / "edited")
    save_file(sd, tmp_path / "edited" / "model.safetensors", metadata={"format": "pt"})
    c = compare(llama_dir, tmp_path / "edited", values=True)
    assert [v.name for v in c.values if v.status != "equal"] == ["model.layers.0.self_attn.v_proj.weight"]


def test_legacy_names_against_model_names_and_a_resave(tmp_path):
    import transformers

    config = transformers.ViTConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8
    )
    torch.manual_seed(0)
    model = transformers.ViTModel(config)
    model.save_pretrained(tmp_path / "legacy")  # transformers writes the legacy names (attention.attention.query)
    config.save_pretrained(tmp_path / "model-names")
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(sd, tmp_path / "model-names" / "model.safetensors", metadata={"format": "pt"})
    c = compare(tmp_path / "legacy", tmp_path / "model-names", values=True)
    assert c.equal and c.verdict == "equal after renames"
    row = next(k for k in c.keys if k.name == "layers.0.attention.q_proj.weight")
    assert (row.status, row.key_a, row.key_b, row.via_a) == (
        "renamed", "encoder.layer.0.attention.attention.query.weight", "layers.0.attention.q_proj.weight", "renames",
    )  # fmt: skip
    transformers.ViTModel.from_pretrained(tmp_path / "legacy").save_pretrained(tmp_path / "resaved")
    again = compare(tmp_path / "legacy", tmp_path / "resaved", values=True)
    assert again.equal and again.verdict == "equal" and again.value_counts()["equal"] == 40


def test_save_pretrained_resave_is_equal(llama_dir, tmp_path):
    from transformers import LlamaForCausalLM

    LlamaForCausalLM.from_pretrained(llama_dir).save_pretrained(tmp_path / "resaved")
    c = compare(llama_dir, tmp_path / "resaved", values=True)
    assert c.equal and c.value_counts() == {"equal": 21, "close": 0, "different": 0, "skipped": 0}


def test_cancel_stops_the_values(pairs):
    from fusion_core import CancelToken
    from fusion_core.errors import Cancelled

    token = CancelToken()
    seen = []

    def progress(p):
        seen.append(p)
        if p.message == "values":
            token.cancel()

    with pytest.raises(Cancelled):
        compare(pairs["base"], pairs["tensor"], values=True, progress=progress, cancel=token)
    assert seen[-1].message == "values"


def test_the_plain_form_round_trips(pairs):
    c = compare(pairs["base"], pairs["layer"])
    data = json.loads(json.dumps(to_plain(c)))
    assert list(data)[:5] == ["schema_version", "a", "b", "equal", "verdict"]
    assert from_plain(Comparison, data) == c


def test_hash_digests_the_stored_bytes(pairs, capsys):
    import hashlib

    c = compare(pairs["base"], pairs["tensor"], values=True, digest=True)
    row = c.value_of(CHANGED)
    info = __import__("fusion_core").read_index(pairs["tensor"]).tensors[CHANGED]
    with open(pairs["tensor"] / "model.safetensors", "rb") as f:
        f.seek(info.start)
        expected = hashlib.blake2b(f.read(info.nbytes), digest_size=16).hexdigest()
    assert row.digest_b == expected and row.digest_a != expected
    same = c.value_of("model.norm.weight")
    assert same.digest_a == same.digest_b and len(same.digest_a) == 32
    assert "digest_a" not in to_plain(compare(pairs["base"], pairs["copy"], values=True).values[0])  # only when asked
    assert main(["diff", str(pairs["base"]), str(pairs["copy"]), "--hash"]) == 2


def test_two_fused_exports_alike_are_plainly_equal(llama_dir, tmp_path):
    import fusion_core

    for name in ("one", "two"):
        fusion_core.export(str(llama_dir), tmp_path / name, {"qkv": True}, verify_outputs=False)
    c = compare(tmp_path / "one", tmp_path / "two", values=True)
    assert c.verdict == "equal" and c.key_counts()["transformed"] == 0
    assert c.a.fusion_config == {"qkv": True}
