"""Agent presets and prompts by name: a preset (AGENT_PRESETS) fills the sampling keys an agents.toml leaves
unset; a prompt (AGENT_PROMPTS) is a system message and a user template. agents.toml picks them with `preset`
and `prompt`, the commands with `--agent-preset` and `--agent-prompt` (docs/search.md, "The agents")."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.registry import Entry, Registry
from morkit.llm.base import SamplingParams

QUESTION = "{question}"
"""Where the question goes in a user template."""


@dataclass(frozen=True)
class AgentPreset:
    """Sampling values for the keys an agents.toml leaves unset (in an agent's table, `[defaults]` and
    `[aggregator]` alike): SamplingParams fields such as temperature, max_tokens, presence_penalty.

    Args:
        sampling: SamplingParams field -> value; the fields it leaves out keep SamplingParams' defaults.

    Raises:
        InputError: A key is not a SamplingParams field, or a value is out of its range.
    """

    sampling: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = {f.name for f in fields(SamplingParams)}
        unknown = sorted(set(self.sampling) - known)
        if unknown:
            raise InputError(f"AgentPreset: {unknown[0]!r} is not a SamplingParams field")
        SamplingParams(**self.sampling)  # values out of range fail here, not at the first agent
        object.__setattr__(self, "sampling", MappingProxyType(dict(self.sampling)))


@dataclass(frozen=True)
class AgentPrompt:
    """What an agent is asked: a system message (None: none) and its user message, a template in which
    `{question}` stands for the question.

    Args:
        system: The system message; None sends none.
        user: The user message's template; it holds `{question}` once.

    Raises:
        InputError: The template does not hold `{question}` exactly once.
    """

    system: str | None = None
    user: str = QUESTION

    def __post_init__(self) -> None:
        user_template(self.user, "AgentPrompt.user")
        if self.system is not None and not isinstance(self.system, str):
            raise InputError(f"AgentPrompt.system must be text or None, got {type(self.system).__name__}")


def user_template(value: Any, what: str) -> str:
    """A user template: text holding `{question}` exactly once (a `core.checks`-style check).

    Args:
        value: The template.
        what: What it is, for the error.

    Returns:
        The template.

    Raises:
        InputError: It is not text, or does not hold `{question}` exactly once.
    """
    if not isinstance(value, str) or value.count(QUESTION) != 1:
        raise InputError(f"{what} must be text holding {QUESTION} once, got {checks.shown(value)}")
    return value


def fill(template: str, question: str) -> str:
    """A user template with the question in place of `{question}` (the question's outer whitespace trimmed)."""
    return template.replace(QUESTION, question.strip())


# CTTS-MM's inference settings (Appendix D.1, "Implementation details"): "The sampling temperature is fixed
# at 0.7, and the output sequence is set to 8,192 tokens ... A presence penalty of 1.05 is applied".
CTTS_MM = AgentPreset({"temperature": 0.7, "max_tokens": 8192, "presence_penalty": 1.05})
NO_PRESET = AgentPreset()

# CTTS-MM's agent prompts (Appendix J, Figure I, "Prompts for seven benchmarks"): every system prompt and user
# template below is the paper's text, verbatim; morkit's are only the names. Figure I prints the templates in
# quotes as "Question: {question}." and "Instruction: {question}."; morkit reads the final period as part of
# the template, as for the aggregator's Figure J.
_FIGURE_I_USER = "Question: {question}."
CTTS_MM_MBPP = AgentPrompt(
    "You are an exceptionally intelligent coding assistant that consistently delivers accurate and reliable "
    "responses to user instructions.", _FIGURE_I_USER)
CTTS_MM_LIVECODEBENCH = AgentPrompt(
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests.", _FIGURE_I_USER)
CTTS_MM_HUMANEVAL = AgentPrompt(
    "You are an expert Python programmer. You will be given a coding question (problem specification) and "
    "will generate a correct Python program that matches the specification and passes all tests. Directly "
    "give the executable function body, without any comments or test cases.", _FIGURE_I_USER)
CTTS_MM_AIME = AgentPrompt(
    "Please reason step by step, and put your final answer within \\boxed{}.", _FIGURE_I_USER)
CTTS_MM_MATH = AgentPrompt(
    "You are a math problem solver. Please solve the following math problem. Be sure to explain your "
    "solution in detail. The numerical values in the answer should be surrounded by \\boxed. The final "
    "answer should start with 'The answer is' and give the conclusion directly. Do not add any extra "
    "content.", _FIGURE_I_USER)
CTTS_MM_GPQA = AgentPrompt(
    "You are a very intelligent assistant, who follows instructions directly.", _FIGURE_I_USER)
CTTS_MM_IFEVAL = AgentPrompt(None, "Instruction: {question}.")

_HERE = "morkit.llm.presets"
AGENT_PRESETS = Registry("agent preset", [
    Entry("ctts-mm", f"{_HERE}:CTTS_MM",
          "CTTS-MM's inference settings: temperature 0.7, 8,192 new tokens, presence penalty 1.05"),
    Entry("none", f"{_HERE}:NO_PRESET",
          "no values: SamplingParams' own (temperature 0.7, 256 new tokens, no presence penalty)"),
])
"""name -> AgentPreset; agents.toml `preset = NAME` or `--agent-preset NAME` picks one."""
DEFAULT_AGENT_PRESET = "ctts-mm"

_FIGURE_I = "CTTS-MM's agent prompt (Figure I) for"
AGENT_PROMPTS = Registry("agent prompt", [
    Entry("ctts-mm/mbpp", f"{_HERE}:CTTS_MM_MBPP", f"{_FIGURE_I} MBPP"),
    Entry("ctts-mm/livecodebench", f"{_HERE}:CTTS_MM_LIVECODEBENCH", f"{_FIGURE_I} LiveCodeBench"),
    Entry("ctts-mm/humaneval", f"{_HERE}:CTTS_MM_HUMANEVAL", f"{_FIGURE_I} HumanEval"),
    Entry("ctts-mm/aime", f"{_HERE}:CTTS_MM_AIME", f"{_FIGURE_I} AIME"),
    Entry("ctts-mm/math", f"{_HERE}:CTTS_MM_MATH", f"{_FIGURE_I} MATH"),
    Entry("ctts-mm/gpqa", f"{_HERE}:CTTS_MM_GPQA", f"{_FIGURE_I} GPQA"),
    Entry("ctts-mm/ifeval", f"{_HERE}:CTTS_MM_IFEVAL", f"{_FIGURE_I} IFEval (no system prompt)"),
])
"""name -> AgentPrompt; agents.toml `prompt = NAME` (an agent's table or [defaults]) or `--agent-prompt NAME`."""
