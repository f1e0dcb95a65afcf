"""TIGER-Lab/AceCodeRM-32B: a Qwen2 causal LM with a value head, run as `Qwen2Model` + `v_head.summary`.

The checkpoint holds `model.*`, `lm_head.weight` (unused: the LM logits are never computed) and
`v_head.summary.{weight,bias}` (searched in every *.safetensors file of the checkpoint, as the value
head may sit in its own file). Score = value at the last real token (`attention_mask.sum - 1`,
right padding), a raw unbounded value, so empty answers go through the model (`empty_score = None`).
Format: [user, assistant] with no explicit system turn: the tokenizer's Qwen template inserts its
own default system prompt, as in the card.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from morkit.reward_models.ctts.common import CttsRM, head_state, load_strict


class AceCodeRM(CttsRM):
    name = "acecoderm-32b"
    backbone_class = "Qwen2Model"
    allowed_extra = ("lm_head", "v_head")

    @classmethod
    def build_head(cls, root: Path, config: Any, dtype: Any) -> Any:
        from morkit.reward_models.ctts.heads import ValueHead

        state = head_state(root, "v_head", cls.model_id)
        return load_strict(ValueHead(config.hidden_size), state, prefix="v_head", model_id=cls.model_id,
                           source=root).to(dtype)
