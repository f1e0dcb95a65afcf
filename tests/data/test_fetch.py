"""`morkit data`: the source registry's pins against the shared files, preparation from upstream-shaped files
(--from), downloads from a real HTTP server on 127.0.0.1, and the one-line errors. No network is used."""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from morkit.cli.main import main
from morkit.core import settings
from morkit.core.errors import InputError, UnavailableError
from morkit.data.datasets import DATASETS, load_spec
from morkit.data.fetch import DOWNLOADS, download, fetch, states
from morkit.data.sources import SOURCES, DataSource, source

REWARDMATH_CUT = Path("upstream") / "rewardmath" / "results" / "RewardMATH"
REWARDMATH_FILE = Path("rewardmath_rm_scores") / "rewardmath_scores.first383.jsonl"


def sha(data: bytes | Path) -> str:
    return hashlib.sha256(data.read_bytes() if isinstance(data, Path) else data).hexdigest()


def every_file(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("morkit: error: "), err
    return err


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server(tmp_path):
    """A real HTTP server on 127.0.0.1 serving tmp_path/www, recording the paths asked for."""
    root = tmp_path / "www"
    root.mkdir()
    asked: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self):
            asked.append(self.path)
            if self.path.endswith("/stall.json"):  # headers, then nothing: the read timeout must end it
                self.send_response(200)
                self.send_header("Content-Length", "100")
                self.end_headers()
                time.sleep(2)
                return
            if self.path.endswith("/trickle.json"):  # a byte at a time, each well inside the read timeout
                self.send_response(200)
                self.end_headers()
                for _ in range(40):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.05)
                return
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield SimpleNamespace(root=root, url=f"http://127.0.0.1:{httpd.server_port}", asked=asked)
    httpd.shutdown()
    httpd.server_close()


def publish(server, name: str, files: dict[str, bytes]) -> None:
    """Put files at their raw-URL paths of source `name` on the test server."""
    src = source(name)
    for path, data in files.items():
        target = server.root / src.repo / src.commit / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


# -- the registry ------------------------------------------------------------------------------------------------


def test_every_data_set_is_served_by_exactly_one_source():
    for name in DATASETS.names():
        serving = [e.name for e in SOURCES if name in e.spec.datasets]
        assert len(serving) == 1, f"{name}: {serving}"
    for entry in SOURCES:
        assert set(entry.spec.datasets) <= set(DATASETS.names()), entry.name
        assert entry.summary and entry.spec.licence and entry.spec.files
        assert callable(entry.load())
        assert entry.spec.fetchable != bool(entry.spec.manual), entry.name
        for prepared in entry.spec.files:
            assert set(prepared.datasets) <= set(entry.spec.datasets)


def test_the_pins_are_the_shared_files(data_dir):
    """Every pinned prepared file is the shared one; for an unchanged set it is also the upstream file's pin."""
    pinned = 0
    for entry in SOURCES:
        src = entry.spec
        for prepared in src.files:
            if prepared.sha256 is None:
                continue
            path = data_dir / src.name / prepared.name
            assert path.stat().st_size == prepared.size and sha(path) == prepared.sha256, path
            pinned += 1
        if entry.target_path.endswith(":unchanged"):
            assert [(up.basename, up.sha256, up.size) for up in src.upstream] == \
                [(f.name, f.sha256, f.size) for f in src.files], src.name
    assert pinned == 12  # every data file of the shared folder
    sums = (data_dir / "upstream" / "rewardmath" / "SHA256SUMS.full").read_text().split("\n")
    full = dict(reversed(line.split()) for line in sums if line.strip())
    assert {up.basename: up.sha256 for up in source("rewardmath_rm_scores").upstream} == full


def test_raw_urls_name_the_pinned_commit():
    src = source("aime24")
    assert src.url(src.upstream[0]) == ("https://raw.githubusercontent.com/QwenLM/Qwen2.5-Math/"
                                        "a45202bd16f1ec06f433442dc1152d0074773465/evaluation/data/aime24/test.jsonl")
    assert source("mbpp").name == "mbpp_sanitized" and source("ifeval_gpt4").name == "ifeval"
    with pytest.raises(InputError, match="unknown data source 'nope'"):
        source("nope")
    with pytest.raises(InputError, match="unknown field 'sha'"):
        DataSource.of("x", datasets=(), files=(), licence="MIT", holds="", sha="1")


# -- preparation from files (--from) -----------------------------------------------------------------------------


def test_rewardmath_from_the_cut_upstream_files_is_the_shared_file_line_for_line(data_dir, tmp_path, capsys):
    cut = data_dir / REWARDMATH_CUT
    out = tmp_path / "data"
    # The cut files are not the full upstream files: their pins fail, naming the first file, and nothing is written.
    assert main(["data", "fetch", "rewardmath_rm_scores", "--from", str(cut), "--data-dir", str(out)]) == 2
    err = one_error_line(capsys)
    assert f"{cut / 'ArmoRM_reward.json'}: sha256 {sha(cut / 'ArmoRM_reward.json')} is not the pinned " \
           "9a296e2e926b44e3ae0de5303bc131c0666827922eea36cb211b2231f01470ee" in err
    assert every_file(out) == []
    # With the cut files' own checksums, only the prepared file's pin stands in the way: it is the 383-problem file.
    cut_pins = {path.name: sha(path) for path in cut.iterdir()}
    assert len(cut_pins) == 31
    with pytest.raises(InputError, match="is not the pinned 41a0fc9bd368"):
        fetch("rewardmath_rm_scores", from_path=cut, data_dir=out, pins=cut_pins)
    assert every_file(out) == []
    # ... and with the first 20 lines' checksum, the merge must give exactly those 20 lines.
    first20 = (data_dir / REWARDMATH_FILE).read_bytes().splitlines(keepends=True)[:20]
    pins = {**cut_pins, REWARDMATH_FILE.name: sha(b"".join(first20))}
    done = fetch("rewardmath_rm_scores", from_path=cut, data_dir=out, pins=pins)
    assert done.action == "prepared" and "sha256 checked" in done.detail
    assert (out / REWARDMATH_FILE).read_bytes().splitlines(keepends=True) == first20
    assert every_file(out) == [str(REWARDMATH_FILE)]
    queries = load_spec("rewardmath_rm_scores", out)
    assert len(queries) == 20 and all(len(q.candidates) == 10 and len(q.candidates[0].scores) == 22 for q in queries)


def test_an_unchanged_set_from_an_upstream_layout_is_byte_identical(data_dir, tmp_path, capsys):
    upstream = tmp_path / "Qwen2.5-Math"
    (upstream / "evaluation" / "data" / "aime24").mkdir(parents=True)
    shutil.copyfile(data_dir / "aime24" / "test.jsonl", upstream / "evaluation" / "data" / "aime24" / "test.jsonl")
    out = tmp_path / "data"
    assert main(["data", "fetch", "aime24", "--from", str(upstream), "--data-dir", str(out)]) == 0
    assert capsys.readouterr().out == (f"aime24: prepared from 1 file in {upstream}, sha256 checked -> "
                                       f"{out / 'aime24'}\n")
    assert (out / "aime24" / "test.jsonl").read_bytes() == (data_dir / "aime24" / "test.jsonl").read_bytes()
    assert [s.state for s in states(source("aime24"), out)] == ["checked"]
    assert len(load_spec("aime24", out)) == 30
    assert main(["data", "fetch", "aime24", "--from", str(upstream), "--data-dir", str(out)]) == 0
    assert "aime24: already here, sha256 checked" in capsys.readouterr().out


def test_a_corrupted_file_is_one_checksum_line_naming_it(data_dir, tmp_path, capsys):
    given = tmp_path / "given"
    given.mkdir()
    data = bytearray((data_dir / "aime24" / "test.jsonl").read_bytes())
    data[100] ^= 1
    (given / "test.jsonl").write_bytes(bytes(data))
    out = tmp_path / "data"
    assert main(["data", "fetch", "aime24", "--from", str(given), "--data-dir", str(out)]) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"morkit: error: {given / 'test.jsonl'}: sha256 {sha(bytes(data))} is not the pinned "
                          "af2b8bd2aa91")
    assert every_file(out) == []


def test_a_cut_set_keeps_its_first_lines(data_dir, tmp_path):
    """Upstream-shaped files longer than the kept part are cut to it, byte for byte, and the pin checks."""
    for name, upstream_name in (("gsm8k_model_solutions", "example_model_solutions.jsonl"),
                                ("qwen25_math_rm8", "math_cot_100.jsonl")):
        src = source(name)
        shared = (data_dir / name / src.files[0].name).read_bytes()
        lines = shared.splitlines(keepends=True)
        assert len(lines) == src.keep
        given = tmp_path / name
        given.mkdir()
        (given / upstream_name).write_bytes(shared + b"".join(lines[:3]))  # more lines than kept
        done = fetch(name, from_path=given, data_dir=tmp_path / "data")
        assert done.action == "prepared"
        assert (tmp_path / "data" / name / src.files[0].name).read_bytes() == shared
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "math_cot_100.jsonl").write_bytes(b'{"idx": 0}\nnot json\n')
    with pytest.raises(InputError, match=r"math_cot_100.jsonl:2: not a JSON line"):
        fetch("qwen25_math_rm8", from_path=bad, data_dir=tmp_path / "data2")


def test_prepared_copies_come_from_a_data_folder_and_force_replaces_a_changed_file(data_dir, tmp_path, capsys):
    out = tmp_path / "data"
    assert main(["data", "fetch", "--all", "--from", str(data_dir), "--data-dir", str(out), "-q"]) == 0
    captured = capsys.readouterr()
    assert "not fetched by URL: humaneval_davinci_samples, gpqa, livecodebench" in captured.err
    for entry in SOURCES:
        expected = "no" if not entry.spec.fetchable else "yes"
        assert fetch_here(entry.spec, out) == expected, entry.name
    for name in DATASETS.names():
        if source(name).fetchable:
            assert load_spec(f"{name}:2", out), name
    target = out / "humaneval" / "HumanEval.jsonl.gz"
    target.write_bytes(target.read_bytes()[:-1])
    assert main(["data", "fetch", "humaneval", "--from", str(data_dir), "--data-dir", str(out)]) == 2
    assert f"morkit: error: {target}: differs from its pinned sha256" in one_error_line(capsys)
    assert main(["data", "fetch", "humaneval", "--from", str(data_dir), "--data-dir", str(out), "--force"]) == 0
    assert target.read_bytes() == (data_dir / "humaneval" / "HumanEval.jsonl.gz").read_bytes()


def fetch_here(src: DataSource, root: Path) -> str:
    from morkit.data.fetch import here

    return here(states(src, root))


def test_sets_not_fetched_by_url_say_how_to_get_them(data_dir, tmp_path, capsys):
    out = tmp_path / "data"
    for name, words in (("gpqa", "gated on the Hugging Face hub"), ("livecodebench", "code_generation_lite"),
                        ("humaneval_davinci_samples", "prepared from the MultiPL-E YAML files")):
        assert main(["data", "fetch", name, "--data-dir", str(out)]) == 2
        err = one_error_line(capsys)
        assert f"data source {name!r} cannot be fetched by URL: " in err and words in err
    # The converted HumanEval sample file is taken from a folder, checked against its pin.
    given = data_dir / "humaneval_davinci_samples"
    assert main(["data", "fetch", "humaneval_davinci_samples", "--from", str(given), "--data-dir", str(out)]) == 0
    assert "copied 1 file" in capsys.readouterr().out
    assert len(load_spec("humaneval_davinci_samples", out)) == 127
    assert main(["data", "fetch", "humaneval_davinci_samples", "--from", str(tmp_path / "www"),
                 "--data-dir", str(out / "other")]) == 2
    assert "--from: no such file or folder" in one_error_line(capsys)


# -- the data folder and the missing-set message -----------------------------------------------------------------


def test_a_missing_set_names_the_command_that_fetches_it(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError) as caught:
        load_spec("rewardmath_rm_scores:5", empty)
    assert str(caught.value) == (f"data set 'rewardmath_rm_scores' is not here (no {empty / REWARDMATH_FILE}): "
                                 f"run `morkit data fetch rewardmath_rm_scores --data-dir {empty}`")
    with pytest.raises(InputError, match=r"data set 'mbpp' is not here .*: run `morkit data fetch mbpp_sanitized"):
        load_spec("mbpp", empty)
    with pytest.raises(InputError, match=r"data set 'gpqa_main' is not here \(no .*gpqa_main.csv\): GPQA is gated"):
        load_spec("gpqa_main", empty)
    monkeypatch.delenv("MORKIT_DATA_DIR", raising=False)
    assert settings.data_dir() == settings.cache_dir() / "data"  # the default; it may not exist yet
    assert main(["label", "--dataset", "aime24:2", "-o", str(tmp_path / "out.jsonl")]) == 2
    assert one_error_line(capsys) == (f"morkit: error: data set 'aime24' is not here (no "
                                      f"{settings.cache_dir() / 'data' / 'aime24' / 'test.jsonl'}): "
                                      "run `morkit data fetch aime24`")


def test_fetch_writes_to_the_default_folder_that_loaders_then_read(data_dir, monkeypatch, tmp_path):
    monkeypatch.delenv("MORKIT_DATA_DIR", raising=False)
    done = fetch("amc23", from_path=data_dir)
    assert done.folder == settings.cache_dir() / "data" / "amc23"
    assert len(load_spec("amc23:3")) == 3
    monkeypatch.setenv("MORKIT_DATA_DIR", str(tmp_path / "env"))
    assert fetch("amc23", from_path=data_dir).folder == tmp_path / "env" / "amc23"  # made when absent
    assert fetch("amc23", from_path=data_dir, data_dir=tmp_path / "flag").folder == tmp_path / "flag" / "amc23"


def test_data_list_shows_sources_and_what_is_here(data_dir, tmp_path, capsys):
    assert main(["data", "list", "--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"data folder: {data_dir}" and lines[1].split() == [
        "NAME", "SOURCE", "SIZE", "LICENCE", "HERE", "DATA", "SETS"]
    here_at = lines[1].index("HERE")
    rows = {line.split()[0]: line for line in lines[2:15]}
    assert list(rows) == SOURCES.names() and max(map(len, lines[1:15])) <= 120
    assert {name: row[here_at:].split()[0] for name, row in rows.items()} == {
        name: "no" if name in ("gpqa", "livecodebench") else "yes" for name in rows}
    assert rows["rewardmath_rm_scores"].split()[1:4] == ["kimsh0507/RewardMATH_official@cde06ab", "4.4", "MB"]
    assert rows["ifeval"].endswith("  ifeval, ifeval_gpt4")
    assert "rewardmath_rm_scores: the first 383 of 483 problems" in out
    assert main(["data", "list", "--json", "--data-dir", str(tmp_path)]) == 0
    records = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert records["aime24"]["here"] == "no" and records["aime24"]["files"][0]["sha256"].startswith("af2b8bd2")
    assert records["ifeval"]["files"][1]["datasets"] == ["ifeval_gpt4"]
    assert len(records["rewardmath_rm_scores"]["upstream"]) == 31


# -- downloads from a real HTTP server ---------------------------------------------------------------------------


def test_download_from_a_local_server_then_a_rerun_fetches_nothing(data_dir, server, tmp_path):
    publish(server, "aime24", {"evaluation/data/aime24/test.jsonl": (data_dir / "aime24" / "test.jsonl").read_bytes()})
    out = tmp_path / "data"
    done = fetch("aime24", data_dir=out, base_url=server.url, progress=False)
    assert done.action == "downloaded"
    assert (out / "aime24" / "test.jsonl").read_bytes() == (data_dir / "aime24" / "test.jsonl").read_bytes()
    assert every_file(out) == ["aime24/test.jsonl"]  # the download folder is gone once the set checks
    assert len(server.asked) == 1
    assert fetch("aime24", data_dir=out, base_url=server.url).action == "here" and len(server.asked) == 1


def test_a_bad_download_leaves_nothing_and_a_checked_one_is_kept_for_the_rerun(data_dir, server, tmp_path):
    good = {f"data/{p.name}": p.read_bytes() for p in sorted((data_dir / "ifeval").glob("*.jsonl"))}
    corrupted = dict(good)
    corrupted["data/input_response_data_gpt4_20231107_145030.jsonl"] = b"{}\n"
    publish(server, "ifeval", corrupted)
    out = tmp_path / "data"
    with pytest.raises(UnavailableError) as caught:
        fetch("ifeval", data_dir=out, base_url=server.url, progress=False)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{server.url}/Podtech-AI/IFEval/")
    assert f"input_response_data_gpt4_20231107_145030.jsonl: sha256 {sha(b'{}' + bytes([10]))} is not the " \
           "pinned 49c1a9043965" in message
    assert every_file(out) == [f"{DOWNLOADS}/ifeval/input_data.jsonl"]  # checked: kept; the bad one: gone
    publish(server, "ifeval", good)
    asked = len(server.asked)
    assert fetch("ifeval", data_dir=out, base_url=server.url, progress=False).action == "downloaded"
    assert len(server.asked) == asked + 1  # only the file that had failed
    assert every_file(out) == ["ifeval/input_data.jsonl", "ifeval/input_response_data_gpt4_20231107_145030.jsonl"]
    assert len(load_spec("ifeval_gpt4", out)) == 540


def test_an_unpinned_download_whose_prepared_file_fails_is_dropped(data_dir, server, tmp_path):
    shared = (data_dir / "qwen25_math_rm8" / "math_cot_100.first70.jsonl").read_bytes()
    lines = shared.splitlines(keepends=True)
    publish(server, "qwen25_math_rm8", {"evaluation/data/eval_rm_maj_example/math_cot_100.jsonl":
                                        b"".join(lines[1:] + lines[:2])})  # same lines, another order
    out = tmp_path / "data"
    with pytest.raises(UnavailableError, match=r"math_cot_100.first70.jsonl: sha256 \w+ is not the pinned fda04812"):
        fetch("qwen25_math_rm8", data_dir=out, base_url=server.url, progress=False)
    assert every_file(out) == []
    publish(server, "qwen25_math_rm8", {"evaluation/data/eval_rm_maj_example/math_cot_100.jsonl":
                                        shared + b"".join(lines[:2])})
    fetch("qwen25_math_rm8", data_dir=out, base_url=server.url, progress=False)
    assert (out / "qwen25_math_rm8" / "math_cot_100.first70.jsonl").read_bytes() == shared


def test_rewardmath_downloaded_from_the_cut_files_merges_as_shared(data_dir, server, tmp_path):
    cut = data_dir / REWARDMATH_CUT
    publish(server, "rewardmath_rm_scores", {f"results/RewardMATH/{p.name}": p.read_bytes() for p in cut.iterdir()})
    first20 = (data_dir / REWARDMATH_FILE).read_bytes().splitlines(keepends=True)[:20]
    pins = {p.name: sha(p) for p in cut.iterdir()} | {REWARDMATH_FILE.name: sha(b"".join(first20))}
    out = tmp_path / "data"
    with pytest.raises(UnavailableError, match="ArmoRM_reward.json: sha256 .* is not the pinned 9a296e2e"):
        fetch("rewardmath_rm_scores", data_dir=out, base_url=server.url, progress=False)
    assert fetch("rewardmath_rm_scores", data_dir=out, base_url=server.url, progress=False, pins=pins).action \
        == "downloaded"
    assert (out / REWARDMATH_FILE).read_bytes().splitlines(keepends=True) == first20
    assert len(server.asked) == 1 + 31


def test_no_network_and_missing_files_are_one_line_with_the_offline_way(server, tmp_path, capsys):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # nothing listens here once the socket is closed
    with pytest.raises(UnavailableError) as caught:
        fetch("aime24", data_dir=tmp_path / "data", base_url=f"http://127.0.0.1:{closed}", progress=False)
    message = str(caught.value)
    commit = "a45202bd16f1ec06f433442dc1152d0074773465"
    assert message.startswith(f"cannot download http://127.0.0.1:{closed}/QwenLM/Qwen2.5-Math/{commit}/"
                              "evaluation/data/aime24/test.jsonl: ConnectError")
    assert message.endswith("; on a machine without a network, copy the upstream files and run "
                            "`morkit data fetch aime24 --from PATH`")
    assert "\n" not in message
    with pytest.raises(UnavailableError, match=r"cannot download .*/test.jsonl: HTTP 404; on a machine without"):
        fetch("amc23", data_dir=tmp_path / "data", base_url=server.url, progress=False)
    assert every_file(tmp_path / "data") == []


def test_a_stalled_download_ends_at_the_read_timeout(server, tmp_path):
    started = time.monotonic()
    with pytest.raises(UnavailableError, match=r"cannot download .*/stall.json: ReadTimeout"):
        download(f"{server.url}/stall.json", tmp_path / "stall.json", None, progress=False,
                 timeouts=(2.0, 0.5, 10.0))
    assert time.monotonic() - started < 2.0
    assert every_file(tmp_path) == []


def test_a_trickling_download_ends_at_its_deadline_however_small_its_reads(server, tmp_path):
    with pytest.raises(UnavailableError, match=r"cannot download .*/trickle.json: not done after 0.5 s"):
        download(f"{server.url}/trickle.json", tmp_path / "trickle.json", None, progress=False,
                 timeouts=(2.0, 1.0, 0.5))
    assert every_file(tmp_path) == []


def test_a_download_larger_than_the_cap_is_refused_and_leaves_nothing(server, tmp_path):
    (server.root / "big.json").write_bytes(b"0" * 300_000)
    with pytest.raises(UnavailableError, match=r"cannot download .*/big.json: more than 100000 bytes"):
        download(f"{server.url}/big.json", tmp_path / "big.json", None, progress=False, max_bytes=100_000)
    assert every_file(tmp_path) == ["www/big.json"]  # the server's copy only


# -- the docs page -----------------------------------------------------------------------------------------------


def test_the_docs_tables_are_the_registry():
    """docs/datasets.md's tables say what SOURCES says: origin, data sets, holdings, size, licence, what is kept."""
    from morkit.cli.data import _size
    from morkit.data import fetch as fetching

    page = (Path(__file__).resolve().parents[2] / "docs" / "datasets.md").read_text(encoding="utf-8")
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in page.splitlines()
            if line.startswith("| `")]
    sources = {cells[0].strip("`"): cells for cells in rows if len(cells) == 6}
    assert list(sources) == SOURCES.names()
    for name, (_, datasets, origin, holds, size, licence) in sources.items():
        src = source(name)
        assert datasets == ", ".join(f"`{d}`" for d in src.datasets), name
        assert (origin, holds, size, licence) == (src.origin, src.holds, _size(src.size), src.licence), name
    kept = {cells[0].strip("`"): cells[2] for cells in rows if len(cells) == 3}
    assert kept == {e.name: e.spec.kept for e in SOURCES if e.spec.kept and e.spec.fetchable}
    assert (fetching.CONNECT_TIMEOUT_S, fetching.READ_TIMEOUT_S, fetching.DEADLINE_S) == (15, 60, 1800)
    assert "when connecting takes\n  15 s, when no byte comes for 60 s, or after 30 minutes" in page
