"""Third-party families: the example plugin through a real entry point and through
``--family-file``; broken plugins are reported and skipped, never fatal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from _family_cases import output

from fusion_core import FamilyConflictError, inspect_model
from fusion_core.api import load, load_plain
from fusion_core.cli.main import main
from fusion_core.families import (
    REGISTRY,
    clear_plugin_errors,
    families,
    get_family,
    load_entry_points,
    load_family_file,
    plugin_errors,
)
from fusion_core.plan.discovery import clear_cache

EXAMPLE = Path(__file__).resolve().parents[1] / "plugin_example"
KV_FILE = EXAMPLE / "fi_kv_family" / "kv_family.py"
BUILTIN = ["patch_embeddings", "patch_embeddings_2d", "qkv", "gate_up"]
ATTENTION = ["model.layers.0.self_attn", "model.layers.1.self_attn"]

BROKEN_MODULE = """
from fusion_core.families import FusionSpec, get_family

class Incomplete(FusionSpec):
    name = "incomplete"

class TakesQKV(type(get_family("qkv"))):
    pass  # same name as the built-in family

NOT_A_SPEC = object()
"""


@pytest.fixture
def registry():
    """Restore the registry, the plugin errors and the imported plugin modules afterwards."""
    saved = dict(REGISTRY)
    clear_plugin_errors()
    yield
    REGISTRY.clear()
    REGISTRY.update(saved)
    clear_plugin_errors()
    clear_cache()
    for name in [m for m in sys.modules if m.split(".")[0] in ("fi_kv_family", "fi_broken", "fi_raises")]:
        del sys.modules[name]
    for name in [m for m in sys.modules if m.startswith("fusion_inspector_family_file_")]:
        del sys.modules[name]


def make_site(root: Path, *, good: bool = True, broken: bool = False) -> Path:
    """A folder for sys.path holding real distributions (``*.dist-info`` with entry points)."""
    site = root / "site"
    site.mkdir()
    if good:
        shutil.copytree(EXAMPLE / "fi_kv_family", site / "fi_kv_family")
        _dist(site, "fi_kv_family", {"kv_proj": "fi_kv_family:KVProjFusion"})
    if broken:
        (site / "fi_broken.py").write_text(BROKEN_MODULE)
        (site / "fi_raises.py").write_text("raise RuntimeError('plugin exploded at import')\n")
        _dist(
            site,
            "fi_broken",
            {
                "missing": "fi_no_such_module:Spec",
                "raises": "fi_raises:Spec",
                "not_a_spec": "fi_broken:NOT_A_SPEC",
                "incomplete": "fi_broken:Incomplete",
                "takes_qkv": "fi_broken:TakesQKV",
            },
        )
    return site


def _dist(site: Path, name: str, entry_points: dict[str, str]) -> None:
    info = site / f"{name}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.1.0\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[fusion_inspector.families]\n{lines}")


def test_entry_point_family_loads_fuses_and_conflicts(registry, tmp_path, monkeypatch, llama_dir):
    monkeypatch.syspath_prepend(str(make_site(tmp_path)))
    loaded = load_entry_points()
    assert [s.name for s in loaded] == ["kv_proj"]
    spec = get_family("kv_proj")
    assert spec.origin == "entry point kv_proj (fi-kv-family)" and not plugin_errors()
    assert [s.name for s in families()] == [*BUILTIN, "kv_proj"]
    assert load_entry_points() == []  # loading again adds nothing

    insp = inspect_model(str(llama_dir))
    plan = insp.plan({"kv_proj": True})
    assert [m.path for m in plan.families[0].discovery.matches] == ATTENTION
    assert {r["target_key"].rsplit(".", 2)[-2] for r in plan.rows("load")} == {"kv_proj"}
    with pytest.raises(
        FamilyConflictError, match=r"'qkv' and 'kv_proj' both replace module model\.layers\.0\.self_attn"
    ):
        insp.plan({"qkv": True, "kv_proj": True})

    fused = load(str(llama_dir), {"kv_proj": True}).model
    assert type(fused.model.layers[0].self_attn).__name__ == "FusedLlamaAttention"
    assert "model.layers.0.self_attn.kv_proj.weight" in fused.state_dict()
    torch.testing.assert_close(output(fused, "llama"), output(load_plain(str(llama_dir)), "llama"))


def test_broken_entry_points_are_reported_and_skipped(registry, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(make_site(tmp_path, broken=True)))
    loaded = load_entry_points()
    assert [s.name for s in loaded] == ["kv_proj"]  # the good plugin still loads
    errors = {e.name: e for e in plugin_errors()}
    assert sorted(errors) == ["incomplete", "missing", "not_a_spec", "raises", "takes_qkv"]
    assert "ModuleNotFoundError" in errors["missing"].error and "fi_no_such_module" in errors["missing"].error
    assert "plugin exploded at import" in errors["raises"].error
    assert "neither a FusionSpec subclass nor a FusionSpec instance" in errors["not_a_spec"].error
    assert "does not implement judge, make_fused_class, make_transforms, fuse_module" in errors["incomplete"].error
    assert "'qkv' is already registered by fusion_core" in errors["takes_qkv"].error
    assert errors["raises"].origin == "entry point raises (fi-broken)"
    assert type(get_family("qkv")).__module__ == "fusion_core.families.qkv"  # the built-in is untouched
    assert [s.name for s in families()] == [*BUILTIN, "kv_proj"]


def test_family_file_through_the_cli(registry, capsys, llama_dir):
    assert main(["--family-file", str(KV_FILE), "families", "--json"]) == 0
    listed = {f["name"]: f for f in json.loads(capsys.readouterr().out)}
    assert list(listed) == [*BUILTIN, "kv_proj"]
    assert listed["kv_proj"]["origin"] == f"file {KV_FILE}"
    # loading the same file again (an edited experiment) replaces its family, no error
    assert [s.name for s in load_family_file(KV_FILE)] == ["kv_proj"] and not plugin_errors()
    assert main(["--family-file", str(KV_FILE), "plan", str(llama_dir), "--fusion", "kv_proj", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [m["module"] for m in plan["families"][0]["matches"]] == ATTENTION


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("def broken(:\n", "SyntaxError"),
        ("X = 1\n", "defines no FusionSpec subclass"),
        ("raise ImportError('needs a package that is not installed')\n", "needs a package that is not installed"),
        # a missing file is a usage error (exit 2): tests/core/test_security_hygiene.py
    ],
)
def test_broken_family_file_is_reported_not_fatal(registry, tmp_path, capsys, text, expected):
    path = tmp_path / "my_family.py"
    path.write_text(text)
    assert main(["--family-file", str(path), "families", "--json"]) == 0
    out = capsys.readouterr()
    assert [f["name"] for f in json.loads(out.out)] == BUILTIN
    (error,) = plugin_errors()
    assert error.name == str(path) and error.origin == f"file {path}" and expected in error.error
    # the user sees which plugin was skipped and why, on stderr (the JSON stays clean)
    assert f"plugin {path} (file {path}) skipped: " in out.err and expected in out.err


def test_conflicting_families_are_a_usage_error_in_the_cli(registry, capsys, llama_dir):
    code = main(["--family-file", str(KV_FILE), "plan", str(llama_dir), "--fusion", "qkv", "--fusion", "kv_proj"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "'qkv' and 'kv_proj' both replace module model.layers.0.self_attn" in err[0]


def test_plugins_load_at_import_in_a_fresh_process(tmp_path):
    """The real path: a new process imports fusion_core and finds the entry points by itself."""
    site = make_site(tmp_path, broken=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(EXAMPLE.parents[1])]))
    code = textwrap.dedent(
        """
        import json
        from fusion_core.families import families, plugin_errors
        print(json.dumps({"families": [f.name for f in families()], "errors": [e.name for e in plugin_errors()]}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["families"] == [*BUILTIN, "kv_proj"]
    assert sorted(data["errors"]) == ["incomplete", "missing", "not_a_spec", "raises", "takes_qkv"]
    assert "fusion family plugin skipped" in proc.stderr
