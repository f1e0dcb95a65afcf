"""CITATION.cff is valid CFF 1.2.0 metadata that agrees with pyproject.toml, and README's Cite section holds BibTeX
entries that parse and cite the same papers as CITATION.cff, with the titles and arXiv ids of the papers' texts."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ARXIV_IDS = {"2508.03333", "2605.10344", "2606.05158", "2606.01667"}  # CTTS-MM, TMAS, StreamMA, ATLAS


def citation() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def arxiv_id(reference: dict) -> str:
    values = [i["value"] for i in reference.get("identifiers", ()) if str(i.get("value", "")).startswith("arXiv:")]
    assert len(values) == 1, f"{reference['title']}: one arXiv identifier expected, got {values}"
    return values[0].removeprefix("arXiv:")


def test_citation_cff_has_the_required_keys_and_the_package_metadata():
    cff = citation()
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors", "type", "version", "license"):
        assert cff.get(key), f"CITATION.cff lacks {key!r}"
    assert cff["title"] == "morkit" and cff["type"] == "software"
    assert cff["version"] == project()["version"]
    assert cff["license"] == project()["license"]["text"] == "MIT"
    assert cff["authors"] == [{"name": "The morkit authors"}]
    assert "repository-code" not in cff  # no address is known for the repository
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")


def test_citation_cff_references_the_four_papers():
    references = citation()["references"]
    assert {arxiv_id(r) for r in references} == ARXIV_IDS
    for reference in references:
        assert reference["type"] == "article" and reference["title"]
        assert isinstance(reference["year"], int) and 2024 <= reference["year"] <= 2026
        assert reference["authors"] and all(a.get("family-names") and a.get("given-names")
                                            for a in reference["authors"])
        assert reference["url"] == f"https://arxiv.org/abs/{arxiv_id(reference)}"


def test_each_reference_carries_its_papers_title_and_id(papers_dir, paper_text):
    texts = {p.name: paper_text(p.name) for p in papers_dir.glob("*.txt")}
    for reference in citation()["references"]:  # the CTTS-MM text sets its title in capitals
        holding = [name for name, text in texts.items() if reference["title"].lower() in text.lower()]
        assert holding, f"no paper text holds the title {reference['title']!r}"
        if arxiv_id(reference) != "2508.03333":  # the CTTS-MM text is the anonymous review copy: no id in it
            assert any(arxiv_id(reference) in texts[name] for name in holding), reference["title"]


# ---- BibTeX in README's Cite section ------------------------------------------------------------------------


def cite_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- --8<-- \[start:cite\] -->(.*?)<!-- --8<-- \[end:cite\] -->", readme, flags=re.DOTALL)
    assert found, "README.md has no cite snippet section"
    return found.group(1)


def braced(text: str, start: int) -> int:
    """The index just past the brace that closes the one at `start`; an AssertionError if it never closes."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        assert depth >= 0, f"unbalanced '}}' at {text[start:i + 1][-60:]!r}"
        if depth == 0:
            return i + 1
    raise AssertionError(f"unclosed '{{' in {text[start:start + 60]!r}...")


def parse_bibtex(text: str) -> list[tuple[str, str, dict[str, str]]]:
    """(type, key, fields) of every `@type{key, name = {value}, ...}` entry, values with outer braces removed."""
    entries, outside, end = [], [], 0
    for match in re.finditer(r"@(\w+)\s*\{", text):
        assert match.start() >= end, f"an entry starts inside another: {text[match.start():match.start() + 40]!r}"
        outside.append(text[end:match.start()])
        end = braced(text, match.end() - 1)
        body = text[match.end():end - 1]
        key, _, rest = body.partition(",")
        assert re.fullmatch(r"\s*[\w:-]+\s*", key), f"bad key {key!r}"
        fields: dict[str, str] = {}
        position = 0
        for field in re.finditer(r"\s*(\w+)\s*=\s*\{", rest):
            if field.start() < position:
                continue
            close = braced(rest, field.end() - 1)
            name = field.group(1).lower()
            assert name not in fields, f"{key.strip()}: field {name} twice"
            fields[name] = " ".join(rest[field.end():close - 1].split())
            position = close
            assert re.match(r"\s*(,|$)", rest[close:]), f"{key.strip()}: no comma after {name}"
        assert not rest[position:].strip(" \n,"), f"{key.strip()}: unparsed text {rest[position:]!r}"
        entries.append((match.group(1).lower(), key.strip(), fields))
    stray = [part for part in [*outside, text[end:]] if "{" in part or "}" in part]
    assert not stray, f"a brace outside every entry: {stray[0].strip()[:60]!r}"
    return entries


def plain(title: str) -> str:
    return title.replace("{", "").replace("}", "")


def test_readme_bibtex_entries_parse_with_their_keys_and_fields():
    entries = parse_bibtex(cite_section())
    keys = [key for _, key, _ in entries]
    assert len(keys) == len(set(keys)) == 5
    software = [fields for kind, _, fields in entries if kind == "software"]
    assert len(software) == 1 and software[0]["version"] == project()["version"]
    assert software[0]["license"] == "MIT" and software[0]["author"] == "{The morkit authors}"
    papers = {fields["eprint"]: fields for kind, _, fields in entries if kind == "misc"}
    assert set(papers) == ARXIV_IDS
    for eprint, fields in papers.items():
        for name in ("title", "author", "year", "eprint", "archiveprefix", "url"):
            assert fields.get(name), f"{eprint}: no {name}"
        assert fields["archiveprefix"] == "arXiv" and fields["url"] == f"https://arxiv.org/abs/{eprint}"


def test_readme_bibtex_agrees_with_citation_cff():
    papers = {fields["eprint"]: fields for kind, _, fields in parse_bibtex(cite_section()) if kind == "misc"}
    for reference in citation()["references"]:
        fields = papers[arxiv_id(reference)]
        assert plain(fields["title"]) == reference["title"]
        assert int(fields["year"]) == reference["year"]
        names = [tuple(name.split(", ")) for name in fields["author"].split(" and ")]
        assert names == [(a["family-names"], a["given-names"]) for a in reference["authors"]]


@pytest.mark.parametrize("bad", ["@misc{k, title = {A {b}, year = {2026}}", "@misc{k, title = {A}} }",
                                 "@misc{k, title = {A} year = {2026}}"])
def test_the_bibtex_check_sees_a_broken_entry(bad):
    with pytest.raises(AssertionError):
        parse_bibtex(bad)
