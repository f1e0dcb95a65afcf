"""The eight reward models of the CTTS-MM paper, described without importing torch: `CTTS_MODELS` is the one place
their facts live (id, kind, adapter, size, vLLM pooling and class, trained length), read by the catalog, the
adapters and the vLLM specs. Each adapter is in its family module; docs: Reward models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from morkit.reward_models.weights import bf16_gib

UNKNOWN_CONTEXT = 4096  # a config without max_position_embeddings (none of the eight's)


def max_positions(root: Path) -> int | None:
    """`max_position_embeddings` from the config.json in checkpoint folder `root` (None where it has none)."""
    value = json.loads((Path(root) / "config.json").read_text()).get("max_position_embeddings")
    return value if isinstance(value, int) and value > 0 else None


@dataclass(frozen=True)
class CttsModel:
    """One CTTS-MM reward model: short name, hub id, kind, adapter class ("module:Class"), size, summary,
    and how vLLM runs it: its pooling kind and, where vLLM has no class for it, morkit's vLLM class."""

    name: str
    model_id: str
    kind: str
    adapter: str
    n_params: float
    description: str
    required: tuple[str, ...] = ("config.json",)
    pooling: str = "classify"  # classify | token_classify | step (see morkit.reward_models.backends.pooling_io)
    vllm_class: str | None = None  # a morkit class registered with vLLM (vllm_plugin); None: vLLM's own
    trained_context: int | None = None  # the longest sequence its model card says it was trained on, if it says

    def context_window(self, max_positions: int | None) -> int:
        """The tokens it reads by default: the checkpoint's `max_position_embeddings`, capped by the length its
        card says it was trained on (a longer input is beyond what the score was fitted for)."""
        limits = [n for n in (max_positions, self.trained_context) if n]
        return min(limits) if limits else UNKNOWN_CONTEXT

    def window_at(self, root: Path) -> int:
        """Its window with the checkpoint in folder `root`."""
        return self.context_window(max_positions(root))

    def describe_context(self, max_positions: int | None) -> str:
        """How its window is set, for `morkit rms NAME`; `max_positions` is None where no config was found."""
        cap = self.trained_context
        card = f", capped at {cap:,} (trained length on its model card)" if cap else ""
        if max_positions is None:
            return f"the checkpoint's max_position_embeddings{card}; weights not found here (--max-tokens overrides)"
        return (f"{self.context_window(max_positions):,} tokens: max_position_embeddings {max_positions:,} in its "
                f"config{card} (--max-tokens overrides)")

    def adapter_class(self) -> type:
        """The transformers adapter class (imports its module; its `build_head` and `messages` serve every backend)."""
        import importlib

        module, cls = self.adapter.split(":")
        return getattr(importlib.import_module(module), cls)

    @property
    def needs(self) -> str:
        return (f"weights of {self.model_id} (local path, $MORKIT_WEIGHTS_DIR or HF cache), torch, transformers; "
                f"~{bf16_gib(self.n_params):.0f} GiB GPU memory in bf16")


_PKG = "morkit.reward_models.ctts"
CTTS_MODELS = (
    CttsModel("qwen2.5-math-rm-72b", "Qwen/Qwen2.5-Math-RM-72B", "orm", f"{_PKG}.qwen_math:QwenMathRM", 72.7e9,
              "Qwen2.5-Math outcome RM; raw logit at the last token", pooling="token_classify"),
    CttsModel("qwen2.5-math-prm-7b", "Qwen/Qwen2.5-Math-PRM-7B", "prm", f"{_PKG}.qwen_math:QwenMathPRM", 7.1e9,
              "Qwen2.5-Math process RM; P(step correct) at each <extra_0>, reduced by min", pooling="step"),
    CttsModel("skywork-reward-gemma-2-27b", "Skywork/Skywork-Reward-Gemma-2-27B", "orm",
              f"{_PKG}.skywork:SkyworkGemmaRM", 27.2e9, "Gemma-2 sequence classifier; raw Bradley-Terry logit"),
    CttsModel("inf-orm-llama3.1-70b", "infly/INF-ORM-Llama3.1-70B", "orm", f"{_PKG}.inform:InfOrmRM", 70.6e9,
              "Llama-3.1 with an MLP score head; raw logit",
              vllm_class="MorkitINFORMForSequenceClassification"),
    CttsModel("ldl-reward-gemma-2-27b", "ShikaiChen/LDL-Reward-Gemma-2-27B-v0.1", "orm", f"{_PKG}.ldl:LDLRewardRM",
              27.3e9, "Gemma-2 label-distribution RM; expected value in [0, 1]",
              ("config.json", "regression_layer.pt", "gating_layer.pt"), vllm_class="MorkitLDLRewardModel"),
    CttsModel("acecoderm-32b", "TIGER-Lab/AceCodeRM-32B", "orm", f"{_PKG}.acecode:AceCodeRM", 31.9e9,
              "Qwen2.5-Coder with a value head; raw value at the last token", vllm_class="MorkitAceCodeRM"),
    CttsModel("qrm-gemma-2-27b", "nicolinho/QRM-Gemma-2-27B", "orm", f"{_PKG}.qrm:QRMGemmaRM", 27.3e9,
              "Gemma-2 quantile RM; gated expected reward (quantiles in Score.extra)",
              vllm_class="MorkitQRMGemma2RewardModel"),
    CttsModel("skywork-reward-v2-llama-3.1-8b", "Skywork/Skywork-Reward-V2-Llama-3.1-8B-40M", "orm",
              f"{_PKG}.skywork:SkyworkV2LlamaRM", 7.5e9, "Llama-3.1 sequence classifier; raw Bradley-Terry logit",
              trained_context=16384),
)
CTTS_BY_NAME = {m.name: m for m in CTTS_MODELS}
