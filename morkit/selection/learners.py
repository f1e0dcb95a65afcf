"""Learners that rank a query's candidates from their features, in LEARNERS: name -> model class with
`fit(x, correct, valid, **params)` and `from_json`; a fitted model has `scores`, `importances`, `to_json`.
Only questions with a correct and a wrong candidate teach. Adding one: docs/selection.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from morkit.core.registry import Entry, Registry
from morkit.question_pool.prr import mixed_questions
from morkit.selection.forest import Forest, ForestError
from morkit.runtime.threads import one_blas_thread


@dataclass(frozen=True)
class ConditionalLogit:
    """P(candidate) = softmax over the query's candidates of w . x; w maximises the probability mass on the
    correct candidates, L2-penalised (a listwise top-1 objective, fitted with L-BFGS)."""

    weights: tuple[float, ...]

    @classmethod
    def fit(cls, x: np.ndarray, correct: np.ndarray, valid: np.ndarray, penalty: float = 1.0,
            sample_weight: np.ndarray | None = None) -> "ConditionalLogit":
        from scipy.optimize import minimize

        use = mixed_questions(correct, valid)
        if not use.any():
            return cls(tuple(np.full(x.shape[-1], 1.0 / max(1, x.shape[-1]))))
        x, good, valid = x[use], (correct & valid)[use], valid[use]
        weight = np.ones(len(x)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[use]

        def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
            u = np.where(valid, x @ w, -np.inf)
            e = np.exp(u - u.max(axis=1, keepdims=True))
            z_all, e_good = e.sum(axis=1), np.where(good, e, 0.0)
            z_good = e_good.sum(axis=1)
            value = -(weight * (np.log(z_good) - np.log(z_all))).sum() + penalty * w @ w
            grad = -np.einsum("q,qn,qnf->f", weight, e_good / z_good[:, None] - e / z_all[:, None], x)
            return float(value), grad + 2 * penalty * w

        # BLAS threads on L-BFGS-B's tiny steps cost ~100x (scipy 1.17, 2 cores); the limit is process-wide
        with one_blas_thread():
            w = minimize(loss, np.zeros(x.shape[-1]), jac=True, method="L-BFGS-B").x
        return cls(tuple(float(v) for v in w))

    def scores(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x) @ np.asarray(self.weights)

    def importances(self) -> np.ndarray:
        return np.asarray(self.weights)

    def to_json(self) -> dict[str, Any]:
        return {"weights": list(self.weights)}

    @property
    def width(self) -> int:
        """Feature columns the model reads."""
        return len(self.weights)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "ConditionalLogit":
        model = cls(tuple(float(v) for v in obj["weights"]))
        if not all(np.isfinite(model.weights)):
            raise ValueError("weights: not all finite")
        return model


@dataclass(frozen=True)
class LambdaRank:
    """Gradient-boosted trees with LightGBM's lambdarank objective over each query's candidates; single-
    threaded and deterministic, so a pool refits to the same model on any machine. `bag` > 1 averages that
    many boosters of successive seeds, each tree grown on a random 80% of the questions: one fit's trees move
    with its seed, their mean much less."""

    models: tuple[str, ...]  # LightGBM's text dump of each booster

    @classmethod
    def fit(cls, x: np.ndarray, correct: np.ndarray, valid: np.ndarray, rounds: int = 100,
            learning_rate: float = 0.05, leaves: int = 7, min_leaf: int = 20, feature_fraction: float = 0.5,
            seed: int = 0, bag: int = 1) -> "LambdaRank":
        import lightgbm

        use = mixed_questions(correct, valid)
        x, correct, valid = x[use], correct[use], valid[use]
        data = lightgbm.Dataset(x[valid], correct[valid].astype(int), group=valid.sum(axis=1), free_raw_data=False)
        models, trained = [], []
        for member in range(max(1, bag)):
            params = {"objective": "lambdarank", "learning_rate": learning_rate, "num_leaves": leaves,
                      "min_data_in_leaf": min_leaf, "feature_fraction": feature_fraction, "seed": seed + member,
                      "deterministic": True, "force_row_wise": True, "num_threads": 1, "verbosity": -1,
                      **({"bagging_fraction": 0.8, "bagging_freq": 1, "bagging_by_query": True} if bag > 1 else {})}
            trained.append(lightgbm.train(params, data, num_boost_round=rounds))
            models.append(trained[-1].model_to_string())
        model = cls(tuple(models))
        object.__setattr__(model, "_trained", tuple(trained))  # a cache, not state: scores the CV's folds fast
        return model

    def forests(self) -> tuple[Forest, ...]:
        """The boosters parsed and checked, evaluated without LightGBM (morkit.selection.forest): a stored model
        is text from pool.json, and LightGBM's own loader aborts the process on a damaged one. ForestError names
        the booster and the field."""
        forests = self.__dict__.get("_forests")
        if forests is None:
            parsed = []
            for i, text in enumerate(self.models):
                try:
                    parsed.append(Forest.parse(text))
                except ForestError as exc:
                    raise ForestError(f"models[{i}]: {exc}") from None
            if len({f.features for f in parsed}) > 1:
                raise ForestError(f"models: its boosters read {sorted({f.features for f in parsed})} features")
            forests = tuple(parsed)
            object.__setattr__(self, "_forests", forests)  # a cache, not state: frozen otherwise
            object.__setattr__(self, "_joined", Forest.joined(forests))
        return forests

    @property
    def width(self) -> int:
        """Feature columns the model reads."""
        return self.forests()[0].features

    def scores(self, x: np.ndarray) -> np.ndarray:
        """The mean of the boosters' raw scores. A model fitted here scores with the boosters LightGBM trained;
        one read from text with its checked forests, which give the same numbers (tests/selection/test_forest.py)."""
        x = np.asarray(x)
        flat = x.reshape(-1, x.shape[-1])
        trained = self.__dict__.get("_trained")
        if trained is not None:  # made in this process, never read back from text: LightGBM's fast predict
            each = [b.predict(flat, num_threads=1) for b in trained]
        else:
            forests = self.forests()
            bounds = np.cumsum([0] + [len(f.roots) for f in forests])
            each = list(Forest.sums(self.__dict__["_joined"].leaves(flat), bounds))
        return np.mean(each, axis=0).reshape(x.shape[:-1])

    def importances(self) -> np.ndarray:
        gain = np.mean([f.gain_importance() for f in self.forests()], axis=0)
        return gain / gain.sum() if gain.sum() > 0 else gain

    def to_json(self) -> dict[str, Any]:
        return {"models": list(self.models)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "LambdaRank":
        """A stored model, its boosters parsed and checked now (ForestError naming the booster and field)."""
        texts = obj["models"]
        if not isinstance(texts, list) or not texts:
            raise ForestError("models: expected a list of model texts")
        model = cls(tuple(texts))
        model.forests()
        return model


@dataclass(frozen=True)
class SingleColumn:
    """One feature column as the score, nothing learned: with the query-z features, one RM on its own. The
    cross-validation weighs every RM this way, so a pool too small to learn from keeps its best single RM."""

    column: int
    width: int

    @classmethod
    def fit(cls, x: np.ndarray, correct: np.ndarray, valid: np.ndarray, column: int = 0) -> "SingleColumn":
        return cls(int(column), int(np.shape(x)[-1]))

    def scores(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x)[..., self.column]

    def importances(self) -> np.ndarray:
        return np.eye(self.width)[self.column]

    def to_json(self) -> dict[str, Any]:
        return {"column": self.column, "width": self.width}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "SingleColumn":
        model = cls(int(obj["column"]), int(obj["width"]))
        if not 0 <= model.column < model.width:
            raise ValueError(f"column: {model.column} is outside 0..{model.width - 1}")
        return model


LEARNERS = Registry("learner", [
    Entry("logit", "morkit.selection.learners:ConditionalLogit",
          "conditional logit: listwise softmax weights over the features, L2-penalised"),
    Entry("lambdarank", "morkit.selection.learners:LambdaRank",
          "gradient-boosted ranking trees (LightGBM lambdarank)"),
    Entry("single", "morkit.selection.learners:SingleColumn", "one RM's own score, nothing learned (a baseline)"),
])
