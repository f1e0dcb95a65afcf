"""The value checks a pool passes at build, save and load, so that a pool that was saved always loads and
selection never meets a non-finite normaliser or weight. Each failure is an InputError naming the RM,
question, ensemble or header key."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from morkit.core.errors import InputError
from morkit.question_pool.ensembles import NORMALIZERS, Ensemble, Normalizer
from morkit.question_pool.rows import PoolQuestion, PoolRows


def check_normalizer(normalizer: Normalizer, rows: PoolRows, rm_names: Sequence[str]) -> None:
    """Scores near the float limit overflow the z-score's mean or spread: name the RM and its largest score."""
    for r, name in enumerate(rm_names):
        shift, scale = normalizer.shift[name], normalizer.scale[name]
        if math.isfinite(shift) and math.isfinite(scale) and scale > 0:
            continue
        magnitude = np.where(rows.valid & ~np.isnan(rows.scores[:, :, r]), np.abs(rows.scores[:, :, r]), -1.0)
        q, c = np.unravel_index(int(np.argmax(magnitude)), magnitude.shape)
        raise InputError(f"{name}: its scores are too large to {normalizer.kind}-normalise (shift {shift:g}, scale "
                         f"{scale:g}; e.g. {rows.scores[q, c, r]:g} on question {rows.questions[q].id!r}); "
                         "rescale that RM's scores")


def check_embeddings(vectors: np.ndarray, questions: Sequence[PoolQuestion], embedder: str) -> None:
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1)) if vectors.size else []
    if len(bad):
        raise InputError(f"embedder {embedder!r} gave a non-finite vector for question {questions[bad[0]].id!r}")


def check_header(header: Mapping[str, Any]) -> None:
    """Every number a pool stores must be finite, but global PRR and index figures (NaN = undefined, stored
    as null): a pool that is saved always loads."""
    def walk(value: Any, where: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"cannot save the pool: {where} is {value} (derived values must be finite numbers)")
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, f"{where}.{k}" if where else str(k))
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")

    walk({k: v for k, v in header.items() if k not in ("global_prr", "index")}, "")


def check_loaded(rm_names: Sequence[str], normalizer: Normalizer, global_prr: Mapping[str, float],
                  ensembles: Sequence[Ensemble]) -> None:
    """What selection and ranking rely on: finite normalisers and weights over the pool's RMs, singles first."""
    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    names = set(rm_names)
    if normalizer.kind not in NORMALIZERS:
        raise InputError(f"unknown normaliser {normalizer.kind!r}")
    for name in rm_names:
        shift, scale = normalizer.shift.get(name), normalizer.scale.get(name)
        if not (number(shift) and number(scale) and scale > 0):
            raise InputError(f"normaliser of {name!r}: shift {shift!r} and scale {scale!r} must be finite, scale > 0")
    if set(global_prr) != names or not all(math.isnan(v) or 0.0 <= v <= 1.0 for v in global_prr.values()):
        raise InputError("global_prr must give every pool RM a PRR in [0, 1] or null")
    for e, ensemble in enumerate(ensembles):
        if not (ensemble.members and len(ensemble.members) == len(ensemble.weights)
                and len(set(ensemble.members)) == len(ensemble.members)
                and all(isinstance(m, str) and m in names for m in ensemble.members)
                and all(number(w) for w in ensemble.weights) and isinstance(ensemble.weighting, str)):
            raise InputError(f"ensemble {e} {ensemble.to_json()}: members must be distinct pool RMs (rm_names), "
                             "with one finite weight each")
    if [e.members for e in ensembles[: len(rm_names)]] != [(name,) for name in rm_names]:
        raise InputError("the first ensembles must be the single RMs in rm_names' order")
