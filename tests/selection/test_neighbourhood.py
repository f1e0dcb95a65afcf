"""PRES's neighbourhoods: the k nearest pool questions ("all") or the k nearest valid ones ("valid"), found by one
filtered search on every index kind, as a switch from Python and the CLI (select and serve), the default pinned, and
a bad value refused in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fakes.queries import scored_query

from morkit.cli import main
from morkit.core.errors import InputError
from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.selection.methods import SelectOptions
from morkit.selection.router import Router

K = 4


class AngleEmbedder:
    """Each question text names its angle ("... at 0.05"): a unit vector in the plane, so similarity is its cosine
    to the query at angle 0."""

    name = "angle-embedder"
    dim = 2

    def encode(self, texts, *, batch_size=64, progress=False):
        angles = [float(t.rsplit(" at ", 1)[1]) for t in texts]
        return np.array([[math.cos(a), math.sin(a)] for a in angles], dtype=np.float32).reshape(len(texts), 2)


def _pool_queries():
    """Nearest the query: one valid question where RM "a" ranks right, then 40 questions with only correct answers
    (invalid: no PRR), then 4 valid ones where "b" ranks right, then 60 far valid ones where neither does."""
    right, wrong = [1.0, 0.0], [0.0, 1.0]
    out = [scored_query("near-a", {"a": right, "b": wrong}, [True, False], question="near a at 0.01")]
    out += [scored_query(f"same{i}", {"a": right, "b": wrong}, [True, True], question=f"same {i} at {0.02 + i / 1000}")
            for i in range(40)]
    out += [scored_query(f"b{i}", {"a": wrong, "b": right}, [True, False], question=f"b {i} at {0.5 + i / 100}")
            for i in range(4)]
    out += [scored_query(f"far{i}", {"a": wrong, "b": wrong}, [True, False], question=f"far {i} at {2 + i / 100}")
            for i in range(60)]
    return out


@pytest.fixture(scope="module")
def pool():
    return build_pool(_pool_queries(), AngleEmbedder(), config=PoolConfig(max_members=1))


def _query_vector():
    return AngleEmbedder().encode(["the query at 0"])


def test_valid_neighbourhood_reaches_past_invalid_questions_in_similarity_order(pool):
    from morkit.selection.neighbourhood import NeighbourSearch, valid_questions

    valid = valid_questions(pool)
    assert valid.sum() == 65 and not valid[1:41].any()
    near_all = NeighbourSearch(pool, K, "all").find(_query_vector())[0]
    assert near_all.ids == ("near-a", "same0", "same1", "same2")  # three of the four add nothing to PRES
    near_valid = NeighbourSearch(pool, K, "valid").find(_query_vector())[0]
    assert near_valid.ids == ("near-a", "b0", "b1", "b2")
    sims = pool.embeddings @ _query_vector()[0]
    want = np.flatnonzero(valid)[np.argsort(-sims[valid], kind="stable")[:K]]
    assert near_valid.rows.tolist() == want.tolist()
    assert np.all(np.diff(near_valid.similarities) <= 0)


def test_valid_neighbourhood_excludes_a_row_and_stops_at_the_pool(pool):
    from morkit.selection.neighbourhood import NeighbourSearch, valid_questions

    near = NeighbourSearch(pool, K, "valid").find(pool.embeddings[:1], exclude=[0])[0]
    assert 0 not in near.rows.tolist() and near.ids == ("b0", "b1", "b2", "b3")
    everything = NeighbourSearch(pool, 1000, "valid").find(_query_vector())[0]
    assert len(everything.rows) == 65 and valid_questions(pool)[everything.rows].all()


def test_exclude_needs_one_row_per_vector(pool):
    from morkit.selection.neighbourhood import NeighbourSearch

    with pytest.raises(InputError, match="exclude holds 1 pool rows for 2 query vectors"):
        NeighbourSearch(pool, K, "valid").find(pool.embeddings[:2], exclude=[0])


def test_the_valid_neighbourhood_is_one_search_for_k(pool, monkeypatch):
    """No wider search: one call asks FAISS for k (k + 1 with a row to exclude) and filters inside the search."""
    from morkit.selection import neighbourhood

    calls = []

    def counted(index, queries, k, allowed=None):
        calls.append((len(queries), k, allowed is not None))
        return search(index, queries, k, allowed)

    search = neighbourhood.search
    monkeypatch.setattr(neighbourhood, "search", counted)
    many = np.repeat(_query_vector(), 50, axis=0)
    found = neighbourhood.NeighbourSearch(pool, K, "valid").find(many, exclude=[1] * 50)
    assert calls == [(50, K + 1, True)] and all(n.ids == ("near-a", "b0", "b1", "b2") for n in found)


def test_pres_picks_differently_under_the_valid_reading(pool, monkeypatch):
    embedder = AngleEmbedder()
    query = scored_query("new", {"a": [0.3, 0.6], "b": [0.6, 0.3]}, question="the query at 0")
    whole = Router(pool, "pres", k=K, embedder=embedder).select(query)
    valid = Router(pool, "pres", k=K, embedder=embedder, neighbourhood="valid").select(query)
    assert whole.choice.ensemble.members == ("a",) and valid.choice.ensemble.members == ("b",)
    assert [n["id"] for n in valid.to_json()["neighbours"]] == ["near-a", "b0", "b1", "b2"]
    calibrated = Router(pool, "pres", k=K, embedder=embedder, neighbourhood="valid")
    assert calibrated.neighbourhood == "valid"
    from morkit.selection import router

    fit, seen = router.leave_one_out_calibrator, {}
    monkeypatch.setattr(router, "leave_one_out_calibrator",
                        lambda *a, **kw: seen.update(kw) or fit(*a, **kw))
    calibrated.calibrator()
    assert seen["neighbourhood"] == "valid"  # leave-one-out picks read the same neighbourhood


def test_the_default_neighbourhood_is_all(pool):
    from morkit.cli.main import build_parser
    from morkit.selection.methods import DEFAULT_NEIGHBOURHOOD

    assert DEFAULT_NEIGHBOURHOOD == "all" and SelectOptions().neighbourhood == "all"
    assert Router(pool, "pres", k=K, embedder=AngleEmbedder()).neighbourhood == "all"
    args = build_parser().parse_args(["select", "in.jsonl", "--pool", "p", "-o", "o"])
    assert args.neighbourhood == "all"


def test_cli_flag_reaches_the_chooser(pool, tmp_path, monkeypatch):
    from morkit.data.contract import save_queries
    from morkit.services import routing

    pool.save(tmp_path / "pool")
    save_queries(tmp_path / "in.jsonl", [scored_query("new", {"a": [0.3, 0.6], "b": [0.6, 0.3]},
                                                      question="the query at 0")])
    seen = {}

    def fake_select(queries, pool, options, device=None):
        seen["chooser"] = Router.from_options(pool, options, embedder=AngleEmbedder()).chooser
        return []

    monkeypatch.setattr(routing, "select", fake_select)
    assert main(["select", str(tmp_path / "in.jsonl"), "--pool", str(tmp_path / "pool"), "-o",
                 str(tmp_path / "out.jsonl"), "--method", "pres", "--neighbours", "valid", "-q"]) == 0
    assert seen["chooser"].neighbourhood == "valid" and seen["chooser"].k == 100


def test_bad_neighbourhoods_are_one_line_errors(capsys):
    with pytest.raises(InputError, match="neighbourhood must be one of all, valid"):
        SelectOptions(method="pres", neighbourhood="nearest")
    with pytest.raises(InputError, match="neighbourhood 'valid' does not apply to 'learned'.*pres, pres-top1"):
        SelectOptions(method="learned", neighbourhood="valid")
    with pytest.raises(InputError, match="neighbourhood 'valid' does not apply to 'stacker'"):
        SelectOptions(method="stacker", neighbourhood="valid")
    with pytest.raises(SystemExit) as exc:
        main(["select", "in.jsonl", "--pool", "p", "-o", "o", "--neighbours", "nearest"])
    assert exc.value.code == 2 and "--neighbours" in capsys.readouterr().err


def test_serve_routes_with_the_flag(pool, tmp_path, monkeypatch):
    """`morkit serve`'s own path (cmd_serve: the pool loaded, the RoutingEngine built) with the server stubbed."""
    import socket

    from morkit.question_pool import embed
    from morkit.services.serving import server

    pool.save(tmp_path / "pool")
    seen = {}

    def fake_serve(engine, limits, *, sock, **kwargs):
        seen["router"] = engine.router
        sock.close()
        return True

    monkeypatch.setattr(server, "serve", fake_serve)
    monkeypatch.setattr(server, "bind_socket", lambda host, port: socket.socket())  # bound to nothing
    monkeypatch.setattr(embed, "load_embedder", lambda name, device=None: AngleEmbedder())
    assert main(["serve", "--pool", str(tmp_path / "pool"), "--method", "pres", "--k", "7", "--neighbours", "valid",
                 "-q"]) == 0
    assert seen["router"].neighbourhood == "valid" and seen["router"].k == 7
    assert seen["router"].chooser.finder.neighbourhood == "valid"


def test_the_readings_table_is_the_committed_json():
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    data = json.loads((root / "docs" / "figures" / "pres_neighbours.json").read_text(encoding="utf-8"))
    text = (root / "docs" / "selection.md").read_text(encoding="utf-8")
    text = text[text.index("### Which k questions"):text.index("## Fidelity to CTTS-MM")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith(("| RewardMATH", "| GSM8K"))]
    label = "PRES (paper, with combinations) [zscore]"
    expected = []
    for ds, name in zip(data["datasets"], ("RewardMATH, 22 RMs", "GSM8K model solutions, minilm-probe and "
                                                                 "math-consensus")):
        for reading in ("all", "valid"):
            key = label if reading == "all" else f"{label[:-1]}, valid neighbours]"
            m = ds["methods"][key]
            paired = ds["paired"].get(key)
            expected.append([name, f"{ds['questions']} ({ds['mixed']})", f"`{reading}`", f"{m['mean']:.1f}%",
                             f"{m['se']:.1f}", f"{paired['points']:+.2f} ({paired['se']:.2f})" if paired else "",
                             f"{paired['better']} / {paired['worse']}" if paired else ""])
    assert rows == expected
    gsm8k = data["datasets"][1]["paired"]
    for key in ("PRES singles [zscore, valid neighbours]", "PRES top-1 criterion [zscore, valid neighbours]",
                "PRES top-1 criterion [raw, valid neighbours]"):
        stated = f"{gsm8k[key]['points']:+.2f} (paired SE {gsm8k[key]['se']:.2f})"
        assert stated in re.sub(r"\s+", " ", text), (key, stated)
    assert all(abs(p["points"]) < 2 * p["se"] or p["points"] == 0 for p in gsm8k.values())  # "none reaches 2 SE"
    assert max(p["points"] for p in gsm8k.values()) < 1e-9  # "none favours valid"
