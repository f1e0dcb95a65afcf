"""The transformers backend core every model-based RM stands on: pairs rendered, tokenised and cut once, batched by
length under a token budget and a padding cap, right padded, and each sequence pooled at its own positions, so a
pair's score does not depend on its batch-mates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.reward_models.truncation import Encoded


@dataclass(frozen=True)
class Batching:
    """Length-sorted batches of at most `max_batch` sequences and `max_tokens` padded tokens, each padded by at most
    `max_padding` of the tokens it computes (None: no cap): a padded token costs as much as a real one (docs:
    Scoring and backends, transformers)."""

    max_batch: int = 16
    max_tokens: int = 8192
    max_padding: float | None = 0.05

    def __post_init__(self) -> None:
        checks.positive_int(self.max_batch, "batch size")
        checks.positive_int(self.max_tokens, "Batching.max_tokens")
        if self.max_padding is not None and not 0.0 <= self.max_padding < 1.0:
            raise InputError(f"Batching.max_padding must be in [0, 1) or None, got {self.max_padding!r}")

    def plan(self, lengths: Sequence[int], shared: int = 0) -> list[list[int]]:
        """Indices grouped into batches, longest first (so a memory problem shows on the first batch).

        `shared`: leading tokens every sequence has already run (a reused prefix): they count toward
        `max_tokens` but not toward the tokens a batch computes, which the padding cap is measured against."""
        order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
        batches: list[list[int]] = []
        current: list[int] = []
        real = 0
        for index in order:
            width = lengths[current[0]] if current else lengths[index]
            n = len(current) + 1
            if current and (n > self.max_batch or n * width > self.max_tokens or self._too_padded(
                    n * (width - shared), real + lengths[index] - n * shared)):
                batches.append(current)
                current, real = [], 0
            current.append(index)
            real += lengths[index]
        if current:
            batches.append(current)
        return batches

    def _too_padded(self, computed: int, real: int) -> bool:
        return self.max_padding is not None and computed - real > self.max_padding * computed


def last_token_pool(hidden: Any, attention_mask: Any) -> Any:
    """Hidden state at each sequence's last real token (right padding assumed)."""
    import torch

    last = attention_mask.sum(dim=1) - 1
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


def right_padded(seqs: Sequence[Sequence[int]], pad_id: int, device: str) -> tuple[Any, Any]:
    """(ids, attention mask) of token id sequences, right padded with `pad_id` to the longest, on `device`."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, : len(seq)] = 1
    return ids.to(device), mask.to(device)


def run_batches(
    model: Any,
    encoded: Sequence[Encoded],
    pool: Callable[[Any, Any, Any], Any],
    *,
    pad_id: int,
    device: str,
    batching: Batching = Batching(),
    progress: Callable[[int], None] | None = None,
    causal: bool = False,
) -> list[Any]:
    """Forward every sequence through `model` in planned batches; `pool(hidden, mask, ids)` returns one row each,
    in input order, as float32 CPU tensors. `causal`: a decoder gets no padding mask (right padding never reaches a
    real token), so it keeps the causal attention kernel; its real tokens' states are the same."""
    import torch

    results: list[Any] = [None] * len(encoded)
    for batch in batching.plan([len(e.ids) for e in encoded]):
        ids, mask = right_padded([encoded[i].ids for i in batch], pad_id, device)
        with torch.inference_mode():
            out = model(input_ids=ids, attention_mask=None if causal else mask)
            hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
            pooled = pool(hidden, mask, ids)
        for row, index in enumerate(batch):
            results[index] = pooled[row].float().cpu()
        if progress is not None:
            progress(len(batch))
    return results
