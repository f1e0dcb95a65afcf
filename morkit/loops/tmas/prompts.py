"""The TMAS agents' prompts: solution (first round, exploit, explore), verification, summary, memory.
Constants marked PAPER quote the published prompts as far as tmas.txt renders them; the rest is morkit's.
What each agent sees, and why morkit's words differ where they do: docs/loops/tmas.md (fidelity table)."""

from __future__ import annotations

from typing import Any, Sequence

from morkit.llm.base import Conversation
from morkit.loops.tmas.banks import ExperienceBank, GuidelineBank

EXPLOIT, EXPLORE = "exploit", "explore"

SOLVER_SYSTEM = "You are an expert mathematician who writes complete, rigorous solutions."  # morkit's
SUMMARY_SYSTEM = ("You summarise what several independent verifications found about one solution to a problem. "
                  "In at most four sentences say whether the verifiers judged it correct, which steps they "
                  "confirmed, and which mistakes they found and how to fix them.")  # morkit's
EXPERIENCE_SYSTEM = ("You maintain the experience bank of one problem. Reply only with operations, one per line:\n"
                     "ADD result: <a Verified Anchor>\nADD avoid: <an Error Avoidance Heuristic>\n"
                     "REFINE <id>: <better wording of entry <id>>\nDELETE <id>\nKEEP <id>\n"
                     "Use the ids shown in the bank. Write nothing else.")  # morkit's line protocol
GUIDELINE_SYSTEM = ("You maintain the guideline bank of one problem: the high-level strategies its solutions have "
                    "tried. Reply only with lines 'STRATEGY: <one short sentence>', one per distinct strategy not "
                    "recorded yet. Write nothing else.")  # morkit's line protocol

# PAPER: the refinement prompt's four standards; the first-round prompt's first two are lost in the rendering,
# so it takes Completeness and Rigour from here (morkit's inference) and keeps its own Self-Containment.
_COMPLETENESS = ("**Completeness:** The solution must cover all cases and steps. If minor details are omitted, it "
                 "is considered imperfect.")
_RIGOUR = "**Rigour:** Fatal errors or severe omissions are unacceptable."
_SELF_CONTAINED = ("**Self-Containment:** Referencing external papers/theorems is allowed **IF AND ONLY IF** you "
                   "also present a valid proof or clear derivation of the referenced argument.")
_ERROR_CORRECTION = ("**Error Correction:** You must explicitly address the flaws pointed out in the verification "
                     "summaries. Do NOT repeat logic that has already been identified as incorrect.")
# PAPER: the first-round solution prompt's process; the refinement prompt's process.
_SOLVE_PROCESS = ("1. Reason carefully about how to solve the problem.\n"
                  "2. Draft your solution mentally or in your scratchpad.\n"
                  "3. **Refine your solution** by fixing any potential logical gaps, ambiguity, or \"hand-waving\" "
                  "arguments until it meets the highest standard of mathematical proof.\n"
                  "4. Present *only* your best, finalized version.")
_REFINE_PROCESS = ("1. Read the **Problem** carefully.\n"
                   "2. Study each **Previous Attempt** and its **Verification Summary**. Identify exactly what went "
                   "wrong, what was incomplete, and what (if anything) was correct.\n"
                   "3. Reason about how to fix the specific issues while retaining any correct sub-results from "
                   "previous attempts.\n"
                   "4. Draft your refined solution, ensuring it does not repeat the confirmed errors.\n"
                   "5. Present *only* your best, finalized, and fully corrected version.")
_ANSWER_LINE = "End with the line 'The answer is <final answer>.'"  # morkit's: answers are graded by it


def _solver_user(opening: str, standards: Sequence[str], process: str, rigorous: str, task: Sequence[str]) -> str:
    """A solution prompt in the paper's layout: standards, process, output format, then the task input."""
    numbered = "\n".join(f"{k}. {s}" for k, s in enumerate(standards, 1))
    return (f"{opening}\n\n{numbered}\n\n**Process:**\n{process}\n\n"  # PAPER from here, but for the answer line
            "**Output Format:** Your response should follow this exact markdown format:\n## Solution\n"
            f"... // Your final, {rigorous} solution to the problem here. Ensure all steps are explicitly shown "
            f"and justified.\n{_ANSWER_LINE}\n\n---\nHere is your task input:\n\n" + "\n\n".join(task))


# PAPER: the experience prompt's criteria for a Verified Anchor, its operations and its quantity guideline.
_ANCHOR_CRITERIA = (
    "1. **Non-trivial**: It must involve meaningful mathematical work -- a derivation, a transformation, a "
    "non-obvious equivalence, or a structural observation. Trivial arithmetic evaluations (e.g., \"2025 == 2 mod "
    "7\") do NOT qualify unless the congruence itself is the key insight that unlocks a deeper argument.\n"
    "2. **Reusable**: It must be a stepping stone -- something a future solver can directly cite and proceed from, "
    "without needing to redo the work. Prefer results that establish structure over results that are dead ends.\n"
    "3. **Verifier-backed**: It must be explicitly confirmed correct by the verification summary. If verifiers are "
    "split on a step, do not add it as an Anchor.")
_OPERATIONS = (
    "1. **ADD**: Extract new Verified Anchors or Error Avoidance Heuristics that are not already covered by the "
    "existing bank. Prioritize insights confirmed consistently across multiple rollouts.\n"
    "2. **KEEP**: Retain all existing entries that remain valid and are not contradicted by the new rollouts.\n"
    "3. **REFINE**: If a new rollout provides a more precise version of an existing entry, rewrite it to be "
    "clearer. Only merge entries that say the exact same thing about the exact same step.\n"
    "4. **DELETE**: Remove entries explicitly revealed as incorrect by the verification summary. Remove entries "
    "that become fully subsumed after refinement.")
_QUANTITY = ("Aim for **{size}** in total across both categories. Do NOT aggressively compress -- fine-grained, "
             "specific entries are more useful than over-generalized ones.")
# PAPER: what the guideline bank is for (cut where the rendering breaks off mid-sentence).
_GUIDELINE_PURPOSE = (
    "1. **Memory of exploration**: It records which broad strategic directions have already been tried, so the "
    "solver does not waste computation repeating the same approach.\n"
    "2. **Diversity enforcement**: When the solver is about to generate a new solution, it will be shown this bank "
    "and instructed to pursue a direction that is **fundamentally different** from everything listed here. The "
    "bank therefore acts as the primary mechanism for controlling exploration.")
_NO_SUMMARIES = "(These rollouts come without verification summaries: {why}.)"

VERIFIER_SYSTEM = "You are an expert mathematician who evaluates solutions rigorously."  # morkit's
# PAPER: the verification prompt's heading and the first words of its instruction, all that tmas.txt renders of it
# ("Verification Prompt ## Instruction 25 Your task is to evaluate ...", 25 a page number). The fragments after it
# (Error Correction, Completeness, Rigour, Self-Containment, then a process over "Previous Attempts") are the
# refinement prompt's, so nothing else of the verification prompt is legible.
_VERIFY_HEADING = "## Instruction"
_VERIFY_OPENING = "Your task is to evaluate"
# morkit's: the rest of the instruction (the standards the solver was given, paraphrased), the output format
# with the 'Score: N/10' line that morkit.verify.critic parses, and the task input laid out as the paper's
# solution prompts lay out theirs.
_VERIFY_REST = (
    "the solution below to the problem below. Check it step by step against the standards its solver was "
    "asked to meet: every case and step covered, no fatal error or severe omission, and every cited result "
    "proved or derived. Say which steps are correct, point out each mistake or gap, and say how to fix it.\n\n"
    "**Output Format:** Your analysis, then a final line 'Score: N/10', where 10 means the solution is surely "
    "correct and complete, and 0 that it is surely wrong.")
VERIFICATION_USER = (f"{_VERIFY_HEADING}\n{_VERIFY_OPENING} {_VERIFY_REST}\n\n---\nHere is your task input:\n\n"
                     "## Problem\n{question}\n\n## Solution\n{answer}")
"""The verification agent's user message, a template for morkit.verify.critic.LLMVerifier (`{question}`,
`{answer}`): the paper's opening words, then morkit's."""
PAPER_WORDING = (_COMPLETENESS, _RIGOUR, _SELF_CONTAINED, _ERROR_CORRECTION, _SOLVE_PROCESS, _REFINE_PROCESS,
                 _ANCHOR_CRITERIA, _OPERATIONS, _QUANTITY, _GUIDELINE_PURPOSE, _VERIFY_HEADING, _VERIFY_OPENING)
"""Every constant above that quotes the paper (a test checks each sentence against tmas.txt)."""


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


def _rollout_block(r: Any, label: str, number: int, chars: int | None, with_summary: bool, show_scores: bool) -> str:
    """One rollout: its heading (with answer and score only under `show_scores`), text and verification summary."""
    heading = f"### {label} {number}"
    if show_scores:
        heading += f" (answer {r.answer or 'none'}, {score_text(r.score)})"
    block = f"{heading}\n{excerpt(r.text, chars)}"
    if with_summary:
        block += f"\n\n#### Verification Summary\n{r.summary or '(none)'}"
    return block


def _rollouts(rs: Sequence[Any], label: str, chars: int | None, with_summaries: bool, show_scores: bool,
              why: str) -> list[str]:
    blocks = [_rollout_block(r, label, r.index + 1, chars, with_summaries, show_scores) for r in rs]
    return blocks if with_summaries or not rs else [*blocks, _NO_SUMMARIES.format(why=why)]


def _problem(problem: str) -> str:
    return f"## Problem\n{problem}"


def _experience_context(experience: ExperienceBank | None) -> list[str]:
    """The experience bank appended to an exploiting prompt (the paper appends an 'Experience Context')."""
    if experience is None or not experience.entries:
        return []
    return ["## Experience Context\nVerified Anchors (result) and Error Avoidance Heuristics (avoid) from earlier "
            f"rounds:\n{experience.render()}"]


def solve_prompt(problem: str, extra: Sequence[str] = ()) -> Conversation:
    """The paper's first-round solution prompt, with `extra` sections after the problem."""
    user = _solver_user("Solve the following problem. Your solution must meet these standards:",
                        [_COMPLETENESS, _RIGOUR, _SELF_CONTAINED + " Merely citing a result without showing why it "
                         "applies or how it works is considered a failure."],
                        _SOLVE_PROCESS, "rigorous", [_problem(problem), *extra])
    return _conversation(SOLVER_SYSTEM, user)


def exploit_prompt(problem: str, previous: Sequence[Any], experience: ExperienceBank | None,
                   chars: int | None, with_summaries: bool, *, show_scores: bool = False,
                   no_summaries: str = "this run has no verification analysis") -> Conversation:
    """Exploitation: the paper's refinement prompt over the previous round's attempts (each with its verification
    summary) and the experience bank; with no previous attempt, the first-round prompt and the bank."""
    if not previous:
        return solve_prompt(problem, _experience_context(experience))
    attempts = _rollouts(previous, "Previous Attempt", chars, with_summaries, show_scores, no_summaries)
    user = _solver_user("Write a refined solution to the following problem, building on the previous attempts. It "
                        "must meet these standards:", [_ERROR_CORRECTION, _COMPLETENESS, _RIGOUR, _SELF_CONTAINED],
                        _REFINE_PROCESS, "rigorous, and corrected",
                        [_problem(problem), "## Previous Attempts", *attempts, *_experience_context(experience)])
    return _conversation(SOLVER_SYSTEM, user)


def explore_prompt(problem: str, guidelines: GuidelineBank | None, guideline_chars: int | None) -> Conversation:
    """Exploration: the first-round prompt, every strategy tried so far and the paper's instruction to go a
    fundamentally different way (without a guideline bank, only a request for an approach of its own)."""
    if guidelines is None:
        return solve_prompt(problem, ["Solve it with an approach of your own, independent of any earlier attempt."])
    return solve_prompt(problem, [f"## Strategies Already Attempted\n{guidelines.render(guideline_chars)}",
                                  "Pursue a direction that is **fundamentally different** from everything listed "
                                  "here."])


def summary_prompt(problem: str, rollout: Any, chars: int | None, *, show_scores: bool = False) -> Conversation:
    """The summary agent's input for one candidate: its solution and the analysis each verification wrote."""
    checks = [f"### Verification {m}" + (f" (score {score:.3f})" if show_scores else "")
              + f"\n{excerpt(feedback, chars)}"
              for m, (score, feedback) in enumerate(zip(rollout.pass_scores, rollout.feedback), 1) if feedback.strip()]
    solution = "## Solution" + (f" (answer {rollout.answer or 'none'})" if show_scores else "")
    user = "\n\n".join([_problem(problem), f"{solution}\n{excerpt(rollout.text, chars)}", "## Verifications",
                        *checks, "Summarise what the verifications found."])
    return _conversation(SUMMARY_SYSTEM, user)


def experience_prompt(problem: str, bank: ExperienceBank, rollouts: Sequence[Any], chars: int | None,
                      least: int, most: int | None, with_summaries: bool, *, show_scores: bool = False,
                      no_summaries: str = "this run has no verification analysis") -> Conversation:
    """The experience agent's input: the paper's criteria and operations, the bank, and the round's N rollouts."""
    size = f"{least}-{most} entries" if most is not None else f"at least {least} entries"
    user = "\n\n".join([
        _problem(problem),
        f"## Verified Anchors (ADD result)\nAn entry must be:\n{_ANCHOR_CRITERIA}",
        "## Error Avoidance Heuristics (ADD avoid)\nA mistake a verification summary identified, stated so that a "
        "later solver does not repeat it.",
        f"## Operations\n{_OPERATIONS}",
        f"## Quantity Guideline\n{_QUANTITY.format(size=size)}",
        f"## Current Experience Bank ({len(bank.entries)} entries)\n{bank.render()}",
        "## This Round's Rollouts",
        *_rollouts(rollouts, "Rollout", chars, with_summaries, show_scores, no_summaries),
        "Update the experience bank."])
    return _conversation(EXPERIENCE_SYSTEM, user)


def guideline_prompt(problem: str, bank: GuidelineBank, rollouts: Sequence[Any], chars: int | None,
                     guideline_chars: int | None, *, with_summaries: bool = True, show_scores: bool = False,
                     no_summaries: str = "this run has no verification analysis") -> Conversation:
    """The guideline agent's input (G_t = A_guide(Q, R_t, G_t-1)): the bank's purpose, the strategies recorded
    so far, and the round's N rollouts, each a solution with its verification summary."""
    user = "\n\n".join([
        _problem(problem), f"## What the Guideline Bank Is For\n{_GUIDELINE_PURPOSE}",
        f"## Strategies Already Recorded\n{bank.render(guideline_chars)}",
        "## This Round's Rollouts",
        *_rollouts(rollouts, "Rollout", chars, with_summaries, show_scores, no_summaries),
        "Name the high-level strategy (mathematical framework, key structural insight, angle of attack) of each "
        "rollout that is not recorded yet."])
    return _conversation(GUIDELINE_SYSTEM, user)
