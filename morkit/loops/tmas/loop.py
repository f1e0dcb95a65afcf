"""TMAS (arXiv 2605.10344): rounds of solve -> verify -> summarise -> remember over a Verifier.

The round, the memory agents, the answer rule and the fidelity to the paper: docs/loops/tmas.md."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from morkit.core.errors import InputError, LLMError, MorkitError, ScoreError
from morkit.core.grading import extract_answer, is_correct
from morkit.llm.base import LLM, Completion, SamplingParams
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
from morkit.loops.tmas import prompts
from morkit.loops.tmas.analysis import memory_input, no_summaries_reason, without_score_parts, writes_analysis
from morkit.loops.tmas.banks import ExperienceBank, GuidelineBank
from morkit.loops.tmas.choice import Choice, agree, best_of, finalists, ranked, rescored, voted
from morkit.loops.tmas.config import PYTHON_MAX_TOKENS, TMASConfig
from morkit.loops.tmas.curves import curve_point
from morkit.loops.tmas.prompts import (
    EXPERIENCE_SYSTEM,
    EXPLOIT,
    EXPLORE,
    GUIDELINE_SYSTEM,
    SOLVER_SYSTEM,
    SUMMARY_SYSTEM,
)
from morkit.loops.tmas.sampling import (
    batched,
    derive_seed,
    fan_out,
    run_all,
    sampled_verifier,
)
from morkit.verify.base import Verifier, scores_are_absolute
from morkit.verify.critic import LLMVerifier

__all__ = ["TMAS", "TMASConfig", "Rollout", "verification_agent", "EXPLOIT", "EXPLORE", "SOLVER_SYSTEM",
           "SUMMARY_SYSTEM", "EXPERIENCE_SYSTEM", "GUIDELINE_SYSTEM"]


def verification_agent(llm: LLM, max_tokens: int | None = None) -> LLMVerifier:
    """TMAS's verification agent A_ver: an LLM critic with the TMAS verification prompt (prompts.VERIFICATION_USER:
    the paper's opening words, then morkit's, ending in the parsed 'Score: N/10' line). The paper runs every agent
    on one model, so `morkit loop tmas` gives it the solver's.

    Args:
        llm: The verifying model (the solver's).
        max_tokens: New tokens per evaluation (None: the critic's 192); the loop's `verify_max_tokens` overrides.

    Returns:
        An LLMVerifier; the loop samples each of its M passes at `verify_temperature` with its own seed.
    """
    params = None if max_tokens is None else SamplingParams(temperature=0.0, max_tokens=max_tokens)
    return LLMVerifier(llm, params, system=prompts.VERIFIER_SYSTEM, user=prompts.VERIFICATION_USER,
                       name="tmas-verifier")


@dataclass(frozen=True)
class Rollout:
    """One solution: where it came from, its answer, its verification passes (each pass's score, and the analysis
    it wrote; a score-only verifier part's lines are in the trace's `verify` events), its summary, correctness."""

    iteration: int
    index: int
    branch: str
    text: str
    answer: str | None
    seed: int | None = None
    score: float | None = None
    pass_scores: tuple[float, ...] = ()
    feedback: tuple[str, ...] = ()
    summary: str | None = None
    correct: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "pass_scores": list(self.pass_scores), "feedback": list(self.feedback)}


def _name(verifier: Any) -> str:
    return getattr(verifier, "name", type(verifier).__name__)


class _Stop(Exception):
    """Ends the run with `reason` (internal control flow; the cause is already in the trace)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _text(completion: Completion) -> str:
    return completion.texts[0] if completion.texts else ""


def _failure(result: Any) -> BaseException | None:
    """The LLMError a sample's call ended with (None if it succeeded); any other exception is a bug: raised."""
    if not isinstance(result, BaseException):
        return None
    if isinstance(result, LLMError):
        return result
    raise result


class TMAS:
    """The TMAS loop: `TMAS(llm, verifier, config, budget).run(problem, reference=None) -> LoopResult`.

    Args:
        llm: The LLM that writes the solutions and the memory agents' replies (summaries, experience, guidelines).
        verifier: Scores each round's solutions (`config.verifications` passes).
        config: Loop sizes, sampling, memory, ablation switches and stop rules (`max_tokens` None: 512).
        budget: Caps on calls, tokens and seconds per problem.

    Raises:
        InputError: `config.stop_score` is set but the verifier's scores compare only within one call.
    """

    name = "tmas"

    def __init__(self, llm: LLM, verifier: Verifier, config: TMASConfig = TMASConfig(), budget: Budget = Budget()):
        if config.stop_score is not None and not scores_are_absolute(verifier):
            raise InputError(f"TMASConfig.stop_score needs a verifier whose scores compare across calls; "
                             f"{_name(verifier)}'s compare only within one call (use stop_on_agreement, or none)")
        if config.max_tokens is None:
            config = replace(config, max_tokens=PYTHON_MAX_TOKENS)
        self.llm, self.verifier, self.config, self.budget = llm, verifier, config, budget

    def run(self, problem: str, reference: str | None = None) -> LoopResult:
        """Run the rounds on one problem until they are done, a stop rule fires, or the budget is spent.

        Args:
            problem: The problem text the agents are asked.
            reference: A reference answer; when given, the result's state records whether the answer matches it.
                It is never shown to an LLM.

        Returns:
            The LoopResult: final answer, score, stop reason, calls, tokens, seconds, trace and state.
        """
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
    guidelines: GuidelineBank = field(default_factory=GuidelineBank)
    previous: list[Rollout] = field(default_factory=list)
    rollouts: list[Rollout] = field(default_factory=list)
    curve: list[dict[str, Any]] = field(default_factory=list)
    budget_spent: bool = False
    choice: Choice | None = None
    absolute: bool = field(init=False)
    analysis: bool = field(init=False)
    _memory_input: str = field(init=False)

    def __post_init__(self) -> None:
        cfg = self.config
        self.spend = Spend(self.tmas.budget)
        self.llm = MeteredLLM(self.tmas.llm, self.spend)
        self.verifier = metered_verifier(self.tmas.verifier, self.spend)
        self.rng = random.Random(cfg.seed)
        self.experience = ExperienceBank(capacity=cfg.experience_capacity, jaccard=cfg.experience_jaccard)
        self.absolute = scores_are_absolute(self.tmas.verifier)
        self.analysis = cfg.verifications > 0 and writes_analysis(self.tmas.verifier)
        self._memory_input = memory_input(cfg.verifications, self.analysis, _name(self.tmas.verifier))

    @property
    def config(self) -> TMASConfig:
        return self.tmas.config

    def execute(self) -> LoopResult:
        self.trace.add("start", loop=self.tmas.name, llm=self.tmas.llm.name, verifier=_name(self.tmas.verifier),
                       config=asdict(self.config), budget=asdict(self.tmas.budget),
                       reference_given=self.reference is not None, scores_absolute=self.absolute,
                       verifier_writes_analysis=self.analysis, memory_input=self._memory_input)
        reason = "iterations"
        for iteration in range(1, self.config.iterations + 1):
            try:
                stop = self._round(iteration)
            except _Stop as stopped:
                stop = stopped.reason
            self.trace.add("memory", iteration=iteration, **self._memory_json())
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
        self.choice = self._choose(iteration)
        agreement = agree(rollouts)
        self.curve.append(curve_point(iteration, rollouts, self.choice))
        self.trace.add("scores", iteration=iteration, solutions=[r.to_json() for r in rollouts],
                       best=self.choice.to_json(), agreement=agreement)
        if self.budget_spent:
            return "budget"
        score = self.choice.score
        if cfg.stop_score is not None and score is not None and score >= cfg.stop_score:
            return "stop_score"
        if cfg.stop_on_agreement and agreement:
            return "agreement"
        if iteration < cfg.iterations or cfg.memory_on_last_round:
            rollouts = self._update_memory(iteration, rollouts)
        self.previous = rollouts if cfg.top_k is None else ranked(rollouts)[: cfg.top_k]
        return "iterations" if iteration == cfg.iterations else None

    def _seed(self, role: str, iteration: int, index: int | None = None) -> int | None:
        """The seed of one sample (`per_sample`) or of one call (`per_call`, index ignored); None for `none`."""
        mode = self.config.seed_mode
        if mode == "none":
            return None
        parts = (role, iteration) if mode == "per_call" or index is None else (role, iteration, index)
        return derive_seed(self.config.seed, *parts)

    def _sample(self, conversations: list[Any], role: str, iteration: int, temperature: float,
                max_tokens: int) -> tuple[list[Completion | BaseException], list[int | None]]:
        """Each conversation's completion (or the error of its call) and its seed, per `seed_mode`."""
        seeds = [self._seed(role, iteration, i) for i in range(len(conversations))]
        params = [SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=s) for s in seeds]
        if self.config.seed_mode == "per_sample":
            return fan_out(self.llm, conversations, params, self.config.parallel_calls), seeds
        return batched(self.llm, conversations, params[0]) if conversations else [], seeds

    def _generate(self, iteration: int, branches: list[str]) -> list[Rollout]:
        """The round's solutions; a sample whose call failed is recorded and left out."""
        cfg = self.config
        conversations = [self._solver_prompt(branch) for branch in branches]
        results, seeds = self._sample(conversations, "solve", iteration, cfg.temperature, cfg.max_tokens)
        rollouts, refused = [], False
        for index, (branch, result, seed) in enumerate(zip(branches, results, seeds)):
            if err := _failure(result):
                self._error(iteration, "generate", err, index=index)
                refused = refused or isinstance(err, BudgetExhausted)
                continue
            text = _text(result)
            rollouts.append(Rollout(iteration, index, branch, text, extract_answer(text), seed=seed,
                                    correct=is_correct(text, self.reference)))
        self.trace.add("generate", iteration=iteration, branches=branches, seeds=seeds,
                       solutions=[{"index": r.index, "branch": r.branch, "text": r.text, "answer": r.answer}
                                  for r in rollouts])
        if not rollouts:
            raise _Stop("budget" if refused else "llm_error")
        self.budget_spent = self.budget_spent or refused
        return rollouts

    def _verify(self, iteration: int, rollouts: list[Rollout]) -> list[Rollout]:
        """M verification passes, each a fresh sample of an LLM critic (a deterministic verifier runs once)."""
        cfg = self.config
        if cfg.verifications == 0:
            return rollouts
        texts = [r.text for r in rollouts]
        # each pass is its own call whatever the seed mode, so each gets its own seed (none under `none`)
        seeds = [None if cfg.seed_mode == "none" else derive_seed(cfg.seed, "verify", iteration, m)
                 for m in range(1, cfg.verifications + 1)]
        verifiers = [sampled_verifier(self.verifier, cfg.verify_temperature, s, cfg.verify_max_tokens) for s in seeds]
        deterministic = verifiers[0] is None
        if deterministic:
            verifiers = [self.verifier]

        def one(verifier: Any) -> tuple[list[Any], list[Any]]:
            verifier, score_parts = without_score_parts(verifier)  # their lines go to the trace, not the agents
            verdicts = verifier.verify(self.problem, texts, context=texts)
            if len(verdicts) != len(texts):
                raise ScoreError(f"verifier returned {len(verdicts)} verdicts for {len(texts)} solutions")
            return verdicts, [line for part in score_parts for line in part.notes]

        scores: list[list[float]] = [[] for _ in rollouts]
        feedback: list[list[str]] = [[] for _ in rollouts]
        for number, result in enumerate(run_all(one, verifiers, cfg.parallel_calls), 1):
            if isinstance(result, BaseException):  # any verifier failure is recorded and that pass skipped
                self._error(iteration, "verify", result, verification=number)
                self.budget_spent = self.budget_spent or isinstance(result, BudgetExhausted)
                continue
            verdicts, score_lines = result
            for i, verdict in enumerate(verdicts):
                scores[i].append(float(verdict.score))
                feedback[i].append(verdict.feedback)
            extra = {"repeats": cfg.verifications, "deterministic": True} if deterministic else {
                "seed": seeds[number - 1], "temperature": cfg.verify_temperature}
            if score_lines:
                extra["score_feedback"] = score_lines
            self.trace.add("verify", iteration=iteration, verification=number,
                           scores=[float(v.score) for v in verdicts], **extra)
        return [replace(r, score=sum(s) / len(s) if s else None, pass_scores=tuple(s), feedback=tuple(f))
                for r, s, f in zip(rollouts, scores, feedback)]

    def _choose(self, iteration: int) -> Choice:
        """The answer so far (morkit.loops.tmas.choice): per `select`, the best score where scores compare across
        calls, else the finalists' re-score, else the last round's vote."""
        if self.config.select == "vote" or all(r.score is None for r in self.rollouts):
            last = max(r.iteration for r in self.rollouts)
            pick = voted([r for r in self.rollouts if r.iteration == last])
            return Choice(pick, pick.score, "vote")
        if self.absolute:
            best = ranked(self.rollouts)[0]
            return Choice(best, best.score, "score")
        finals = finalists(self.rollouts)
        if len(finals) == 1:
            return Choice(finals[0], finals[0].score, "score")
        return self._rescore(iteration, finals)

    def _rescore(self, iteration: int, finals: list[Rollout]) -> Choice:
        """The finalists scored together in one greedy verify call (charged to the budget like any); if that
        call fails, the newest round's best, as the trace says."""
        cfg = self.config
        context = [r.text for r in (finals if cfg.rescore_context == "finalists" else self.rollouts)]
        verifier = sampled_verifier(self.verifier, 0.0, self._seed("rescore", iteration), cfg.verify_max_tokens)
        event: dict[str, Any] = {"finalists": [{"iteration": r.iteration, "index": r.index} for r in finals],
                                 "context": cfg.rescore_context, "context_size": len(context)}
        try:
            scores = rescored(verifier or self.verifier, self.problem, finals, context)
        except MorkitError as err:  # a failed re-score is recorded, as a failed pass is; anything else is a bug
            self.budget_spent = self.budget_spent or isinstance(err, BudgetExhausted)
            self._error(iteration, "rescore", err)
            choice = Choice(finals[-1], finals[-1].score, "newest")
            event.update(scores=None, fallback="the newest round's best")
        else:
            choice = Choice(*best_of(finals, scores), "rescore")
            event["scores"] = scores
        self.trace.add("rescore", iteration=iteration, **event, chosen={"iteration": choice.rollout.iteration,
                                                                         "index": choice.rollout.index})
        return choice

    # -- memory agents -----------------------------------------------------------------------------

    def _update_memory(self, iteration: int, rollouts: list[Rollout]) -> list[Rollout]:
        """Summaries per candidate, then the experience and guideline banks; the rollouts with their summaries."""
        cfg = self.config
        if self.analysis:
            rollouts = self._summarise(iteration, rollouts)
        elif cfg.verifications > 0:
            self.trace.add("summary", iteration=iteration, summaries=[], skipped=self._memory_input)
        shown = {"show_scores": cfg.show_scores, "no_summaries": no_summaries_reason(cfg.verifications)}
        if cfg.experience:
            reply = self._agent(iteration, "experience", prompts.experience_prompt(
                self.problem, self.experience, rollouts, cfg.excerpt_chars, cfg.experience_min,
                cfg.experience_capacity, self.analysis, **shown))
            if reply is not None:
                update = self.experience.apply_reply(reply)
                self.experience = update.bank
                self.trace.add("experience", iteration=iteration, reply=reply, **update.to_json())
        if cfg.guidelines:
            reply = self._agent(iteration, "guidelines", prompts.guideline_prompt(
                self.problem, self.guidelines, rollouts, cfg.excerpt_chars, cfg.guideline_prompt_chars,
                with_summaries=self.analysis, **shown))
            if reply is not None:
                update = self.guidelines.apply_reply(reply)
                self.guidelines = update.bank
                self.trace.add("guidelines", iteration=iteration, reply=reply, **update.to_json())
        return rollouts

    def _summarise(self, iteration: int, rollouts: list[Rollout]) -> list[Rollout]:
        """One summary per candidate with some analysis (the summary agent); stored on the rollouts and the state."""
        cfg = self.config
        todo = [r for r in rollouts if any(f.strip() for f in r.feedback)]
        conversations = [prompts.summary_prompt(self.problem, r, cfg.excerpt_chars, show_scores=cfg.show_scores)
                         for r in todo]
        results, _ = self._sample(conversations, "summary", iteration, cfg.agent_temperature, cfg.agent_max_tokens)
        summaries: dict[int, str] = {}
        refused = False
        for r, result in zip(todo, results):
            if err := _failure(result):
                self._error(iteration, "summary", err, index=r.index)
                refused = refused or isinstance(err, BudgetExhausted)
            else:
                summaries[r.index] = " ".join(_text(result).split())
        rollouts = [replace(r, summary=summaries.get(r.index)) for r in rollouts]
        self.rollouts[len(self.rollouts) - len(rollouts):] = rollouts
        self.trace.add("summary", iteration=iteration,
                       summaries=[{"index": i, "text": t} for i, t in sorted(summaries.items())])
        if refused:
            raise _Stop("budget")
        return rollouts

    def _agent(self, iteration: int, step: str, conversation: Any) -> str | None:
        """One agent's reply; None (error recorded, step skipped) when the call fails; _Stop when out of budget."""
        cfg = self.config
        (result,), _ = self._sample([conversation], step, iteration, cfg.agent_temperature, cfg.agent_max_tokens)
        if err := _failure(result):
            self._error(iteration, step, err)
            if isinstance(err, BudgetExhausted):
                raise _Stop("budget") from err
            return None
        return _text(result).strip()

    # -- prompts -----------------------------------------------------------------------------------

    def _solver_prompt(self, branch: str) -> Any:
        cfg = self.config
        if branch == EXPLORE:
            return prompts.explore_prompt(self.problem, self.guidelines if cfg.guidelines else None,
                                          cfg.guideline_prompt_chars)
        return prompts.exploit_prompt(self.problem, self.previous, self.experience if cfg.experience else None,
                                      cfg.excerpt_chars, self.analysis, show_scores=cfg.show_scores,
                                      no_summaries=no_summaries_reason(cfg.verifications))

    # -- bookkeeping -------------------------------------------------------------------------------

    def _error(self, iteration: int, step: str, err: BaseException, **data: Any) -> None:
        self.trace.add("error", iteration=iteration, step=step, error=type(err).__name__, message=str(err), **data)

    def _memory_json(self) -> dict[str, Any]:
        return {"experience": self.experience.to_json() if self.config.experience else None,
                "guidelines": self.guidelines.to_json() if self.config.guidelines else None}

    def _finish(self, reason: str) -> LoopResult:
        choice = self.choice
        best = None if choice is None else next(r for r in self.rollouts if (r.iteration, r.index) == (
            choice.rollout.iteration, choice.rollout.index))  # the stored copy, summary included
        return finish(self.tmas.name, best.text if best else "", choice.score if choice else None, reason,
                      self.spend, self.trace,
                      best=best.to_json() if best else None, chosen_by=choice.rule if choice else None,
                      iterations=max((r.iteration for r in self.rollouts), default=0),
                      **self._memory_json(), curve=self.curve, rollouts=[r.to_json() for r in self.rollouts])
