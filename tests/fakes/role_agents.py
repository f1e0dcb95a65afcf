"""Scripted role replies for the loop CLI tests: one reply function that answers as whichever agent a system prompt
names (ATLAS's orchestrator, a critic, an aggregator, TMAS's memory agents, a StreamMA reviewer), served by
fakes.http_server.FakeServer; every solution reaches 71."""

from __future__ import annotations


SOLUTION = "Half of $100 is $50.\nSo Ali has 21 + 50 = 71 dollars.\nThe answer is 71."


def role_reply(messages: list[dict]) -> str:
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    user = messages[-1]["content"]
    if "orchestrator of independent solvers" in system:  # ATLAS: reason, explore once, stop, then answer
        if "Final answer turn." in user:
            return SOLUTION
        return "One solver answered; that is enough.\nACTION: stop" if "Result of explore" in user else \
            "No evidence yet.\nACTION: explore"
    if "check solutions" in system:
        return "Each step holds. Score: 8/10"
    if "combine several candidate responses" in system or "final answer to a problem" in system:
        return SOLUTION
    if "experience bank" in system:
        return "ADD result: half of 100 is 50"
    if "strategies" in system:
        return "STRATEGY: add the gift to the start amount"
    if "pipeline of agents that solve a problem" in system:  # a StreamMA reviewer accepts and writes its own step
        return "ACCEPT\nSTEP 1: Half of 100 is 50, and 50 + 21 = 71. The answer is 71."
    if "summarise" in system:
        return "All solutions reach 71."
    return SOLUTION
