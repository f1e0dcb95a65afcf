"""Prepare functions of the data sources (SOURCES): upstream files in, the files the loaders read out, byte for byte
what the docs' figures were measured on. Each is `fn(source, inputs, folder)`, `inputs` aligned with its upstream.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Sequence

from morkit.core.errors import InputError
from morkit.data.sources import DataSource

CORRECT_AUTHOR = "human_to_GPT-4"
"""RewardMATH's one correct solution per problem: a human solution rewritten by GPT-4 (the rest are incorrect)."""
_REWARD, _PAIRWISE = "_reward.json", "_pairwise_reward.json"


def unchanged(source: DataSource, inputs: Sequence[Path], folder: Path) -> None:
    """Copy each upstream file as it is, to the prepared file at the same position.

    Args:
        source: The data source.
        inputs: Its upstream files, in the order of `source.upstream`.
        folder: Where the prepared files are written.
    """
    for path, prepared in zip(inputs, source.files, strict=True):
        shutil.copyfile(path, folder / prepared.name)


def first_lines(source: DataSource, inputs: Sequence[Path], folder: Path) -> None:
    """The first `source.keep` lines of the one upstream JSONL file, bytes unchanged (each must be a JSON value).

    Args:
        source: The data source (one upstream file, one prepared file).
        inputs: The upstream file.
        folder: Where the prepared file is written.
    """
    (path,), (prepared,) = inputs, source.files
    kept = []
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if source.keep and number > source.keep:  # 0 keeps every line
                break
            try:
                json.loads(line)
            except ValueError as exc:
                raise InputError(f"not a JSON line ({exc}); is this the upstream file?", path=str(path),
                                 line=number) from exc
            kept.append(line)
    (folder / prepared.name).write_bytes(b"".join(kept))


def rewardmath_merged(source: DataSource, inputs: Sequence[Path], folder: Path) -> None:
    """RewardMATH's per-judge files merged into one JSON line per problem, the first `source.keep` problems.

    The problems follow ArmoRM_reward.json; every other file's record is found by problem text and candidate list
    (a problem whose text and candidates match no record, or several, gets null there). Schema: docs/datasets.md.

    Args:
        source: The data source.
        inputs: The 31 upstream files, in the order of `source.upstream`.
        folder: Where the prepared file is written.
    """
    by_name = {up.basename: path for path, up in zip(inputs, source.upstream, strict=True)}
    tables = {name: _records(path, pairwise=name.endswith(_PAIRWISE)) for name, path in sorted(by_name.items())}
    base = tables.get("ArmoRM" + _REWARD)
    if base is None:
        raise InputError("RewardMATH needs ArmoRM_reward.json (the problem order)")
    places = {name: _places(records) for name, records in tables.items()}
    (prepared,) = source.files
    with open(folder / prepared.name, "w", encoding="utf-8", newline="\n") as out:
        for index, problem in enumerate(base[: source.keep or None]):
            refs = problem["solution_reference"]
            rejected = [author for author in refs if author != CORRECT_AUTHOR]
            scores: dict[str, Any] = {}
            pairwise: dict[str, Any] = {}
            for name, records in tables.items():
                if name.endswith(_PAIRWISE):
                    record = _match(records, places[name], index, problem["problem"], rejected)
                    pairwise[name[: -len(_PAIRWISE)]] = None if record is None else {
                        "rejected_refs": record["solution_reference"], "chosen_position": record["chosen_position"],
                        "judge_choice": record["score"]}
                else:
                    record = _match(records, places[name], index, problem["problem"], refs)
                    scores[name[: -len(_REWARD)]] = None if record is None else record["score"]
            row = {"problem": problem["problem"], "solution_reference": refs, "scores": scores,
                   "pairwise_choice": pairwise, "index": index,
                   "is_correct": [author == CORRECT_AUTHOR for author in refs]}
            out.write(json.dumps(row) + "\n")


def unavailable(source: DataSource, inputs: Sequence[Path], folder: Path) -> None:
    """A source morkit cannot prepare from upstream files: an error saying how its files are obtained.

    Args:
        source: The data source.
        inputs: Unused.
        folder: Unused.
    """
    raise InputError(f"data source {source.name!r} cannot be prepared here: {source.manual}")


def _records(path: Path, *, pairwise: bool) -> list[dict[str, Any]]:
    """One RewardMATH file: a JSON list of {problem, solution_reference, score[, chosen_position]}, checked."""
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read as JSON ({exc}); is this the upstream file?", path=str(path)) from exc
    keys = ("problem", "solution_reference", "score") + (("chosen_position",) if pairwise else ())
    if not isinstance(records, list):
        raise InputError(f"a JSON {type(records).__name__}, not a list of problems", path=str(path))
    for number, record in enumerate(records):
        if not isinstance(record, dict) or any(k not in record for k in keys):
            raise InputError(f"problem {number}: expected an object with {', '.join(keys)}", path=str(path))
        if not isinstance(record["problem"], str) or not isinstance(record["solution_reference"], list) or \
                not isinstance(record["score"], list) or len(record["score"]) != len(record["solution_reference"]):
            raise InputError(f"problem {number}: problem must be text, and score a list as long as "
                             "solution_reference", path=str(path))
    return records


def _places(records: list[dict[str, Any]]) -> dict[str, list[int]]:
    places: dict[str, list[int]] = {}
    for number, record in enumerate(records):
        places.setdefault(record["problem"], []).append(number)
    return places


def _match(records: list[dict[str, Any]], places: dict[str, list[int]], index: int, problem: str,
           refs: list[str]) -> dict[str, Any] | None:
    """The record of `problem` with candidates `refs`: the one at `index` if it is that, else the only one."""
    found = [n for n in places.get(problem, ()) if records[n]["solution_reference"] == refs]
    if index in found:
        return records[index]
    return records[found[0]] if len(found) == 1 else None
