"""The HTML reports render the same text as before they became templates: each report (pool, its selection section
in every shape, pipeline) is rendered from a fixed input and its text content, whitespace-normalised, is compared
with report_texts.json. Those texts were written by the f-string reports the templates replaced, from these same
inputs; a deliberate change to a report's wording rewrites them with MORKIT_WRITE_REPORT_TEXTS=1."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from fakes.embedder import HashEmbedder

from morkit.core.types import Candidate, Query
from morkit.question_pool import report as pool_report
from morkit.question_pool.pool import build_pool
from morkit.selection import report as selection_report

TEXTS = Path(__file__).with_name("report_texts.json")
EVIL_RM = "<script>alert(1)</script>"
EVIL_DOMAIN = 'code & "<b>"'


class _Text(HTMLParser):
    """The page's text as a reader sees it: every text node (the title's too), not the stylesheet."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self._style = [], False

    def handle_starttag(self, tag, attrs):
        self._style = tag in ("style", "script")

    def handle_endtag(self, tag):
        self._style = False

    def handle_data(self, data):
        if not self._style:
            self.parts.append(data)


def page_text(path: Path) -> str:
    parser = _Text()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    return " ".join(" ".join(parser.parts).split())


def _queries() -> list[Query]:
    rng = np.random.default_rng(7)
    rms, out = ("rm_a", EVIL_RM, "rm_c"), []
    for d, domain in enumerate(("math", EVIL_DOMAIN)):
        for i in range(12):
            correct = rng.random(5) < 0.4
            correct[0], correct[1] = True, i % 5 != 0
            candidates = tuple(Candidate(text=f"answer {c}", correct=bool(ok),
                                         scores={rm: float(ok * (r + 1) * 0.5 + rng.normal())
                                                 for r, rm in enumerate(rms)})
                               for c, ok in enumerate(correct))
            out.append(Query(f"q{d}-{i}", f"Question {i} of <{domain}>?", candidates, domain=domain))
    return out


def _pool(**meta):
    pool = build_pool(_queries(), HashEmbedder())
    fixed = {"created": "2025-01-02T03:04:05", "updated": "2025-01-02T03:04:05", "revision": 3,
             "morkit_version": "0.1.0", "not_applicable": {"rm_c": {EVIL_DOMAIN: 12}}}
    return replace(pool, meta={**pool.meta, **fixed, **meta})


def _fit(members, learner="logit", **extra):
    return {"label": f"{learner} C=1", "components": [{"setting": {"learner": learner},
                                                       "spec": {"members": list(members)}}],
            "cv_best_of_n": 0.8125,
            "cv_table": [[f"{learner} C=0.1", 0.75, 0.05], [f"{learner} C=1", 0.8125, 0.04], ["blend", 0.7, None]],
            "report": {"folds": 5, "repeats": 2, "cv_questions": 24, "questions": 24,
                       "reliability": {"bins": [{"low": 0.0, "high": 0.5, "count": 6, "confidence": 0.31,
                                                 "accuracy": 0.5},
                                                {"low": 0.5, "high": 1.0, "count": 18, "confidence": 0.82,
                                                 "accuracy": 0.7777}], "ece": 0.0812, "picks": 24},
                       "importances": {f"query-z:{EVIL_RM}": 0.42, "pool-z:rm_a@mean": -0.3, "agreement:votes": 0.1,
                                       "query-z:rm_c": float("nan")},
                       "domains": {"math": {"questions": 12, "learned": 0.75, "best_single": 0.6667,
                                            "best_single_rm": "rm_a"},
                                   EVIL_DOMAIN: {"questions": 12, "learned": 0.5, "best_single": -1.0,
                                                 "best_single_rm": "rm_c"}}},
            **extra}


@pytest.fixture
def fixed_estimates(monkeypatch):
    """The stacker's CV and PRES's leave-one-out as fixed figures: their fits are not what a template lays out."""
    monkeypatch.setattr(selection_report, "_stacker_row",
                        lambda pool: ["stacker: logit C=1", 0.7917, 0.03, "5-fold CV, 24 questions"])
    monkeypatch.setattr(selection_report, "_loo", lambda pool, method, k: (0.625 if method == "pres" else 0.6, 24))


def _pool_page(tmp_path, monkeypatch, pool, sections=()):
    monkeypatch.setattr(pool_report, "leak_warnings", lambda evidence: [f"{EVIL_RM} is far ahead", "second & last"])
    return pool_report.write_report(pool, tmp_path / "pool.html", top=4, sections=sections)


def _selection_page(tmp_path, monkeypatch, pool, k=10):
    return _pool_page(tmp_path, monkeypatch, pool, [selection_report.selection_section(pool, k=k)])


def _pipeline_page(tmp_path):
    from morkit.services.pipeline.report import write_reports

    class Run:
        def path(self, name):
            return tmp_path / name

    def method(name, detail, accuracy, reference=False):
        return {"method": name, "detail": detail, "accuracy": accuracy, "questions": 3, "tokens": 120,
                "llm_calls": 9, "rm_calls": 4, "seconds": 1.25, "reference": reference}

    report = {"config": "<run>.toml", "agents": "agents.toml", "rms": ["math-consensus", EVIL_RM],
              "search": ["acs"], "aggregator": "judge", "strict_grading": False,
              "benchmarks": [{"benchmark": "<b>gsm8k", "validation_questions": 4, "test_questions": 3,
                              "methods": [method("oracle", "any correct", 1.0, True),
                                          method("MoR rank", "rm_a + rm_c", 0.6667),
                                          method("majority vote", "3 agents", float("nan"))]}],
              "stages": {"split": {"seconds": 0.01, "output": "x", "questions": 7},
                         "pool": {"seconds": 2.5, "rms": [EVIL_RM]}}}
    write_reports(Run(), report)
    return tmp_path / "report.html"


CASES = {
    "pool": lambda tmp, mp: _pool_page(tmp, mp, _pool()),
    "pool-one-domain": lambda tmp, mp: pool_report.write_report(
        replace(build_pool([q for q in _queries() if q.domain == "math"], HashEmbedder()),
                meta={"created": "c", "updated": "u", "revision": 1}), tmp / "single.html"),
    "selection-learned-and-subsets": lambda tmp, mp: _selection_page(
        tmp, mp, _pool(learned=_fit(["rm_a", EVIL_RM, "rm_c"]),
                       learned_subsets=[_fit(["rm_a", EVIL_RM], learner="lambdarank")])),
    "selection-lambdarank": lambda tmp, mp: _selection_page(
        tmp, mp, _pool(learned=_fit(["rm_a", EVIL_RM, "rm_c"], learner="lambdarank"))),
    "selection-pres-chosen": lambda tmp, mp: _selection_page(
        tmp, mp, _pool(learned={**_fit(["rm_a"]), "pres_members": ["rm_a", "rm_c"],
                                "report": {"folds": 5, "reliability": {}, "importances": {}, "domains": {}}})),
    "selection-none-stored": lambda tmp, mp: _selection_page(tmp, mp, _pool(), k=5),
    "pipeline": lambda tmp, mp: _pipeline_page(tmp),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_report_renders_the_text_it_rendered_before_templates(case, tmp_path, monkeypatch, fixed_estimates):
    text = page_text(CASES[case](tmp_path, monkeypatch))
    if os.environ.get("MORKIT_WRITE_REPORT_TEXTS"):
        stored = json.loads(TEXTS.read_text(encoding="utf-8")) if TEXTS.exists() else {}
        TEXTS.write_text(json.dumps({**stored, case: text}, indent=1, ensure_ascii=False, sort_keys=True) + "\n",
                         encoding="utf-8")
        pytest.skip("wrote the expected text")
    assert text == json.loads(TEXTS.read_text(encoding="utf-8"))[case]


def test_every_template_compiles_and_ships_as_package_data():
    import tomllib

    from morkit.data import html

    root = Path(html.__file__).resolve().parents[1]
    names = html._environment().list_templates()
    assert {"base.html.j2", "macros.html.j2", "pool_report.html.j2", "selection_section.html.j2",
            "pipeline_report.html.j2"} <= set(names)
    for name in names:
        html._environment().get_template(name)
    patterns = tomllib.loads((root.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {p for pattern in patterns["morkit"] for p in root.glob(pattern)}
    assert {root / "resources" / "templates" / name for name in names} <= shipped


def test_importing_the_reports_loads_no_template_engine():
    import subprocess
    import sys

    code = ("import sys, morkit.question_pool.report, morkit.selection.report, morkit.services.pipeline.report; "
            "print(any(m.split('.')[0] in ('jinja2', 'matplotlib') for m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_a_section_is_html_only_when_a_template_rendered_it(tmp_path, monkeypatch, fixed_estimates):
    from markupsafe import Markup

    pool = _pool(learned=_fit(["rm_a", EVIL_RM, "rm_c"]))
    section = selection_report.selection_section(pool, k=10)
    assert isinstance(section, Markup) and "<h2>" in section
    raw = "<h2>raw</h2><script>alert(2)</script>"
    page = _pool_page(tmp_path, monkeypatch, pool, [section, raw]).read_text(encoding="utf-8")
    assert str(section) in page  # the selection section as HTML, tags and all
    assert "<script>alert(2)" not in page and "<h2>raw</h2>" not in page  # a plain string: its text, escaped
    assert "&lt;h2&gt;raw&lt;/h2&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in page
