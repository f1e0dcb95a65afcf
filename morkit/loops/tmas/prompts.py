"""The TMAS agents' prompts: solution (exploit / explore), summary, experience and guideline.

What each agent sees follows the paper (arXiv 2605.10344) and its code README: an exploiting solution
sees every (solution, verification summary) pair of the previous round and the experience bank; an
exploring one sees the guideline bank (every strategy tried) and is asked for a different one; the
summary agent condenses one candidate's M verifications; the experience and guideline agents see all
N solutions of the round. The paper's own prompt texts (its appendix) could not be read from here, so
the wording is morkit's; the line protocols (ADD/REFINE/DELETE/KEEP, STRATEGY:) are morkit's too, so
small models' replies can be parsed.
"""

from __future__ import annotations

from typing import Any, Sequence

from morkit.llm.base import Conversation
from morkit.loops.tmas.banks import ExperienceBank, GuidelineBank

EXPLOIT, EXPLORE = "exploit", "explore"

SOLVER_SYSTEM = ("You solve math problems. Reason step by step, then finish with the line "
                 "'The answer is <final answer>.'")
SUMMARY_SYSTEM = ("You summarise what several independent verifications found about one solution to a problem. "
                  "In at most four sentences say whether the verifiers judged it correct, which steps they "
                  "confirmed, and which mistakes they found and how to fix them.")
EXPERIENCE_SYSTEM = ("You keep an experience bank of lessons for solving one problem. Reply only with operations, "
                     "one per line:\nADD result: <a verified intermediate result worth reusing>\n"
                     "ADD avoid: <a mistake or dead end to avoid>\nREFINE <id>: <better wording of entry <id>>\n"
                     "DELETE <id>\nKEEP <id>\nUse the ids shown in the bank. Write nothing else.")
GUIDELINE_SYSTEM = ("You name the high-level strategies that solutions to a problem used. Reply only with lines "
                    "'STRATEGY: <one short sentence>', one per distinct strategy, leaving out those already "
                    "listed. Write nothing else.")


def excerpt(text: str, chars: int | None) -> str:
    """The text, or its head and tail around an elision mark when longer than `chars` (None: all of it)."""
    text = text.strip()
    if chars is None or len(text) <= chars:
        return text
    head = chars * 2 // 3
    return f"{text[:head]}\n[...]\n{text[len(text) - (chars - head):]}"


def score_text(score: float | None) -> str:
    return "unverified" if score is None else f"score {score:.3f}"


def _conversation(system: str, user: str) -> Conversation:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _solution_block(r: Any, chars: int | None, with_summary: bool) -> str:
    """One candidate of a round: its number, answer, score, text and (when verified) its summary."""
    block = (f"### Solution {r.index + 1} (answer {r.answer or 'none'}, {score_text(r.score)})\n"
             f"{excerpt(r.text, chars)}")
    if with_summary:
        block += f"\n\nSummary of its verification: {r.summary or '(none)'}"
    return block


def exploit_prompt(problem: str, previous: Sequence[Any], experience: ExperienceBank | None,
                   chars: int | None, with_summaries: bool) -> Conversation:
    """Exploitation: the previous round's solutions with their summaries, and the experience bank."""
    parts = [f"Problem:\n{problem}"]
    if previous:
        parts.append("Solutions of the previous round" + (", each with a summary of its verification:"
                                                         if with_summaries else ":"))
        parts.extend(_solution_block(r, chars, with_summaries) for r in previous)
    if experience is not None and experience.entries:
        parts.append("Experience bank (verified intermediate results to reuse, mistakes to avoid):\n"
                     + experience.render())
    parts.append("Write a better solution: reuse what was verified and fix the mistakes pointed out."
                 if previous else "Solve the problem.")
    return _conversation(SOLVER_SYSTEM, "\n\n".join(parts))


def explore_prompt(problem: str, guidelines: GuidelineBank | None, guideline_chars: int | None) -> Conversation:
    """Exploration: every strategy tried so far, and the request for a different one (without a guideline
    bank, only the request for an approach of its own)."""
    parts = [f"Problem:\n{problem}"]
    if guidelines is not None:
        parts.append(f"Strategies already tried (do not repeat any of them):\n{guidelines.render(guideline_chars)}")
        parts.append("Solve the problem with a high-level strategy different from all of those listed.")
    else:
        parts.append("Solve the problem with an approach of your own, independent of any earlier attempt.")
    return _conversation(SOLVER_SYSTEM, "\n\n".join(parts))


def summary_prompt(problem: str, rollout: Any, chars: int | None) -> Conversation:
    """The summary agent's input for one candidate: its solution and each of its verifications."""
    checks = [f"Verification {m} (score {score:.3f}):\n{excerpt(feedback or '(no feedback)', chars)}"
              for m, (score, feedback) in enumerate(zip(rollout.pass_scores, rollout.feedback), 1)]
    user = "\n\n".join([f"Problem:\n{problem}",
                        f"Solution (answer {rollout.answer or 'none'}):\n{excerpt(rollout.text, chars)}",
                        "Verifications:", *checks, "Summarise what the verifications found."])
    return _conversation(SUMMARY_SYSTEM, user)


def experience_prompt(problem: str, bank: ExperienceBank, rollouts: Sequence[Any], chars: int | None,
                      least: int, most: int | None, with_summaries: bool) -> Conversation:
    """The experience agent's input: the bank with its size target, and all of the round's solutions."""
    size = (f"keep it between {least} and {most} entries" if most is not None else f"keep at least {least} entries")
    user = "\n\n".join([
        f"Problem:\n{problem}",
        f"Experience bank ({len(bank.entries)} entries; {size} once there are enough lessons: "
        f"merge with REFINE, drop what is wrong or redundant with DELETE):\n{bank.render()}",
        "This round's solutions" + (", each with a summary of its verification:" if with_summaries else ":"),
        *(_solution_block(r, chars, with_summaries) for r in rollouts),
        "Update the experience bank."])
    return _conversation(EXPERIENCE_SYSTEM, user)


def guideline_prompt(problem: str, bank: GuidelineBank, rollouts: Sequence[Any], chars: int | None,
                     guideline_chars: int | None) -> Conversation:
    """The guideline agent's input: every strategy listed so far, and all of the round's solutions."""
    user = "\n\n".join([
        f"Problem:\n{problem}", f"Strategies already listed:\n{bank.render(guideline_chars)}",
        "This round's solutions:", *(_solution_block(r, chars, False) for r in rollouts),
        "Name the high-level strategies these solutions used that are not listed yet."])
    return _conversation(GUIDELINE_SYSTEM, user)
