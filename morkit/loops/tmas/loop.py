"""TMAS: test-time memory-augmented search, a loop of solve -> verify -> remember over a Verifier.

Each iteration:
1. N solutions in one batched `chat` call. Each solution, by a seeded coin, *exploits* (prob 1-epsilon:
   its prompt shows the previous round's best rollouts, the feedback summary and the experience bank)
   or *explores* (prob epsilon: its prompt lists the strategies already tried, the guideline bank,
   and asks for a different approach).
2. M verification passes over all N solutions (each pass sees the round's solutions as context);
   a solution's score is the mean over the passes that succeeded, with all their feedback.
3. Unless the loop stops here, three agents update the memory for the next round: a summary of the
   feedback, experience-bank operations and guideline-bank strategies (see morkit.loops.tmas.banks).
Stops after `iterations`, when the budget is spent, when the best score reaches `stop_score`, or when
every solution of a round reaches the same final answer. A failing verifier pass or agent step is
recorded and skipped; a failing generation ends the loop. The answer is the best-scored solution seen
in any round (scores from different `verify` calls are compared as they are). The reference, when
given, only marks correctness in the trace; no prompt ever contains it.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Sequence

from morkit.core import checks
from morkit.core.errors import LLMError, ScoreError
from morkit.core.grading import answers_equivalent, extract_answer, is_correct
from morkit.llm.base import LLM, Conversation, SamplingParams
from morkit.loops.base import (
    Budget,
    BudgetExhausted,
    LoopResult,
    MeteredLLM,
    Spend,
    Trace,
    finish,
    metered_verifier,
)
from morkit.loops.tmas.banks import ExperienceBank, GuidelineBank
from morkit.verify.base import Verifier

EXPLOIT, EXPLORE = "exploit", "explore"

SOLVER_SYSTEM = ("You solve math problems. Reason step by step, then finish with the line "
                 "'The answer is <final answer>.'")
SUMMARY_SYSTEM = ("You summarise a verifier's feedback on several solutions to one problem. In at most four "
                  "sentences say which answers were reached, which steps were checked as correct, and which "
                  "mistakes were found.")
EXPERIENCE_SYSTEM = ("You keep an experience bank of lessons for solving one problem. Reply only with operations, "
                     "one per line:\nADD result: <a verified intermediate result worth reusing>\n"
                     "ADD avoid: <a mistake or dead end to avoid>\nREFINE <id>: <better wording of entry <id>>\n"
                     "DELETE <id>\nKEEP <id>\nUse the ids shown in the bank. Write nothing else.")
GUIDELINE_SYSTEM = ("You name the high-level strategies that solutions to a problem used. Reply only with lines "
                    "'STRATEGY: <one short sentence>', one per distinct strategy, leaving out those already "
                    "listed. Write nothing else.")


@dataclass(frozen=True)
class TMASConfig:
    """Loop sizes (the paper uses up to T=20, N=8, M=8), sampling, memory limits and stop rules."""

    iterations: int = 3
    solutions: int = 4
    verifications: int = 2
    epsilon: float = 0.2
    seed: int = 0
    max_tokens: int = 512
    temperature: float = 0.7
    agent_max_tokens: int = 256
    agent_temperature: float = 0.0
    top_k: int = 2
    """Best rollouts of the previous round shown to exploiting solutions."""
    stop_score: float | None = None
    stop_on_agreement: bool = True
    """Stop when every solution of a round (at least two) has the same final answer."""
    memory_on_last_round: bool = False
    """Run the memory agents after the last round too (only useful to inspect the final banks)."""
    experience_capacity: int = 12
    guideline_capacity: int = 10
    excerpt_chars: int = 1200
    """Longest solution or feedback excerpt put into a prompt."""

    def __post_init__(self) -> None:
        for name in ("iterations", "solutions", "verifications", "max_tokens", "agent_max_tokens", "top_k",
                     "experience_capacity", "guideline_capacity", "excerpt_chars"):
            checks.positive_int(getattr(self, name), f"TMASConfig.{name}")
        checks.probability(self.epsilon, "TMASConfig.epsilon")
        checks.non_negative(self.temperature, "TMASConfig.temperature")
        checks.non_negative(self.agent_temperature, "TMASConfig.agent_temperature")
        checks.optional(checks.non_negative, self.stop_score, "TMASConfig.stop_score")


@dataclass(frozen=True)
class Rollout:
    """One solution: where it came from, its final answer, its verification, and (with a reference) correctness."""

    iteration: int
    index: int
    branch: str
    text: str
    answer: str | None
    score: float | None = None
    feedback: tuple[str, ...] = ()
    correct: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "feedback": list(self.feedback)}


class _Stop(Exception):
    """Ends the run with `reason` (internal control flow; the cause is already in the trace)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _excerpt(text: str, chars: int) -> str:
    """The text, or its head and tail around an elision mark when longer than `chars`."""
    text = text.strip()
    if len(text) <= chars:
        return text
    head = chars * 2 // 3
    return f"{text[:head]}\n[...]\n{text[len(text) - (chars - head):]}"


def _score_text(score: float | None) -> str:
    return "unverified" if score is None else f"score {score:.3f}"


def _ranked(rollouts: Sequence[Rollout]) -> list[Rollout]:
    """Best first: scored before unscored, higher score first, earlier first among equals."""
    return sorted(rollouts, key=lambda r: (r.score is None, -(r.score or 0.0), r.iteration, r.index))


def _agree(rollouts: Sequence[Rollout]) -> bool:
    answers = [r.answer for r in rollouts]
    return len(answers) >= 2 and all(answers_equivalent(answers[0], a) for a in answers[1:])


class TMAS:
    """The TMAS loop: `TMAS(llm, verifier, config, budget).run(problem, reference=None) -> LoopResult`."""

    name = "tmas"

    def __init__(self, llm: LLM, verifier: Verifier, config: TMASConfig = TMASConfig(), budget: Budget = Budget()):
        self.llm, self.verifier, self.config, self.budget = llm, verifier, config, budget

    def run(self, problem: str, reference: str | None = None) -> LoopResult:
        return _Run(self, problem, reference).execute()


@dataclass
class _Run:
    """One problem's run: the metered LLM, trace, coin and memory, changed as the rounds go."""

    tmas: TMAS
    problem: str
    reference: str | None
    spend: Spend = field(init=False)
    llm: MeteredLLM = field(init=False)
    verifier: Verifier = field(init=False)
    rng: random.Random = field(init=False)
    trace: Trace = field(default_factory=Trace)
    experience: ExperienceBank = field(init=False)
    guidelines: GuidelineBank = field(init=False)
    summary: str = ""
    previous: list[Rollout] = field(default_factory=list)
    rollouts: list[Rollout] = field(default_factory=list)
    budget_spent: bool = False

    def __post_init__(self) -> None:
        cfg = self.config
        self.spend = Spend(self.tmas.budget)
        self.llm = MeteredLLM(self.tmas.llm, self.spend)
        self.verifier = metered_verifier(self.tmas.verifier, self.spend)
        self.rng = random.Random(cfg.seed)
        self.experience = ExperienceBank(capacity=cfg.experience_capacity)
        self.guidelines = GuidelineBank(capacity=cfg.guideline_capacity)

    @property
    def config(self) -> TMASConfig:
        return self.tmas.config

    def execute(self) -> LoopResult:
        self.trace.add("start", loop=self.tmas.name, llm=self.tmas.llm.name,
                       verifier=getattr(self.tmas.verifier, "name", type(self.tmas.verifier).__name__),
                       config=asdict(self.config), budget=asdict(self.tmas.budget),
                       reference_given=self.reference is not None)
        reason = "iterations"
        for iteration in range(1, self.config.iterations + 1):
            try:
                stop = self._round(iteration)
            except _Stop as stopped:
                stop = stopped.reason
            self.trace.add("memory", iteration=iteration, experience=self.experience.to_json(),
                           guidelines=self.guidelines.to_json(), summary=self.summary)
            if stop:
                reason = stop
                break
        return self._finish(reason)

    # -- one round ---------------------------------------------------------------------------------

    def _round(self, iteration: int) -> str | None:
        """Generate, verify and (unless stopping) update memory; the stop reason, or None to go on."""
        cfg = self.config
        branches = [EXPLORE if self.rng.random() < cfg.epsilon else EXPLOIT for _ in range(cfg.solutions)]
        rollouts = self._verify(iteration, self._generate(iteration, branches))
        self.rollouts.extend(rollouts)
        best = _ranked(self.rollouts)[0]
        agreement = _agree(rollouts)
        self.trace.add("scores", iteration=iteration, solutions=[r.to_json() for r in rollouts],
                       best={"iteration": best.iteration, "index": best.index, "score": best.score},
                       agreement=agreement)
        if self.budget_spent:
            return "budget"
        if cfg.stop_score is not None and best.score is not None and best.score >= cfg.stop_score:
            return "stop_score"
        if cfg.stop_on_agreement and agreement:
            return "agreement"
        if iteration < cfg.iterations or cfg.memory_on_last_round:
            self._update_memory(iteration, rollouts)
        self.previous = _ranked(rollouts)[: cfg.top_k]
        return "iterations" if iteration == cfg.iterations else None

    def _generate(self, iteration: int, branches: list[str]) -> list[Rollout]:
        """The round's solutions; solutions of a partly failed call are kept (their error recorded)."""
        cfg = self.config
        params = SamplingParams(temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=cfg.seed + iteration)
        conversations = [self._solver_prompt(branch) for branch in branches]
        try:
            completions: list[Any] = self.llm.chat(conversations, params)
        except BudgetExhausted as err:
            self._error(iteration, "generate", err)
            raise _Stop("budget") from err
        except LLMError as err:
            self._error(iteration, "generate", err)
            completions = list(getattr(err, "results", None) or [])  # a backend's partial results, if any
            completions = [c if hasattr(c, "texts") else None for c in completions]
        rollouts = []
        for index, (branch, completion) in enumerate(zip(branches, completions)):
            if completion is not None:
                text = completion.texts[0] if completion.texts else ""
                rollouts.append(Rollout(iteration, index, branch, text, extract_answer(text),
                                        correct=is_correct(text, self.reference)))
        self.trace.add("generate", iteration=iteration, branches=branches,
                       solutions=[{"index": r.index, "branch": r.branch, "text": r.text, "answer": r.answer}
                                  for r in rollouts])
        if not rollouts:
            raise _Stop("llm_error")
        return rollouts

    def _verify(self, iteration: int, rollouts: list[Rollout]) -> list[Rollout]:
        """M verification passes; each rollout gets its mean score and all feedback of the passes that worked."""
        texts = [r.text for r in rollouts]
        scores: list[list[float]] = [[] for _ in rollouts]
        feedback: list[list[str]] = [[] for _ in rollouts]
        for verification in range(1, self.config.verifications + 1):
            try:
                verdicts = self.verifier.verify(self.problem, texts, context=texts)
                if len(verdicts) != len(texts):
                    raise ScoreError(f"verifier returned {len(verdicts)} verdicts for {len(texts)} solutions")
            except Exception as err:  # noqa: BLE001 - any verifier failure is recorded and that pass skipped
                self._error(iteration, "verify", err, verification=verification)
                if isinstance(err, BudgetExhausted):
                    self.budget_spent = True
                    break
                continue
            for i, verdict in enumerate(verdicts):
                scores[i].append(float(verdict.score))
                feedback[i].append(verdict.feedback)
            self.trace.add("verify", iteration=iteration, verification=verification,
                           scores=[float(v.score) for v in verdicts])
        return [replace(r, score=sum(s) / len(s) if s else None, feedback=tuple(f))
                for r, s, f in zip(rollouts, scores, feedback)]

    # -- memory agents -----------------------------------------------------------------------------

    def _update_memory(self, iteration: int, rollouts: list[Rollout]) -> None:
        reply = self._agent(iteration, "summary", SUMMARY_SYSTEM, self._feedback_prompt(rollouts))
        if reply is not None:
            self.summary = _excerpt(re.sub(r"\s+", " ", reply), self.config.excerpt_chars)
            self.trace.add("summary", iteration=iteration, text=self.summary)
        reply = self._agent(iteration, "experience", EXPERIENCE_SYSTEM, self._experience_prompt(rollouts))
        if reply is not None:
            update = self.experience.apply_reply(reply)
            self.experience = update.bank
            self.trace.add("experience", iteration=iteration, reply=reply, **update.to_json())
        reply = self._agent(iteration, "guidelines", GUIDELINE_SYSTEM, self._guideline_prompt(rollouts))
        if reply is not None:
            update = self.guidelines.apply_reply(reply)
            self.guidelines = update.bank
            self.trace.add("guidelines", iteration=iteration, reply=reply, **update.to_json())

    def _agent(self, iteration: int, step: str, system: str, user: str) -> str | None:
        """One agent's reply; None (error recorded, step skipped) when the call fails; _Stop when out of budget."""
        cfg = self.config
        params = SamplingParams(temperature=cfg.agent_temperature, max_tokens=cfg.agent_max_tokens, seed=cfg.seed)
        try:
            completion = self.llm.chat([[{"role": "system", "content": system}, {"role": "user", "content": user}]],
                                       params)[0]
        except BudgetExhausted as err:
            self._error(iteration, step, err)
            raise _Stop("budget") from err
        except LLMError as err:
            self._error(iteration, step, err)
            return None
        return completion.texts[0].strip() if completion.texts else ""

    # -- prompts -----------------------------------------------------------------------------------

    def _solver_prompt(self, branch: str) -> Conversation:
        parts = [f"Problem:\n{self.problem}"]
        if branch == EXPLORE:
            parts.append(f"Strategies already tried:\n{self.guidelines.render()}")
            parts.append("Solve the problem with an approach different from those listed.")
        else:
            for rank, r in enumerate(self.previous, 1):
                parts.append(f"Previous attempt {rank} ({_score_text(r.score)}):\n"
                             f"{_excerpt(r.text, self.config.excerpt_chars)}")
            if self.summary:
                parts.append(f"Verifier feedback on the previous attempts:\n{self.summary}")
            if self.experience.entries:
                parts.append(f"Lessons so far (reuse results, avoid pitfalls):\n{self.experience.render()}")
            parts.append("Write a better solution, fixing any mistakes pointed out." if self.previous
                         else "Solve the problem.")
        return [{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]

    def _feedback_prompt(self, rollouts: Sequence[Rollout]) -> str:
        chars = max(200, self.config.excerpt_chars // max(1, len(rollouts)))
        blocks = [f"Solution {r.index + 1} (answer {r.answer or 'none'}, {_score_text(r.score)}):\n"
                  f"{_excerpt(' / '.join(f for f in r.feedback if f.strip()) or '(no feedback)', chars)}"
                  for r in rollouts]
        return f"Problem:\n{self.problem}\n\nVerifier feedback:\n\n" + "\n\n".join(blocks)

    def _experience_prompt(self, rollouts: Sequence[Rollout]) -> str:
        ranked = _ranked(rollouts)
        chars = self.config.excerpt_chars // 2
        shown = [f"Best solution ({_score_text(ranked[0].score)}):\n{_excerpt(ranked[0].text, chars)}"]
        if len(ranked) > 1:
            shown.append(f"Worst solution ({_score_text(ranked[-1].score)}):\n{_excerpt(ranked[-1].text, chars)}")
        return "\n\n".join([f"Problem:\n{self.problem}", f"Experience bank:\n{self.experience.render()}",
                            f"Feedback summary:\n{self.summary or '(none)'}", *shown,
                            "Update the experience bank."])

    def _guideline_prompt(self, rollouts: Sequence[Rollout]) -> str:
        chars = max(200, self.config.excerpt_chars // max(1, len(rollouts)))
        solutions = [f"Solution {r.index + 1}:\n{_excerpt(r.text, chars)}" for r in rollouts]
        return "\n\n".join([f"Problem:\n{self.problem}", f"Strategies already listed:\n{self.guidelines.render()}",
                            *solutions, "Name the strategies these solutions used."])

    # -- bookkeeping -------------------------------------------------------------------------------

    def _error(self, iteration: int, step: str, err: BaseException, **data: Any) -> None:
        self.trace.add("error", iteration=iteration, step=step, error=type(err).__name__, message=str(err), **data)

    def _finish(self, reason: str) -> LoopResult:
        ranked = _ranked(self.rollouts)
        best = ranked[0] if ranked else None
        return finish(self.tmas.name, best.text if best else "", best.score if best else None, reason,
                      self.spend, self.trace,
                      best=best.to_json() if best else None,
                      iterations=max((r.iteration for r in self.rollouts), default=0),
                      experience=self.experience.to_json(), guidelines=self.guidelines.to_json(),
                      summary=self.summary, rollouts=[r.to_json() for r in self.rollouts])
