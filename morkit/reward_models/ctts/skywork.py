"""Skywork/Skywork-Reward-Gemma-2-27B and Skywork/Skywork-Reward-V2-Llama-3.1-8B-40M: stock sequence classifiers
(backbone + `score.weight`), a raw Bradley-Terry logit at the last real token. Details: docs page Reward models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from morkit.reward_models.ctts.common import CttsRM, head_state, load_strict
from morkit.reward_models.families.adapter import AdapterFamily


class _SeqClassRM(CttsRM):
    allowed_extra = ("score",)

    @classmethod
    def build_head(cls, root: Path, config: Any, dtype: Any) -> Any:
        from morkit.reward_models.ctts.heads import linear_score

        state = head_state(root, "score", cls.model_id)
        return load_strict(linear_score(config.hidden_size), state, prefix="score", model_id=cls.model_id,
                           source=root).to(dtype)


class SkyworkGemmaRM(_SeqClassRM):
    backbone_class = "Gemma2Model"
    default_attn = "eager"


class SkyworkV2LlamaRM(_SeqClassRM):
    backbone_class = "LlamaModel"


SKYWORK_GEMMA = AdapterFamily("morkit.reward_models.ctts.skywork:SkyworkGemmaRM")
SKYWORK_V2_LLAMA = AdapterFamily("morkit.reward_models.ctts.skywork:SkyworkV2LlamaRM")
