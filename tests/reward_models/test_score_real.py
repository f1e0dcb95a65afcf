"""`morkit score` and `morkit demo` end to end on the real embedded models and the packaged sample."""

from __future__ import annotations

import json

import pytest

from morkit.cli import main
from morkit.demo import sample_path

pytestmark = pytest.mark.slow


def _lines(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def test_score_writes_every_candidate_and_reuses_the_cache(tmp_path, capsys):
    out = tmp_path / "scored.jsonl"
    args = ["score", str(sample_path()), "-o", str(out), "--rm", "smollm2-orm", "--rm", "minilm-probe", "-q"]
    assert main(args) == 0
    first = _lines(out)
    source = _lines(sample_path())
    assert [q["id"] for q in first] == [q["id"] for q in source]
    for query, original in zip(first, source):
        assert len(query["candidates"]) == len(original["candidates"])
        for cand in query["candidates"]:
            assert 0.0 <= cand["scores"]["smollm2-orm"] <= 1.0
            assert 0.0 <= cand["scores"]["minilm-probe"] <= 1.0
    capsys.readouterr()
    assert main(args) == 0
    pairs = sum(len(q["candidates"]) for q in source)
    assert f"cache hits {2 * pairs}" in capsys.readouterr().err
    assert _lines(out) == first


def test_non_finite_model_score_names_the_query(tmp_path, monkeypatch, capsys):
    from morkit.reward_models.embedded import models

    monkeypatch.setattr(models.FeatureHeadRM, "head", lambda self, pooled: [float("nan")] * len(pooled))
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"id": "q-nan", "question": "What is 2+3?",
                                  "candidates": [{"text": "5"}, {"text": "6"}]}) + "\n")
    out = tmp_path / "out.jsonl"
    code = main(["score", str(source), "-o", str(out), "--rm", "smollm2-orm", "--no-cache", "-q"])
    assert code == 1
    err = capsys.readouterr().err
    assert "non-finite score" in err and "for query 'q-nan'" in err
    assert not out.exists()


def test_demo_routes_on_real_scores_then_runs_the_live_path_offline(capsys, monkeypatch):
    """Routing on the packaged RewardMATH scores, then scoring, a pool, PRES and ACS with real SmolLM2 agents; the
    README's demo figures are what this run printed (tests/test_pages.py reads them)."""
    import re

    from test_pages import check_demo_figures

    assert main(["demo"]) == 0
    printed = capsys.readouterr().out
    routing, live = printed.split("== 2. Live", 1)
    check_demo_figures(routing)
    held = re.search(r"Held-out best-of-10 accuracy over (\d+) problems .*best single RM (\S+) ([\d.]+)%, "
                     r"morkit ([\d.]+)%", routing)
    assert held and int(held.group(1)) > 50 and held.group(2) in routing.split("Best single RM on the pool: ")[1]
    assert 0 < float(held.group(3)) < 100 and 0 < float(held.group(4)) < 100
    assert routing.count("morkit picks solution") == 3
    for query in _lines(sample_path())[:1]:
        assert f"[{query['id']}]" in live
    for name in ("smollm2-orm", "minilm-probe", "math-consensus", "code-tests"):
        assert name in live
    first_search = _lines(sample_path("search.jsonl"))[0]
    section = live.split(f"[{first_search['id']}]", 1)[1]
    assert "ensemble (pres):" in section
    assert "answers" in section and "initial" in section and "final:" in section
