"""The answer-search methods, in SEARCH_METHODS: name -> factory(SearchSetup) -> SearchMethod.

A factory gets the query's verifier, the LLM aggregator, the agents, the query's kind and SearchOptions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.registry import Entry, Registry
from morkit.search.acs import ACS_ORDERS, ACS_STEPS, PAPER_MAX_STEPS
from morkit.search.aggregate import AGGREGATOR_PROMPTS, DEFAULT_AGGREGATOR_PROMPT
from morkit.search.aggregators import AGGREGATORS, DEFAULT_AGGREGATOR

DEFAULT_SEARCH = "acs"


@dataclass(frozen=True)
class SearchOptions:
    """Knobs of the search methods: ACS's initial set size, residual step and aggregator, the
    self-consistency agent, and how `correct` is graded in the output.

    Args:
        top_k: ACS's initial set size: the best-scored answers aggregated first (positive).
        residual: ACS ends with an aggregation of every answer plus the current one, kept if it scores higher.
        sc_agent: The agent whose samples self-consistency votes over; None is the first agent.
        aggregator: A name in AGGREGATORS: `llm`, `vote` or `best`.
        strict_grading: Grade `correct` by a stated final answer only, never the last number in the text.
        acs_step: ACS's greedy step: `argmax` (the paper's Section 3.2) or `first` (its Algorithm A).
        max_steps: ACS's step limit: rounds (argmax) or passes (first); None is no limit.
        acs_order: The order a `first` pass tries answers in: `answers` (Algorithm A's) or `scores`.
        aggregator_prompt: The LLM aggregator's prompt: `ctts-mm`, `moa` or `refine`.

    Raises:
        InputError: A value is out of range or not one of its choices.
    """

    top_k: int = 2
    residual: bool = True
    sc_agent: str | None = None  # None: the first agent
    aggregator: str = DEFAULT_AGGREGATOR  # a name in AGGREGATORS: llm, vote, best
    strict_grading: bool = False  # True: only a stated final answer counts, never the last number in the text
    acs_step: str = "argmax"  # ACS's greedy step: argmax (the paper's Section 3.2) or first (its Algorithm A)
    max_steps: int | None = PAPER_MAX_STEPS  # ACS steps at most: rounds (argmax), passes (first); None: no limit
    acs_order: str = "answers"  # the order a `first` pass tries answers in: answers (Algorithm A's) or scores
    aggregator_prompt: str = DEFAULT_AGGREGATOR_PROMPT  # the LLM aggregator's prompt: ctts-mm (Figure J), moa or refine

    def __post_init__(self) -> None:
        checks.positive_int(self.top_k, "top_k")
        AGGREGATORS.get(self.aggregator)  # an unknown name lists the known ones
        checks.one_of(self.acs_step, ACS_STEPS, "acs_step")
        checks.optional(checks.positive_int, self.max_steps, "max_steps")
        checks.one_of(self.acs_order, ACS_ORDERS, "acs_order")
        AGGREGATOR_PROMPTS.get(self.aggregator_prompt)
        if not isinstance(self.strict_grading, bool):
            raise InputError(f"strict_grading must be True or False, got {self.strict_grading!r}")


@dataclass(frozen=True)
class SearchSetup:
    """What a search method's factory may use for one query."""

    verifier: Any  # morkit.verify.base.Verifier
    aggregator: Any  # the LLM aggregator (morkit.search.aggregate.Aggregator), or None where none is needed
    agents: Any  # morkit.llm.agents.AgentsConfig
    options: SearchOptions = SearchOptions()
    kind: str | None = None  # the query's kind (a grader name: math, code, choice, ...), for grouping answers


def acs(setup: SearchSetup) -> Any:
    from morkit.search.acs import ACS

    aggregator = AGGREGATORS.load(setup.options.aggregator)(setup)
    o = setup.options
    return ACS(setup.verifier, aggregator, k=o.top_k, residual=o.residual, max_steps=o.max_steps, step=o.acs_step,
               order=o.acs_order)


def best_of_n(setup: SearchSetup) -> Any:
    from morkit.search.baselines import BestOfN

    return BestOfN(setup.verifier)


def majority(setup: SearchSetup) -> Any:
    from morkit.search.baselines import MajorityVote

    return MajorityVote()


def self_consistency(setup: SearchSetup) -> Any:
    from morkit.search.baselines import self_consistency

    return self_consistency(setup.options.sc_agent or setup.agents.agents[0].name)


def moa(setup: SearchSetup) -> Any:
    from morkit.search.baselines import SingleAggregation

    return SingleAggregation(setup.aggregator, setup.verifier)


_HERE = "morkit.search.methods"
SEARCH_METHODS = Registry("search method", [
    Entry("acs", f"{_HERE}:acs", "Agent Collaboration Search (CTTS-MM): greedy reward-guided aggregation"),
    Entry("best-of-n", f"{_HERE}:best_of_n", "the answer the query's verifier scores highest"),
    Entry("majority", f"{_HERE}:majority", "the answer most answers agree with (math answer equivalence)"),
    Entry("self-consistency", f"{_HERE}:self_consistency", "majority vote among one agent's samples"),
    Entry("moa", f"{_HERE}:moa", "one Mixture-of-Agents layer: the aggregator reads every answer"),
])
"""Search methods by name (ACS and its baselines); `run_search(..., methods=[...])` and `morkit search
--method` pick them."""
