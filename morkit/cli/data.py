"""`morkit data list | fetch`: where each public data set comes from, and putting its files in the data folder."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any

FROM_HELP = ("take the files from this folder instead of downloading: the upstream files (as laid out in the "
             "repository, or side by side), or the prepared files (side by side, or a data folder's NAME/ folder)")


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"


def cmd_data_list(args: argparse.Namespace) -> int:
    from morkit.core import settings
    from morkit.data.fetch import here, states
    from morkit.data.sources import SOURCES

    root = settings.data_dir_path(args.data_dir)
    sources = [entry.spec for entry in SOURCES]
    found = {src.name: states(src, root) for src in sources}
    if args.json:
        print(json.dumps([_record(src, found[src.name]) for src in sources], indent=1))
        return 0
    default = root == settings.default_data_dir() and not args.data_dir
    print(f"data folder: {root}" + (" (the default; --data-dir or $MORKIT_DATA_DIR names another)" if default else ""))
    rows = [("NAME", "SOURCE", "SIZE", "LICENCE", "HERE", "DATA SETS")]
    rows += [(src.name, src.origin, _size(src.size), src.licence, here(found[src.name]), ", ".join(src.datasets))
             for src in sources]
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print("\nThe prepared files keep the problems the docs' figures are measured on:")
    for src in sources:
        if src.kept:
            print(f"  {src.name}: {src.kept}")
    print("Not fetched by URL (`morkit data fetch` says the same):")
    for src in sources:
        if not src.fetchable:
            print(textwrap.fill(f"{src.name}: {src.manual}", width=110, initial_indent="  ",
                                subsequent_indent="    "))
    print("SIZE: of the prepared files. hf: the Hugging Face hub. MAA terms: MIT harness, competition problems of\n"
          "the MAA (not an open licence). HERE: yes when every file is in the data folder, sha256 checked if pinned.")
    return 0


def _record(src: Any, found: list[Any]) -> dict[str, Any]:
    """Everything `data list --json` shows about one source, with the state of its files in the data folder."""
    from morkit.data.fetch import here

    return {"name": src.name, "datasets": list(src.datasets), "repo": src.repo or None, "commit": src.commit or None,
            "hub": src.hub or None, "licence": src.licence, "holds": src.holds, "kept": src.kept or None,
            "fetchable": src.fetchable, "manual": src.manual or None, "size": src.size, "here": here(found),
            "upstream": [{"path": up.path, "url": src.url(up), "sha256": up.sha256, "size": up.size}
                         for up in src.upstream],
            "files": [{"name": f.name, "sha256": f.sha256, "size": f.size, "datasets": list(f.datasets or src.datasets)}
                      for f in src.files],
            "in_data_folder": [{"path": str(s.path), "state": s.state} for s in found]}


def cmd_data_fetch(args: argparse.Namespace) -> int:
    from morkit.core.errors import InputError
    from morkit.data.fetch import fetch, fetchable_names
    from morkit.data.sources import SOURCES, source

    if bool(args.names) == bool(args.all):
        raise InputError("name the data sources to fetch, or pass --all (not both); `morkit data list` lists them")
    names = fetchable_names() if args.all else [source(name).name for name in args.names]
    for name in dict.fromkeys(names):
        done = fetch(name, data_dir=args.data_dir, from_path=args.from_path, force=args.force,
                     progress=not args.quiet)
        print(f"{done.source}: {done.detail} -> {done.folder}")
    if args.all:
        skipped = [entry.name for entry in SOURCES if entry.name not in names]
        print(f"not fetched by URL: {', '.join(skipped)} (`morkit data list` says how to get each)", file=sys.stderr)
    return 0


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    data = sub.add_parser("data", parents=[parent], help="list the public data sets' sources and fetch their files",
                          description="Every `--dataset NAME` reads files in the data folder (--data-dir, else "
                                      "$MORKIT_DATA_DIR, else data/ in the cache folder). `list` shows where each "
                                      "folder's files come from and whether they are here; `fetch` downloads them "
                                      "at a pinned commit, prepares them and checks their sha256.")
    verbs = data.add_subparsers(dest="data_command", required=True, metavar="VERB", parser_class=type(data))

    p = verbs.add_parser("list", parents=[parent], help="the data sources: data sets, origin, size, licence, here?",
                         description="A table of the data sources: the folder name, the data sets (--dataset "
                                     "NAME) that read it, the upstream repository at its pinned commit, the size of "
                                     "the prepared files, the licence, and whether the files are in the data "
                                     "folder (their sha256 checked where pinned); then what the cut sets keep and "
                                     "how to get the sets that cannot be fetched by URL.")
    p.add_argument("--data-dir", metavar="DIR",
                   help="the data folder to look in (default $MORKIT_DATA_DIR, else data/ in the cache folder)")
    p.add_argument("--json", action="store_true",
                   help="every field as JSON: upstream paths, raw URLs, sha256 pins, the state of each file")
    p.set_defaults(func=cmd_data_list)

    p = verbs.add_parser("fetch", parents=[parent], help="download, prepare and check data sets' files",
                         description="For each NAME (a data source, or a data set it serves: mbpp fetches "
                                     "mbpp_sanitized): download its upstream files at the pinned commit, or take "
                                     "them from --from, prepare the files the loaders read (cut or merged where "
                                     "`morkit data list` says so), check every sha256 pin, and put them in the data "
                                     "folder. A file appears only once it checks; downloads already checked are "
                                     "kept for a rerun, and a source already in place is left as it is.")
    p.add_argument("names", nargs="*", metavar="NAME", help="data sources (or data sets) to fetch")
    p.add_argument("--all", action="store_true", help="every source that can be fetched by URL")
    p.add_argument("--from", dest="from_path", metavar="PATH", help=FROM_HELP)
    p.add_argument("--data-dir", metavar="DIR",
                   help="where the files go (default $MORKIT_DATA_DIR, else data/ in the cache folder); made if absent")
    p.add_argument("--force", action="store_true",
                   help="fetch again and replace files already in place (also ones that differ from their pins)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_data_fetch)
