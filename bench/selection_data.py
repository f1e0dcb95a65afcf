"""The data sets of bench/selection.py: loaded, scored through the score cache, embedded once per run.

Run bench/selection.py; this module holds its loaders (one per --datasets key) and the lookup embedder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

DATASETS = ("rewardmath", "qwen", "gsm8k", "humaneval", "mixed")


@dataclass
class Dataset:
    name: str
    queries: list
    rm_names: tuple[str, ...]
    notes: list[str] = field(default_factory=list)

    def announce(self, design: str) -> None:
        """Print the data set's banner (size, RMs, the run's design) and its loader's notes."""
        print(f"\n=== {self.name}: {len(self.queries)} questions, {len(self.rm_names)} RMs, {design} ===")
        for note in self.notes:
            print(note)


class LookupEmbedder:
    """Stands in for the pool's SentenceEmbedder: same name and dim; each text is embedded once per run
    and then looked up, so pools built per fold (and the speed pool) never re-embed."""

    def __init__(self, embedder):
        self.embedder = embedder
        self.name = embedder.name
        self.dim = embedder.dim
        self.table: dict = {}

    def encode(self, texts, *, batch_size: int = 64, progress: bool = False):
        import numpy as np

        todo = sorted({t for t in texts if t not in self.table})
        if todo:
            self.table.update(zip(todo, self.embedder.encode(todo, batch_size=batch_size, progress=progress)))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.ascontiguousarray(np.stack([self.table[t] for t in texts]), dtype=np.float32)


def head_training_ids(head: str = "minilm-probe") -> tuple[set[str], str]:
    """Ids of the questions a packaged head was fitted on, recomputed from its own metadata."""
    from morkit.reward_models.heads import load_packaged_head
    from morkit.services.train_heads import load_specs, split_by_question

    info = load_packaged_head(head).info
    split = split_by_question(load_specs(info["data"]), info["test_fraction"], info["seed"])
    if len(split.train) != info["train_questions"]:
        raise RuntimeError(f"recomputed {len(split.train)} training questions for {head}, "
                           f"its metadata says {info['train_questions']}")
    where = f"{head} head: seeded {1 - info['test_fraction']:.0%} of {' + '.join(info['data'])}"
    return {q.id for q in split.train}, where


def _score(queries, rm_names):
    from morkit.reward_models.cache import ScoreCache
    from morkit.reward_models.options import ScoringOptions, default_cache_path
    from morkit.services.scoring import score

    cache = ScoreCache(default_cache_path())
    started = time.perf_counter()
    out = score(queries, rm_names, options=ScoringOptions(progress=True), cache=cache)
    return out, time.perf_counter() - started, cache


def _parse_range(text: str) -> tuple[int, int]:
    start, _, stop = text.partition(":")
    return int(start or 0), int(stop) if stop else 10**9


def load_dataset(key: str, args) -> Dataset:
    from morkit.core import settings
    from morkit.data import datasets
    from morkit.reward_models.rules.table import table_names

    data_dir = settings.data_dir(args.data_dir)
    if key == "rewardmath":
        queries = datasets.rewardmath_rm_scores(data_dir)
        rms = tuple(table_names(queries))
        full = sum(all(name in c.scores for c in q.candidates) for q in queries for name in rms)
        sizes = sorted({len(q.candidates) for q in queries})
        notes = [f"{len(rms)} RMs with cached scores; (question, RM) pairs where the RM scores every answer: "
                 f"{full} of {len(queries) * len(rms)} -> "
                 + ("every RM scores every problem" if full == len(queries) * len(rms) else "SOME MISSING"),
                 f"answers per problem: {sizes}; correct per problem: "
                 f"{sorted({sum(bool(c.correct) for c in q.candidates) for q in queries})}"]
        return Dataset("rewardmath_rm_scores", queries, rms, notes)

    if key == "humaneval":
        per_task = args.humaneval_per_task
        loaded = datasets.humaneval_davinci(data_dir, per_task=per_task)
        rms = tuple(args.humaneval_rms)
        chosen, seconds, cache = _score(loaded, rms)
        notes = [f"{len(loaded)} HumanEval tasks x the first {per_task} of 200 code-davinci-002 completions (labels: "
                 "the data set's own pass/fail); RMs " + ", ".join(rms) + " (none was trained on code)",
                 f"scored in {seconds:.1f}s (cache {cache.path}: {cache.hits} hits, {cache.misses} misses)"]
        return Dataset("humaneval_davinci_samples", chosen, rms, notes)
    if key == "mixed":
        return mixed_dataset(args, data_dir)
    trained, where = head_training_ids("minilm-probe")
    if key == "qwen":
        start, stop = _parse_range(args.qwen_range)
        name, loaded = "qwen25_math_rm8", datasets.qwen25_math_rm8(data_dir)
        rms = ("qwen2.5-math-rm-72b", "math-consensus", "minilm-probe")
    elif key == "gsm8k":
        start, stop = _parse_range(args.gsm8k_range)
        name, loaded = "gsm8k_model_solutions", datasets.gsm8k_model_solutions(data_dir)
        rms = ("minilm-probe", "math-consensus")
    else:
        raise ValueError(key)
    chosen = loaded[start:stop]
    overlap = [q for q in chosen if q.id in trained]
    notes = [f"questions {start}..{min(stop, len(loaded)) - 1} of {len(loaded)}; {len(overlap)} of these "
             f"{len(chosen)} trained the {where}"]
    if args.keep_head_train:
        notes.append("  KEPT (--keep-head-train): minilm-probe scores on them are in-sample")
    else:
        chosen = [q for q in chosen if q.id not in trained]
        notes.append(f"  dropped; {len(chosen)} held-out questions remain (--keep-head-train keeps them)")
    computed = tuple(r for r in rms if r != "qwen2.5-math-rm-72b")
    chosen, seconds, cache = _score(chosen, computed)
    notes.append(f"scored {', '.join(computed)} on {sum(len(q.candidates) for q in chosen)} answers in "
                 f"{seconds:.1f}s (cache {cache.path}: {cache.hits} hits, {cache.misses} misses; "
                 "math-consensus is never cached)")
    return Dataset(name, chosen, rms, notes)


def mixed_dataset(args, data_dir) -> Dataset:
    """GSM8K model solutions (math) + HumanEval davinci samples (code) in one set, scored by --mixed-rms: the
    RMs that do not apply to a domain (code-tests on math, math-consensus on code) leave their scores missing.
    GSM8K questions either packaged head (minilm-probe, smollm2-orm) trained on are dropped."""
    from morkit.data import datasets
    from morkit.reward_models.scoring import skip_counts

    start, stop = _parse_range(args.mixed_gsm8k_range)
    trained = set()
    for head in ("minilm-probe", "smollm2-orm"):
        trained |= head_training_ids(head)[0]
    math = [q for q in datasets.gsm8k_model_solutions(data_dir)[start:stop] if q.id not in trained]
    code = datasets.humaneval_davinci(data_dir, per_task=args.mixed_per_task)
    rms = tuple(args.mixed_rms)
    queries, seconds, cache = _score(math + code, rms)
    skips = ", ".join(f"{name} on {n}" for name, n in skip_counts(queries).items())
    notes = [f"math: gsm8k_model_solutions {start}..{stop - 1} less the heads' training questions -> {len(math)} "
             f"questions x 4 GPT-3 solutions; code: {len(code)} HumanEval tasks x the first {args.mixed_per_task} "
             "code-davinci-002 completions (labels: the data set's pass/fail)",
             f"RMs {', '.join(rms)}; not applicable (scores missing by design): {skips or 'none'}",
             "a single RM where it has no score picks at random (its expected hit is the share of right answers)",
             f"scored in {seconds:.1f}s (cache {cache.path}: {cache.hits} hits, {cache.misses} misses; math-consensus "
             "is never cached)"]
    return Dataset("mixed: gsm8k_model_solutions + humaneval_davinci_samples", queries, rms, notes)
