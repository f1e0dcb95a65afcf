"""The server's request and reply bodies: contract queries for /v1/rank, OpenRLHF's remote-RM protocol.

Read with the JSONL contract's own parser (the same one-line reasons as a bad file), size-checked first, linear in size.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.data.contract import parse_query
from morkit.data.jsonl import (
    _parsed,  # the contract reader's decoder: same checks, same messages
)
from morkit.services.serving.limits import ServeLimits


class TooLarge(InputError):
    """A body over one of the server's size limits (413): it names the limit and its flag."""


_SCAN_CHUNK = 1 << 20
"""Bytes of a body `json_value_count` scans at a time (its working arrays are a few times this)."""


def json_value_count(raw: bytes) -> int:
    """The JSON values (not keys) in the JSON text `raw`, as `body_extent` counts them once parsed, without parsing:
    1 + its commas + its non-empty containers outside strings, vectorised over the bytes in chunks (0.1-0.4 s for
    16 MiB, whatever they are). Exact for valid JSON; for anything else some count, and the parser says why."""
    import numpy as np

    data = np.frombuffer(raw, dtype=np.uint8)
    commas = containers = empties = 0
    run, inside, last = 0, False, 0  # carried: backslashes ending the chunk, inside a string, last kept byte
    for start in range(0, len(data), _SCAN_CHUNK):
        chunk = data[start:start + _SCAN_CHUNK]
        quote = chunk == 34  # '"', a delimiter unless an odd run of backslashes comes before it
        backslash = chunk == 92
        if run or backslash.any():
            index = np.arange(len(chunk), dtype=np.int32)
            last_other = np.maximum.accumulate(np.where(backslash, np.int32(-1), index))
            ending = index - last_other  # backslashes ending at each byte
            ending[last_other < 0] += run
            quote[1:] &= ending[:-1] % 2 == 0
            quote[0] &= run % 2 == 0
            run = int(ending[-1])
        within = np.bitwise_xor.accumulate(quote)  # after an opening quote, up to its closing one
        if inside:
            within = ~within
        inside = bool(within[-1])
        kept = chunk[(quote | ~within) & (chunk > 32)]  # outside strings, each string as its two quotes
        commas += int(np.count_nonzero(kept == 44))
        opens = (kept == 91) | (kept == 123)
        containers += int(np.count_nonzero(opens))
        if len(kept):
            follows = np.zeros(len(kept), dtype=np.uint8)
            follows[:-1] = kept[1:]
            empties += int(np.count_nonzero(opens & (follows == kept + 2)))  # '[]' and '{}'
            empties += int(last in (91, 123) and int(kept[0]) == last + 2)
            last = int(kept[-1])
    return 1 + commas + containers - empties


def decode_body(raw: bytes, max_values: int | None = None) -> dict[str, Any]:
    """The body as a JSON object; InputError (one line) for bytes, JSON or numbers the contract refuses. With
    `max_values`, a body of more JSON values is TooLarge before it is parsed (`json_value_count`): a body of
    `{}`s becomes 24 times its bytes in memory."""
    if (max_values is not None and 1 + raw.count(b",") + raw.count(b"[") + raw.count(b"{") > max_values
            and (values := json_value_count(raw)) > max_values):  # the first: an upper bound, at memchr speed
        raise TooLarge(f"request body: {values} JSON values; this server takes at most {max_values} per request "
                       "(--max-json-values); split it")
    text = raw.decode("utf-8", errors="surrogateescape")
    try:
        for _, obj in _parsed(text, "request body", None):
            return obj
    except InputError as exc:
        raise InputError(str(exc)) from None
    raise InputError("request body: empty; send a JSON object")


def _list(body: dict[str, Any], key: str, limit: int, *, required: bool = True) -> list[Any] | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, list):
        raise InputError(f"request body: {key!r} must be a list")
    if len(value) > limit:
        raise InputError(f"request body: {key!r} has {len(value)} items; this server takes at most {limit} "
                         "per request (--max-items); split it")
    return value


def body_extent(body: Any) -> tuple[int, int]:
    """(characters in every string, keys included; JSON values) of a decoded body, walked without recursion."""
    chars, values, stack = 0, 0, [body]
    while stack:
        value = stack.pop()
        values += 1
        if isinstance(value, str):
            chars += len(value)
        elif isinstance(value, dict):
            chars += sum(len(k) for k in value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return chars, values


def check_size(body: dict[str, Any], candidates: int, limits: ServeLimits) -> None:
    """TooLarge when a body holds more candidates, JSON values or characters of text than the server takes per
    request (values bound what a small body becomes in memory: `[{}, {}, ...]` is 24 times its bytes)."""
    if candidates > limits.max_candidates:
        raise TooLarge(f"request body: {candidates} candidates in all; this server takes at most "
                       f"{limits.max_candidates} per request (--max-candidates); split it")
    chars, values = body_extent(body)
    if values > limits.max_json_values:
        raise TooLarge(f"request body: {values} JSON values; this server takes at most {limits.max_json_values} "
                       "per request (--max-json-values); split it")
    if chars > limits.max_text_chars:
        raise TooLarge(f"request body: {chars} characters of text; this server takes at most "
                       f"{limits.max_text_chars} per request (--max-text-chars); split it")


def rank_queries(body: dict[str, Any], limits: ServeLimits = ServeLimits()) -> tuple[Query, ...]:
    """The contract queries of a /v1/rank body `{"queries": [...]}`; every problem names the index and id.

    A query needs at least one candidate here (a request to rank nothing is a client's mistake)."""
    items = _list(body, "queries", limits.max_items)
    if not items:
        raise InputError("request body: 'queries' is empty")
    check_size(body, sum(len(q["candidates"]) for q in items
                         if isinstance(q, dict) and isinstance(q.get("candidates"), list)), limits)
    out: list[Query] = []
    seen: dict[str, int] = {}
    for i, obj in enumerate(items):
        if not isinstance(obj, dict):
            raise InputError(f"queries[{i}]: expected a JSON object, got {type(obj).__name__}")
        try:
            query = parse_query(obj)
        except InputError as exc:
            raise InputError(f"queries[{i}]: {exc}") from None
        if query.id in seen:
            raise InputError(f"queries[{i}]: duplicate id {query.id!r} (first at queries[{seen[query.id]}])")
        if not query.candidates:
            raise InputError(f"queries[{i}]: query {query.id!r}: 'candidates' is empty; send at least one "
                             "candidate to rank")
        seen[query.id] = i
        out.append(query)
    return tuple(out)


@dataclass(frozen=True)
class RewardJob:
    """Responses grouped by prompt: one query per distinct prompt, and where each input item landed."""

    queries: tuple[Query, ...]
    positions: tuple[tuple[int, int], ...]  # item i -> (query index, candidate index)


def group_responses(prompts: Sequence[str], responses: Sequence[str],
                    references: Sequence[str | None] | None = None) -> RewardJob:
    """One contract query per distinct prompt (in first-seen order) holding its responses as candidates.

    A prompt's responses are scored together, as GRPO groups are: rules such as math-consensus and the
    per-query transforms look at the whole group."""
    groups: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts):
        groups.setdefault(prompt, []).append(i)
    queries, positions = [], [(0, 0)] * len(prompts)
    for q, (prompt, items) in enumerate(groups.items()):
        reference = next((references[i] for i in items if references and references[i] is not None), None)
        for c, i in enumerate(items):
            positions[i] = (q, c)
        queries.append(Query(f"prompt-{q}", prompt, tuple(Candidate(text=responses[i]) for i in items),
                             reference=reference))
    return RewardJob(tuple(queries), tuple(positions))


def _label(value: Any, i: int) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise InputError(f"labels[{i}]: must be a string, a number or null")


_SPECIAL = r"(?:<\|[A-Za-z0-9_.:-]{1,40}\|>|</?s>|<pad>|<eos>|<bos>|\[PAD\]|\[CLS\]|\[SEP\])"
_LEADING_SPECIAL = re.compile(rf"^(?:{_SPECIAL})+")
"""Special tokens as decoded text: OpenRLHF decodes with skip_special_tokens=False, so a query text may start
with left padding or BOS and end with EOS and padding; they are not part of the prompt or the response."""
_FIXED_SPECIAL = ("</s>", "<s>", "<pad>", "<eos>", "<bos>", "[PAD]", "[CLS]", "[SEP]")
_SPECIAL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,40}")


def _special_ending_at(text: str, end: int) -> int | None:
    """Where the special token that ends at `end` starts, if one does (at most one can: no two end alike)."""
    for token in _FIXED_SPECIAL:
        start = end - len(token)
        if start >= 0 and text.startswith(token, start):
            return start
    if end >= 5 and text.startswith("|>", end - 2):  # <|name|>: a name holds no '<' or '|', so the last '<|'
        start = text.rfind("<|", max(0, end - 44), end - 3)
        if start >= 0 and _SPECIAL_NAME.fullmatch(text, start + 2, end - 2):
            return start
    return None


def strip_trailing_special(text: str) -> str:
    """`text` less the special tokens it ends with and the whitespace after them, scanned from the end in one
    pass (a regex anchored at the end would retry from every start: quadratic on a long run of tokens)."""
    end = len(text.rstrip())
    cut = None
    while (start := _special_ending_at(text, end)) is not None:
        end = cut = start
    return text if cut is None else text[:cut]


def split_response(text: str, prompt: str) -> str | None:
    """The response of an OpenRLHF query text: what follows its prompt, special tokens around it removed;
    None where the text (less leading special tokens) does not start with the prompt."""
    for candidate in (text, _LEADING_SPECIAL.sub("", text, count=1)):
        for head in (prompt, _LEADING_SPECIAL.sub("", prompt, count=1)):
            if candidate.startswith(head):
                return strip_trailing_special(candidate[len(head):])
    return None


def reward_job(body: dict[str, Any], limits: ServeLimits = ServeLimits()) -> RewardJob:
    """The RewardJob of an OpenRLHF body; each text must start with its prompt (after any leading special
    tokens; a mismatch names the item)."""
    texts = _list(body, "query", limits.max_items)
    prompts = _list(body, "prompts", limits.max_items, required=False)
    labels = _list(body, "labels", limits.max_items, required=False)
    if not texts:
        raise InputError("request body: 'query' is empty")
    if prompts is None:
        raise InputError("request body: 'prompts' is missing; morkit routes by prompt, so send each item's prompt "
                         "(OpenRLHF does)")
    for key, values in (("prompts", prompts), ("labels", labels)):
        if values is not None and len(values) != len(texts):
            raise InputError(f"request body: {len(values)} {key} for {len(texts)} items in 'query'")
    check_size(body, len(texts), limits)
    responses = []
    for i, (text, prompt) in enumerate(zip(texts, prompts)):
        if not isinstance(text, str) or not isinstance(prompt, str):
            raise InputError(f"item {i}: 'query' and 'prompts' items must be strings")
        response = split_response(text, prompt)
        if response is None:
            raise InputError(f"item {i}: query[{i}] does not start with prompts[{i}]; send prompt + response as "
                             "the query text")
        responses.append(response)
    references = [_label(v, i) for i, v in enumerate(labels)] if labels is not None else None
    return group_responses(prompts, responses, references)


def item_rewards(job: RewardJob, scores: Sequence[Sequence[float]]) -> list[float]:
    """Each item's score from its query's per-candidate scores."""
    return [float(scores[q][c]) for q, c in job.positions]


def group_scaled(job: RewardJob, scores: Sequence[Sequence[float]]) -> list[float]:
    """Each item's score min-max scaled within its prompt's group to [0, 1] (all 0 where the group is flat).

    OpenRLHF reads `scores` as 0-1 values for dynamic filtering (it drops prompts whose mean score falls
    outside --dynamic_filtering_reward_range); scaled this way a group without signal averages 0."""
    out = []
    for q, c in job.positions:
        row = scores[q]
        low, high = min(row), max(row)
        out.append(0.0 if not math.isfinite(high - low) or high <= low else (row[c] - low) / (high - low))
    return out


def reward_reply(job: RewardJob, scores: Sequence[Sequence[float]]) -> dict[str, list[float]]:
    """OpenRLHF's reply: `rewards` (for advantages) and `scores` (0-1, for dynamic filtering)."""
    return {"rewards": item_rewards(job, scores), "scores": group_scaled(job, scores)}
