"""The pool HTML report: one self-contained file, escaped user text, atomic writes, renders in a browser; and
its Selection section (morkit.selection.report): method accuracy, reliability, learned weights, domain gains."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from dataclasses import dataclass, replace
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from fakes.embedder import HashEmbedder

from morkit.cli import main
from morkit.core.types import Candidate, Query
from morkit.question_pool import report
from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.question_pool.report import write_report
from morkit.selection.learned_method import with_stored_learned
from morkit.selection.report import selection_section

CHROMIUM = Path("/usr/bin/chromium")
EVIL_RM = "<script>alert(1)</script>"
EVIL_DOMAIN = 'code & "<b>"'
VOID = {"meta", "img", "br", "hr", "link", "input"}


@dataclass
class FakeEmbedder:
    """Random unit vectors: the report never looks at embeddings."""

    name: str = "fake-embedder"
    dim: int = 8

    def encode(self, texts, progress=False):
        vectors = np.random.default_rng(len(texts)).normal(size=(len(texts), self.dim)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def synthetic_queries(rm_names, domains, per_domain=12, n=6, seed=0):
    """Labelled queries whose RMs are better than chance by different margins."""
    rng = np.random.default_rng(seed)
    queries = []
    for d, domain in enumerate(domains):
        for i in range(per_domain):
            correct = rng.random(n) < 0.4
            correct[0], correct[1] = True, i % 5 != 0  # some questions all-correct: PRR undefined there
            candidates = tuple(
                Candidate(text=f"answer {c}", correct=bool(ok),
                          scores={rm: float(ok * (r + 1) * 0.5 + rng.normal()) for r, rm in enumerate(rm_names)})
                for c, ok in enumerate(correct))
            queries.append(Query(f"q{d}-{i}", f"Question {i} of <{domain}>?", candidates, domain=domain))
    return queries


def make_pool(rm_names=("rm_a", "rm_b", "rm_c"), domains=("math", "gsm8k"), **config):
    return build_pool(synthetic_queries(rm_names, domains), FakeEmbedder(), config=PoolConfig(**config))


class _Checker(HTMLParser):
    """Collects tags, image sources and text, and fails on unbalanced tags."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.images, self.headings, self.text, self._in = [], [], [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag not in VOID:
            self.stack.append(tag)
        self._in = tag

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)
        if self._in in ("h1", "h2", "h3"):
            self.headings.append(data)


def parse(path: Path) -> _Checker:
    checker = _Checker()
    checker.feed(path.read_text(encoding="utf-8"))
    checker.close()
    assert checker.stack == [], f"unclosed tags {checker.stack}"
    return checker


def png_bytes(src: str) -> bytes:
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix)
    return base64.b64decode(src[len(prefix):], validate=True)


def test_report_is_one_self_contained_page(tmp_path):
    pool = make_pool()
    out = write_report(pool, tmp_path / "sub" / "report.html", top=5)
    assert out == tmp_path / "sub" / "report.html" and out.is_file()
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    checker = parse(out)
    for heading in ("Question pool report", "PRR by reward model and domain", "Single reward models",
                    "Best ensembles", "Top 5 by mean PRR", "Top 5 by best-of-n accuracy",
                    "PRR distribution per reward model", "Reward models against each other"):
        assert heading in checker.headings
    assert len(checker.images) == 3  # heatmap, ensemble bars, distribution
    for src in checker.images:
        assert png_bytes(src).startswith(b"\x89PNG\r\n\x1a\n")
    assert not re.search(r'(src|href)="(?!data:)', page), "no external assets"
    text = " ".join(checker.text)
    for fact in ("fake-embedder", "flat", "0.1.0", "rm_a", "rm_c", "PRR gsm8k", "best single:"):
        assert fact in text
    assert f"{len(pool)} in 2 domain(s)" in text


def test_user_text_is_escaped(tmp_path):
    pool = make_pool(rm_names=("rm_a", EVIL_RM, r"$\frac$"), domains=("math", EVIL_DOMAIN))
    out = write_report(pool, tmp_path / "report.html")
    page = out.read_text(encoding="utf-8")
    assert "<script" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    text = " ".join(parse(out).text)
    assert EVIL_RM in text and EVIL_DOMAIN in text and r"$\frac$" in text  # literal; would break mathtext


def test_one_domain_and_singles_only(tmp_path):
    pool = make_pool(domains=("math",), max_members=1)
    checker = parse(write_report(pool, tmp_path / "report.html"))
    text = " ".join(checker.text)
    assert len(checker.images) == 2  # no ensemble chart
    assert "no ensembles of two or more RMs" in text and "PRR math" not in text
    for src in checker.images:
        assert png_bytes(src).startswith(b"\x89PNG")


def test_failure_leaves_no_partial_file(tmp_path, monkeypatch):
    pool = make_pool()
    folder = tmp_path / "out"  # tmp_path also holds conftest's cache dir
    folder.mkdir()
    target = folder / "report.html"
    target.write_text("old report", encoding="utf-8")

    def broken(*args, **kwargs):
        raise RuntimeError("plot failed")

    monkeypatch.setattr(report, "_distribution", broken)
    with pytest.raises(RuntimeError, match="plot failed"):
        write_report(pool, target)
    with pytest.raises(RuntimeError):
        write_report(pool, folder / "new.html")
    assert target.read_text(encoding="utf-8") == "old report"
    assert sorted(p.name for p in folder.iterdir()) == ["report.html"]


def test_import_does_no_plotting_work():
    code = ("import sys, morkit.question_pool.report, morkit.selection.report; "
            "print(any(m.startswith('matplotlib') for m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium")
def test_renders_in_headless_chromium(tmp_path):
    from matplotlib.image import imread

    out = write_report(make_pool(), tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1400,3000",
                    out.resolve().as_uri()], check=True, capture_output=True, timeout=120)
    assert shot.is_file()
    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (3000, 1400)
    assert pixels.std() > 0.05  # not a blank page
    assert (pixels.mean(axis=2) < 0.5).mean() > 0.005  # some dark text and plot ink


@pytest.fixture(scope="module")
def learned_pool():
    """24 questions, all with a right and a wrong answer: enough for the learned selector; RM and domain names
    that must be escaped."""
    queries = synthetic_queries(("rm_a", EVIL_RM, "rm_c"), ("math", EVIL_DOMAIN))
    pool = with_stored_learned(build_pool(queries, HashEmbedder()))
    assert "learned" in pool.meta and "stacker" not in pool.meta  # the "stacker" row is fitted by the report
    return pool


def _selection_text(checker: _Checker) -> str:
    text = " ".join(checker.text)
    return text[text.index("Selection"):]


@pytest.mark.slow
def test_selection_section_shows_its_four_parts(learned_pool, tmp_path):
    out = write_report(learned_pool, tmp_path / "report.html", sections=[selection_section(learned_pool)])
    checker = parse(out)
    for heading in ("Selection", "Accuracy by selection method", "Confidence reliability (learned selector)",
                    "Gain over the best single RM per domain"):
        assert heading in checker.headings
    assert any(h.startswith("Learned feature weights (top ") for h in checker.headings)
    assert len(checker.images) == 3 + 2  # the pool's plots, then method bars and the reliability diagram
    for src in checker.images:
        assert png_bytes(src).startswith(b"\x89PNG")
    text = _selection_text(checker)
    learned = learned_pool.meta["learned"]
    chosen = learned["label"]
    assert f"learned: {chosen} (chosen)" in text and text.count("(chosen)") == 1
    assert text.count("learned: ") == len(learned["cv_table"])
    for fact in ("stacker: ", "PRES (k = 100)", "PRES top-1 (k = 100)", "best single RM: ", "leave-one-out, 24 "
                 "questions", f"ECE): {learned['report']['reliability']['ece']:.3f}", "query-z", "gain (points)"):
        assert fact in text
    for domain, d in learned["report"]["domains"].items():
        assert f"{100 * (d['learned'] - d['best_single']):+.1f}" in text


def test_selection_section_falls_back_to_pres_on_a_small_pool(tmp_path):
    pool = with_stored_learned(build_pool(synthetic_queries(("rm_a", "rm_b"), ("math",), per_domain=8),
                                          HashEmbedder()))
    assert "learned" not in pool.meta and "stacker" not in pool.meta
    checker = parse(write_report(pool, tmp_path / "report.html", sections=[selection_section(pool, k=5)]))
    text = _selection_text(checker)
    assert "falls back to PRES" in text and "PRES (k = 5)" in text and "learned: " not in text
    assert "Confidence reliability (learned selector)" not in checker.headings
    assert len(checker.images) == 3 + 1  # the pool's plots, then the method bars


def test_selection_section_escapes_user_text(learned_pool, tmp_path):
    out = write_report(learned_pool, tmp_path / "report.html", sections=[selection_section(learned_pool)])
    page = out.read_text(encoding="utf-8")
    section = page[page.index("<h2>Selection</h2>"):]
    assert "<script" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section  # in the feature-weight table's RM column
    text = _selection_text(parse(out))
    assert EVIL_RM in text and EVIL_DOMAIN in text


@pytest.mark.slow
def test_selection_section_survives_nan_and_missing_values(learned_pool, tmp_path):
    learned = learned_pool.meta["learned"]
    nan = float("nan")
    damaged = {**learned, "label": "retired", "components": [{"setting": {"learner": "retired"}}], "cv_table": [["old label", nan, nan], ["other", 0.5, nan]],
               "report": {"reliability": {"bins": [{"low": 0.0, "high": 0.1, "count": 3, "confidence": nan,
                                                    "accuracy": 0.5}], "ece": nan, "picks": 3},
                          "importances": {"query-z:rm_a": nan, "agreement:votes": -0.2, "pool-z:prm@last": 0.1},
                          "domains": {"math": {"questions": 4, "learned": nan, "best_single": -1.0,
                                               "best_single_rm": "rm_a"}}}}
    pool = replace(learned_pool, meta={**learned_pool.meta, "learned": damaged,
                                       "stacker": {"cv_best_of_n": nan}})
    checker = parse(write_report(pool, tmp_path / "report.html", sections=[selection_section(pool)]))
    text = _selection_text(checker)
    assert "learned: other (chosen)" in text  # the stored setting names no row: the best row is marked
    assert "No out-of-fold picks" in text and "agreement (votes)" in text and "pool-z, steps last" in text
    assert "–" in text and "nan" not in text.lower()


@pytest.mark.slow
def test_pool_report_cli_adds_the_selection_section(learned_pool, tmp_path):
    learned_pool.save(tmp_path / "pool")
    out = tmp_path / "report.html"
    assert main(["pool", "report", str(tmp_path / "pool"), "-o", str(out)]) == 0
    checker = parse(out)
    assert "Selection" in checker.headings and len(checker.images) == 5
