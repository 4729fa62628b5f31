"""A deliberately wrong family for the conformance kit (a test fixture loaded with --family-file).

Its fused forward is the qkv family's (it slices the fused rows as q, k, v), but its key
transforms write k before q. In-place fusion (which concatenates in member order) is
right, and every transform inverts bitwise; only a checkpoint written in the fused layout
loads wrong. The kit must fail it on ``in_place_equals_fused_layout``.
"""

from __future__ import annotations

from fusion_core.families.qkv import QKVFusion
from fusion_core.families.transforms import Concat

ORDER = (1, 0, 2)  # k, q, v


class KBeforeQFusion(QKVFusion):
    name = "test_k_before_q"
    description = "qkv with its key transforms in the wrong order (k, q, v): a test fixture"

    def make_transforms(self, config, modules):
        return [
            Concat(
                family=t.family,
                sources=tuple(t.sources[i] for i in ORDER),
                targets=t.targets,
                dim=t.dim,
                source_shapes=tuple(t.source_shapes[i] for i in ORDER),
            )
            for t in super().make_transforms(config, modules)
        ]
