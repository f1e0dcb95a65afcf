"""Every Python example in README.md runs, in order, in one namespace, as a reader would paste them.

The examples name two input files; here they are the packaged GSM8K sample: `queries.jsonl` without
labels and `validation.jsonl` with them. Real models (SmolLM2, MiniLM) run, so this is a slow test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
pytestmark = pytest.mark.slow


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_readme_has_python_examples():
    assert len(python_blocks(README.read_text(encoding="utf-8"))) >= 4


def test_every_readme_python_example_runs(tmp_path, monkeypatch, capsys):
    from morkit.demo import sample_path
    from morkit.reward_models.catalog import REWARD_MODELS

    rows = [json.loads(line) for line in sample_path().read_text(encoding="utf-8").splitlines() if line.strip()]
    math = [r for r in rows if r.get("domain") == "math"]
    (tmp_path / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in math))
    plain = [{**r, "candidates": [{k: v for k, v in c.items() if k != "correct"} for c in r["candidates"]]}
             for r in math]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plain))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    try:
        for number, block in enumerate(python_blocks(README.read_text(encoding="utf-8")), start=1):
            try:
                exec(compile(block, f"README.md python block {number}", "exec"), namespace)
            except Exception as exc:  # noqa: BLE001 - name the block that failed
                pytest.fail(f"README python block {number} failed: {type(exc).__name__}: {exc}\n{block}")
    finally:
        if "length" in REWARD_MODELS:  # the example registers a toy RM; leave the registry as found
            REWARD_MODELS.unregister("length")
    printed = capsys.readouterr().out
    assert "smollm2-orm" in printed and (tmp_path / "scored.jsonl").is_file()
    assert (tmp_path / "pools" / "mine" / "pool.json").is_file()
