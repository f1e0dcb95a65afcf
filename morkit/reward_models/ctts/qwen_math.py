"""Qwen/Qwen2.5-Math-RM-72B (ORM, raw logit at the last token) and Qwen/Qwen2.5-Math-PRM-7B (PRM, P(good) per step
at each step tag) on a plain `Qwen2Model` with their `score` MLP. Format and steps: docs page Reward models.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from morkit.core.errors import ScoreError, UnavailableError
from morkit.core.types import Score
from morkit.reward_models.base import EMPTY_ANSWER_SCORE, is_empty_answer, reduce_steps
from morkit.reward_models.ctts.common import (
    QWEN_MATH_SYSTEM,
    CttsRM,
    head_state,
    load_strict,
)
from morkit.reward_models.families.adapter import AdapterFamily
from morkit.reward_models.truncation import mark_cut

STEP_TOKEN = "<extra_0>"


class QwenMathRM(CttsRM):
    backbone_class = "Qwen2Model"
    system_prompt = QWEN_MATH_SYSTEM
    allowed_extra = ("score",)
    labels = 1

    @classmethod
    def build_head(cls, root: Path, config: Any, dtype: Any) -> Any:
        from morkit.reward_models.ctts.heads import mlp_score

        head = mlp_score(config.hidden_size, cls.labels)
        state = head_state(root, "score", cls.model_id)
        return load_strict(head, state, prefix="score", model_id=cls.model_id, source=root).to(dtype)


class QwenMathPRM(QwenMathRM):
    empty_score = EMPTY_ANSWER_SCORE  # step scores are probabilities in [0, 1]
    labels = 2

    def __init__(self, *args: Any, reduction: str = "min", **kwargs: Any):
        super().__init__(*args, **kwargs)
        reduce_steps([1.0], reduction)  # validate the rule name now
        self.reduction = reduction
        ids = self.backbone.tokenizer.convert_tokens_to_ids(STEP_TOKEN)
        if ids is None or ids == self.backbone.tokenizer.unk_token_id:
            raise UnavailableError(f"tokenizer has no {STEP_TOKEN} token")
        self.step_id = int(ids)

    @staticmethod
    def steps(answer: str) -> list[str]:
        return [s.strip() for s in answer.replace(STEP_TOKEN, "").split("\n\n") if s.strip()]

    answer_steps = steps  # a cut drops whole steps (see morkit.reward_models.truncation)

    @classmethod
    def messages(cls, question: str, answer: str) -> list[dict[str, str]]:
        text = "".join(step + STEP_TOKEN for step in cls.steps(answer))
        return super().messages(question, text)

    def pool(self, hidden: Any, mask: Any, ids: Any) -> Any:
        found = (ids == self.step_id) & mask.bool()
        return [hidden[row][found[row]] for row in range(hidden.shape[0])]

    def step_scores(self, rows: Sequence[Any]) -> list[list[float]]:
        import torch

        if not rows:
            return []
        sizes = [row.shape[0] for row in rows]
        logits = self.run_head(torch.cat(list(rows)))
        probs = torch.softmax(logits.float(), dim=-1)[:, 1]
        return [part.tolist() for part in torch.split(probs, sizes)]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        floor = float(self.empty_score or 0.0)
        scores = [Score(floor, steps=(floor,)) for _ in pairs]
        live = [i for i, (_, a) in enumerate(pairs) if not is_empty_answer(a) and self.steps(a)]
        if not live:
            return scores
        rows, encoded = self.pooled([pairs[i] for i in live])
        for i, steps, enc in zip(live, self.step_scores(rows), encoded):
            shown = enc.kept_steps if enc.kept_steps is not None else range(len(self.steps(pairs[i][1])))
            if not steps or len(steps) != len(shown):
                raise ScoreError(f"{self.name}: pair {i} shows {len(shown)} steps but has {len(steps)} "
                                 f"{STEP_TOKEN} positions")
            scores[i] = mark_cut(Score(reduce_steps(steps, self.reduction), steps=tuple(steps)), enc)
        return scores


@dataclass(frozen=True)
class StepFamily(AdapterFamily):
    """A process RM read at each step tag: vLLM's STEP pooling at STEP_TOKEN, label 1 of 2, whole steps kept by a
    cut; an answer with no step (or empty) scores the floor without the model."""

    pooling: str = "step"

    def engine_fields(self, root: Path, tokenizer: Any, adapter: type) -> dict[str, Any]:
        floor = adapter.empty_score
        step_id = tokenizer.convert_tokens_to_ids(STEP_TOKEN)
        return {"step_token_id": int(step_id), "label": 1, "num_labels": 2, "prefix_caching": False,
                "answer_steps": adapter.steps,
                "not_shown": lambda a: Score(float(floor), steps=(float(floor),))
                if is_empty_answer(a) or not adapter.steps(a) else None}


QWEN_MATH_RM = AdapterFamily("morkit.reward_models.ctts.qwen_math:QwenMathRM", pooling="token_classify")
QWEN_MATH_PRM = StepFamily("morkit.reward_models.ctts.qwen_math:QwenMathPRM")
