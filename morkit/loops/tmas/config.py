"""TMASConfig: every knob of the TMAS loop, with the paper's value where the paper gives one.
A field whose docstring says "deviation" or "not in the paper" is a morkit choice; the fidelity table of
docs/loops/tmas.md lists them all beside the paper's values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.loops.settings import LoopFlag

SeedMode = Literal["per_sample", "per_call", "none"]
Selection = Literal["score", "vote"]
RescoreContext = Literal["finalists", "all"]
VerificationAgent = Literal["tmas", "critic"]
PYTHON_MAX_TOKENS = 512
"""New tokens per solution of a TMAS built in Python whose config leaves `max_tokens` None."""


@dataclass(frozen=True)
class TMASConfig:
    """Loop sizes, sampling, memory, ablation switches and stop rules of one TMAS run."""

    FLAGS: ClassVar[tuple[LoopFlag, ...]] = (
        LoopFlag("--iterations", "iterations", "rounds T; the default is the paper's"),
        LoopFlag("--solutions", "solutions", "solutions per round N; the default is the paper's"),
        LoopFlag("--verifications", "verifications",
                 "verification passes per solution M (0: the no-verification ablation); the default is the paper's"),
        LoopFlag("--epsilon", "epsilon", "probability that a solution explores; the default is the paper's"),
    )
    """The flags of `morkit loop tmas`, each a shorthand for `--set FIELD=VALUE`."""

    iterations: int = 20
    """Rounds T (the paper's runs go up to 20 iterations). Every round runs unless a stop rule below is set;
    on a CPU use a few (`--iterations 2`)."""
    solutions: int = 8
    """Candidate solutions N per round (paper: 8)."""
    verifications: int = 8
    """Verification passes M per solution (paper: 8). 0 is the no-verification ablation: no scores, no
    summaries, and the answer is chosen by `select`'s vote."""
    epsilon: float = 0.2
    """Probability that a solution explores (guideline-directed) instead of exploiting (paper: 0.2)."""
    seed: int = 0
    """Base seed of the explore/exploit coin and of every sample's derived seed."""
    seed_mode: SeedMode = "per_sample"
    """How sampling seeds reach the LLM. `per_sample`: every sample (solution, verification pass,
    summary) gets its own seed derived from (seed, role, iteration, index), one chat call per sample,
    run `parallel_calls` at a time; a seed-honouring server (vLLM) then returns distinct samples.
    `per_call`: one batched call, one seed per round; fine for the local backend (rows draw
    independently) but a seed-honouring server returns identical solutions for identical prompts.
    `none`: one batched call without a seed (not reproducible)."""
    parallel_calls: int = 8
    """Per-sample calls (and verification passes) in flight at once; 1 runs them one after another."""
    max_tokens: int | None = None
    """New tokens per solution; None: the solver agent's max_tokens under `run_loop` and `morkit loop`
    (`--gen-tokens` sets it), `PYTHON_MAX_TOKENS` (512) in a TMAS built in Python."""
    temperature: float = 0.7
    """Solution sampling temperature. The paper's value could not be read (see the notes); morkit's default."""
    verify_temperature: float = 0.7
    """Sampling temperature of each verification pass of an LLM verifier: the M passes are independent
    samples, so M > 1 buys new evidence. A verifier with no sampling knob (MoR) is deterministic: it is
    called once and its score stands for all M passes (the trace says so)."""
    verify_max_tokens: int | None = None
    """New tokens per critique; None keeps the verifier's own setting."""
    verification_agent: VerificationAgent = "tmas"
    """The LLM critic of `morkit loop tmas` and `run_loop("tmas")` under `--verifier llm` or `both`: `tmas`, the
    paper's verification agent, the solver's model (the first agent) with TMAS's verification prompt
    (`verification_agent()`); `critic`, morkit's generic critic prompt on the `[aggregator]` model. A TMAS
    built in Python verifies with the verifier it is given."""
    agent_max_tokens: int = 256
    """New tokens per summary / experience / guideline reply."""
    agent_temperature: float = 0.0
    """Temperature of the summary, experience and guideline agents; not in the paper: greedy keeps the
    line protocols of small models parseable."""
    top_k: int | None = None
    """Previous-round solutions shown to an exploiting sample: None shows all N (solution, summary)
    pairs, as the paper; k shows the k best-scored only (a deviation, to fit small contexts)."""
    experience: bool = True
    """The experience bank (ablation 'w/o experience bank': false drops the agent and the bank from prompts)."""
    guidelines: bool = True
    """The guideline bank (ablation 'w/o guideline bank': false drops the agent; exploring samples are
    only told to try an approach of their own, without the list of tried strategies)."""
    experience_min: int = 20
    """Entries the experience agent is asked to keep at least, once there are enough lessons (the
    paper's target range is 20 to 35 entries)."""
    experience_capacity: int | None = 35
    """Most entries the experience agent is asked to keep (paper: 35) and the bank's hard cap: past it,
    the oldest entries no operation touched are evicted, and the trace lists them. None: no cap."""
    experience_jaccard: float | None = 0.7
    """An ADD whose word-set Jaccard similarity with an entry reaches this is a duplicate (the paper's
    code de-duplicates by Jaccard similarity; its threshold is not given). None: exact duplicates only."""
    guideline_prompt_chars: int | None = None
    """Longest rendering of the guideline bank in a prompt. None: every strategy is shown. A limit shows
    the newest strategies that fit and says how many older ones are left out; the bank itself never
    forgets a strategy."""
    excerpt_chars: int | None = 2000
    """Longest solution or feedback text put into a prompt (head and tail kept). The paper passes whole
    solutions; 2000 characters is about a whole 512-token solution. None: no limit."""
    select: Selection = "score"
    """The answer (not specified by the paper): `score`, the best-scored solution of any round (unscored rank
    last; with no score at all, the vote); `vote`, the most common final answer of the last round (ties:
    higher score, then earlier). Scores of different rounds come from different verify calls: they are
    compared directly only when the verifier declares them absolute (`scores_are_absolute`); otherwise
    each round's best is a finalist, and the finalists are re-scored together in one call, whose scores
    choose (see `rescore_context`)."""
    rescore_context: RescoreContext = "finalists"
    """The siblings of the finalists' re-score call, which set-level members (consensus, a learned ranker's
    within-call features) read: `finalists`, the finalists alone (the same set for every finalist, one
    text per round); `all`, every solution of the rounds so far (more votes, more texts to score)."""
    show_scores: bool = False
    """Show each solution's extracted answer and verifier score in the agents' prompts, and each
    verification's score in the summary agent's. Not in the paper, whose prompts carry solutions and
    verification summaries only (an LLM critic's own 'Score:' line stays in its analysis either way)."""
    stop_score: float | None = None
    """Stop once the answer's score reaches this (not in the paper). Needs a verifier whose scores compare
    across calls (`scores_are_absolute`); with any other, TMAS refuses it at construction."""
    stop_on_agreement: bool = False
    """Stop when every solution of a round (at least two) has the same final answer (not in the paper,
    which runs all T rounds)."""
    memory_on_last_round: bool = False
    """Run the memory agents after the last round too (only useful to inspect the final banks)."""

    def __post_init__(self) -> None:
        for name in ("iterations", "solutions", "agent_max_tokens", "parallel_calls"):
            checks.positive_int(getattr(self, name), f"TMASConfig.{name}")
        checks.non_negative_int(self.verifications, "TMASConfig.verifications")
        checks.non_negative_int(self.seed, "TMASConfig.seed")
        checks.non_negative_int(self.experience_min, "TMASConfig.experience_min")
        for name in ("max_tokens", "top_k", "experience_capacity", "guideline_prompt_chars", "excerpt_chars",
                     "verify_max_tokens"):
            checks.optional(checks.positive_int, getattr(self, name), f"TMASConfig.{name}")
        checks.probability(self.epsilon, "TMASConfig.epsilon")
        checks.optional(checks.probability, self.experience_jaccard, "TMASConfig.experience_jaccard")
        for name in ("temperature", "verify_temperature", "agent_temperature"):
            checks.non_negative(getattr(self, name), f"TMASConfig.{name}")
        checks.optional(checks.non_negative, self.stop_score, "TMASConfig.stop_score")
        checks.one_of(self.seed_mode, ("per_sample", "per_call", "none"), "TMASConfig.seed_mode")
        checks.one_of(self.select, ("score", "vote"), "TMASConfig.select")
        checks.one_of(self.rescore_context, ("finalists", "all"), "TMASConfig.rescore_context")
        checks.one_of(self.verification_agent, ("tmas", "critic"), "TMASConfig.verification_agent")
        if self.experience_capacity is not None and self.experience_min > self.experience_capacity:
            raise InputError(f"TMASConfig.experience_min ({self.experience_min}) exceeds experience_capacity "
                             f"({self.experience_capacity})")
