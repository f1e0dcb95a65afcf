"""The eight reward models of the CTTS-MM paper, as cards (`CTTS_CARDS`, read by the catalog): each card names its
family (adapter class and vLLM facts), which lives in the family's module here; nothing here imports torch.
Docs: Reward models.
"""

from __future__ import annotations

from morkit.reward_models.card import RMCard, weights_needs

_PKG = "morkit.reward_models.ctts"
_TORCH = ("torch", "transformers")


def _card(name: str, model_id: str, kind: str, family: str, n_params: float, description: str,
          **more: object) -> RMCard:
    """One of the eight: a transformers model with downloadable weights, built by `family`."""
    return RMCard(name=name, kind=kind, runs="transformers", family=f"{_PKG}.{family}", description=description,
                  packages=_TORCH, needs=weights_needs(model_id, n_params), model_id=model_id, n_params=n_params,
                  **more)  # type: ignore[arg-type]


CTTS_CARDS = (
    _card("qwen2.5-math-rm-72b", "Qwen/Qwen2.5-Math-RM-72B", "orm", "qwen_math:QWEN_MATH_RM", 72.7e9,
          "Qwen2.5-Math outcome RM; raw logit at the last token"),
    _card("qwen2.5-math-prm-7b", "Qwen/Qwen2.5-Math-PRM-7B", "prm", "qwen_math:QWEN_MATH_PRM", 7.1e9,
          "Qwen2.5-Math process RM; P(step correct) at each <extra_0>, reduced by min"),
    _card("skywork-reward-gemma-2-27b", "Skywork/Skywork-Reward-Gemma-2-27B", "orm", "skywork:SKYWORK_GEMMA", 27.2e9,
          "Gemma-2 sequence classifier; raw Bradley-Terry logit"),
    _card("inf-orm-llama3.1-70b", "infly/INF-ORM-Llama3.1-70B", "orm", "inform:INF_ORM", 70.6e9,
          "Llama-3.1 with an MLP score head; raw logit"),
    _card("ldl-reward-gemma-2-27b", "ShikaiChen/LDL-Reward-Gemma-2-27B-v0.1", "orm", "ldl:LDL_REWARD", 27.3e9,
          "Gemma-2 label-distribution RM; expected value in [0, 1]",
          required=("config.json", "regression_layer.pt", "gating_layer.pt")),
    _card("acecoderm-32b", "TIGER-Lab/AceCodeRM-32B", "orm", "acecode:ACECODE", 31.9e9,
          "Qwen2.5-Coder with a value head; raw value at the last token"),
    _card("qrm-gemma-2-27b", "nicolinho/QRM-Gemma-2-27B", "orm", "qrm:QRM_GEMMA", 27.3e9,
          "Gemma-2 quantile RM; gated expected reward (quantiles in Score.extra)"),
    _card("skywork-reward-v2-llama-3.1-8b", "Skywork/Skywork-Reward-V2-Llama-3.1-8B-40M", "orm",
          "skywork:SKYWORK_V2_LLAMA", 7.5e9, "Llama-3.1 sequence classifier; raw Bradley-Terry logit",
          trained_context=16384),
)
