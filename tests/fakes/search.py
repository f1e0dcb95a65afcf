"""A table verifier and a scripted MoA aggregator for the ACS and search tests (no model, no server)."""

from __future__ import annotations

import re

from morkit.core.errors import LLMError
from morkit.core.types import Verdict
from morkit.llm.base import ScriptedLLM
from morkit.search.aggregate import MOA_SYSTEM


class TableVerifier:
    """Scores answers from a fixed table (unknown texts score 0); records what each call saw."""

    name = "table"

    def __init__(self, table):
        self.table = table
        self.calls = []
        self.rm_calls = 0

    def verify(self, question, answers, context=()):
        self.calls.append((list(answers), list(context)))
        self.rm_calls += len(answers)
        return [Verdict(self.table.get(a, 0.0)) for a in answers]


def aggregating_llm(fail_on=None):
    """Replies agg(X|Y|...) with the sorted responses it was shown (MoA's layout, parsed for real: numbered
    responses after the system prompt)."""

    def reply(conversation, _):
        system = conversation[0]["content"]
        assert system.startswith(MOA_SYSTEM) and conversation[-1]["role"] == "user"
        listed = system[len(MOA_SYSTEM):]
        found = sorted(re.findall(r"\n\d+\. (.*?)(?=\n\d+\. |$)", listed, re.S))
        text = "agg(" + "|".join(found) + ")"
        if fail_on and text == fail_on:
            raise LLMError("scripted failure")
        return text

    return ScriptedLLM(reply)
