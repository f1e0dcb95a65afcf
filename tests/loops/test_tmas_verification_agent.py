"""TMAS's verification agent: `morkit loop tmas` and `run_loop("tmas")` verify on the solver's model with the TMAS
verification prompt (the paper's opening words, then morkit's); `verification_agent=critic` gives morkit's generic
critic on the [aggregator]. StreamMA and ATLAS keep the generic critic on the aggregator."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

import morkit
from morkit.core.errors import InputError
from morkit.llm.agents import AgentsConfig, AgentSpec, LLMPool
from morkit.llm.base import ScriptedLLM
from morkit.loops.registry import LoopOptions, loop_critic
from morkit.loops.tmas.loop import TMASConfig, verification_agent
from morkit.loops.tmas.prompts import VERIFICATION_USER, VERIFIER_SYSTEM
from morkit.verify.critic import LLM_VERIFIER_SYSTEM, LLMVerifier

PROBLEM = "Tom has 3 bags of 4 apples. How many apples does he have?"
SOLUTION = "3 bags of 4 apples hold 3 x 4 = 12 apples. The answer is 12."


class Models:
    """A scripted backend per model name: every conversation each model is sent, by role; critics reply with a
    score (the generic critic 9/10, TMAS's verification agent 8/10), every other role with the solution."""

    def __init__(self):
        self.sent: dict[str, list] = defaultdict(list)

    def reply_as(self, model):
        def reply(conversation, sample):
            self.sent[model].append(conversation)
            if conversation[0]["content"] == LLM_VERIFIER_SYSTEM:
                return "Each step holds.\nScore: 9/10"
            if conversation[0]["content"] == VERIFIER_SYSTEM:
                return "Step 1 multiplies correctly.\nScore: 8/10"
            return SOLUTION
        return reply

    def critiques(self, model, system):
        return [c for c in self.sent[model] if c[0]["content"] == system]


@pytest.fixture
def models():
    held = Models()
    entry = morkit.LLM_BACKENDS.register("scripted-per-model", lambda spec: ScriptedLLM(held.reply_as(spec.model)),
                                         "per-model scripted replies")
    yield held
    morkit.LLM_BACKENDS.unregister(entry.name)


AGENTS = AgentsConfig((AgentSpec("solver", backend="scripted-per-model", model="solver-model"),),
                      AgentSpec("judge", backend="scripted-per-model", model="aggregator-model"))
QUERY = morkit.Query("apples", PROBLEM, (), reference="12")


def run(settings=(), verifier=None):
    config = TMASConfig(iterations=1, solutions=2, verifications=1)
    return morkit.run_loop("tmas", [QUERY], agents=AGENTS, options=LoopOptions(settings=settings), config=config,
                           verifier=verifier)[0]


@pytest.mark.parametrize("verifier", [None, "llm"])
def test_tmas_verifies_on_the_solvers_model_with_the_tmas_prompt(models, verifier):
    record = run(verifier=verifier)
    checks = models.critiques("solver-model", VERIFIER_SYSTEM)
    assert len(checks) == 2 and record["score"] == pytest.approx(0.8)  # one pass per solution, the agent's 8/10
    assert models.sent["aggregator-model"] == []  # the aggregator plays no part in TMAS
    user = checks[0][-1]["content"]
    assert user.startswith("## Instruction\nYour task is to evaluate the solution below")
    assert user.endswith(f"## Problem\n{PROBLEM}\n\n## Solution\n{SOLUTION}") and "'Score: N/10'" in user
    assert all(r["feedback"] == ["Step 1 multiplies correctly.\nScore: 8/10"] for r in record["state"]["rollouts"])


def test_the_switch_gives_the_generic_critic_on_the_aggregator(models):
    record = run(settings=(("verification_agent", "critic"),))
    assert len(models.critiques("aggregator-model", LLM_VERIFIER_SYSTEM)) == 2
    assert models.critiques("solver-model", VERIFIER_SYSTEM) == []
    assert models.critiques("solver-model", LLM_VERIFIER_SYSTEM) == []
    assert record["score"] == pytest.approx(0.9)
    with pytest.raises(InputError, match="verification_agent"):
        run(settings=(("verification_agent", "aggregator"),))


@pytest.mark.parametrize("loop", ["streamma", "atlas"])
def test_the_other_loops_keep_the_generic_critic_on_the_aggregator(models, loop):
    llms = LLMPool()
    critic = loop_critic(loop, AGENTS, llms)
    assert isinstance(critic, LLMVerifier) and critic.system == LLM_VERIFIER_SYSTEM
    assert critic.llm is llms.llm(AGENTS.aggregator)


def test_the_verification_agent_takes_the_solution_tokens_and_the_papers_words(models, paper_text):
    llms = LLMPool()
    critic = loop_critic("tmas", AGENTS, llms, LoopOptions(gen_tokens=300))
    assert critic.llm is llms.llm(AGENTS.agents[0]) and critic.params.max_tokens == 300
    assert (critic.system, critic.user) == (VERIFIER_SYSTEM, VERIFICATION_USER)
    # the paper renders only "Verification Prompt ## Instruction 25 Your task is to evaluate ..." (25: a page
    # number); the prompt starts with those words and the rest is morkit's
    assert "Verification Prompt ## Instruction 25 Your task is to evaluate ..." in paper_text("tmas")
    assert VERIFICATION_USER.startswith("## Instruction\nYour task is to evaluate ")
    verdict = verification_agent(ScriptedLLM(lambda c, i: "Wrong in step 2.\nScore: 2/10")).verify("q", ["a"])[0]
    assert verdict.score == pytest.approx(0.2) and re.search(r"Score: 2/10$", verdict.feedback)
