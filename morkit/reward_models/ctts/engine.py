"""EngineSpecs for the eight CTTS-MM RMs: the adapter's own rendering and head facts, for vLLM and servers. vLLM's
classes run Qwen2.5-Math-RM, -PRM and the two Skyworks; morkit's (`vllm_models`) run INF-ORM, LDL, QRM, AceCode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from morkit.core.types import Score
from morkit.reward_models.base import is_empty_answer
from morkit.reward_models.ctts import CTTS_BY_NAME
from morkit.reward_models.backends.engine_rm import EngineSpec, empty_answers_score


def ctts_spec(name: str, root: Path) -> EngineSpec:
    """The spec of CTTS-MM RM `name` whose checkpoint (at least its config and tokenizer) is at `root`."""
    from morkit.reward_models.ctts.common import load_tokenizer, render_chat

    record = CTTS_BY_NAME[name]
    adapter = record.adapter_class()
    tokenizer = load_tokenizer(root)
    fields: dict[str, Any] = {}
    floor = adapter.empty_score

    def render(question: str, answer: str) -> list[int]:
        return render_chat(tokenizer, adapter.messages(question, answer))

    if record.pooling == "step":
        from morkit.reward_models.ctts.qwen_math import STEP_TOKEN

        step_id = tokenizer.convert_tokens_to_ids(STEP_TOKEN)
        fields.update(step_token_id=int(step_id), label=1, num_labels=2, prefix_caching=False,
                      answer_steps=adapter.steps)
        fields["not_shown"] = lambda a: Score(float(floor), steps=(float(floor),)) \
            if is_empty_answer(a) or not adapter.steps(a) else None
    elif floor is not None:
        fields["not_shown"] = empty_answers_score(float(floor))
    if record.pooling == "token_classify":
        fields["prefix_caching"] = False  # token pooling never reads vLLM's prefix cache
    if name == "qrm-gemma-2-27b":
        fields.update(_qrm_fields(root, tokenizer))
    return EngineSpec(name=name, kind=record.kind, model_dir=root, pooling=record.pooling,
                      render=render, tokenizer=tokenizer,
                      max_context=record.window_at(root),
                      architecture=record.vllm_class, **fields)


def _qrm_fields(root: Path, tokenizer: Any) -> dict[str, Any]:
    """QRM's row is [score, quantiles, rewards]; the gate is read at the assistant header, which must be there."""
    from morkit.reward_models.ctts.common import config_value
    from morkit.reward_models.ctts.qrm import gating_position, header_ids
    from morkit.reward_models.backends.pooling_io import MalformedOutput, row_of

    q = int(config_value(root, "num_quantiles", 0))
    pattern = header_ids(tokenizer)
    levels = tuple((i + 1) / (q + 1) for i in range(q))

    def finish(data: Any) -> Score:
        row = row_of(data[0] if data and isinstance(data[0], list) else data, None)
        if len(row) < 1 + q:
            raise MalformedOutput(f"QRM row has {len(row)} values, expected at least {1 + q}")
        return Score(row[0], extra={"quantiles": tuple(row[1:1 + q]), "quantile_levels": levels,
                                    "rewards": tuple(row[1 + q:])})

    return {"finish": finish, "check": lambda ids: gating_position(ids, pattern), "prefix_caching": False}


def spec_for(name: str, options: Any) -> EngineSpec:
    """The registry's engine factory: find the checkpoint (servers need only its config and tokenizer here)."""
    from morkit.reward_models.weights import locate_weights

    record = CTTS_BY_NAME[name]
    required = ("config.json",) if options.servers.urls_for(name) else record.required
    return ctts_spec(name, locate_weights(record.model_id, required=required))
