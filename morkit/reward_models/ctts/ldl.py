"""ShikaiChen/LDL-Reward-Gemma-2-27B-v0.1: `Gemma2Model` + label-distribution heads from two .pt files (fp32); the
score is the gated mixture's expectation over linspace(0, 1, 10). Details: docs page Reward models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from morkit.core.errors import UnavailableError
from morkit.reward_models.base import EMPTY_ANSWER_SCORE
from morkit.reward_models.ctts.common import (
    CttsRM,
    FirstPadPooling,
    config_value,
    load_strict,
)
from morkit.reward_models.families.adapter import AdapterFamily

HEAD_FILES = ("regression_layer.pt", "gating_layer.pt")


def _load_pt(path: Path, model_id: str) -> dict[str, Any]:
    import torch

    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise UnavailableError(f"{model_id}: cannot read head file {path}: {exc}") from exc
    if not isinstance(state, dict):
        raise UnavailableError(f"{model_id}: head file {path} holds {type(state).__name__}, not a state dict")
    return state


class LDLRewardRM(FirstPadPooling, CttsRM):
    backbone_class = "Gemma2Model"
    empty_score = EMPTY_ANSWER_SCORE  # the score is an expectation over [0, 1]
    default_attn = "eager"

    @classmethod
    def build_head(cls, root: Path, config: Any, dtype: Any) -> Any:
        import torch
        from torch import nn

        from morkit.reward_models.ctts.heads import LDLHead, leaky_mlp_from_state

        nets = {}
        for prefix, file in zip(("regression_layer", "gating_layer"), HEAD_FILES):
            state = _load_pt(root / file, cls.model_id)
            try:
                holder = nn.Module()
                holder.network = leaky_mlp_from_state(state)
            except ValueError as exc:
                raise UnavailableError(f"{cls.model_id}: {root / file}: {exc}") from None
            load_strict(holder.float(), {k: v.float() for k, v in state.items()}, prefix=prefix,
                        model_id=cls.model_id, source=root / file)
            nets[prefix] = holder.network
        objectives = config_value(root, "num_objectives", 220)
        reg_in = nets["regression_layer"][0].in_features
        reg_out = nets["regression_layer"][-1].out_features
        gate_out = nets["gating_layer"][-1].out_features
        if reg_out != objectives or gate_out * LDLHead.bins != objectives:
            raise UnavailableError(f"{cls.model_id}: heads give {reg_out} regression outputs and {gate_out} gates; "
                                   f"config num_objectives={objectives} needs {objectives} and {objectives // 10}")
        if reg_in != config.hidden_size:
            raise UnavailableError(f"{cls.model_id}: head input size {reg_in} != backbone hidden size "
                                   f"{config.hidden_size}")
        head = LDLHead(nets["regression_layer"], nets["gating_layer"],
                       temperature=config_value(root, "temperature", 1.0), softmax=config_value(root, "softmax", False))
        return head.to(torch.float32)


LDL_REWARD = AdapterFamily("morkit.reward_models.ctts.ldl:LDLRewardRM", architecture="MorkitLDLRewardModel",
                           vllm_class="morkit.reward_models.ctts.vllm_models:LDLRewardForVLLM")
