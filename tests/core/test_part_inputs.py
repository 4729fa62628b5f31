"""Parts of models saved alone whose forward takes model-specific tensors (``run/part_inputs.py``):
each runs end to end on the vectors, feature maps, counts and indices its forward requires."""

from __future__ import annotations

import inspect

import pytest

from fusion_core.coverage.checked import VERIFIED, check_type
from fusion_core.families.base import Workload


@pytest.mark.parametrize(
    "model_type",
    [
        # hidden states in input_values and decoder_input_values: a speech model without its pre-nets
        "speecht5",
        # (hidden_states, mask) of the config's input_size (its mel bins), not of its hidden width
        "phi4_multimodal_audio",
        # a required count of the steps made (num_patches)
        "deepseek_ocr2_encoder",
        # patch_embeds a feature map (batch, hidden, height, width), as its docstring gives it
        "unlimited_ocr_vision_encoder",
        # required image_features of the width of the Linear that reads them, and indices into them
        "molmo2_adapter",
        # the groups it pools its steps into: num_patches and each step's patch_ids
        "blt_local_encoder",
        # optional patch_embeds of the width of the Linear named after them
        "blt_local_decoder",
        # feature maps in a list (one level) with their position embeddings; text features
        "sam3_detr_encoder",
        "sam3_lite_text_detr_encoder",
        # vision and text features, and the vision position encoding
        "sam3_detr_decoder",
        "sam3_lite_text_detr_decoder",
        # decoder queries, backbone features in a list, encoder states; prompt features so its cross-attention runs
        "sam3_mask_decoder",
        "sam3_lite_text_mask_decoder",
    ],
)
def test_a_part_runs_end_to_end_on_the_tensors_its_forward_takes(model_type) -> None:
    result = check_type(model_type, ["patch_embeddings", "patch_embeddings_2d", "qkv", "gate_up"], 0)
    assert result["status"] == VERIFIED, result["reason"]
    assert result["input_kinds"] == ["embeddings"]


class _Part:
    """A part whose docstring gives its input a feature map's four dimensions."""

    def __init__(self) -> None:
        import torch
        from transformers import PretrainedConfig

        self.config = PretrainedConfig(hidden_size=8, image_size=16, patch_size=4)
        self.layer = torch.nn.Linear(8, 8)

    def modules(self):
        return iter([self.layer])

    def named_modules(self):
        return iter([("layer", self.layer)])

    def forward(self, patch_embeds, num_patches: int, pooled_idx, **kwargs):
        r"""
        patch_embeds (`torch.Tensor` of shape `(batch_size, hidden_size, grid_height, grid_width)`):
            Patch embeddings.
        pooled_idx (`torch.Tensor` of shape `(num_tokens, pool)`):
            Indices into the patches.
        """


def test_state_inputs_make_a_feature_map_a_count_and_indices_deterministically() -> None:
    import torch

    from fusion_core.run.inputs import _generator
    from fusion_core.run.part_inputs import doc_dims, state_inputs

    part = _Part()
    params = dict(inspect.signature(part.forward).parameters)
    assert doc_dims(part, "patch_embeds") == ["batch_size", "hidden_size", "grid_height", "grid_width"]

    def made() -> list:
        return list(state_inputs(part, params, _generator(0), None, Workload(seed=0)))

    first, again = made(), made()
    inputs = first[0]  # the docstring's 4-D layout first, of the config's patches per side
    assert inputs.kind == "embeddings" and inputs.fed[0].modality == "embeddings"
    assert tuple(inputs.kwargs["patch_embeds"].shape) == (1, 8, 4, 4)
    assert inputs.kwargs["num_patches"] == 16  # the steps made
    idx = inputs.kwargs["pooled_idx"]
    assert idx.dim() == 2 and idx.dtype == torch.long and int(idx.min()) >= 0 and int(idx.max()) < 16
    assert all(torch.equal(a.kwargs["patch_embeds"], b.kwargs["patch_embeds"]) for a, b in zip(first, again))


def test_a_list_of_feature_maps_goes_to_the_device_with_the_other_inputs() -> None:
    """A part fed a list of tensors (SAM 3's DETR encoder) gets each of them on the run's device."""
    import torch

    from fusion_core.run.capture import _on

    moved = _on({"maps": [torch.zeros(1, 2)], "x": torch.ones(1), "flag": True}["maps"], "meta")
    assert [m.device.type for m in moved] == ["meta"] and isinstance(moved, list)
    assert _on(True, "meta") is True
