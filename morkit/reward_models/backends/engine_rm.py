"""A registered model RM on a vLLM engine or vLLM servers: the recipe its family builds for one checkpoint
(`EngineSpec`: rendering, tokenizer, label, step tag, how an output becomes a Score) and the RM that scores with it
(`EngineRM`). One recipe serves the offline engine and servers, so one short name means one model on every placement.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from morkit.core.errors import InputError, PartialScoreError, UnavailableError
from morkit.core.types import Score
from morkit.reward_models.base import is_empty_answer
from morkit.reward_models.truncation import Truncation, encode_pair, log_truncated, mark_cut


def empty_answers_score(value: float) -> Callable[[str], Score | None]:
    """A spec's `not_shown` rule for an RM whose empty answers score `value` without reaching the model."""
    return lambda answer: Score(value) if is_empty_answer(answer) else None


@dataclass(frozen=True)
class EngineSpec:
    """How one registered model RM runs outside transformers, with its checkpoint found: built by its family
    (morkit.reward_models.family); its name and kind are its card's, its pooling and vLLM class its family's."""

    card: Any  # the RM's RMCard
    family: Any  # the Family that built this recipe
    model_dir: Path
    render: Callable[[str, str], list[int]]
    tokenizer: Any
    max_context: int  # the tokens it reads by default (see morkit.reward_models.truncation)
    finish: Callable[[Any], Score] | None = None  # raw pooled output -> Score; None: pooling_io.to_score
    label: int | None = None
    num_labels: int | None = None
    step_token_id: int | None = None
    not_shown: Callable[[str], Score | None] = field(default=lambda answer: None)  # answers scored without the model
    check: Callable[[list[int]], None] | None = None  # refuse a rendered prompt the model cannot read
    prefix_caching: bool = True  # vLLM's pooling runner can reuse cached prefix blocks for this model
    answer_steps: Callable[[str], list[str]] | None = None  # a PRM's step splitter: a cut drops whole steps

    @property
    def name(self) -> str:
        return self.card.name

    @property
    def kind(self) -> str:
        return self.card.kind

    @property
    def pooling(self) -> str:
        """classify | token_classify | step | embed (morkit.reward_models.backends.pooling_io)."""
        return self.family.pooling

    @property
    def architecture(self) -> str | None:
        """Run the checkpoint as this vLLM class (hf_overrides); None: vLLM's own."""
        return self.family.architecture


class EngineRM:
    """(question, answer) -> the spec's prompt ids (cut to fit) -> engine -> Score; `engine.score_prompts(ids)`."""

    def __init__(self, spec: EngineSpec, engine: Any, truncation: Truncation = Truncation()):
        self.spec = spec
        self.engine = engine
        self.name = spec.name
        self.kind = spec.kind
        self.truncation = truncation.within(spec.max_context)

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        scores: list[Score | None] = [self.spec.not_shown(a) for _, a in pairs]
        live = [i for i, s in enumerate(scores) if s is None]
        spec, truncation = self.spec, self.truncation
        encoded = [encode_pair(spec.render, spec.tokenizer, *pairs[i], truncation, spec.answer_steps) for i in live]
        log_truncated(self.name, encoded, truncation)
        if self.spec.check is not None:
            for enc in encoded:
                self.spec.check(list(enc.ids))
        try:
            got = self.engine.score_prompts([list(e.ids) for e in encoded]) if live else []
        except PartialScoreError as err:  # keep the successes, at their places in this batch
            for i, s in zip(live, err.scores):
                scores[i] = s
            raise PartialScoreError(str(err), scores) from err
        for i, s, enc in zip(live, got, encoded):
            scores[i] = mark_cut(s, enc)
        return scores  # type: ignore[return-value]

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()


VLLM_INSTALL = ("--placement vllm needs vLLM, which is not installed here: pip install vllm (GPU), "
                "or, on a CPU machine, pip install --no-deps -r requirements-vllm.lock from a clone (see docs/scoring.md)")


def require_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise UnavailableError(VLLM_INSTALL)


def engine_spec(card: Any, options: Any) -> EngineSpec:
    """Registered RM `card`'s EngineSpec (how vLLM and servers run it), from its family; InputError where it has
    no family or its family runs only in this process."""
    if card.family is None:
        raise InputError(f"reward model {card.name!r} runs only on transformers; drop --placement vllm / --url for it")
    from morkit.reward_models.family import family_of

    return family_of(card).engine_spec(card, options)
