"""Bad flag values exit 2 with one line, a traceback appears only with -v, a closed pipe ends quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from morkit.cli import main

ROOT = Path(__file__).resolve().parents[2]

BAD_VALUES = [
    (["score", "in.jsonl", "-o", "o", "--chunk", "0"], "--chunk"),
    (["score", "in.jsonl", "-o", "o", "--batch-size", "0"], "--batch-size"),
    (["score", "in.jsonl", "-o", "o", "--max-tokens", "-3"], "--max-tokens"),
    (["score", "in.jsonl", "-o", "o", "--chunk", "many"], "--chunk"),
    (["select", "in.jsonl", "--pool", "p", "-o", "o", "--k", "-5"], "--k"),
    (["rank", "in.jsonl", "--pool", "p", "-o", "o", "--k", "0"], "--k"),
    (["search", "in.jsonl", "--pool", "p", "-o", "o", "--top-k", "0"], "--top-k"),
    (["loop", "tmas", "in.jsonl", "-o", "o", "--epsilon", "2"], "--epsilon"),
    (["loop", "tmas", "in.jsonl", "-o", "o", "--epsilon", "nan"], "--epsilon"),
    (["loop", "tmas", "in.jsonl", "-o", "o", "--iterations", "0"], "--iterations"),
    (["loop", "tmas", "in.jsonl", "-o", "o", "--solutions", "0"], "--solutions"),
    (["loop", "streamma", "in.jsonl", "-o", "o", "--chain", "0"], "--chain"),
    (["loop", "atlas", "in.jsonl", "-o", "o", "--max-explores", "0"], "--max-explores"),
    (["loop", "tmas", "in.jsonl", "-o", "o", "--max-calls", "-1"], "--max-calls"),
    (["loop", "tmas", "in.jsonl", "-o", "o", "--max-seconds", "-0.5"], "--max-seconds"),
    (["loop", "tmas", "in.jsonl", "-o", "o", "--gen-tokens", "0"], "--gen-tokens"),
    (["pool", "build", "x.jsonl", "-o", "p", "--temperature", "0"], "--temperature"),
    (["pool", "build", "x.jsonl", "-o", "p", "--temperature", "inf"], "--temperature"),
    (["pool", "build", "x.jsonl", "-o", "p", "--max-members", "0"], "--max-members"),
    (["pool", "info", "p", "--top", "0"], "--top"),
    (["loop", "nope", "in.jsonl", "-o", "o"], "loop"),
    (["loop", "streamma", "in.jsonl", "-o", "o", "--iterations", "3"], "--iterations"),
    (["loop", "tmas", "in.jsonl", "-o", "o", "--chain", "3"], "--chain"),
    (["loop", "streamma", "in.jsonl", "-o", "o", "--protocol", "relay"], "--protocol"),
]


@pytest.mark.parametrize("argv,flag", BAD_VALUES, ids=[" ".join(a[:2] + [f]) for a, f in BAD_VALUES])
def test_bad_values_exit_2_with_one_line_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err and "Traceback" not in err, err


def test_options_check_values_when_made():
    from morkit import LoopOptions, ScoringOptions, SearchOptions, SelectOptions
    from morkit.loops.streamma import StreamMAConfig
    from morkit.loops.tmas import TMASConfig
    from morkit.core.errors import InputError
    from morkit.loops.base import Budget
    from morkit.question_pool.pool import PoolConfig

    for make in (lambda: ScoringOptions(chunk=0), lambda: ScoringOptions.from_flags(batch_size=0),
                 lambda: ScoringOptions(truncation="bogus"), lambda: SelectOptions(k=-5),
                 lambda: SelectOptions(method="nope"), lambda: SearchOptions(top_k=0),
                 lambda: TMASConfig(epsilon=2.0), lambda: TMASConfig(iterations=0), lambda: Budget(max_calls=-1),
                 lambda: PoolConfig(temperature=float("nan")), lambda: PoolConfig(max_members=0),
                 lambda: PoolConfig(temperature=10**400), lambda: Budget(max_seconds=-(10**400)),
                 lambda: ScoringOptions.from_flags(placement="vllm", gpu_memory_utilization=float("nan")),
                 lambda: LoopOptions(seed=-1), lambda: LoopOptions(gen_tokens=0), lambda: StreamMAConfig(agents=0)):
        with pytest.raises(InputError):
            make()


def test_argument_errors_are_one_morkit_error_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["pool", "build", "x.jsonl", "-o", "p", "--temperature", "nan"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("morkit: error: argument --temperature: must be a finite number > 0, got nan")
    assert err.rstrip().endswith("(see morkit pool build --help)") and err.count("\n") == 1


def _run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "morkit.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, **kwargs)


def test_traceback_only_with_verbose(tmp_path):
    quiet = _run("score", str(tmp_path / "absent.jsonl"), "-o", str(tmp_path / "o.jsonl"), "--no-cache")
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    assert quiet.stderr.strip().splitlines() == [quiet.stderr.strip()] and "absent.jsonl" in quiet.stderr
    for argv in (("-v", "score"), ("score", "-v")):
        loud = _run(*argv, str(tmp_path / "absent.jsonl"), "-o", str(tmp_path / "o.jsonl"), "--no-cache")
        assert loud.returncode == 2 and "Traceback" in loud.stderr and "morkit: error:" in loud.stderr


def test_a_closed_pipe_ends_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "morkit.cli", "rms", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdout.close()  # the reader is gone before morkit writes (like `| head -0`)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and err == b""


def test_a_pipe_through_head_ends_quietly():
    script = f"{sys.executable} -m morkit.cli rms --json | head -1; exit ${{PIPESTATUS[0]}}"
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "[" and res.stderr == ""


def test_a_device_is_checked_before_any_model_loads():
    import torch

    from morkit.core.errors import InputError, UnavailableError
    from morkit.runtime.device import resolve_device

    with pytest.raises(InputError, match="unknown device 'gpu0'"):
        resolve_device("gpu0")
    assert resolve_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(UnavailableError, match="no CUDA device"):
            resolve_device("cuda:1")


def test_services_reject_bad_names_before_expensive_work():
    from morkit import Candidate, Query, SearchOptions, build_pool, run_search
    from morkit.core.errors import InputError, UnknownName

    queries = [Query("q", "2+2?", (Candidate("4", correct=True), Candidate("5", correct=False)))]
    with pytest.raises(UnknownName, match="unknown reward model 'nope'"):  # before the (absent) embedder loads
        build_pool(queries, rms=["nope"], embedder="/no/such/embedder")
    with pytest.raises(InputError, match="self-consistency agent 'zed' is not in"):
        run_search(queries, None, options=SearchOptions(sc_agent="zed"))


def test_pool_info_json_is_standard_json():
    import json

    import numpy as np

    from morkit.data.jsonl import json_safe

    info = {"rms": {"a": {"mean_prr": float("nan"), "best_of_n": np.float32(0.5)}},
            "best": [{"weights": (np.float64("inf"), 1.0)}], "questions": np.int64(3)}
    text = json.dumps(json_safe(info), allow_nan=False)
    assert json.loads(text) == {"rms": {"a": {"mean_prr": None, "best_of_n": 0.5}},
                                "best": [{"weights": [None, 1.0]}], "questions": 3}
