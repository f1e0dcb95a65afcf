"""Fit the logistic heads of the embedded ORMs on labelled shared data, and report held-out quality. The split is
by question (seeded); frozen-backbone features are saved as computed, so a rerun resumes. Docs: Reward models.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from morkit.core.types import Query
from morkit.data.datasets import load_spec
from morkit.data.jsonl import atomic_path
from morkit.question_pool.prr import best_of_n_hit, prr
from morkit.reward_models.heads import LogisticHead
from morkit.reward_models.truncation import DEFAULT_POLICY

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Split:
    train: list[Query]
    test: list[Query]


def load_specs(specs: Sequence[str], data_dir: Path | None = None) -> list[Query]:
    """'name' or 'name:N' (first N questions) of each data set registered in morkit.data.datasets.DATASETS."""
    queries: list[Query] = []
    for spec in specs:
        queries.extend(q for q in load_spec(spec, data_dir) if q.labelled and all(c.text for c in q.candidates))
    return queries


def split_by_question(queries: Sequence[Query], test_fraction: float, seed: int) -> Split:
    order = list(range(len(queries)))
    random.Random(seed).shuffle(order)
    cut = int(round(len(order) * test_fraction))
    test = sorted(order[:cut])
    train = sorted(order[cut:])
    return Split([queries[i] for i in train], [queries[i] for i in test])


def extract(features_fn: Callable[[list[tuple[str, str]]], np.ndarray], queries: Sequence[Query],
            store: Path, chunk: int = 32) -> np.ndarray:
    """Features of every candidate, saved to `store` (npz) after each chunk and reused on rerun."""
    from tqdm import tqdm

    pairs = [(q.question, c.text or "") for q in queries for c in q.candidates]
    keys = [hashlib.sha256(f"{q}\x00{a}".encode()).hexdigest() for q, a in pairs]
    done: dict[str, np.ndarray] = {}
    if store.is_file():
        with np.load(store) as saved:
            done = {k: saved[k] for k in saved.files}
    todo = [i for i, k in enumerate(keys) if k not in done]
    with tqdm(total=len(pairs), initial=len(pairs) - len(todo), desc=f"features -> {store.name}", unit="pair") as bar:
        for start in range(0, len(todo), chunk):
            part = todo[start : start + chunk]
            rows = features_fn([pairs[i] for i in part])
            for i, row in zip(part, rows):
                done[keys[i]] = row
            with atomic_path(store) as tmp:
                with open(tmp, "wb") as handle:
                    np.savez(handle, **done)
            bar.update(len(part))
    return np.stack([done[k] for k in keys])


def _labels(queries: Sequence[Query]) -> tuple[np.ndarray, np.ndarray]:
    y = np.array([c.correct for q in queries for c in q.candidates], dtype=bool)
    groups = np.array([i for i, q in enumerate(queries) for _ in q.candidates])
    return y, groups


def _pair_differences(z: np.ndarray, y: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Feature differences (correct - incorrect) for every mixed pair inside each question."""
    diffs = []
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        good, bad = rows[y[rows]], rows[~y[rows]]
        if good.size and bad.size:
            diffs.append((z[good][:, None, :] - z[bad][None, :, :]).reshape(-1, z.shape[1]))
    return np.concatenate(diffs) if diffs else np.zeros((0, z.shape[1]))


def _fit_direction(z: np.ndarray, y: np.ndarray, groups: np.ndarray, objective: str, c: float) -> np.ndarray:
    """Weight vector: pointwise logistic on answers, or pairwise (RankNet-style) logistic on in-question pairs."""
    from sklearn.linear_model import LogisticRegression

    if objective == "pointwise":
        return LogisticRegression(C=c, max_iter=2000).fit(z, y).coef_[0]
    diffs = _pair_differences(z, y, groups)
    x = np.concatenate([diffs, -diffs])
    labels = np.concatenate([np.ones(len(diffs)), np.zeros(len(diffs))])
    return LogisticRegression(C=c, max_iter=2000, fit_intercept=False).fit(x, labels).coef_[0]


def _mean_prr(s: np.ndarray, y: np.ndarray, groups: np.ndarray) -> float:
    values = [prr(s[groups == g], y[groups == g]) for g in np.unique(groups)]
    values = [v for v in values if not np.isnan(v)]
    return float(np.mean(values)) if values else float("nan")


def _calibrate(s: np.ndarray, y: np.ndarray, groups: np.ndarray) -> tuple[float, float]:
    """Slope and bias mapping a score to P(correct), with the slope kept positive. The slope is fitted on scores centred
    within each question (across questions it can turn negative, tracking difficulty, and flip the ranking); then
    the bias with the slope held fixed."""
    from scipy.optimize import minimize_scalar
    from sklearn.linear_model import LogisticRegression

    centred = s.copy()
    for g in np.unique(groups):
        centred[groups == g] -= s[groups == g].mean()
    slope = float(LogisticRegression(C=1e6, max_iter=2000).fit(centred[:, None], y).coef_[0][0])
    slope = max(slope, 1e-6)

    def loss(b: float) -> float:
        logits = slope * s + b
        return float(np.sum(np.logaddexp(0.0, logits) - y * logits))

    return slope, float(minimize_scalar(loss).x)


def fit_head(x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> tuple[LogisticHead, dict]:
    """Pick objective (pointwise / pairwise) and L2 strength by grouped 5-fold CV mean PRR on training data,
    refit on all of it, then calibrate the score to P(correct) with a 1-D logistic fit (slope kept positive)."""
    from sklearn.model_selection import GroupKFold

    mean = x.mean(axis=0)
    scale = x.std(axis=0) + 1e-6
    z = (x - mean) / scale
    folds = list(GroupKFold(5).split(z, y, groups))
    results = {}
    for objective in ("pointwise", "pairwise"):
        for c in (1e-4, 1e-3, 1e-2, 1e-1, 1.0):
            cv = [_mean_prr(z[te] @ _fit_direction(z[tr], y[tr], groups[tr], objective, c), y[te], groups[te])
                  for tr, te in folds]
            results[(objective, c)] = float(np.nanmean(cv))
    objective, c = max(results, key=results.get)
    direction = _fit_direction(z, y, groups, objective, c)
    a, b = _calibrate(z @ direction, y, groups)
    chosen = {"objective": objective, "C": c, "cv_mean_prr": results[(objective, c)],
              "cv": {f"{o}@{k}": round(v, 4) for (o, k), v in results.items()}}
    return LogisticHead(mean, scale, a * direction.astype(np.float64), b), chosen


def evaluate(probabilities: np.ndarray, queries: Sequence[Query]) -> dict[str, float]:
    """Accuracy at 0.5, mean PRR over mixed questions, and best-of-n accuracy, on held-out queries."""
    y, _ = _labels(queries)
    prrs, hits, start = [], [], 0
    for q in queries:
        n = len(q.candidates)
        s, c = probabilities[start : start + n], y[start : start + n]
        start += n
        value = prr(s, c)
        if not np.isnan(value):
            prrs.append(value)
        hits.append(best_of_n_hit(s, c))
    random_hit = float(np.mean([np.mean([c.correct for c in q.candidates]) for q in queries]))
    return {
        "accuracy": float(((probabilities >= 0.5) == y).mean()),
        "majority_class_accuracy": float(max(y.mean(), 1 - y.mean())),
        "mean_prr": float(np.mean(prrs)) if prrs else float("nan"),
        "mixed_questions": len(prrs),
        "best_of_n": float(np.mean(hits)),
        "random_pick": random_hit,
        "questions": len(queries),
        "answers": int(len(y)),
    }


def train(rm_name: str, features_fn: Callable, specs: Sequence[str], out: Path, *, test_fraction: float = 0.25,
          seed: int = 0, work_dir: Path, data_dir: Path | None = None) -> LogisticHead:
    queries = load_specs(specs, data_dir)
    split = split_by_question(queries, test_fraction, seed)
    work_dir.mkdir(parents=True, exist_ok=True)
    x_train = extract(features_fn, split.train, work_dir / f"{rm_name}-train.npz")
    x_test = extract(features_fn, split.test, work_dir / f"{rm_name}-test.npz")
    y_train, groups = _labels(split.train)
    head, chosen = fit_head(x_train, y_train, groups)
    metrics = evaluate(head.probabilities(x_test), split.test)
    digest = hashlib.sha256(b"".join(a.tobytes() for a in (head.mean, head.scale, head.weight))).hexdigest()[:16]
    info = {"rm": rm_name, "data": list(specs), "test_fraction": test_fraction, "seed": seed, "selection": chosen,
            "train_questions": len(split.train), "held_out": metrics, "sha256": digest}
    head = LogisticHead(head.mean, head.scale, head.weight, head.bias, info)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        head.save(tmp)
    log.info("%s held-out: %s", rm_name, json.dumps(metrics))
    return head


TRAINABLE = ("smollm2-orm", "minilm-probe")


def train_head(rm_name: str, data: Sequence[str], output: Path | None = None, *, max_tokens: int | None = None,
               truncation: str = DEFAULT_POLICY, test_fraction: float = 0.25, seed: int = 0, device: str | None = None,
               data_dir: Path | None = None) -> tuple[LogisticHead, Path]:
    """Fit an embedded RM's head on the named data sets, its pairs cut to `max_tokens` (default: the RM's window)
    under `truncation`; writes it to `output` (default: the packaged head)."""
    from morkit.core import checks
    from morkit.core.settings import cache_dir
    from morkit.reward_models.embedded.models import (
        MiniLMProbe,
        SmolLM2ORM,
        load_minilm,
        load_smollm2,
    )
    from morkit.reward_models.heads import packaged_head_path
    from morkit.reward_models.truncation import Truncation

    checks.one_of(rm_name, TRAINABLE, "head")
    checks.share(test_fraction, "test_fraction")
    checks.non_negative_int(seed, "seed")
    fit = Truncation(max_tokens, truncation)
    untrained = {"smollm2-orm": lambda: SmolLM2ORM(load_smollm2(device), None, truncation=fit),
                 "minilm-probe": lambda: MiniLMProbe(load_minilm(device), None, truncation=fit)}
    rm = untrained[rm_name]()
    out = Path(output) if output else packaged_head_path(rm_name)
    head = train(rm_name, rm.features, data, out, test_fraction=test_fraction, seed=seed,
                 work_dir=cache_dir() / "train", data_dir=data_dir)
    return head, out
