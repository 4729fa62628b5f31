"""The foundation's headline behaviour, end to end on the demo checkpoint."""

from __future__ import annotations

import pytest

from fusion_core import inspect_model

# the smoke subset: also run against the oldest transformers pyproject.toml admits (scripts/test_oldest.sh)
pytestmark = pytest.mark.smoke


def test_plan_demo_matches_patch_embedding(qwen2_vl_dir):
    insp = inspect_model(str(qwen2_vl_dir))
    plan = insp.plan({"patch_embeddings": True})
    assert [m.path for m in plan.families[0].discovery.matches] == ["model.visual.patch_embed"]
    rows = plan.rows("load")
    assert rows == [
        {
            "family": "patch_embeddings",
            "source_key": "visual.patch_embed.proj.weight",
            "source_shape": [32, 3, 2, 14, 14],
            "dtype": "F32",
            "target_key": "visual.patch_embed.linear_proj.weight",
            "target_shape": [32, 1176],
            "op": "conv3d_to_linear",
        }
    ]
