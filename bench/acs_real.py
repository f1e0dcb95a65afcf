"""ACS against best-of-N, majority vote, self-consistency and the oracle on three REAL candidate sets.

Nothing is generated: each question's recorded candidates are the agents' answers, and every method
picks among the same ones.

Data (each split into --folds parts by a seeded permutation of its questions; each part is evaluated
with a question pool built from the other parts only, so no evaluated question is in its pool, and
with the default 2 folds every question is evaluated once, half of them with each pool):
  - gsm8k: gsm8k_model_solutions, 1000 GSM8K questions x 4 GPT-3 solutions (four generators: 6B/175B,
    fine-tuned / verifier-picked), labels from the data set. RMs: minilm-probe, math-consensus.
  - qwen: qwen25_math_rm8, 70 MATH problems x 8 Qwen2.5-Math-Instruct samples, labels from the data set.
    RMs: the cached Qwen2.5-Math-RM-72B score (a table, served by answer text) and math-consensus.
  - humaneval: humaneval_davinci_samples, 127 HumanEval tasks; per task --samples of the 200
    code-davinci-002 completions, drawn with a seed from the task id. Labels come from the code-tests
    rule (the task's hidden tests run in morkit's sandbox, through the score cache), never from a
    scoring RM; agreement with the data set's own pass flags is printed. RMs: minilm-probe, smollm2-orm
    (embedded, CPU); no RM sees the tests.
  The packaged minilm-probe and smollm2-orm heads were trained on some gsm8k/qwen questions
  (recomputed from their metadata, as bench/selection.py's head_training_ids does); questions a head
  of a used RM was trained on are left out of both parts (--keep-head-train keeps them). Qwen uses no
  head RM, so all 70 problems stay.

Per data set, member scores are computed once for every candidate (morkit.services.scoring.score,
through the score cache; time shown), the pool is built with morkit.services.pools.build_pool, each
evaluated question gets its ensemble (or learned ranker) from Router(pool, --selection; by default
morkit's default method) and its verifier from morkit.verify.mor.mor_verifier. The verifier's pair
members answer from the scores computed before (a text never seen, i.e. an LLM aggregate, goes to the
real model); rule members (math-consensus) rerun on each verify call's answer set. Methods (all
through SEARCH_METHODS except the two votes):
  - oracle (pass@N): some candidate is correct;
  - majority vote: morkit.services.pipeline.evaluate.majority_pick, the query grader's vote (equivalent
    math answers; for code, equal program text), ties broken by a seed from the query id;
  - self-consistency: the `self-consistency` search method, a vote among one generator's samples, here
    the whole set (qwen and humaneval have one generator; gsm8k's four answers come from four models).
    That method groups by math answer, so on code it is the unweighted program-text vote instead;
  - best-of-N (MoR): the `best-of-n` search method with the query's MoR verifier;
  - ACS with the `vote` and `best` aggregators at k=2 (the paper's k) and `vote` at k=N (the initial
    set is every answer), and with --llm the `llm` aggregator (local SmolLM2-135M at --llm-temperature,
    seeded, on the first --llm-questions questions only, and not on qwen, whose 72B RM cannot score a
    new text); each once per --acs-steps entry (argmax, first), with at most --max-steps steps.
Reported: accuracy; LLM calls, aggregations (sets aggregated: initial, every greedy try, residual; from
the trace, so picking aggregators count too), RM calls (every (member, answer) score a method asks its
verifier for, served or computed) and seconds per question (the method's own work; the one-time scoring
is shown apart); and ACS - best-of-N in points, paired, with a bootstrap 95% interval, questions
won/lost and on how many questions the picks differ (and how many of those are ties on the verifier's
score, which ACS breaks by answer order and best-of-N by a seeded draw), set against the CTTS-MM
paper's +4.8. Expect the picking aggregators to tie best-of-N: ACS replaces its current answer only by
one the verifier scores strictly higher, so once the verifier's top answer is current no pick can
displace it (see morkit.search.voting); the run measures what that costs and whether ties or the k=N
vote move anything.

Time: the first run scores everything (minilm-probe on ~2,800 GSM8K answers, about 3 min; minilm-probe
and smollm2-orm on 1,524 HumanEval programs and their sandboxed tests, about 5 min on an idle 2-core
machine); later runs read the score cache and take about 1.5 min.

    MORKIT_DATA_DIR=/work/shared/data .venv/bin/python bench/acs_real.py [--datasets gsm8k qwen humaneval]
        [--questions N] [--samples 12] [--selection NAME] [--llm --llm-questions 5]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from dataclasses import dataclass, field, replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PAPER_GAIN = 4.8  # CTTS-MM: ACS over best-of-N, in points
RMS = {"gsm8k": ("minilm-probe", "math-consensus"), "qwen": ("qwen2.5-math-rm-72b", "math-consensus"),
       "humaneval": ("minilm-probe", "smollm2-orm")}
HEADS = ("minilm-probe", "smollm2-orm")  # RMs with a packaged head trained on gsm8k/qwen questions


# --------------------------------------------------------------------------------------------- data
def load_gsm8k(args):
    from morkit.data.datasets import gsm8k_model_solutions

    return gsm8k_model_solutions(args.data_path), []


def load_qwen(args):
    from morkit.data.datasets import qwen25_math_rm8

    return qwen25_math_rm8(args.data_path), []


def load_humaneval(args):
    """Every task with a seeded draw of --samples completions, relabelled by its hidden tests in the sandbox."""
    from morkit.data.datasets import humaneval_davinci
    from morkit.services.scoring import score

    drawn = []
    for q in humaneval_davinci(args.data_path, per_task=200):
        picks = random.Random(f"{args.seed}:{q.id}").sample(range(len(q.candidates)), args.samples)
        drawn.append(replace(q, candidates=tuple(q.candidates[i] for i in picks)))
    started = time.perf_counter()
    tested = score(drawn, ["code-tests"], cache=args.cache)
    labelled, agree, total = [], 0, 0
    for q in tested:
        candidates = []
        for c in q.candidates:
            passed = float(c.scores["code-tests"]) == 1.0
            agree, total = agree + (passed == bool(c.correct)), total + 1
            scores = {k: v for k, v in c.scores.items() if k != "code-tests"}
            candidates.append(replace(c, correct=passed, scores=scores))
        labelled.append(replace(q, candidates=tuple(candidates)))
    return labelled, [f"labels: code-tests in the sandbox on {total} programs in {time.perf_counter() - started:.1f}s"
                      f" (score cache); they agree with the data set's pass flags on {agree} of {total}"]


LOADERS = {"gsm8k": load_gsm8k, "qwen": load_qwen, "humaneval": load_humaneval}


def head_training_ids(head: str, data_path) -> set[str]:
    """Ids of the questions a packaged head was fitted on, recomputed from its own metadata."""
    from morkit.reward_models.heads import load_packaged_head
    from morkit.services.train_heads import load_specs, split_by_question

    info = load_packaged_head(head).info
    split = split_by_question(load_specs(info["data"], data_path), info["test_fraction"], info["seed"])
    if len(split.train) != info["train_questions"]:
        raise RuntimeError(f"recomputed {len(split.train)} training questions for {head}, metadata says "
                           f"{info['train_questions']}")
    return {q.id for q in split.train}


@dataclass
class Prepared:
    key: str
    rms: tuple[str, ...]
    tables: tuple[str, ...]  # RMs whose scores came with the data: no model here computes them
    folds: list  # per fold: (pool questions, evaluated questions)
    notes: list[str] = field(default_factory=list)

    @property
    def evaluated(self) -> list:
        return [q for _, part in self.folds for q in part]


def prepare(key: str, args) -> Prepared:
    """Load, label, drop head-training questions, split, and score every candidate once."""
    import numpy as np

    from morkit.services.scoring import score

    rms = tuple(getattr(args, f"{key}_rms") or RMS[key])
    queries, notes = LOADERS[key](args)
    heads = [h for h in HEADS if h in rms]
    trained = set().union(*(head_training_ids(h, args.data_path) for h in heads)) if heads else set()
    overlap = sum(q.id in trained for q in queries)
    if overlap and not args.keep_head_train:
        queries = [q for q in queries if q.id not in trained]
        notes.append(f"left out {overlap} questions the {'/'.join(heads)} head(s) were trained on")
    elif overlap:
        notes.append(f"KEPT {overlap} questions the {'/'.join(heads)} head(s) were trained on (in-sample scores)")
    order = np.random.default_rng(args.seed).permutation(len(queries))
    fold_of = {int(i): rank % args.folds for rank, i in enumerate(order)}
    evaluated = {int(i) for i in order[: args.questions or None]}
    tables = tuple(r for r in rms if all(r in c.scores for q in queries for c in q.candidates))
    computed = [r for r in rms if r not in tables]
    started = time.perf_counter()
    scored = score(queries, computed, cache=args.cache, progress=not args.quiet)
    n = sum(len(q.candidates) for q in scored)
    notes.append(f"scored {', '.join(computed)} on {n} answers of {len(scored)} questions in "
                 f"{time.perf_counter() - started:.1f}s (score cache {args.cache}; math-consensus is never cached)")
    folds = [([q for i, q in enumerate(scored) if fold_of[i] != f],
              [q for i, q in enumerate(scored) if fold_of[i] == f and i in evaluated]) for f in range(args.folds)]
    return Prepared(key, rms, tables, folds, notes)


# ------------------------------------------------------------------------------------------ methods
class Precomputed:
    """A pair RM answering from the scores computed for the candidate set; a new text goes to `fallback`."""

    kind = "orm"

    def __init__(self, name: str, table: dict, fallback=None):
        self.name, self.table, self.fallback = name, table, fallback

    def score(self, pairs):
        from morkit.core.errors import InputError
        from morkit.core.types import Score

        new = [p for p in pairs if p[1] not in self.table]
        if new and self.fallback is None:
            raise InputError(f"{self.name} has no score for a new answer and no model to compute one")
        extra = dict(zip([a for _, a in new], self.fallback.score(new))) if new else {}
        return [Score(float(self.table[a])) if a in self.table else extra[a] for _, a in pairs]


@dataclass
class Tally:
    """One method on one data set: correct or not per question id, summed costs."""

    correct: dict = field(default_factory=dict)
    llm_calls: int = 0
    rm_calls: int = 0
    seconds: float = 0.0
    aggregations: int = 0  # sets aggregated (ACS: initial, greedy tries, residual)
    differ: int = 0  # questions where the answer is not best-of-N's ...
    tied: int = 0  # ... because it ties best-of-N's pick on the verifier's score (first answer vs a seeded draw)

    def add(self, qid: str, correct: bool, llm_calls: int = 0, rm_calls: int = 0, seconds: float = 0.0,
            aggregations: int = 0) -> None:
        self.correct[qid] = bool(correct)
        self.llm_calls, self.rm_calls, self.seconds = (self.llm_calls + llm_calls, self.rm_calls + rm_calls,
                                                       self.seconds + seconds)
        self.aggregations += aggregations


ACS_RUNS = (("ACS vote (k=2)", "vote", 2), ("ACS best (k=2)", "best", 2), ("ACS vote (k=N)", "vote", None))


def aggregations(result) -> int:
    """Sets ACS aggregated, from its trace: the initial set, every greedy try, the residual."""
    return sum(len(s.tried) if s.step == "greedy" else s.step in ("initial", "residual") for s in result.trace)


def evaluate(data: Prepared, args, llm_aggregator, models) -> tuple[dict[str, Tally], float, str]:
    """Every method on every evaluated question; (tallies, selection seconds, ensembles chosen)."""
    import statistics
    from collections import Counter

    from morkit.llm.agents import AgentAnswer, AgentsConfig, AgentSpec
    from morkit.question_pool.graders import grader_name
    from morkit.reward_models.catalog import REWARD_MODELS, load_rm
    from morkit.reward_models.options import ScoringOptions
    from morkit.search.methods import SEARCH_METHODS, SearchOptions, SearchSetup
    from morkit.search.voting import VoteAggregator
    from morkit.selection.router import Router
    from morkit.services.pipeline.evaluate import grade_text, majority_pick
    from morkit.services.pools import build_pool
    from morkit.verify.mor import mor_verifier

    started = time.perf_counter()
    work = []
    for pool_part, part in data.folds:
        pool = build_pool(pool_part, list(data.rms), options=ScoringOptions(cache=None))  # timed: no embedding cache
        work += [(q, pool, selection) for q, selection in zip(part, Router(pool, args.selection, k=args.k)
                                                               .select_many(part))]
    select_seconds = time.perf_counter() - started
    agents = AgentsConfig((AgentSpec("candidates"),), AgentSpec("aggregator"))
    tallies: dict[str, Tally] = {}
    spreads: list[float] = []  # sd of the verifier's scores over each question's answers (the vote's scale)
    use_llm = llm_aggregator is not None and not data.tables  # a table cannot score an aggregate's new text

    def tally(name: str) -> Tally:
        return tallies.setdefault(name, Tally())

    for qi, (q, pool, selection) in enumerate(work):
        texts = [c.text for c in q.candidates]
        label = {c.text: bool(c.correct) for c in q.candidates}
        members = {}
        for m in selection.choice.ensemble.members:
            rule = m not in data.tables and REWARD_MODELS.get(m).spec.kind == "rule"
            if rule:  # reruns on each verify call's answer set
                members[m] = models[m] if m in models else models.setdefault(m, load_rm(m))
                continue
            if use_llm and m not in models:
                models[m] = load_rm(m, device="cpu")
            members[m] = Precomputed(m, {c.text: c.scores[m] for c in q.candidates}, models.get(m))
        verifier = mor_verifier(selection, pool, members)
        answers = [AgentAnswer("candidates", t) for t in texts]
        kind = grader_name(q)

        def graded(answer: str) -> bool:
            return label[answer] if answer in label else grade_text(q, answer, strict=True)

        tally("oracle (pass@N)").add(q.id, any(label.values()))
        t0 = time.perf_counter()
        pick = majority_pick(q)
        tally("majority vote").add(q.id, bool(q.candidates[pick].correct), seconds=time.perf_counter() - t0)
        t0 = time.perf_counter()
        if kind == "code":
            sc = texts[VoteAggregator(kind="code").pick(texts, [0.0] * len(texts))]
            tally("self-consistency").add(q.id, graded(sc), seconds=time.perf_counter() - t0)
        else:
            result = SEARCH_METHODS.load("self-consistency")(
                SearchSetup(verifier, None, agents, SearchOptions(sc_agent="candidates"), kind=kind)).run(
                q.question, answers)
            tally("self-consistency").add(q.id, graded(result.answer), seconds=result.seconds)
        limit = {} if args.max_steps is None else {"max_steps": args.max_steps or None}
        runs = [("best-of-N (MoR)", "best-of-n", SearchOptions())]
        runs += [(f"{name} {step}", "acs", SearchOptions(aggregator=agg, top_k=k or len(texts), acs_step=step,
                                                         **limit))
                 for name, agg, k in ACS_RUNS for step in args.acs_steps]
        if use_llm and qi < args.llm_questions:
            runs += [(f"ACS llm (k=2, SmolLM2-135M) {step}", "acs",
                      SearchOptions(aggregator="llm", acs_step=step, **limit)) for step in args.acs_steps]
        for name, method, options in runs:
            setup = SearchSetup(verifier, llm_aggregator, agents, options, kind=kind)
            result = SEARCH_METHODS.load(method)(setup).run(q.question, answers)
            tally(name).add(q.id, graded(result.answer), result.llm_calls, result.rm_calls, result.seconds,
                            aggregations(result) if method == "acs" else 0)
            if method == "best-of-n":
                bon, first = result, dict(zip(texts, (score for _, score in result.trace[0].tried)))
                spreads.append(statistics.pstdev(first.values()))
            elif result.answer != bon.answer:  # an ACS pick that is not best-of-N's: a tie broken differently?
                tally(name).differ += 1
                tally(name).tied += first.get(result.answer) == bon.score
    picks = Counter(s.choice.ensemble.name for _, _, s in work).most_common(3)
    chosen = ", ".join(f"{name} x{n}" for name, n in picks)
    return tallies, select_seconds, f"{chosen}; MoR score sd within a question: median {statistics.median(spreads):.2f}"


# ------------------------------------------------------------------------------------------- report
def paired(a: list[bool], b: list[bool], rounds: int, seed: int) -> tuple[float, float, float, int, int]:
    """Mean of a - b in points, its bootstrap 95% interval, and questions won / lost."""
    import numpy as np

    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), (rounds, len(d)))].mean(axis=1) * 100
    return d.mean() * 100, *np.percentile(means, [2.5, 97.5]), int((d > 0).sum()), int((d < 0).sum())


def report(data: Prepared, tallies: dict[str, Tally], select_seconds: float, picks: str, args) -> list[str]:
    n = len(data.evaluated)
    mixed = sum(any(c.correct for c in q.candidates) and not all(c.correct for c in q.candidates)
                for q in data.evaluated)
    sizes = sorted({len(q.candidates) for q in data.evaluated})
    pools = "/".join(str(len(pool_part)) for pool_part, _ in data.folds)
    print(f"\n=== {data.key}: {n} evaluated questions ({mixed} mixed: a right and a wrong answer), "
          f"{len(data.folds)} folds, pools of {pools} other questions, {'/'.join(map(str, sizes))} answers each; "
          f"RMs {', '.join(data.rms)}")
    for note in data.notes:
        print(f"  {note}")
    print(f"  pool builds + Router(pool, {args.selection!r}, k={args.k}) for all {n} questions: "
          f"{select_seconds:.1f}s (embedding and the selector's fit included); most chosen: {picks}")
    print(f"\n{'method':<38} {'accuracy':>14} {'LLM calls/q':>12} {'aggregations/q':>15} {'RM calls/q':>11} "
          f"{'ms/q':>8}")
    for name, t in tallies.items():
        m, right = len(t.correct), sum(t.correct.values())
        print(f"{name:<38} {right:>4}/{m:<4} {100 * right / m:5.1f}% {t.llm_calls / m:12.2f} "
              f"{t.aggregations / m:15.2f} {t.rm_calls / m:11.1f} {1000 * t.seconds / m:8.2f}")
    bon = tallies["best-of-N (MoR)"].correct
    base = tallies["best-of-N (MoR)"]
    room = 100 * (sum(tallies["oracle (pass@N)"].correct.values()) - sum(bon.values())) / n
    print(f"headroom: oracle - best-of-N = {room:.1f} points (the most any picking method can gain over it)")
    lines = []
    for name, t in tallies.items():
        if not name.startswith("ACS"):
            continue
        ids = list(t.correct)  # the --llm row covers only its first questions
        diff, lo, hi, won, lost = paired([t.correct[i] for i in ids], [bon[i] for i in ids], args.bootstrap,
                                         args.seed)
        verdict = ("holds" if diff >= PAPER_GAIN else
                   "not excluded by the interval" if lo <= PAPER_GAIN <= hi else "does NOT hold")
        line = (f"{data.key}: {name} - best-of-N = {diff:+.2f} points (95% CI {lo:+.2f}..{hi:+.2f}; "
                f"{won} won, {lost} lost of {len(t.correct)}; picks differ on {t.differ}, {t.tied} of them ties "
                f"broken differently); paper's +{PAPER_GAIN}: {verdict}; cost vs best-of-N: "
                f"{t.rm_calls / len(ids) / (base.rm_calls / n):.1f}x RM calls, "
                f"{t.seconds / len(ids) / (base.seconds / n):.1f}x time")
        print(line)
        lines.append(line)
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", choices=list(LOADERS), default=list(LOADERS))
    p.add_argument("--questions", type=int, default=0, help="evaluate at most N questions per data set (0: all)")
    p.add_argument("--folds", type=int, default=2, help="parts per data set; each is evaluated with a pool of the rest")
    p.add_argument("--samples", type=int, default=12, help="humaneval completions drawn per task (of 200)")
    p.add_argument("--selection", help="selection method (SELECTION_METHODS; default: morkit's default)")
    p.add_argument("--k", type=int, default=100, help="pool neighbours per query")
    for key in LOADERS:
        p.add_argument(f"--{key}-rms", nargs="+", help=f"pool RMs for {key} (default {' '.join(RMS[key])})")
    p.add_argument("--keep-head-train", action="store_true", help="keep questions a used RM's head was trained on")
    p.add_argument("--llm", action="store_true", help="also run ACS with the `llm` aggregator (local SmolLM2-135M)")
    p.add_argument("--llm-questions", type=int, default=5,
                   help="with --llm: on this many questions per data set (about a minute each on gsm8k, more on code)")
    p.add_argument("--llm-max-tokens", type=int, default=256,
                   help="the `llm` aggregator's token limit (the paper's is 8,192; SmolLM2 on CPU keeps 256)")
    p.add_argument("--llm-temperature", type=float, default=0.7, help="the `llm` aggregator's (the paper's 0.7)")
    p.add_argument("--llm-prompt", help="the `llm` aggregator's prompt (AGGREGATOR_PROMPTS; default: morkit's)")
    p.add_argument("--acs-steps", nargs="+", choices=("argmax", "first"), default=["argmax", "first"],
                   help="ACS greedy steps, one row each")
    p.add_argument("--max-steps", type=int, help="ACS steps at most (default: morkit's, the paper's 8; 0: no limit)")
    p.add_argument("--bootstrap", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", help="folder of the public data sets (default: $MORKIT_DATA_DIR, "
                   "else data/ in morkit's cache folder, which `morkit data fetch NAME` fills)")
    p.add_argument("--cache", help="score cache (default morkit's, ~/.cache/morkit/scores.sqlite)")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args()
    if args.folds < 2 or not 1 <= args.samples <= 200:
        p.error("--folds must be at least 2 and --samples in 1..200")

    import logging

    from morkit.core import settings
    from morkit.selection.methods import DEFAULT_METHOD
    from morkit.reward_models.options import default_cache_path

    logging.basicConfig(level=logging.ERROR)
    args.data_path = settings.data_dir(args.data_dir)
    args.cache = args.cache or str(default_cache_path())
    args.selection = args.selection or DEFAULT_METHOD
    llm_aggregator = None
    if args.llm:
        from morkit.llm.base import SamplingParams
        from morkit.llm.local import LocalLLM
        from morkit.search.aggregate import Aggregator

        llm_aggregator = Aggregator(LocalLLM(device="cpu"), SamplingParams(
            temperature=args.llm_temperature, max_tokens=args.llm_max_tokens, seed=args.seed),
            **({"prompt": args.llm_prompt} if args.llm_prompt else {}))
    started, verdicts, models = time.perf_counter(), [], {}
    for key in args.datasets:
        data = prepare(key, args)
        tallies, select_seconds, picks = evaluate(data, args, llm_aggregator, models)
        verdicts += report(data, tallies, select_seconds, picks, args)
    print("\n=== ACS - best-of-N against the CTTS-MM paper's +4.8 points")
    for line in verdicts:
        print(line)
    print(f"\ntotal {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
