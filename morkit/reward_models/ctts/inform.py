"""infly/INF-ORM-Llama3.1-70B: `LlamaModel` + the `score` MLP (Linear(h,h) -> ReLU -> Linear(h,1)), pooled at the
token before the first pad id as in the reference; a raw logit. Details: docs page Reward models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from morkit.reward_models.ctts.common import (
    CttsRM,
    FirstPadPooling,
    head_state,
    load_strict,
)
from morkit.reward_models.families.adapter import AdapterFamily


class InfOrmRM(FirstPadPooling, CttsRM):
    backbone_class = "LlamaModel"
    allowed_extra = ("score",)

    @classmethod
    def build_head(cls, root: Path, config: Any, dtype: Any) -> Any:
        from morkit.reward_models.ctts.heads import mlp_score

        state = head_state(root, "score", cls.model_id)
        return load_strict(mlp_score(config.hidden_size, 1), state, prefix="score", model_id=cls.model_id,
                           source=root).to(dtype)


INF_ORM = AdapterFamily("morkit.reward_models.ctts.inform:InfOrmRM",
                        architecture="MorkitINFORMForSequenceClassification",
                        vllm_class="morkit.reward_models.ctts.vllm_models:InfOrmForVLLM")
