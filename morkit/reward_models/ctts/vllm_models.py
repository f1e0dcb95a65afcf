"""vLLM model classes for the four CTTS-MM RMs vLLM has no class for (INF-ORM, LDL, QRM, AceCode): vLLM's backbone
plus the head of `adapter` (set by the vLLM plugin: the family's adapter bound to its card) and its strict loader,
so the placements cannot drift apart. Only vLLM processes import this module."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.pooler import DispatchPooler, PoolingParamsUpdate
from vllm.model_executor.layers.pooler.seqwise.methods import SequencePoolingMethod
from vllm.model_executor.layers.pooler.seqwise.poolers import pooler_for_classify
from vllm.model_executor.models.gemma2 import Gemma2ForCausalLM, Gemma2Model
from vllm.model_executor.models.interfaces_base import default_pooling_type
from vllm.model_executor.models.llama import LlamaForCausalLM, LlamaModel
from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM, Qwen2Model
from vllm.model_executor.models.utils import AutoWeightsLoader, maybe_prefix


@default_pooling_type(seq_pooling_type="LAST")
class _HeadOnBackbone(nn.Module):
    """A vLLM pooling model: backbone -> pooled rows -> morkit head (no activation applied by morkit)."""

    is_pooling_model = True
    adapter: type | None = None  # set by the plugin: the adapter class bound to the RM's card
    backbone_cls: type = LlamaModel
    mapper_from: type = LlamaForCausalLM
    bare_backbone = False  # the checkpoint's backbone tensors carry no "model." prefix

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        model_config = vllm_config.model_config
        self.config = model_config.hf_config
        self.model_config = model_config
        self.model = self.backbone_cls(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
        self.head = self.adapter.build_head(Path(model_config.model), self.config, model_config.head_dtype)
        self.head = self.head.to(dtype=model_config.head_dtype).eval()
        classify = pooler_for_classify(model_config.pooler_config, pooling=self.pooling(), classifier=self.classify)
        self.pooler = DispatchPooler({"classify": classify})

    def pooling(self) -> SequencePoolingMethod | None:
        return None  # LAST

    def classify(self, rows: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=rows.device.type, enabled=False):
            return self.head(rows.to(next(self.head.parameters()).dtype)).float()

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_input_ids(input_ids)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Backbone tensors through vLLM's loader; head tensors were loaded (strictly) at construction."""
        def backbone(items):
            for name, tensor in items:
                if self.bare_backbone and not name.startswith("model."):
                    name = "model." + name
                if name.startswith("model."):
                    yield name, tensor

        loaded = AutoWeightsLoader(self).load_weights(
            backbone(weights), mapper=self.mapper_from.hf_to_vllm_mapper)
        return set(loaded) | {f"head.{n}" for n, _ in self.head.named_parameters()}


class InfOrmForVLLM(_HeadOnBackbone):
    """INF-ORM: Llama backbone, MLP score head."""


class AceCodeRMForVLLM(_HeadOnBackbone):
    """AceCodeRM: Qwen2 backbone, value head."""

    backbone_cls, mapper_from = Qwen2Model, Qwen2ForCausalLM


class LDLRewardForVLLM(_HeadOnBackbone):
    """LDL-Reward: Gemma-2 backbone (tensors without a prefix), label-distribution heads."""

    backbone_cls, mapper_from = Gemma2Model, Gemma2ForCausalLM
    bare_backbone = True


class _RewardAndGatePool(SequencePoolingMethod):
    """Rows [last token ; last assistant-header token] per prompt, concatenated (QRM's two readings)."""

    def __init__(self, pattern: list[int], gating_position: Any):
        super().__init__()
        self.pattern = pattern
        self.gating_position = gating_position  # the adapter's: where the last assistant header starts

    def get_supported_tasks(self):
        return {"classify"}

    def get_pooling_updates(self, task) -> PoolingParamsUpdate:
        return PoolingParamsUpdate(requires_token_ids=True)

    def gate_position(self, ids: list[int]) -> int:
        from morkit.core.errors import ScoreError

        try:
            return self.gating_position(ids, self.pattern)
        except ScoreError:  # vLLM's warm-up prompts (all token 0); morkit checks real prompts before sending
            return len(ids) - 1

    def forward(self, hidden_states: torch.Tensor, pooling_metadata) -> torch.Tensor:
        cursor = pooling_metadata.get_pooling_cursor()
        if cursor.is_partial_prefill():
            raise RuntimeError("QRM pooling needs each prompt computed in one step (chunked prefill off)")
        first = cursor.first_token_indices_gpu.tolist()
        last = cursor.last_token_indices_gpu.tolist()
        computed = (cursor.seq_lens_cpu - cursor.num_scheduled_tokens_cpu).tolist()
        rows = []
        for start, end, skipped, ids in zip(first, last, computed, pooling_metadata.get_prompt_token_ids_cpu()):
            at = self.gate_position(ids.tolist()) - skipped
            if at < 0:
                raise RuntimeError("QRM pooling needs the whole prompt computed (prefix caching off)")
            rows.append(torch.cat([hidden_states[end], hidden_states[start + at]]))
        return torch.stack(rows)


class QRMGemmaForVLLM(_HeadOnBackbone):
    """QRM: Gemma-2 backbone, reward and gate rows, quantile head."""

    backbone_cls, mapper_from = Gemma2Model, Gemma2ForCausalLM

    def pooling(self) -> SequencePoolingMethod:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.model_config.tokenizer)
        return _RewardAndGatePool(self.adapter.header_ids(tokenizer), self.adapter.gating_position)

    def classify(self, rows: torch.Tensor) -> torch.Tensor:
        return super().classify(rows.reshape(rows.shape[0], 2, -1))
