"""Loaders that turn the public labelled data sets into contract Queries, registered in DATASETS.

A loader is `fn(data_dir: Path) -> list[Query]`; candidate order is shuffled by query id (docs/jsonl.md).
"""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from morkit.core import settings
from morkit.core.errors import InputError
from morkit.core.registry import Entry, Registry
from morkit.core.types import Candidate, Query
from morkit.data.jsonl import read_jsonl

GSM8K_AUTHORS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
_Q = TypeVar("_Q")


def shuffled_order(key: str, n: int) -> list[int]:
    """A permutation of range(n), always the same for the same `key` (seeded with its SHA-256)."""
    order = list(range(n))
    random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")).shuffle(order)
    return order


def _shuffled(qid: str, candidates: list[Candidate]) -> tuple[Candidate, ...]:
    return tuple(candidates[i] for i in shuffled_order(qid, len(candidates)))


def parse_rows(path: Path, parse: Callable[[int, dict[str, Any]], _Q],
               rows: Iterable[tuple[int, dict[str, Any]]] | None = None) -> list[_Q]:
    """`parse(line number, row)` for every row (of the JSONL file, or `rows` read from it); a row of the
    wrong shape is an error naming file and line."""
    out = []
    for number, row in read_jsonl(path) if rows is None else rows:
        try:
            out.append(parse(number, row))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"unexpected row shape ({type(exc).__name__}: {exc}); is this the public file?",
                             path=str(path), line=number) from exc
    return out


def gsm8k_model_solutions(data_dir: Path) -> list[Query]:
    """1000 GSM8K questions x 4 labelled GPT-3 solutions (MIT, openai/grade-school-math)."""

    def parse(number: int, row: dict[str, Any]) -> Query:
        qid = f"gsm8k-{number - 1}"
        candidates = [Candidate(text=row[a]["solution"], agent=a, correct=bool(row[a]["is_correct"]))
                      for a in GSM8K_AUTHORS]
        reference = row["ground_truth"].rsplit("A:", 1)[-1].strip()
        return Query(qid, row["question"], _shuffled(qid, candidates), domain="math", reference=reference)

    return parse_rows(data_dir / "gsm8k_model_solutions" / "example_model_solutions.first1000.jsonl", parse)


def gsm8k_test(data_dir: Path) -> list[Query]:
    """The 1,319 GSM8K test questions with their reference answers and no candidates (MIT, openai/grade-school-math)."""

    def parse(number: int, row: dict[str, Any]) -> Query:
        reference = row["answer"].split("####")[-1].strip().replace(",", "")
        return Query(f"gsm8k-test-{number - 1}", row["question"], (), domain="math", reference=reference,
                     extra={"prompt": MATH_PROMPT.format(problem=row["question"])})

    return parse_rows(data_dir / "gsm8k" / "test.jsonl", parse)


def qwen25_math_rm8(data_dir: Path) -> list[Query]:
    """70 MATH problems x 8 Qwen2.5-Math answers with correctness and the Qwen2.5-Math-RM score (MIT)."""

    def parse(number: int, row: dict[str, Any]) -> Query:
        qid = f"math-{row['idx']}"
        candidates = [Candidate(text=text, agent="qwen2.5-math-instruct", correct=bool(ok),
                                scores={"qwen2.5-math-rm-72b": float(score[0])})
                      for text, ok, score in zip(row["code"], row["score"], row["pred_score"])]
        return Query(qid, row["question"], _shuffled(qid, candidates), domain="math", reference=row["gt"])

    return parse_rows(data_dir / "qwen25_math_rm8" / "math_cot_100.first70.jsonl", parse)


def rewardmath_rm_scores(data_dir: Path) -> list[Query]:
    """383 MATH problems x 10 solutions (one correct) with the scores of ~22 RMs and judges; no texts (MIT)."""

    def parse(number: int, row: dict[str, Any]) -> Query:
        qid = f"rewardmath-{row['index']}"
        candidates = []
        for i, author in enumerate(row["solution_reference"]):
            scores = {}
            for rm, values in row["scores"].items():
                if values is None or len(values) != len(row["solution_reference"]) or values[i] is None:
                    continue
                value = values[i]
                scores[rm] = tuple(float(v) for v in value) if isinstance(value, list) else float(value)
            candidates.append(Candidate(text=None, agent=author, correct=bool(row["is_correct"][i]), scores=scores))
        return Query(qid, row["problem"], _shuffled(qid, candidates), domain="math")

    return parse_rows(data_dir / "rewardmath_rm_scores" / "rewardmath_scores.first383.jsonl", parse)


def humaneval_davinci(data_dir: Path, per_task: int = 20) -> list[Query]:
    """127 HumanEval problems with code-davinci-002 completions and their pass/fail (MIT); `per_task` samples each."""

    def parse(number: int, row: dict[str, Any]) -> Query:
        qid = row["task_id"]
        candidates = [Candidate(text=row["prompt"] + completion, agent="code-davinci-002", correct=bool(ok))
                      for completion, ok in list(zip(row["completions"], row["passed"]))[:per_task]]
        return Query(qid, row["prompt"], _shuffled(qid, candidates), domain="code", tests=row["tests"])

    return parse_rows(data_dir / "humaneval_davinci_samples" / "humaneval_py_davinci_200.tasks_lt130.jsonl", parse)


MATH_PROMPT = "{problem}\n\nSolve the problem step by step, then give the final answer as \\boxed{{answer}}."
CODE_PROMPT = ("Complete the following Python code. Reply with the complete program (imports, the function and "
               "anything it needs) in one ```python block.\n\n{code}")
MBPP_PROMPT = ("{task}\nYour code should pass these tests:\n{tests}\n\nReply with the complete Python program in "
               "one ```python block.")


def _math_benchmark(folder: str, prefix: str) -> Callable[[Path], list[Query]]:
    """A math benchmark's test.jsonl (problem, answer) as bare questions with their references and prompt."""

    def load(data_dir: Path) -> list[Query]:
        def parse(number: int, row: dict[str, Any]) -> Query:
            answer = row["answer"]
            reference = str(int(answer)) if isinstance(answer, float) and answer.is_integer() else str(answer)
            qid = f"{prefix}-{row.get('unique_id') or row.get('id', number - 1)}"
            return Query(qid, row["problem"], (), domain="math", reference=reference,
                         extra={"prompt": MATH_PROMPT.format(problem=row["problem"])})

        return parse_rows(data_dir / folder / "test.jsonl", parse)

    return load


def humaneval(data_dir: Path) -> list[Query]:
    """The 164 HumanEval problems (MIT, openai/human-eval): signature and docstring, tests calling check()."""

    def parse(number: int, row: dict[str, Any]) -> Query:
        tests = f"{row['test']}\n\ncheck({row['entry_point']})\n"
        return Query(row["task_id"], row["prompt"], (), domain="code", tests=tests,
                     extra={"prompt": CODE_PROMPT.format(code=row["prompt"])})

    return parse_rows(data_dir / "humaneval" / "HumanEval.jsonl.gz", parse)


def mbpp(data_dir: Path) -> list[Query]:
    """The 427 sanitized MBPP problems (CC-BY-4.0, google-research/mbpp) with their assert tests."""
    import json

    path = data_dir / "mbpp_sanitized" / "sanitized-mbpp.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        queries = []
        for row in rows:
            tests = "\n".join([*row["test_imports"], *row["test_list"]]) + "\n"
            queries.append(Query(f"mbpp-{row['task_id']}", row["prompt"], (), domain="code", tests=tests,
                                 extra={"prompt": MBPP_PROMPT.format(task=row["prompt"],
                                                                     tests="\n".join(row["test_list"]))}))
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=str(path)) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"unexpected shape ({type(exc).__name__}: {exc}); is this the public file?",
                         path=str(path)) from exc
    return queries


def ifeval(data_dir: Path) -> list[Query]:
    """The IFEval prompts (Apache-2.0, google-research): each with the instructions its answer must follow.

    `extra` holds `instruction_id_list` and `kwargs` (one dict per instruction) for the instruction grader."""

    def parse(number: int, row: dict[str, Any]) -> Query:
        ids, kwargs = list(row["instruction_id_list"]), [dict(k) for k in row["kwargs"]]
        if len(ids) != len(kwargs) or not all(isinstance(i, str) for i in ids):
            raise ValueError("instruction_id_list and kwargs must be lists of the same length")
        return Query(f"ifeval-{row['key']}", row["prompt"], (), domain="instruction",
                     extra={"instruction_id_list": ids, "kwargs": kwargs})

    return parse_rows(data_dir / "ifeval" / "input_data.jsonl", parse)


def ifeval_gpt4(data_dir: Path) -> list[Query]:
    """The IFEval prompts, each with the GPT-4 response of the original release (unlabelled: grade them)."""
    path = data_dir / "ifeval" / "input_response_data_gpt4_20231107_145030.jsonl"
    responses = {}
    for number, row in read_jsonl(path):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not isinstance(row.get("response"), str):
            raise InputError("expected an object with string 'prompt' and 'response'", path=str(path), line=number)
        responses[row["prompt"]] = row["response"]
    return [replace(q, candidates=(Candidate(responses[q.question], agent="gpt-4"),))
            for q in ifeval(data_dir) if q.question in responses]


DATASETS = Registry("data set", [
    Entry("gsm8k_test", "morkit.data.datasets:gsm8k_test",
          "1,319 GSM8K test questions with reference answers, no candidates", {"domain": "math", "scores": False}),
    Entry("gsm8k_model_solutions", "morkit.data.datasets:gsm8k_model_solutions",
          "1,000 GSM8K questions x 4 labelled GPT-3 solutions", {"domain": "math", "scores": False}),
    Entry("qwen25_math_rm8", "morkit.data.datasets:qwen25_math_rm8",
          "70 MATH problems x 8 labelled Qwen2.5-Math answers with the Qwen2.5-Math-RM-72B score",
          {"domain": "math", "scores": True}),
    Entry("rewardmath_rm_scores", "morkit.data.datasets:rewardmath_rm_scores",
          "383 MATH problems x 10 solutions (one correct) with the scores of 22 RMs and judges; no texts",
          {"domain": "math", "scores": True}),
    Entry("math500", _math_benchmark("math500", "math500"),
          "MATH-500 (500 problems, reference answers, no candidates)", {"domain": "math", "scores": False}),
    Entry("aime24", _math_benchmark("aime24", "aime24"),
          "AIME 2024 (30 problems, reference answers, no candidates)", {"domain": "math", "scores": False}),
    Entry("amc23", _math_benchmark("amc23", "amc23"),
          "AMC 2023 (40 problems, reference answers, no candidates)", {"domain": "math", "scores": False}),
    Entry("humaneval", "morkit.data.datasets:humaneval",
          "HumanEval (164 problems with tests, no candidates)", {"domain": "code", "scores": False}),
    Entry("mbpp", "morkit.data.datasets:mbpp",
          "sanitized MBPP (427 problems with assert tests, no candidates)", {"domain": "code", "scores": False}),
    Entry("humaneval_davinci_samples", "morkit.data.datasets:humaneval_davinci",
          "127 HumanEval tasks x 20 labelled code-davinci-002 completions, with tests",
          {"domain": "code", "scores": False}),
    Entry("ifeval", "morkit.data.datasets:ifeval",
          "IFEval (540 prompts with verifiable instructions, no candidates)", {"domain": "instruction", "scores": False}),
    Entry("ifeval_gpt4", "morkit.data.datasets:ifeval_gpt4",
          "IFEval prompts x the GPT-4 response of the original release, unlabelled",
          {"domain": "instruction", "scores": False}),
    Entry("gpqa", "morkit.data.benchmarks:gpqa",
          "GPQA diamond (198 four-option questions, shuffled per record, reference letter, no candidates)",
          {"domain": "choice", "scores": False}),
    Entry("gpqa_main", "morkit.data.benchmarks:gpqa_main",
          "GPQA main (448 four-option questions, shuffled per record, reference letter, no candidates)",
          {"domain": "choice", "scores": False}),
    Entry("livecodebench", "morkit.data.benchmarks:livecodebench",
          "LiveCodeBench code_generation_lite, stdin/stdout problems with their tests (call-based skipped)",
          {"domain": "code", "scores": False}),
])
"""Public data sets by name (`--dataset NAME[:N]`), each a loader reading its files under the data folder."""


def load_spec(spec: str, data_dir: str | os.PathLike | None = None) -> list[Query]:
    """Queries of one registered data set named 'NAME' or 'NAME:N' (its first N questions); a data set whose files
    are not in the data folder is an error giving the command that fetches them (morkit.data.sources)."""
    from morkit.data.sources import require_files

    name, colon, count = spec.partition(":")
    loader = DATASETS.load(name)
    if colon and not (count.isdigit() and int(count) > 0):
        raise InputError(f"data set spec {spec!r}: N in NAME:N must be a whole number >= 1")
    folder = settings.data_dir_path(data_dir)  # a folder not there yet: its files are missing, with the command
    require_files(name, folder, data_dir)
    loaded = loader(folder)
    return loaded[: int(count)] if count else loaded
