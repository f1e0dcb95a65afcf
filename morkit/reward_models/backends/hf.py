"""The transformers backend core every model-based RM stands on: pairs rendered, tokenised and cut once, batched by
length under a token budget, right padded, and each sequence pooled at its own positions, so a pair's score does
not depend on its batch-mates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from morkit.core import checks
from morkit.reward_models.truncation import Encoded


@dataclass(frozen=True)
class Batching:
    """Length-sorted batches of at most `max_batch` sequences and `max_tokens` padded tokens."""

    max_batch: int = 16
    max_tokens: int = 8192

    def __post_init__(self) -> None:
        checks.positive_int(self.max_batch, "batch size")
        checks.positive_int(self.max_tokens, "Batching.max_tokens")

    def plan(self, lengths: Sequence[int]) -> list[list[int]]:
        """Indices grouped into batches, longest first (so a memory problem shows on the first batch)."""
        order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
        batches: list[list[int]] = []
        current: list[int] = []
        for index in order:
            width = lengths[current[0]] if current else lengths[index]
            if current and (len(current) >= self.max_batch or (len(current) + 1) * width > self.max_tokens):
                batches.append(current)
                current = []
            current.append(index)
        if current:
            batches.append(current)
        return batches


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
) -> list[Any]:
    """Forward every sequence through `model` in planned batches; `pool(hidden, mask, ids)` returns one row each.

    Returns the pooled rows in input order, as float32 CPU tensors.
    """
    import torch

    results: list[Any] = [None] * len(encoded)
    for batch in batching.plan([len(e.ids) for e in encoded]):
        ids, mask = right_padded([encoded[i].ids for i in batch], pad_id, device)
        with torch.inference_mode():
            out = model(input_ids=ids, attention_mask=mask)
            hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
            pooled = pool(hidden, mask, ids)
        for row, index in enumerate(batch):
            results[index] = pooled[row].float().cpu()
        if progress is not None:
            progress(len(batch))
    return results
