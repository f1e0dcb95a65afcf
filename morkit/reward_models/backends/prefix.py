"""Question-prefix reuse: a query's candidates share their rendered tokens up to the answer, so that prefix runs
through the model once and its KV cache serves every candidate (causal decoders only; the longest common prefix of
the token ids, one token short of the shortest member). Docs: Scoring and backends, question-prefix reuse.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

from morkit.reward_models.backends.hf import Batching, right_padded, run_batches
from morkit.reward_models.truncation import Encoded

MIN_PREFIX = 16  # shorter shared prefixes are not worth a separate forward pass
MIN_GROUP = 2


def common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of token id sequences."""
    if not seqs:
        return 0
    first, n = seqs[0], min(len(s) for s in seqs)
    for i in range(n):
        token = first[i]
        if any(s[i] != token for s in seqs):
            return i
    return n


def prefix_groups(keys: Sequence[Any], encoded: Sequence[Encoded], *, window: int | None = None
                  ) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """[(shared prefix length, member indices)] for groups worth sharing, and the indices left alone.

    `window`: a sliding-window model's window; a group whose longest member exceeds it is left alone
    (a sliding cache would drop prefix states the unshared path still attends to)."""
    by_key: dict[Any, list[int]] = {}
    for index, key in enumerate(keys):
        by_key.setdefault(key, []).append(index)
    groups, alone = [], []
    for members in by_key.values():
        seqs = [encoded[i].ids for i in members]
        shared = min(common_prefix(seqs), min(len(s) for s in seqs) - 1)
        too_long = window is not None and max(len(s) for s in seqs) > window
        if len(members) >= MIN_GROUP and shared >= MIN_PREFIX and not too_long:
            groups.append((shared, members))
        else:
            alone.extend(members)
    return groups, alone


def run_with_prefix(model: Any, prefix: Sequence[int], suffixes: Sequence[Sequence[int]],
                    pool: Callable[[Any, Any, Any], Any], *, pad_id: int, device: str,
                    batching: Batching = Batching(), progress: Callable[[int], None] | None = None) -> list[Any]:
    """Pooled rows for `prefix + suffix` of every suffix, running the prefix once and reusing its KV cache."""
    import torch

    with torch.inference_mode():
        prefix_ids = torch.tensor([list(prefix)], dtype=torch.long, device=device)
        head = model(input_ids=prefix_ids, use_cache=True)
        prefix_hidden, cache = head.last_hidden_state, head.past_key_values
    p = len(prefix)
    results: list[Any] = [None] * len(suffixes)
    for batch in batching.plan([p + len(s) for s in suffixes], shared=p):
        ids, mask = right_padded([suffixes[i] for i in batch], pad_id, device)
        b, width = ids.shape
        full_mask = torch.cat([torch.ones((b, p), dtype=torch.long, device=device), mask], dim=1)
        positions = torch.arange(p, p + width, device=device).unsqueeze(0).expand(b, width)
        with torch.inference_mode():
            kv = copy.deepcopy(cache)
            kv.batch_repeat_interleave(b)
            out = model(input_ids=ids, attention_mask=full_mask, position_ids=positions, past_key_values=kv,
                        cache_position=torch.arange(p, p + width, device=device), use_cache=True)
            hidden = torch.cat([prefix_hidden.expand(b, -1, -1), out.last_hidden_state], dim=1)
            full_ids = torch.cat([prefix_ids.expand(b, -1), ids], dim=1)
            pooled = pool(hidden, full_mask, full_ids)
        for row, index in enumerate(batch):
            results[index] = pooled[row].float().cpu()
        if progress is not None:
            progress(b)
    return results


def run_grouped(model: Any, keys: Sequence[Any], encoded: Sequence[Encoded], pool: Callable[[Any, Any, Any], Any],
                *, pad_id: int, device: str, batching: Batching = Batching(), window: int | None = None) -> list[Any]:
    """`run_batches`, with every group of candidates sharing a question run through `run_with_prefix`."""
    groups, alone = prefix_groups(keys, encoded, window=window)
    results: list[Any] = [None] * len(encoded)
    for shared, members in groups:
        prefix = encoded[members[0]].ids[:shared]
        rows = run_with_prefix(model, prefix, [encoded[i].ids[shared:] for i in members], pool, pad_id=pad_id,
                               device=device, batching=batching)
        for index, row in zip(members, rows):
            results[index] = row
    if alone:
        rows = run_batches(model, [encoded[i] for i in alone], pool, pad_id=pad_id, device=device, batching=batching,
                           causal=True)
        for index, row in zip(alone, rows):
            results[index] = row
    return results
