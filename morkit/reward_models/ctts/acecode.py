"""TIGER-Lab/AceCodeRM-32B: `Qwen2Model` + the value head `v_head.summary`, read at the last real token (a raw
value, so empty answers reach the model). Format and checkpoint notes: docs page Reward models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from morkit.reward_models.ctts.common import CttsRM, head_state, load_strict
from morkit.reward_models.families.adapter import AdapterFamily


class AceCodeRM(CttsRM):
    backbone_class = "Qwen2Model"
    allowed_extra = ("lm_head", "v_head")

    @classmethod
    def build_head(cls, root: Path, config: Any, dtype: Any) -> Any:
        from morkit.reward_models.ctts.heads import ValueHead

        state = head_state(root, "v_head", cls.model_id)
        return load_strict(ValueHead(config.hidden_size), state, prefix="v_head", model_id=cls.model_id,
                           source=root).to(dtype)


ACECODE = AdapterFamily("morkit.reward_models.ctts.acecode:AceCodeRM", architecture="MorkitAceCodeRM",
                        vllm_class="morkit.reward_models.ctts.vllm_models:AceCodeRMForVLLM")
