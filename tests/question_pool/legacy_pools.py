"""Pools in the formats morkit wrote before the question table went columnar (1 dense, 2 on the fly), for tests
that `morkit pool upgrade` rewrites them, checking their questions.jsonl as the old reader did."""

from __future__ import annotations

import json
from pathlib import Path

from morkit.question_pool.pool import load_pool
from morkit.question_pool.table import TABLE_ARRAYS


def to_legacy(root: Path) -> Path:
    """Rewrite the saved pool at `root` as the older morkit wrote it: questions.jsonl, format version 1 or 2."""
    questions = list(load_pool(root).questions)
    header = json.loads((root / "pool.json").read_text())
    header["format_version"] = 1 if "prr" in header["shapes"] else 2
    del header["question_domains"]
    for name in TABLE_ARRAYS:
        del header["shapes"][name]
        (root / f"{name}.npy").unlink()
    (root / "questions.jsonl").write_text("".join(json.dumps(
        {"id": q.id, "question": q.question, "domain": q.domain, "n_candidates": q.n_candidates}) + "\n"
        for q in questions))
    (root / "pool.json").write_text(json.dumps(header, indent=1) + "\n")
    return root
