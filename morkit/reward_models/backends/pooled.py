"""Base for model RMs: render a pair to token ids, run the backbone, pool hidden states, apply a head. Subclasses
say how to render a pair (`render`), where to read it (`pool`) and what the head computes (`head`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from morkit.core.errors import InputError, UnavailableError
from morkit.core.types import Score
from morkit.reward_models.base import EMPTY_ANSWER_SCORE, is_empty_answer
from morkit.reward_models.backends.hf import Batching, last_token_pool, run_batches
from morkit.reward_models.truncation import Encoded, Truncation, encode_pair, log_truncated, mark_cut


@dataclass(frozen=True)
class Backbone:
    """A loaded transformers model with its tokenizer and the device it sits on."""

    model: Any
    tokenizer: Any
    device: str

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        if pad is None:
            raise UnavailableError("tokenizer has neither a pad nor an eos token to pad with")
        return int(pad)


class PooledRM:
    """(question, answer) -> token ids -> backbone -> pooled rows -> head -> Score, in batches.

    A pair longer than the truncation's limit (by default the model's `context_window()`) is cut to fit
    (morkit.reward_models.truncation)."""

    name = "pooled"
    kind = "orm"
    empty_score: float | None = EMPTY_ANSWER_SCORE
    causal = True  # a decoder: no padding mask, a shared prompt prefix run once; an encoder MUST set False
    window = 2048  # tokens read by default, where the model does not say (see context_window)
    absolute_positions = False  # learned position embeddings: no input may pass max_position_embeddings
    answer_steps: Callable[[str], list[str]] | None = None  # a PRM's step splitter: a cut drops whole steps

    def __init__(self, backbone: Backbone, truncation: Truncation | None = None, batching: Batching | None = None,
                 prefix_reuse: bool = True):
        self.backbone = backbone
        self.truncation = (truncation or Truncation()).within(self.context_window())
        positions = getattr(getattr(backbone.model, "config", None), "max_position_embeddings", None)
        if self.absolute_positions and positions and self.truncation.limit > positions:
            raise InputError(f"{self.name} reads at most {positions} tokens (its position embeddings); "
                             f"max tokens {self.truncation.limit} is over that")
        self.batching = batching or Batching()
        self.prefix_reuse = prefix_reuse and self.causal

    def context_window(self) -> int:
        """The tokens a pair may have before it is cut, unless the truncation gives a limit."""
        return self.window

    def render(self, question: str, answer: str) -> list[int]:
        raise NotImplementedError

    def pool(self, hidden: Any, mask: Any, ids: Any) -> Any:
        return last_token_pool(hidden, mask)

    def head(self, pooled: Sequence[Any]) -> list[float]:
        raise NotImplementedError

    def encode(self, pairs: Sequence[tuple[str, str]]) -> list[Encoded]:
        tok = self.backbone.tokenizer
        return [encode_pair(self.render, tok, q, a, self.truncation, self.answer_steps) for q, a in pairs]

    def pooled(self, pairs: Sequence[tuple[str, str]]) -> tuple[list[Any], list[Encoded]]:
        """Pooled rows and encodings for every pair (empty answers included)."""
        encoded = self.encode(pairs)
        log_truncated(self.name, encoded, self.truncation)
        backbone = self.backbone
        if self.prefix_reuse and len(pairs) > 1:
            from morkit.reward_models.backends.prefix import run_grouped

            window = getattr(backbone.model.config, "sliding_window", None)
            rows = run_grouped(backbone.model, [q for q, _ in pairs], encoded, self.pool, pad_id=backbone.pad_id,
                               device=backbone.device, batching=self.batching, window=window)
        else:
            rows = run_batches(backbone.model, encoded, self.pool, pad_id=backbone.pad_id, device=backbone.device,
                               batching=self.batching, causal=self.causal)
        return rows, encoded

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        live = [i for i, (_, a) in enumerate(pairs) if self.empty_score is None or not is_empty_answer(a)]
        scores: list[Score] = [Score(float(self.empty_score or 0.0)) for _ in pairs]
        if live:
            rows, encoded = self.pooled([pairs[i] for i in live])
            for i, value, enc in zip(live, self.head(rows), encoded):
                scores[i] = mark_cut(Score(float(value)), enc)
        return scores
