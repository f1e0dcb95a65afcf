"""Stored lambdarank boosters are read without LightGBM: the checked evaluator predicts what LightGBM predicts, and
a damaged or hostile model text (truncated, numbers changed, indices out of range, huge counts) is a one-line
error where LightGBM's own loader kills the process; a pool carrying one fails naming pool.json and the field."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fakes.embedder import HashEmbedder

from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.question_pool.pool import build_pool, load_pool
from morkit.selection.forest import Forest, ForestError
from morkit.selection.learned import BAG, Setting, fit_learned
from morkit.selection.learners import LambdaRank
from morkit.selection.router import Router

LAMBDARANK = Setting("lambdarank", "full", {"rounds": 100, "learning_rate": 0.05, "leaves": 7, "bag": BAG})
"""A setting of the learned selector's grid, so that a pool storing its fit is read, not refitted."""


def _data(seed, rows=150, width=5, nan=0.0):
    """Ranking data whose first two features carry the signal; a fifth of the values exactly 0, some NaN."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 6, width))
    x[rng.random(x.shape) < 0.2] = 0.0
    x[rng.random(x.shape) < nan] = np.nan
    correct = np.zeros((rows, 6), bool)
    correct[np.arange(rows), np.nanargmax(np.nan_to_num(x[:, :, 0] + x[:, :, 1]) + rng.normal(size=(rows, 6)),
                                          axis=1)] = True
    return x, correct, rng.random((rows, 6)) < 0.9


def _lightgbm(texts, x):
    import lightgbm

    flat = x.reshape(-1, x.shape[-1])
    return np.mean([lightgbm.Booster(model_str=t).predict(flat, num_threads=1) for t in texts], axis=0)


@pytest.fixture(scope="module")
def small():
    """A small fitted booster's text and data of its width (the fuzz's seed)."""
    x, correct, valid = _data(7, rows=80, width=3)
    return LambdaRank.fit(x, correct, valid, rounds=12, min_leaf=5).models[0], x.reshape(-1, 3)


@pytest.mark.parametrize("seed, nan", [(0, 0.0), (1, 0.05), (2, 0.3)])
def test_the_checked_evaluator_predicts_what_lightgbm_predicts(seed, nan):
    x, correct, valid = _data(seed, nan=nan)
    fitted = LambdaRank.fit(x, correct, valid, rounds=60, leaves=7, min_leaf=5, bag=3)
    read = LambdaRank.from_json(json.loads(json.dumps(fitted.to_json())))  # as a pool stores it
    assert "_trained" not in read.__dict__  # scored by the forests, LightGBM never loads the text
    expected = _lightgbm(fitted.models, x)
    assert np.abs(read.scores(x).ravel() - expected).max() <= 1e-9
    assert np.array_equal(read.scores(x).ravel(), expected)  # the same sums in the same order: bit for bit
    assert np.array_equal(fitted.scores(x), read.scores(x))
    import lightgbm

    gain = np.mean([lightgbm.Booster(model_str=t).feature_importance("gain") for t in fitted.models], axis=0)
    assert np.abs(read.importances() - gain / gain.sum()).max() <= 1e-9


def test_every_missing_value_rule_walks_as_lightgbm_walks(small):
    """decision_type's missing rules (none, zero, NaN; default left or right) on 0, values within LightGBM's zero
    threshold, NaN and ordinary values: each edited model (still a sound one) predicts as LightGBM does."""
    text, x = small
    x = x.copy()
    rng = np.random.default_rng(3)
    x[rng.random(x.shape) < 0.15] = np.nan
    x[rng.random(x.shape) < 0.1] = 1e-36
    x[rng.random(x.shape) < 0.1] = -0.0
    for rule in ("0", "2", "4", "6", "8", "10"):
        edited = re.sub(r"decision_type=[0-9 ]+", lambda m: "decision_type=" + " ".join(
            rule for _ in m.group(0).split("=")[1].split(" ")), text)
        edited = re.sub(r"tree_sizes=[0-9 ]+\n", "", edited)  # the trees' byte sizes changed: LightGBM reads on
        assert np.abs(Forest.parse(edited).predict(x) - _lightgbm([edited], x)).max() <= 1e-9, rule


def test_a_lambdarank_fit_of_a_pool_scores_as_lightgbm_once_stored(lambdarank_pool):
    pool = lambdarank_pool
    fit = fit_learned(pool, settings=[LAMBDARANK], baselines=False, repeats=1)
    stored = type(fit).from_json(json.loads(json.dumps(fit.to_json())))
    component = stored.components[0]
    x = component.spec.apply(pool.scores, pool.steps, pool.valid)
    expected = _lightgbm(component.model.models, x).reshape(x.shape[:-1])
    assert np.abs(component.model.scores(x) - expected).max() <= 1e-9
    args = (pool.scores, pool.steps, pool.valid, pool.rm_names, pool.step_rms)
    assert np.array_equal(fit.scores(*args), stored.scores(*args), equal_nan=True)


HOSTILE = ("-1", "0", "1", "7", "99", "-99", "2147483648", "9999999999", "99999999999999999999", "1e308", "-1e400",
           "nan", "inf", "", "1.5", "0x10", "--1", "1_000", "1e99999")


def _mutants(text, count, seed):
    """(what, text) pairs: the model truncated, a number swapped for a hostile one, a digit flipped, a line
    dropped or repeated, two child indices swapped, in positions drawn with a fixed seed."""
    rng = np.random.default_rng(seed)
    lines = text.split("\n")
    fields = [i for i, line in enumerate(lines) if re.match(r"[a-z_]+=", line) and i < lines.index("end of trees")]
    digits = [m.start() for m in re.finditer(r"[0-9]", text[: text.index("end of trees")])]
    out = []
    for _ in range(count):
        kind = int(rng.integers(6))
        if kind == 0:
            out.append(("truncated", text[: int(rng.integers(0, len(text)))]))
            continue
        if kind == 1:
            at = digits[int(rng.integers(len(digits)))]
            out.append(("digit flipped", text[:at] + str(int(rng.integers(10))) + text[at + 1:]))
            continue
        edited = list(lines)
        i = fields[int(rng.integers(len(fields)))]
        key, value = edited[i].split("=", 1)
        if kind == 2:
            tokens = value.split(" ")
            tokens[int(rng.integers(len(tokens)))] = str(rng.choice(HOSTILE))
            edited[i] = f"{key}=" + " ".join(tokens)
        elif kind == 3:
            del edited[i]
        elif kind == 4:
            edited.insert(i, edited[i])
        else:
            child = [j for j in fields if lines[j].startswith(("left_child=", "right_child="))]
            a, b = (child[int(c)] for c in rng.integers(len(child), size=2))
            ta, tb = edited[a].split("=")[1].split(" "), edited[b].split("=")[1].split(" ")
            p, q = int(rng.integers(len(ta))), int(rng.integers(len(tb)))
            ta[p], tb[q] = tb[q], ta[p]
            edited[a] = edited[a].split("=")[0] + "=" + " ".join(ta)
            edited[b] = edited[b].split("=")[0] + "=" + " ".join(tb)
        out.append((f"{key} {['', '', 'value', 'line dropped', 'line repeated', 'children swapped'][kind]}",
                    "\n".join(edited)))
    return out


def test_tampered_model_texts_are_one_line_errors_or_sound_models(small):
    text, x = small
    refused = loaded = 0
    for what, mutant in _mutants(text, 400, seed=0):
        try:
            model = LambdaRank.from_json({"models": [mutant]})
        except ForestError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("models[0]: "), (what, str(exc))
            refused += 1
            continue
        loaded += 1  # a change LightGBM would read as a sound model: it predicts finite numbers of the right shape
        if model.width == x.shape[1]:
            scores = model.scores(x[:, None, :])
            assert scores.shape == (len(x), 1) and np.isfinite(scores).all(), what
            assert np.isfinite(model.importances()).all(), what
    assert refused > 200 and loaded > 50  # both outcomes were met many times


def _dies_in_lightgbm(text: str, tmp_path: Path) -> int:
    """The return code of a process that hands `text` to LightGBM's own loader and predicts once."""
    file = tmp_path / "model.txt"
    file.write_text(text)
    code = ("import sys, numpy, lightgbm\n"
            "b = lightgbm.Booster(model_str=open(sys.argv[1]).read())\n"
            "b.predict(numpy.zeros((4, b.num_feature())), num_threads=1)\n")
    return subprocess.run([sys.executable, "-c", code, str(file)], capture_output=True, timeout=120).returncode


def test_texts_that_kill_lightgbms_own_loader_are_refused_here(small, tmp_path):
    """What the old reader did with these (LightGBM's loader, as a stored fit was read): SIGABRT or SIGSEGV."""
    text, _ = small
    tree = text.index("Tree=0")
    cases = {
        "truncated": text[: len(text) * 2 // 3],
        "more leaves than values": text[:tree] + text[tree:].replace("num_leaves=", "num_leaves=9", 1),
        "a child index past the tree": re.sub(r"left_child=(-?\d+)", "left_child=123456", text, count=1),
        "a huge leaf count": text.replace("num_leaves=", "num_leaves=2000000000", 1),
    }
    for what, mutant in cases.items():
        assert _dies_in_lightgbm(mutant, tmp_path) < 0, what  # killed by a signal, no Python error
        with pytest.raises(ForestError):
            Forest.parse(mutant)
    assert _dies_in_lightgbm(text, tmp_path) == 0  # the untouched text loads there


def _queries(n=90, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        right = int(rng.integers(0, 5))
        cands = tuple(Candidate(text=f"answer {i}.{c}", correct=c == right,
                                scores={"orm": float(rng.normal() + (0.9 if c == right else 0.0)),
                                        "judge": float(rng.integers(4, 8) + (1 if c == right else 0))})
                      for c in range(5))
        out.append(Query(f"q{i}", f"question {i} about topic {i % 5}", cands, domain="math"))
    return out


@pytest.fixture(scope="module")
def lambdarank_pool():
    return build_pool(_queries(), HashEmbedder(), rm_names=("orm", "judge"))


@pytest.fixture(scope="module")
def stored_fit(lambdarank_pool):
    return fit_learned(lambdarank_pool, settings=[LAMBDARANK], baselines=False, repeats=1).to_json()


def _booster(fit, edit):
    fit = json.loads(json.dumps(fit))
    models = fit["components"][0]["model"]["models"]
    models[1] = edit(models[1])
    return fit


def _edited(fit, path, value):
    fit = json.loads(json.dumps(fit))
    *parents, last = path
    target = fit
    for key in parents:
        target = target[key]
    target[last] = value
    return fit


TAMPERED = {
    "a booster cut short": (lambda f: _booster(f, lambda t: t[: len(t) // 2]), "models[1]: truncated"),
    "a child index out of range": (lambda f: _booster(f, lambda t: re.sub(r"left_child=-?\d+ \d+", "left_child=-1 "
                                                                           "40", t, count=1)), "left_child[1]"),
    "a feature index out of range": (lambda f: _booster(f, lambda t: t.replace("split_feature=", "split_feature=77",
                                                                               1)), "split_feature[0]"),
    "a huge leaf count": (lambda f: _booster(f, lambda t: t.replace("num_leaves=", "num_leaves=100000000", 1)),
                          "num_leaves"),
    "a booster of another width": (lambda f: _booster(f, lambda t: t.replace("max_feature_idx=", "max_feature_idx=9",
                                                                             1)), "boosters read"),
    "models not a list": (lambda f: _edited(f, ["components", 0, "model", "models"], "x"), "list of model texts"),
    "scales of another length": (lambda f: _edited(f, ["components", 0, "spec", "scale"], [1.0]), "spec.scale"),
    "step scores the pool lacks": (lambda f: _edited(f, ["components", 0, "spec", "step_members"], ["orm"]),
                                   "step scores"),
    "a calibrator of another width": (lambda f: _edited(f, ["calibrator", "coef"], [1.0]), "calibrator"),
    "a normaliser without a member": (lambda f: _edited(f, ["components", 0, "spec", "pool_z", "shift"], {}),
                                      "spec.pool_z"),
    "a negative scale": (lambda f: _edited(f, ["components", 0, "spec", "scale", 0], -1.0), "spec.scale"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_pool_fails_in_one_line_naming_pool_json_and_the_field(lambdarank_pool, stored_fit, tmp_path,
                                                                          case):
    tamper, field = TAMPERED[case]
    replace(lambdarank_pool, meta={**lambdarank_pool.meta, "learned": tamper(stored_fit)}).save(tmp_path / "pool")
    pool = load_pool(tmp_path / "pool")
    with pytest.raises(InputError) as caught:
        Router(pool, embedder=HashEmbedder()).route([_queries(1, seed=9)[0]])[0]
    message = str(caught.value)
    assert caught.value.path == str(tmp_path / "pool" / "pool.json") and "\n" not in message
    assert "malformed learned selector learned: " in message and field in message, message


def test_an_untouched_stored_fit_is_used_as_stored(lambdarank_pool, stored_fit, tmp_path):
    replace(lambdarank_pool, meta={**lambdarank_pool.meta, "learned": stored_fit}).save(tmp_path / "pool")
    ranking = Router(load_pool(tmp_path / "pool"), embedder=HashEmbedder()).route([_queries(1, seed=9)[0]])[0]
    assert ranking.selection.choice.details["learner"].startswith("lambdarank [full]")


@pytest.mark.slow
def test_rank_on_a_tampered_pool_exits_2_in_one_line_where_it_crashed(embedder, stored_fit, tmp_path):
    """Through the CLI in its own process, as a downloaded pool is used: the old reader died by SIGABRT here."""
    from morkit.data.contract import save_queries

    pool = build_pool(_queries(), embedder, rm_names=("orm", "judge"))
    tampered = _booster(stored_fit, lambda t: t[: len(t) // 2])
    replace(pool, meta={**pool.meta, "learned": tampered}).save(tmp_path / "pool")
    save_queries(tmp_path / "q.jsonl", _queries(2, seed=9))
    done = subprocess.run([sys.executable, "-m", "morkit.cli", "rank", str(tmp_path / "q.jsonl"), "--pool",
                           str(tmp_path / "pool"), "-o", str(tmp_path / "out.jsonl"), "--no-run"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    err = done.stderr.strip()
    assert err.startswith(f"morkit: error: {tmp_path / 'pool' / 'pool.json'}: malformed learned selector learned: ")
    assert "\n" not in err and "truncated" in err
