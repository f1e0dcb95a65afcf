"""The bench scripts' own logic, cheaply: bench/plotting.py's house figure (byte-stable SVG, suffix checked, nothing
written on an error), each script's plot drawn from numbers shaped like its --json, and pool_build's tiled rows,
so a break shows here rather than at the end of a ten-minute run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(autouse=True)
def bench_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    yield
    for name in ("plotting", "selection", "selection_figures", "score_throughput", "pool_build", "selection_curve",
                 "cost_frontier", "remote_scoring", "tables", "compute"):
        sys.modules.pop(name, None)


def draw(path: Path) -> None:
    from plotting import figure

    with figure(path, 1, 2) as (fig, axes):
        axes[0, 0].plot([1, 2, 3], [2, 1, 3], "o-", label="a")
        axes[0, 1].bar([1, 2], [3, 4])
        axes[0, 0].legend()


def test_svg_is_byte_stable_and_undated(tmp_path):
    draw(tmp_path / "a.svg")
    draw(tmp_path / "b.svg")
    first = (tmp_path / "a.svg").read_bytes()
    assert first == (tmp_path / "b.svg").read_bytes()
    assert b"<dc:date>" not in first


def test_png_by_suffix(tmp_path):
    draw(tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes().startswith(b"\x89PNG")


def test_other_suffixes_refused_and_nothing_written_on_error(tmp_path):
    from plotting import figure, figure_path

    with pytest.raises(argparse.ArgumentTypeError, match="svg or .png"):
        figure_path("out.pdf")
    with pytest.raises(RuntimeError):
        with figure(tmp_path / "c.svg"):
            raise RuntimeError("mid-plot")
    assert not (tmp_path / "c.svg").exists()


def test_merged_reliability_weights_bins_by_count():
    from selection import merged_reliability

    one = {"bins": [{"low": 0.5, "high": 0.6, "count": 1, "confidence": 0.55, "accuracy": 1.0}]}
    two = {"bins": [{"low": 0.5, "high": 0.6, "count": 3, "confidence": 0.51, "accuracy": 0.0},
                    {"low": 0.9, "high": 1.0, "count": 4, "confidence": 0.95, "accuracy": 1.0}]}
    merged = merged_reliability([one, two])
    low, high = merged["bins"]
    assert (low["count"], high["count"], merged["picks"], merged["fits"]) == (4, 4, 8, 2)
    assert low["confidence"] == pytest.approx(0.52) and low["accuracy"] == pytest.approx(0.25)
    assert merged["ece"] == pytest.approx((4 * 0.27 + 4 * 0.05) / 8)


def selection_result() -> dict:
    methods = {"rm-a": 30.0, "rm-b": 20.0, "best single (chosen on train)": 30.0, "PRES (paper) [zscore]": 35.0,
               "morkit default (learned) [zscore]": 50.0, "random pick (expected)": 10.0, "oracle": 80.0}
    bins = [{"low": b / 10, "high": (b + 1) / 10, "count": 5 + b, "confidence": b / 10 + 0.05,
             "accuracy": b / 10} for b in range(3, 9)]
    return {"name": "toy", "questions": 40, "mixed": 30, "rms": ["rm-a", "rm-b"], "folds": 5, "seeds": [0],
            "singles": ["rm-a", "rm-b"], "methods": {k: {"mean": v, "sd_folds": 3.0} for k, v in methods.items()},
            "selection": ["best single (chosen on train)", "PRES (paper) [zscore]",
                          "morkit default (learned) [zscore]"],
            "roles": {"default": "morkit default (learned) [zscore]", "best_single": "best single (chosen on train)",
                      "random": "random pick (expected)", "oracle": "oracle"},
            "reliability": {"held_out": {"bins": bins, "ece": 0.05, "picks": 39},
                            "pool_out_of_fold": {"bins": bins, "ece": 0.05, "picks": 39, "fits": 5}}}


def test_each_script_draws_its_figure(tmp_path):
    from pool_build import plot as pool_plot
    from score_throughput import plot as throughput_plot
    from selection_figures import plot_accuracy, plot_reliability

    plot_accuracy([selection_result()], tmp_path / "accuracy.svg")
    plot_reliability([selection_result(), selection_result()], tmp_path / "reliability.svg")
    rate = {"pairs": 8, "pairs_per_s": 1.5, "gflops": 90.0}
    rows = [{"path": "loop", "batch_size": 1, "prefix_reuse": False, **rate},
            *({"path": "batched", "batch_size": b, "prefix_reuse": False, **rate} for b in (1, 2)),
            {"path": "batched", "batch_size": 4, "prefix_reuse": True, **rate}]
    throughput_plot({"rm": "smollm2-orm", "pairs": 8, "tokens_per_pair": 200, "threads": 2, "repeats": 2,
                     "rows": rows, "peak_gflops": 180.0, "load_start": 1.0, "load_end": 1.0},
                    tmp_path / "throughput.svg")
    rows = [{"size": s, "seconds": {"rows": s / 1e3, "fit": 0.1, "stats": s / 1e2, "embed": s / 30, "index": 0.01},
             "total_s": s / 20, "index": "flat", "lookup_p50_ms": 0.1, "lookup_p99_ms": 0.3,
             **({"embedded": 1000} if s > 1000 else {})} for s in (1000, 4000)]
    pool_plot({"k": 100, "ensembles": 100, "rows": rows}, tmp_path / "pool.svg")
    for name in ("accuracy", "reliability", "throughput", "pool"):
        assert (tmp_path / f"{name}.svg").read_bytes().startswith(b"<?xml")


def test_tiled_rows_tile_every_per_question_array():
    import numpy as np

    from pool_build import tiled_rows

    from morkit.question_pool.rows import PoolQuestion, PoolRows

    base = PoolRows(questions=(PoolQuestion("a", "A?", "math", 2), PoolQuestion("b", "B?", "math", 2)),
                    scores=np.arange(4.0).reshape(2, 2, 1), correct=np.array([[True, False], [False, True]]),
                    valid=np.ones((2, 2), dtype=bool), skipped={}, missing={"rm": 0},
                    steps=np.arange(12.0).reshape(2, 2, 1, 3), step_rms=("rm",))
    rows = tiled_rows(base, 5)
    assert [q.id for q in rows.questions] == ["a", "b", "a [copy 1]", "b [copy 1]", "a [copy 2]"]
    for name in ("scores", "correct", "valid", "steps"):
        assert len(getattr(rows, name)) == 5, name
    assert np.array_equal(rows.steps[4], base.steps[0])


# Each committed figure and the script function that draws it from the committed numbers beside it.
COMMITTED = [
    ("selection_results", "selection_results", "selection_figures", "plot_accuracy", "datasets"),
    ("reliability", "selection_results", "selection_figures", "plot_reliability", "datasets"),
    ("selection_curve", "selection_curve", "selection_curve", "plot", "datasets"),
    ("throughput", "throughput", "score_throughput", "plot", None),
    ("pool_scaling", "pool_scaling", "pool_build", "plot", None),
]


@pytest.mark.parametrize("figure,numbers,module,function,key", COMMITTED, ids=[c[0] for c in COMMITTED])
def test_each_committed_figure_is_what_its_numbers_draw(figure, numbers, module, function, key, tmp_path):
    import importlib
    import json

    figures = BENCH.parent / "docs" / "figures"
    data = json.loads((figures / f"{numbers}.json").read_text())
    getattr(importlib.import_module(module), function)(data[key] if key else data, tmp_path / f"{figure}.svg")
    assert (tmp_path / f"{figure}.svg").read_bytes() == (figures / f"{figure}.svg").read_bytes(), (
        f"docs/figures/{figure}.svg is not what {module}.{function} draws from {numbers}.json: redraw it")


# Packages a bare GPU machine (python3, torch, transformers) lacks: the GPU check must run without any of them.
NOT_ON_A_GPU_MACHINE = ("sentence_transformers", "faiss", "sklearn", "scipy", "lightgbm", "threadpoolctl",
                        "matplotlib", "math_verify", "gguf", "accelerate", "vllm", "ray")


def test_gpu_check_runs_in_tiny_cpu_mode_with_only_torch_and_transformers(tmp_path):
    import json
    import os
    import subprocess

    out = tmp_path / "out"
    # sys.modules[name] = None: importing it fails and find_spec says it is absent, as on the GPU machine
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in NOT_ON_A_GPU_MACHINE)
    code = f"import runpy, sys; {blocked}; runpy.run_path({str(BENCH / 'gpu_check.py')!r}, run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", code, "--device", "cpu", "--tiny"], check=False, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env={**os.environ, "OUT": str(out)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((out / "gpu_check.json").read_text())
    paths = result["speed"]["paths"]
    assert set(paths) == {"plain loop", "batched", "batched+pfx", "batched/nocap",
                          "batched+pfx/nocap"} and result["speed"]["peak_gflops"] > 0
    assert all(row["pairs_per_s"] > 0 and row["max_abs_diff_vs_plain"] < 0.1 for row in paths.values())
    rows = result["parity"]["rows"]
    assert result["parity"]["ok"] and len(rows) == 8 and {r["dtype"] for r in rows} == {"bfloat16"}
    assert "best path over the plain loop" in done.stdout and "parity: all ok" in done.stdout


def test_cost_frontier_plot_and_frontier_from_numbers_shaped_like_its_json(tmp_path):
    import cost_frontier

    methods = {
        "a": {"kind": "single", "accuracy": 30.0, "cost": 10.0, "share": 0.01},
        "b": {"kind": "single", "accuracy": 25.0, "cost": 20.0, "share": 0.02},
        cost_frontier.DEFAULT: {"kind": "learned", "accuracy": 60.0, "cost": 1000.0, "share": 1.0},
        "learned, budget 10%": {"kind": "learned", "accuracy": 50.0, "cost": 90.0, "share": 0.09},
        "PRES, budget 10%": {"kind": "pres", "accuracy": 40.0, "cost": 95.0, "share": 0.095},
        "cascade, spend 25%": {"kind": "cascade", "accuracy": 55.0, "cost": 300.0, "share": 0.3, "escalated": 0.25},
    }
    assert cost_frontier._frontier(methods) == ["a", "learned, budget 10%", "cascade, spend 25%",
                                                cost_frontier.DEFAULT]
    result = {"methods": methods, "oracle": 80.0, "random": 10.0, "candidates": 10, "folds": 5}
    cost_frontier.plot(result, tmp_path / "frontier.svg")
    assert (tmp_path / "frontier.svg").read_bytes().startswith(b"<?xml")
