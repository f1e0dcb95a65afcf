"""infly/INF-ORM-Llama3.1-70B: `LlamaModel` + `score` MLP (Linear(h,h) -> ReLU -> Linear(h,1)).

The card's INFORMForSequenceClassification is reproduced without its code: backbone `model.*`,
head tensors `score.0.*` / `score.2.*`. Pooling follows the reference exactly: the token before
the first `config.pad_token_id` (the last real token when the pad id does not occur in the text).
Format: Llama-3.1 chat [user, assistant], one BOS. Score = raw logit, so empty answers go through
the model (`empty_score = None`).
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


class InfOrmRM(FirstPadPooling, CttsRM):
    name = "inf-orm-llama3.1-70b"
    backbone_class = "LlamaModel"
    allowed_extra = ("score",)

    @classmethod
    def build_head(cls, root: Path, config: Any, dtype: Any) -> Any:
        from morkit.reward_models.ctts.heads import mlp_score

        state = head_state(root, "score", cls.model_id)
        return load_strict(mlp_score(config.hidden_size, 1), state, prefix="score", model_id=cls.model_id,
                           source=root).to(dtype)
