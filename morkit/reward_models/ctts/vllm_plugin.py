"""morkit's vLLM plugin: registers the out-of-tree reward model classes (see `vllm_models`) with vLLM.

Installed as the `vllm.general_plugins` entry point `morkit`, so every vLLM process loads it: an
offline engine's spawned workers, `vllm serve`, and remote workers where morkit is installed. The
classes are registered by "module:Class" path, so nothing heavy is imported until vLLM builds one.
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
