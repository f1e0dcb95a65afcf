"""morkit's vLLM plugin (entry point `vllm.general_plugins`: `morkit`): registers the out-of-tree reward model classes
of `vllm_models` by "module:Class" path in every vLLM process where morkit is installed.
"""

from __future__ import annotations

ARCHITECTURES = {
    "MorkitINFORMForSequenceClassification": "morkit.reward_models.ctts.vllm_models:InfOrmForVLLM",
    "MorkitAceCodeRM": "morkit.reward_models.ctts.vllm_models:AceCodeRMForVLLM",
    "MorkitLDLRewardModel": "morkit.reward_models.ctts.vllm_models:LDLRewardForVLLM",
    "MorkitQRMGemma2RewardModel": "morkit.reward_models.ctts.vllm_models:QRMGemmaForVLLM",
}
"""vLLM architecture name -> class; a checkpoint runs as one through `hf_overrides={"architectures": [name]}`."""


def register() -> None:
    """Register morkit's classes with vLLM's model registry (idempotent; vLLM calls it once per process)."""
    from vllm import ModelRegistry

    known = set(ModelRegistry.get_supported_archs())
    for name, target in ARCHITECTURES.items():
        if name not in known:
            ModelRegistry.register_model(name, target)
