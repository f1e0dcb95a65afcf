"""LightGBM's text model read without LightGBM, every field a prediction reads checked, the trees walked in numpy:
a damaged pool.json booster is a ForestError naming the field (LightGBM's loader aborts the process on one), a sound
one predicts what LightGBM predicts (tests/selection/test_forest.py; docs/pools.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

MAX_LEAVES = 131_072
"""LightGBM's own bound on a tree's leaves."""
MAX_FEATURES = 1 << 20
VERSIONS = ("v2", "v3", "v4")
ZERO = float(np.float32(1e-35))
"""LightGBM's kZeroThreshold (a float constant widened to double): |x| at most this is zero to it."""
_MISSING_ZERO, _MISSING_NAN = 1, 2  # decision_type bits 2-3; 0 is none
_DEFAULT_LEFT = 2
_ALLOWED_DECISIONS = frozenset(_DEFAULT_LEFT * left + 4 * missing for left in (0, 1) for missing in (0, 1, 2))
"""decision_type values of a numerical split: default-left bit, missing type none/zero/NaN; the categorical bit
is never set in a model without categorical features (num_cat=0)."""
_INT = re.compile(r"-?[0-9]{1,10}")
_FLOAT = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,4})?|[-+]?inf")
_TREE_KEYS = ("num_leaves", "num_cat", "split_feature", "split_gain", "threshold", "decision_type", "left_child",
              "right_child", "leaf_value")


class ForestError(ValueError):
    """A model text that is not a sound LightGBM lambdarank model; the message names the field."""


@dataclass(frozen=True, eq=False)
class Forest:
    """The trees of one LightGBM booster as flat arrays over every tree's nodes. A child code >= 0 is an internal
    node's index, < 0 is ~(a leaf's index); `roots` holds each tree's root code (a one-leaf tree's is a leaf).
    An internal node's children have higher indices than it (LightGBM numbers nodes as it splits), so a walk
    from a root ends at a leaf."""

    features: int  # columns a prediction reads (max_feature_idx + 1)
    roots: np.ndarray  # (T,) int64
    feature: np.ndarray  # (I,) int64 split column of each internal node
    threshold: np.ndarray  # (I,) float64: go left when x <= threshold
    default_left: np.ndarray  # (I,) bool: where a missing value goes
    missing: np.ndarray  # (I,) int8: what counts as missing (none, zero, NaN)
    left: np.ndarray  # (I,) int64 child codes
    right: np.ndarray  # (I,) int64
    leaf_value: np.ndarray  # (L,) float64
    gain: np.ndarray  # (I,) float64 split gains, as LightGBM's float32

    @classmethod
    def parse(cls, text: object) -> "Forest":
        """The checked forest of LightGBM's `model_to_string()` text; ForestError naming the field otherwise."""
        if not isinstance(text, str):
            raise ForestError(f"not a model text but {type(text).__name__}")
        lines = text.split("\n")
        if lines[0] != "tree":
            raise ForestError("not a LightGBM model text (no 'tree' line first)")
        at, header = _block(lines, 1, "header")
        version = header.get("version")
        if version not in VERSIONS:
            raise ForestError(f"version {str(version)[:20]!r}; readable: {', '.join(VERSIONS)}")
        for key in ("num_class", "num_tree_per_iteration"):
            if header.get(key) != "1":
                raise ForestError(f"{key} {str(header.get(key))[:20]!r}: a ranking model has 1")
        objective = header.get("objective", "")
        if objective.split(" ")[0] != "lambdarank":
            raise ForestError(f"objective {objective[:40]!r}: not a lambdarank model")
        if "average_output" in header:
            raise ForestError("average_output: a random forest's averaged output is not read here")
        features = _int(header.get("max_feature_idx"), "max_feature_idx", 0, MAX_FEATURES - 1) + 1
        trees = _Trees()
        while at < len(lines) and lines[at] != "end of trees":
            if lines[at] != f"Tree={trees.count}":
                raise ForestError(f"expected 'Tree={trees.count}' or 'end of trees', found {lines[at][:40]!r}")
            at, tree = _block(lines, at + 1, f"tree {trees.count}")
            trees.add(tree)
        if at >= len(lines):
            raise ForestError("truncated: no 'end of trees' line")
        return trees.forest(features)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(R,) raw scores of the rows of `x` (R, features): the sum of the trees' leaves, as LightGBM's predict."""
        return self.sums(self.leaves(x), [0, len(self.roots)])[0]

    @staticmethod
    def sums(leaves: np.ndarray, bounds: Sequence[int]) -> np.ndarray:
        """(B, R) the sums of the leaf values (T, R) of the trees bounds[b]:bounds[b + 1], tree by tree in order
        as LightGBM adds them."""
        return np.stack([np.cumsum(leaves[a:b], axis=0)[-1] if b > a else np.zeros(leaves.shape[1])
                         for a, b in zip(bounds[:-1], bounds[1:])])

    def leaves(self, x: np.ndarray) -> np.ndarray:
        """(T, R) the leaf value each tree gives each row of `x` (R, features), walked as LightGBM walks a tree:
        values within its zero threshold read as 0, NaN and zero as each split's missing rule says."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.features:
            raise ValueError(f"the model reads {self.features} features; got an array of shape {x.shape}")
        flat = np.where(np.abs(x) <= ZERO, 0.0, x).ravel()  # LightGBM drops these from a dense row: read as 0
        n_rows, n_trees = x.shape[0], len(self.roots)
        node = np.repeat(self.roots[:, None], n_rows, axis=1).ravel()  # (T * R,) tree-major
        base = np.tile(np.arange(n_rows) * self.features, n_trees)  # each entry's row start in `flat`
        special = bool(np.isnan(flat).any()) or bool((self.missing == _MISSING_ZERO).any())
        live = np.flatnonzero(node >= 0)
        while len(live):  # each step goes to a higher node index or a leaf: at most max-depth steps
            at = node[live]
            value = flat[base[live] + self.feature[at]]
            if special:
                kind, nan = self.missing[at], np.isnan(value)
                value = np.where(nan & (kind != _MISSING_NAN), 0.0, value)
                missing = ((kind == _MISSING_ZERO) & (np.abs(value) <= ZERO)) | ((kind == _MISSING_NAN) & nan)
                go_left = np.where(missing, self.default_left[at], value <= self.threshold[at])
            else:
                go_left = value <= self.threshold[at]
            step = np.where(go_left, self.left[at], self.right[at])
            node[live] = step
            live = live[step >= 0]
        return self.leaf_value[~node].reshape(n_trees, n_rows)

    @classmethod
    def joined(cls, forests: Sequence["Forest"]) -> "Forest":
        """One forest of the trees of several that read the same features, in order (walked in one pass)."""
        if len(forests) == 1:
            return forests[0]
        node_at = _starts(np.array([len(f.feature) for f in forests]))
        leaf_at = _starts(np.array([len(f.leaf_value) for f in forests]))

        def shifted(code: np.ndarray, i: int) -> np.ndarray:
            return np.where(code >= 0, code + node_at[i], ~(~code + leaf_at[i]))

        cat = lambda name: np.concatenate([getattr(f, name) for f in forests])  # noqa: E731
        return cls(forests[0].features, np.concatenate([shifted(f.roots, i) for i, f in enumerate(forests)]),
                   cat("feature"), cat("threshold"), cat("default_left"), cat("missing"),
                   np.concatenate([shifted(f.left, i) for i, f in enumerate(forests)]),
                   np.concatenate([shifted(f.right, i) for i, f in enumerate(forests)]), cat("leaf_value"), cat("gain"))

    def gain_importance(self) -> np.ndarray:
        """(features,) the summed positive split gain of each feature: LightGBM's feature_importance("gain")."""
        out = np.zeros(self.features)
        positive = self.gain > 0
        np.add.at(out, self.feature[positive], self.gain[positive])
        return out


def _block(lines: list[str], at: int, what: str) -> tuple[int, dict[str, str]]:
    """The key=value lines from `at` to the next blank line, and the index after the blank lines."""
    out: dict[str, str] = {}
    while at < len(lines) and lines[at] != "":
        key, sep, value = lines[at].partition("=")
        if not sep or not key:
            raise ForestError(f"{what}: expected key=value, found {lines[at][:40]!r}")
        if key in out:
            raise ForestError(f"{what}: {key[:40]} given twice")
        out[key] = value
        at += 1
    if at >= len(lines):
        raise ForestError(f"truncated in the {what}")
    while at < len(lines) and lines[at] == "":
        at += 1
    return at, out


def _int(value: str | None, field: str, low: int, high: int) -> int:
    if value is None or not _INT.fullmatch(value):
        raise ForestError(f"{field}: {str(value)[:40]!r} is not a whole number")
    number = int(value)
    if not low <= number <= high:
        raise ForestError(f"{field}: {number} is outside {low}..{high}")
    return number


_INTS = re.compile(f"(?:{_INT.pattern}(?: {_INT.pattern})*)?")
_FLOATS = re.compile(f"(?:(?:{_FLOAT.pattern})(?: (?:{_FLOAT.pattern}))*)?")


class _Trees:
    """The trees' fields gathered as the text is read, then checked all at once (forest)."""

    def __init__(self) -> None:
        self.count = 0
        self.leaves: list[int] = []
        self.fields: dict[str, list] = {key: [] for key in _TREE_KEYS[2:]}

    def add(self, tree: Mapping[str, str]) -> None:
        where = f"tree {self.count}"
        for key in _TREE_KEYS:
            if key not in tree:
                raise ForestError(f"{where}: missing {key}")
        leaves = _int(tree["num_leaves"], f"{where}: num_leaves", 1, MAX_LEAVES)
        if _int(tree["num_cat"], f"{where}: num_cat", 0, MAX_LEAVES) != 0:
            raise ForestError(f"{where}: num_cat {tree['num_cat']}: categorical splits are not read here")
        if tree.get("is_linear", "0") != "0":
            raise ForestError(f"{where}: is_linear: linear trees are not read here")
        for key in _TREE_KEYS[2:]:
            value, count = tree[key], leaves if key == "leaf_value" else leaves - 1
            integer = key in ("split_feature", "decision_type", "left_child", "right_child")
            if not (_INTS if integer else _FLOATS).fullmatch(value):
                raise ForestError(f"{where}: {key} holds something other than numbers")
            tokens = value.split(" ") if value else []
            if len(tokens) != count:  # counted before anything is made of them
                raise ForestError(f"{where}: {key} has {len(tokens)} values; num_leaves {leaves} implies {count}")
            self.fields[key].append(tokens)
        self.leaves.append(leaves)
        self.count += 1

    def forest(self, features: int) -> Forest:
        """The checked Forest: indices in range, each tree's nodes and leaves each reached from one parent, a
        child numbered after its parent (so every walk ends at a leaf), every value finite and no prediction or
        total gain beyond the float range."""
        leaves = np.array(self.leaves, dtype=np.int64)
        internal = leaves - 1
        node_at, leaf_at = _starts(internal), _starts(leaves)
        tree_of_node = np.repeat(np.arange(self.count), internal)
        tree_of_leaf = np.repeat(np.arange(self.count), leaves)

        def column(key: str, dtype: type) -> np.ndarray:
            joined = [t for tokens in self.fields[key] for t in tokens]
            return np.array(list(map(int if dtype is np.int64 else float, joined)), dtype=dtype)

        def check(key: str, bad: np.ndarray, values: np.ndarray, why: str, per: np.ndarray, start: np.ndarray) -> None:
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                t = int(per[i])
                raise ForestError(f"tree {t}: {key}[{i - int(start[t])}] is {values[i].item()!r}, {why}")

        feature = column("split_feature", np.int64)
        with np.errstate(over="ignore"):  # a gain beyond float32 becomes inf, refused below
            gain = column("split_gain", np.float64).astype(np.float32).astype(np.float64)
        threshold = column("threshold", np.float64)
        decision = column("decision_type", np.int64)
        leaf_value = column("leaf_value", np.float64)
        per_node = (tree_of_node, node_at)
        check("split_feature", (feature < 0) | (feature >= features), feature, f"outside 0..{features - 1}", *per_node)
        check("threshold", np.isnan(threshold), threshold, "not a number", *per_node)
        check("split_gain", ~np.isfinite(gain), gain, "not finite", *per_node)
        check("decision_type", ~np.isin(decision, sorted(_ALLOWED_DECISIONS)), decision, "not a numerical split's",
              *per_node)
        check("leaf_value", ~np.isfinite(leaf_value), leaf_value, "not finite", tree_of_leaf, leaf_at)
        with np.errstate(over="ignore"):
            largest = np.maximum.reduceat(np.abs(leaf_value), leaf_at[:-1]).sum() if len(leaf_value) else 0.0
            total_gain = gain[gain > 0].sum()
        if not np.isfinite(largest):
            raise ForestError("leaf_value: the trees' largest leaves sum beyond the float range")
        if not np.isfinite(total_gain):
            raise ForestError("split_gain: the gains sum beyond the float range")
        local = np.arange(len(feature)) - node_at[tree_of_node]  # each node's index within its tree
        codes = {}
        for key in ("left_child", "right_child"):
            child = column(key, np.int64)
            n_internal, n_leaves = internal[tree_of_node], leaves[tree_of_node]
            bad = np.where(child >= 0, (child <= local) | (child >= n_internal), child < -n_leaves)
            check(key, bad, child, "neither a later internal node of its tree nor one of its leaves", *per_node)
            codes[key] = np.where(child >= 0, child + node_at[tree_of_node], ~(~child + leaf_at[tree_of_node]))
        both = np.concatenate([codes["left_child"], codes["right_child"]])
        parents = np.bincount(both[both >= 0], minlength=len(feature))
        leaf_parents = np.bincount(~both[both < 0], minlength=len(leaf_value))
        parents[node_at[:-1][internal > 0]] += 1  # each root has no parent: counted as one
        leaf_parents[leaf_at[:-1][internal == 0]] += 1  # so has a one-leaf tree's leaf
        if not ((parents == 1).all() and (leaf_parents == 1).all()):
            bad = np.concatenate([tree_of_node[parents != 1], tree_of_leaf[leaf_parents != 1]])
            raise ForestError(f"tree {int(bad.min())}: a node or leaf has no parent or several (not a tree)")
        roots = np.where(internal > 0, node_at[:-1], ~leaf_at[:-1])
        return Forest(features, roots.astype(np.int64), feature, threshold, (decision & _DEFAULT_LEFT) > 0,
                      ((decision >> 2) & 3).astype(np.int8), codes["left_child"], codes["right_child"], leaf_value,
                      gain)


def _starts(counts: np.ndarray) -> np.ndarray:
    """Where each tree's entries begin in the joined arrays (one more entry: the total)."""
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
