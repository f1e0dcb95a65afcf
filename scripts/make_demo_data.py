"""Make morkit/resources/demo/rewardmath.jsonl.gz, the cached RM scores `morkit demo` routes with.

From the public RewardMATH score file (see its SOURCE.md): every problem with its 10 candidates in
the loader's seeded order, correctness labels, and the real scores of the 22 RMs and judges. Authors
are dropped, and each PRM's step scores are stored reduced by min (the pool's default reduction), so
the file stays small; every value is the exact upstream float. No solution text exists upstream.

    .venv/bin/python scripts/make_demo_data.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import replace
from pathlib import Path

from morkit.core import settings
from morkit.data.contract import query_to_json
from morkit.data.datasets import rewardmath_rm_scores

OUT = Path(__file__).resolve().parents[1] / "morkit" / "resources" / "demo" / "rewardmath.jsonl.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder of the data sets (default $MORKIT_DATA_DIR)")
    args = parser.parse_args()
    lines = []
    for query in rewardmath_rm_scores(settings.data_dir(args.data_dir)):
        candidates = tuple(replace(c, agent=None, scores={k: min(v) if isinstance(v, tuple) else v
                                                           for k, v in c.scores.items()})
                           for c in query.candidates)
        lines.append(json.dumps(query_to_json(replace(query, candidates=candidates)), separators=(",", ":")))
    with gzip.GzipFile(OUT, "wb", compresslevel=9, mtime=0) as out:  # mtime 0: the same bytes every run
        out.write(("\n".join(lines) + "\n").encode("utf-8"))
    print(f"{len(lines)} problems -> {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
