"""nicolinho/QRM-Gemma-2-27B: a quantile RM on `Gemma2Model`, heads loaded by name, no remote code; the score is the
gate-weighted mean of quantile means, with the quantiles in `Score.extra`. Details: docs page Reward models.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from morkit.core.errors import ScoreError, UnavailableError
from morkit.core.types import Score
from morkit.reward_models.ctts.common import (
    CttsRM,
    config_value,
    first_pad_pool_index,
    head_state,
    load_strict,
)
from morkit.reward_models.families.adapter import AdapterFamily

GATING_HEADER = "<end_of_turn>\n<start_of_turn>model\n"


def header_ids(tokenizer: Any) -> list[int]:
    """The token ids of GATING_HEADER in this tokenizer."""
    return list(tokenizer(GATING_HEADER, add_special_tokens=False)["input_ids"])


def gating_position(ids: Sequence[int], pattern: Sequence[int]) -> int:
    """Where the last assistant header starts in a rendered pair; ScoreError when it has none."""
    width, ids, pattern = len(pattern), list(ids), list(pattern)
    for start in range(len(ids) - width, -1, -1):
        if ids[start:start + width] == pattern:
            return start
    raise ScoreError(f"qrm-gemma-2-27b: assistant header {GATING_HEADER!r} not found in the rendered pair")


class QRMGemmaRM(CttsRM):
    backbone_class = "Gemma2Model"
    allowed_extra = ("regression_layer", "gating", "reward_transform_matrix")
    default_attn = "eager"
    header_ids = staticmethod(header_ids)  # for its vLLM class (vllm_models), which imports no family module
    gating_position = staticmethod(gating_position)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.pattern = header_ids(self.backbone.tokenizer)

    def pool(self, hidden: Any, mask: Any, ids: Any) -> Any:
        import torch

        rows = torch.arange(hidden.shape[0], device=hidden.device)
        reward_at = first_pad_pool_index(ids, mask, self.backbone.model.config.pad_token_id)
        lengths = mask.sum(dim=1).tolist()
        gate_at = torch.tensor([gating_position(ids[r, : lengths[r]].tolist(), self.pattern)
                                for r in range(len(lengths))], device=hidden.device)
        return torch.stack([hidden[rows, reward_at], hidden[rows, gate_at]], dim=1)

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        import torch

        if not pairs:
            return []
        rows, encoded = self.pooled(list(pairs))
        out = self.run_head(torch.stack(rows))
        levels = tuple(self.score_head.levels())
        q = self.score_head.num_quantiles
        return [Score(float(row[0]), truncated=enc.truncated,
                      extra={"quantiles": tuple(row[1:1 + q].tolist()), "quantile_levels": levels,
                             "rewards": tuple(row[1 + q:].tolist())})
                for row, enc in zip(out, encoded)]

    @classmethod
    def build_head(cls, root: Path, config: Any, dtype: Any) -> Any:
        import torch

        from morkit.reward_models.ctts.heads import QRMHead

        quantiles = config_value(root, "num_quantiles", None)
        if quantiles is None:
            raise UnavailableError(f"{cls.model_id}: config.json at {root} has no num_quantiles")
        head = QRMHead(config.hidden_size, config_value(root, "num_objectives", 19), quantiles,
                       temperature=config_value(root, "gating_temperature", 10),
                       gating_hidden_dim=config_value(root, "gating_hidden_dim", 1024),
                       gating_n_hidden=config_value(root, "gating_n_hidden", 3))
        state: dict[str, Any] = {}
        for prefix in ("regression_layer", "gating", "reward_transform_matrix"):
            part = head_state(root, prefix, cls.model_id)
            state.update({f"{prefix}.{k}" if k else prefix: v.float() for k, v in part.items()})
        load_strict(head, state, prefix="", model_id=cls.model_id, source=root,
                    optional=("num_batches_tracked",))
        return head.to(torch.float32)


@dataclass(frozen=True)
class QRMFamily(AdapterFamily):
    """QRM on vLLM: its row is [score, quantiles, rewards]; the gate is read at the assistant header, which must be
    in every prompt sent, and at the whole prompt (prefix caching off)."""

    def engine_fields(self, root: Path, tokenizer: Any, adapter: type) -> dict[str, Any]:
        from morkit.reward_models.backends.pooling_io import MalformedOutput, row_of

        fields = super().engine_fields(root, tokenizer, adapter)
        q = int(config_value(root, "num_quantiles", 0))
        pattern = header_ids(tokenizer)
        levels = tuple((i + 1) / (q + 1) for i in range(q))

        def finish(data: Any) -> Score:
            row = row_of(data[0] if data and isinstance(data[0], list) else data, None)
            if len(row) < 1 + q:
                raise MalformedOutput(f"QRM row has {len(row)} values, expected at least {1 + q}")
            return Score(row[0], extra={"quantiles": tuple(row[1:1 + q]), "quantile_levels": levels,
                                        "rewards": tuple(row[1 + q:])})

        return {**fields, "finish": finish, "check": lambda ids: gating_position(ids, pattern),
                "prefix_caching": False}


QRM_GEMMA = QRMFamily("morkit.reward_models.ctts.qrm:QRMGemmaRM", architecture="MorkitQRMGemma2RewardModel",
                      vllm_class="morkit.reward_models.ctts.vllm_models:QRMGemmaForVLLM")
