"""The CLI's documented JSON (docs/cli-json.md) against golden files made before the typed-boundary change.

Every ``--json`` command runs in-process on the demo checkpoints; its output is normalised
(measured numbers become their type, paths and versions placeholders) and must equal
``tests/core/golden/<name>.json`` exactly: same keys, same order of lists, same values
wherever a value is deterministic. ``FUSION_REGEN_GOLDEN=1`` rewrites the files (only when
the documented shape really changes, with ``schema_version`` going up).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from fusion_core.cli import main

GOLDEN = Path(__file__).parent / "golden"
KV_FILE = Path(__file__).resolve().parents[1] / "plugin_example" / "fi_kv_family" / "kv_family.py"

# keys whose value is measured (a time, a speed, a difference, memory): only their type is kept
VOLATILE = {
    "seconds",
    "peak_rss_mb",
    "timing",
    "share_of_end_to_end",
    "verdict",
    "projected_speedup",
    "speedup",
    "low",
    "high",
    "share",
    "projected_end_to_end",
    "line",
    "warnings",
    "max_abs_diff",
    "max_rel_diff",
    "ours_max_abs_diff",
    "max_original",
    "limit",
    "floor",
    # a comparison's shape: end to end it is the worst run's (image+text or video+text), a measurement
    "shape",
    "summary",
    "transformers_version",
    "torch_version",
    "cpu",
    # a plan's source identity: absolute folders and the weights' SHA-256 (test_plan_file.py checks them)
    "identity",
    "jobs",
    "threads",
    "detail",
    "bytes",
    "total_bytes",
    "within_tolerance",
    "notes",
    "messages",
}


def shape_of(value: Any) -> Any:
    """Keys and types only (a measured dict keeps its keys)."""
    if isinstance(value, dict):
        return {k: shape_of(v) for k, v in value.items()}
    if isinstance(value, list):
        return "list"  # how many warnings or notes a run gives is measured too
    return type(value).__name__


def normalise(value: Any, roots: list[str], key: str = "") -> Any:
    if key in VOLATILE:
        return shape_of(value)
    if isinstance(value, dict):
        return {k: normalise(v, roots, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v, roots, key) for v in value]
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        for i, root in enumerate(roots):
            value = value.replace(root, f"<root{i}>")
        return re.sub(r"\b\d+\.\d+\.\d+\S*", "<version>", value)
    return value


def cases(tmp: Path) -> dict[str, list[str]]:
    out = str(tmp / "export-out")
    return {
        "plan_qwen2_vl": ["plan", "demo:qwen2-vl", "--fusion", "patch_embeddings", "--json"],
        "plan_llama": ["plan", "demo:llama", "--fusion", "qkv", "--fusion", "gate_up", "--json"],
        "plan_kv_options": [
            "--family-file",
            str(KV_FILE),
            "plan",
            "demo:llama",
            "--fusion",
            "kv_proj:min_in_features=8",
            "--json",
        ],
        "plan_arch": ["plan", "arch:qwen2_vl", "--fusion", "qkv", "--fusion", "patch_embeddings", "--json"],
        "tree_llama": ["tree", "demo:llama", "--depth", "3", "--json"],
        "diff_llama": ["diff", "demo:llama", "--fusion", "qkv", "--fusion", "gate_up", "--json"],
        "families": ["families", "--json"],
        "load_llama": ["load", "demo:llama", "--fusion", "qkv", "--json"],
        "check_llama": [
            "check",
            "demo:llama",
            "--fusion",
            "qkv",
            "--fusion",
            "gate_up",
            "--no-upstream",
            "--time-budget",
            "0.1",
            "--json",
        ],
        "check_qwen2_vl_upstream": [
            "check",
            "demo:qwen2-vl",
            "--fusion",
            "patch_embeddings",
            "--time-budget",
            "0.1",
            "--json",
        ],
        "export_llama": ["export", "demo:llama", out, "--fusion", "qkv", "--json"],
    }


NAMES = list(cases(Path("/x")))


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_cli_json_matches_golden(name: str, capsys, tmp_path: Path, _isolated_cache: Path) -> None:
    argv = cases(tmp_path)[name]
    try:
        code = main(argv)
    finally:
        if "--family-file" in argv:
            from fusion_core.families import unregister

            unregister("kv_proj")
    out, err = capsys.readouterr()
    assert code == 0, err
    got = normalise(json.loads(out), [str(tmp_path), str(_isolated_cache), str(Path.home())])
    path = GOLDEN / f"{name}.json"
    if os.environ.get("FUSION_REGEN_GOLDEN") == "1":
        path.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(path.read_text()), f"{name}: the JSON of `fusion-core {' '.join(argv)}` changed"
