"""Answer extraction and equivalence, checked against real graded model solutions."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
import os
from pathlib import Path

import pytest

from morkit.core import grading
from morkit.core.grading import answers_equivalent, extract_answer

DATA = Path(os.environ.get("MORKIT_DATA_DIR") or Path(__file__).resolve().parents[3] / "shared" / "data")
GSM = DATA / "gsm8k_model_solutions" / "example_model_solutions.first1000.jsonl"
QWEN = DATA / "qwen25_math_rm8" / "math_cot_100.first70.jsonl"
MODELS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")


def _rows(path: Path, limit: int | None = None) -> list[dict]:
    if not path.exists():
        pytest.skip(f"shared data file missing: {path}")
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(limit or 10**9), f)]


def test_gsm8k_labels_agree_with_extracted_answers():
    rows = _rows(GSM, 200)
    outcomes = []
    for row in rows:
        reference = extract_answer(row["ground_truth"])
        assert reference is not None and row["ground_truth"].rstrip().endswith(reference)
        for model in MODELS:
            sol = row[model]
            outcomes.append(answers_equivalent(extract_answer(sol["solution"]), reference) == sol["is_correct"])
    mismatches = outcomes.count(False)
    print(f"gsm8k: {len(outcomes)} solutions, {mismatches} mismatches, agreement {1 - mismatches / len(outcomes):.4f}")
    assert len(outcomes) == 800
    assert mismatches <= 0.03 * len(outcomes)


def test_math_labels_agree_with_extracted_answers():
    rows = _rows(QWEN)
    outcomes = [answers_equivalent(extract_answer(code), row["gt"]) == correct
                for row in rows for code, correct in zip(row["code"], row["score"])]
    mismatches = outcomes.count(False)
    print(f"math: {len(outcomes)} solutions, {mismatches} mismatches, agreement {1 - mismatches / len(outcomes):.4f}")
    assert len(outcomes) == 8 * len(rows) > 0
    assert mismatches <= 0.10 * len(outcomes)


@pytest.mark.parametrize("text, answer", [
    ("so x = 3.\n#### 1,234", "1,234"),
    ("We get 9 eggs.\nA: 18", "18"),
    (r"first \boxed{1} then \boxed{\frac{a}{\sqrt{b^{2}}}}.", r"\frac{a}{\sqrt{b^{2}}}"),
    ("Thus, the answer is $42. Done.", "$42"),
    ("She has <<3*4=12>>12 apples and 7 pears left", "7"),
    ("no digits here", None),
    ("", None),
])
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize("a, b, same", [
    (r"\boxed{\frac{1}{2}}", "0.5", True),
    ("1,000", "1000", True),
    ("$18", "18", True),
    ("18 dollars", "18.00", True),
    (r"\text{18}\,\text{dollars}", "18", True),
    (r"12\frac{3}{5}", "12.6", True),
    (r"\dfrac{3}{8}", r"\frac{6}{16}", True),
    (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}", True),  # needs math_verify
    ("x^2+2x+1", "(x+1)^2", True),
    ("6290000", "6287000", False),
    ("0.33", "1/3", False),
    ("18", None, False),
    (r"10^{10^{10}}", "1", False),  # refused before sympy could blow up
])
def test_answers_equivalent(a, b, same):
    assert answers_equivalent(a, b) is same
    if b is not None:
        assert answers_equivalent(b, a) is same


def test_equivalence_works_off_the_main_thread():
    pairs = [(r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}"), (r"2\pi", r"\pi \cdot 2"), ("x+1", "x+2")]
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda p: answers_equivalent(*p), pairs)) == [True, True, False]


def test_time_guard_stops_a_runaway_call_in_a_worker_thread(monkeypatch):
    monkeypatch.setattr(grading, "VERIFY_SECONDS", 0.3)

    def spin(_timeout):
        end = time.monotonic() + 20
        while time.monotonic() < end:
            pass
        return True

    box = {}
    worker = threading.Thread(target=lambda: box.update(result=grading._guarded(spin)))
    start = time.monotonic()
    worker.start()
    worker.join(10)
    assert not worker.is_alive() and box["result"] is None
    assert time.monotonic() - start < 5


def test_majority_groups_orders_by_size_then_first_member_and_skips_missing_answers():
    answers = ["0.5", "7", None, "\\frac{1}{2}", "", "7", "1/2", "9"]
    assert grading.majority_groups(answers) == [[0, 3, 6], [1, 5], [7]]
    assert grading.majority_groups(["7", "9", "9", "7"]) == [[0, 3], [1, 2]]  # a tie: the earlier group first
    assert grading.majority_groups([None, ""]) == []
