"""ACS's aggregators, in AGGREGATORS: name -> factory(SearchSetup) -> AnswerAggregator (morkit.search.base).

`llm` writes one refined answer (CTTS-MM); `vote` and `best` pick one by the verifier's scores (docs/search.md)."""

from __future__ import annotations

from typing import Any

from morkit.core.registry import Entry, Registry

DEFAULT_AGGREGATOR = "llm"


def llm(setup: Any) -> Any:
    """The LLM aggregator the search runner built from the agents' config."""
    if setup.aggregator is None:
        from morkit.core.errors import InputError

        raise InputError("the 'llm' aggregator needs an LLM aggregator in the search setup; none was given")
    return setup.aggregator


def vote(setup: Any) -> Any:
    from morkit.search.voting import VoteAggregator

    return VoteAggregator(kind=setup.kind)


def best(setup: Any) -> Any:
    from morkit.search.voting import BestAggregator

    return BestAggregator()


_HERE = "morkit.search.aggregators"
AGGREGATORS = Registry("aggregator", [
    Entry("llm", f"{_HERE}:llm", "an LLM reads the set and writes one refined answer (CTTS-MM; agents.toml "
                                 "[aggregator])"),
    Entry("vote", f"{_HERE}:vote", "the set's answers vote by final answer, each weighted by the softmax of its "
                                   "verifier score; the heaviest group's best-scored answer; no LLM call"),
    Entry("best", f"{_HERE}:best", "the set's answer the verifier scores highest; no LLM call"),
])
"""How ACS merges the answers it collected (an LLM aggregator, a weighted vote, the best-scored answer), by
name."""
