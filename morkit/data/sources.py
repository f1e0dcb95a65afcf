"""Where each public data set's files come from: upstream repository, pinned commit, files, licence and sha256 pins,
in SOURCES (one entry per folder of the data folder). `morkit data fetch` reads it; docs/datasets.md explains it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from morkit.core.errors import InputError
from morkit.core.registry import Entry, Registry, spec_fields

RAW_BASE = "https://raw.githubusercontent.com"
"""Raw files of a GitHub repository at a commit: <RAW_BASE>/<owner>/<repo>/<commit>/<path>."""


@dataclass(frozen=True)
class Upstream:
    """One upstream file: its path in the repository and, where known, the sha256 and size of the whole file."""

    path: str
    sha256: str | None = None
    size: int | None = None

    @property
    def basename(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Prepared:
    """One file a loader reads, in the source's folder: its name (a glob where the file set varies), its sha256 pin
    and size where known, and the data sets that read it (empty: all of the source's)."""

    name: str
    sha256: str | None = None
    size: int | None = None
    datasets: tuple[str, ...] = ()

    @property
    def is_pattern(self) -> bool:
        return any(c in self.name for c in "*?[")


@dataclass(frozen=True)
class DataSource:
    """Where one folder of the data folder comes from and what it holds: `repo`@`commit` on GitHub (fetched by URL),
    or `manual`, one sentence saying how its files are obtained; `keep` is the leading records the prepare function
    keeps (0: all), `kept` says so in words."""

    name: str
    datasets: tuple[str, ...]
    files: tuple[Prepared, ...]
    licence: str
    holds: str
    repo: str = ""
    commit: str = ""
    upstream: tuple[Upstream, ...] = ()
    keep: int = 0
    kept: str = ""
    manual: str = ""
    hub: str = ""  # a Hugging Face dataset id, for sets that live only on the hub

    @classmethod
    def of(cls, name: str, **given: Any) -> "DataSource":
        """The spec from a registration's keyword fields; an unknown field is an error naming it.

        Args:
            name: The folder's name (the registered name).
            **given: DataSource fields; lists become tuples.

        Returns:
            The spec.
        """
        return cls(name=name, **spec_fields(cls, f"data source {name!r}", given,
                                            tuples=("datasets", "files", "upstream"), exclude=("name",)))

    @property
    def fetchable(self) -> bool:
        """Whether `morkit data fetch NAME` can download it (a pinned GitHub commit, no manual step)."""
        return bool(self.repo and self.commit and self.upstream and not self.manual)

    @property
    def origin(self) -> str:
        """repo@short-commit, or the hub dataset it lives on."""
        if self.repo:
            return f"{self.repo}@{self.commit[:7]}"
        return f"hf:{self.hub}" if self.hub else "-"

    @property
    def size(self) -> int | None:
        """Bytes of the prepared files, where every one is pinned."""
        sizes = [f.size for f in self.files]
        return None if not sizes or None in sizes else sum(sizes)  # type: ignore[arg-type]

    def url(self, upstream: Upstream, base: str = RAW_BASE) -> str:
        """The raw-file address of one upstream file at the pinned commit."""
        return f"{base.rstrip('/')}/{self.repo}/{self.commit}/{upstream.path}"

    def files_for(self, dataset: str | None = None) -> tuple[Prepared, ...]:
        """The prepared files data set `dataset` reads (None: every file of the source)."""
        return tuple(f for f in self.files if dataset is None or not f.datasets or dataset in f.datasets)

    def missing(self, data_dir: Path, dataset: str | None = None) -> list[Path]:
        """The files (of `dataset`, else all) absent from this source's folder under `data_dir`."""
        folder = data_dir / self.name
        return [folder / f.name for f in self.files_for(dataset)
                if not (any(folder.glob(f.name)) if f.is_pattern else (folder / f.name).is_file())]

    def how_to_get(self, data_dir_flag: str = "") -> str:
        """What the user runs (or does) to put this source's files in place, in one sentence."""
        if self.fetchable:
            return f"run `morkit data fetch {self.name}{data_dir_flag}`"
        return self.manual


def _unchanged(path: str, sha256: str, size: int) -> dict[str, list[Any]]:
    """The upstream file at `path` and its prepared copy, the same bytes (an "unchanged" source's one file)."""
    return {"upstream": [Upstream(path, sha256, size)], "files": [Prepared(path.rsplit("/", 1)[-1], sha256, size)]}


_GSM8K = ("openai/grade-school-math", "3101c7d5072418e28b9008a6636bde82a006892c")
_QWEN = ("QwenLM/Qwen2.5-Math", "a45202bd16f1ec06f433442dc1152d0074773465")
_REWARDMATH = ("kimsh0507/RewardMATH_official", "cde06ab3f5466e1f94e74ba4fadf0e6561434ecb")
_REWARDMATH_FILES = {  # sha256 of each whole upstream file at the pinned commit
    "ArmoRM_reward.json": "9a296e2e926b44e3ae0de5303bc131c0666827922eea36cb211b2231f01470ee",
    "Easy_to_hard_reward.json": "70c394007df27e5b8e1bf9a1ec46420e9f45fa9831d891faa494babde50e85d5",
    "Eurus-RM_reward.json": "5c40d3d01d326fa738fe84a0bd6f4a0f4d129d4a23a1b8e3310dc5e66f07ef70",
    "Math_Shepherd_reward.json": "648582ee49b3f8c71d723e6273840bc913f15806709a9586950b53eb54e02331",
    "ReasonEval_34B_reward.json": "58a61725ba8cfbff7b7ddf1ba3b9b9e875146e8c2cbbf8e196b1f0b947ec2431",
    "ReasonEval_7B_reward.json": "cb7f3d1278d76ea5d7c839e35762824a29cd89e31bc7daeb63d2254203ff701e",
    "beaver_reward.json": "4ba4a8a2ccf8629ff2048914236455b282d228b8664f07baac3089d28a5affd9",
    "chatgpt_pairwise_reward.json": "8cee1e188c360376053caeffbdc9a039110c32b7bbfefd971672811d78e07144",
    "chatgpt_reward.json": "5cc6ac77a2bc5a29b690ebed52542392e2fdd6da8a4f03cdafda43815fd0b69b",
    "gpt4_pairwise_reward.json": "91a11004348dd1446c68cf2d137c9b95b2d7f34ffed4f8c4f88ba9a0df5a2e24",
    "gpt4_reward.json": "07953e150fe2c7c34b29852f352957a9590145a27ad5e514180900ea123aae35",
    "gpt4o_pairwise_reward.json": "4cfb085d344982f5c9d42b526b4efb09e612d73e6273789101b26dc09a3af350",
    "gpt4o_reward.json": "5569a3fb1b755c918d29ecaf4b4cc57f9eec868539853c05cf57a72a83e934bd",
    "grm_gemma_reward.json": "236ba955d5c2b2f32cd2b6d035b8e582c9f90cc7f8287571cf627b244f6ab0eb",
    "grm_llama3_reward.json": "c3311a466a9ad43f23d3f289cd8049b0cfae806e08bdc30142d7bee3b6894d5c",
    "internlm2_20b_reward.json": "0809bc8c56aa7091a2bbf28f44dc1d6a862f39371366483d8ccc9d4b91cf8d00",
    "internlm2_reward.json": "48ec59e8ce4062a72ca30ad0ceb691edc89393b8a7c6ce38ef8f09b6366e9885",
    "llama3_70B_pairwise_reward.json": "e0e90ce8571ecd8e29eca075d1ee7523ef4be919290771d00fda59b115a1910d",
    "llama3_70B_reward.json": "6274626af1edffaeb606688c96bd2e42367d3ea76ee3c54bb953af747a85273a",
    "llama3_8B_pairwise_reward.json": "d919abfe87cd79a873f26486267e5e221ba68a98f6363d69c8170be7618dc4e7",
    "llama3_8B_reward.json": "aedbfa2772282513c0160f323b42c256f8780dd15e59b4832e125af8b4d1a564",
    "oasst-rm_reward.json": "575f24d45d0060f202578ce6c7768fab84e0b21ce48d2c3af15ab0955dc7780c",
    "opus_pairwise_reward.json": "0984f0d4dedd941f42ca5e4a4f2d6080e57ed5fb018bf6f0c73e09e689982636",
    "opus_reward.json": "4fb31badc050078656ded1df36a3c8193b74752969847b84e0cdf71e2beff0a3",
    "prometheus_7B_pairwise_reward.json": "247bd27ed67a546bae3452c625f9f518faf4ff818be4b62b4ebaf3cd1edbf7ef",
    "prometheus_7B_reward.json": "7ff4e648c6549f157b6dfba71509592590a24d605275265c3d380d2cd3e2417e",
    "prometheus_8x7B_pairwise_reward.json": "dbd4145f1b8a0711a462f275596a8a183d73a72db686f0f7bdb12fc03470dc38",
    "prometheus_8x7B_reward.json": "1fd78013847e402ddd9fcb02a05b9ae6ef66c5623cadc076e58c7d94241d4178",
    "skywork_llama3_reward.json": "f6eb5762f0e4ebd791bfdfa00e64029dec756b1d328715598abf766a9b27892e",
    "sonnet-3-5_pairwise_reward.json": "f5d5cfa49a756fae993d5135ec4dc97b4de04b015795ee6007b79b93954c712e",
    "sonnet-3-5_reward.json": "f60f85797595ed05a0ecff1228c9dbb90163b012f52d1d90180862bb3eedb79d",
}
_PREPARE = "morkit.data.prepare:"

SOURCES = Registry("data source", [
    Entry("gsm8k", _PREPARE + "unchanged", "GSM8K test questions with worked reference answers", dict(
        datasets=["gsm8k_test"], repo=_GSM8K[0], commit=_GSM8K[1], licence="MIT", holds="1,319 questions",
        **_unchanged("grade_school_math/data/test.jsonl",
                     "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14", 749738))),
    Entry("gsm8k_model_solutions", _PREPARE + "first_lines", "GSM8K questions x 4 labelled GPT-3 solutions", dict(
        datasets=["gsm8k_model_solutions"], repo=_GSM8K[0], commit=_GSM8K[1], licence="MIT",
        holds="1,000 questions x 4 solutions", keep=1000,
        kept="the first 1,000 of 1,319 questions",
        upstream=[Upstream("grade_school_math/data/example_model_solutions.jsonl")],
        files=[Prepared("example_model_solutions.first1000.jsonl",
                        "3caa841d4aaf7f61207a545910e0c8034078f33efd7d2bef2b01f8536084dc9a", 1927395)])),
    Entry("qwen25_math_rm8", _PREPARE + "first_lines",
          "MATH problems x 8 Qwen2.5-Math answers, correctness and Qwen2.5-Math-RM scores", dict(
              datasets=["qwen25_math_rm8"], repo=_QWEN[0], commit=_QWEN[1], licence="MIT",
              holds="70 problems x 8 answers", keep=70, kept="the first 70 of 100 problems",
              upstream=[Upstream("evaluation/data/eval_rm_maj_example/math_cot_100.jsonl")],
              files=[Prepared("math_cot_100.first70.jsonl",
                              "fda04812a16ac688b1fb0329dcb908abd476706135b4a8246e2558952deddcaf", 1485464)])),
    Entry("rewardmath_rm_scores", _PREPARE + "rewardmath_merged",
          "RewardMATH: scores of 22 RMs and LLM judges on 10 solutions per MATH problem, merged per problem", dict(
              datasets=["rewardmath_rm_scores"], repo=_REWARDMATH[0], commit=_REWARDMATH[1], licence="MIT",
              holds="383 problems x 10 solutions x 22 RMs", keep=383,
              kept="the first 383 of 483 problems, merged from 31 files into one line per problem",
              upstream=[Upstream(f"results/RewardMATH/{name}", sha) for name, sha in _REWARDMATH_FILES.items()],
              files=[Prepared("rewardmath_scores.first383.jsonl",
                              "41a0fc9bd3687bafab5b6abd066329f4f82ca9b5bbe933376592c24d20bc0217", 4393330)])),
    Entry("math500", _PREPARE + "unchanged", "MATH-500, the PRM800K test split of MATH", dict(
        datasets=["math500"], repo="ZubinGou/math-evaluation-harness",
        commit="db77bc6bb2a17c90ed2d63e88ebd8c40a82858c5", licence="MIT", holds="500 problems",
        **_unchanged("data/math_oai/test.jsonl",
                     "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132", 446564))),
    Entry("aime24", _PREPARE + "unchanged", "AIME 2024 problems with integer answers", dict(
        datasets=["aime24"], repo=_QWEN[0], commit=_QWEN[1], licence="MAA terms", holds="30 problems",
        **_unchanged("evaluation/data/aime24/test.jsonl",
                     "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac", 156944))),
    Entry("amc23", _PREPARE + "unchanged", "AMC 2023 problems with answers", dict(
        datasets=["amc23"], repo=_QWEN[0], commit=_QWEN[1], licence="MAA terms", holds="40 problems",
        **_unchanged("evaluation/data/amc23/test.jsonl",
                     "43707e1ca784602d8479de24ee8ce36609dbebc46dd152b0b12a46611aa898a4", 27631))),
    Entry("humaneval", _PREPARE + "unchanged", "HumanEval problems with their tests (gzip JSONL)", dict(
        datasets=["humaneval"], repo="openai/human-eval", commit="6d43fb980f9fee3c892a914eda09951f772ad10d",
        licence="MIT", holds="164 problems",
        **_unchanged("data/HumanEval.jsonl.gz",
                     "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef", 44877))),
    Entry("mbpp_sanitized", _PREPARE + "unchanged", "sanitized MBPP, as mirrored in PropertyEval", dict(
        datasets=["mbpp"], repo="mrigankpawagi/PropertyEval", commit="b2be813dcff867cc350c61b8d3ea57ec088ce1ac",
        licence="CC-BY-4.0", holds="427 problems",
        **_unchanged("sanitized-mbpp.json",
                     "8ac32b2799150228e2d745aed09c870b7e4444246d4727d1004576207ef40769", 278372))),
    Entry("humaneval_davinci_samples", _PREPARE + "unavailable",
          "HumanEval x 200 code-davinci-002 completions with pass/fail (MultiPL-E), one record per problem", dict(
              datasets=["humaneval_davinci_samples"], repo="neulab/code-bert-score",
              commit="44106b5b5ed348b8e6fde2385653a3ce1de8a429", licence="MIT",
              holds="127 problems x 200 completions", kept="the 127 of 161 problems numbered below HumanEval/130",
              manual=("prepared from the MultiPL-E YAML files (<name>.yaml and <name>.results.yaml) under "
                      "evaluation/data/multipl_e/python-davinci-0.8-keep/ of neulab/code-bert-score@44106b5, "
                      "by a conversion morkit does not ship: copy the converted "
                      "humaneval_py_davinci_200.tasks_lt130.jsonl into a folder and run "
                      "`morkit data fetch humaneval_davinci_samples --from FOLDER` (its sha256 is checked)"),
              files=[Prepared("humaneval_py_davinci_200.tasks_lt130.jsonl",
                              "3236499106bf0d9ab51f9b0e9849d33432df5769bfd15a594695b6950f29f9a5", 5845900)])),
    Entry("ifeval", _PREPARE + "unchanged", "IFEval prompts with their instructions, and GPT-4's responses", dict(
        datasets=["ifeval", "ifeval_gpt4"], repo="Podtech-AI/IFEval", commit="76670a377db0f75ac8e808bbdaa8df5e6f185399",
        licence="Apache-2.0", holds="540 prompts; 540 responses",
        upstream=[Upstream("data/input_data.jsonl", "0ca6d445a430b5dfe2a9657492fa058ff83fce61c7ed1a3b5f74c3a746d2160b",
                      206605),
                  Upstream("data/input_response_data_gpt4_20231107_145030.jsonl",
                      "49c1a90439654e3699e69e56da1d41e9bad957a7ba0595386a9176378395553a", 827862)],
        files=[Prepared("input_data.jsonl", "0ca6d445a430b5dfe2a9657492fa058ff83fce61c7ed1a3b5f74c3a746d2160b",
                        206605),
               Prepared("input_response_data_gpt4_20231107_145030.jsonl",
                        "49c1a90439654e3699e69e56da1d41e9bad957a7ba0595386a9176378395553a", 827862,
                        datasets=("ifeval_gpt4",))])),
    Entry("gpqa", _PREPARE + "unavailable", "GPQA diamond and main, the release's CSV files", dict(
        datasets=["gpqa", "gpqa_main"], hub="Idavidrein/gpqa", licence="CC-BY-4.0",
        holds="198 (diamond); 448 (main)",
        manual=("GPQA is gated on the Hugging Face hub: accept its terms at "
                "https://huggingface.co/datasets/Idavidrein/gpqa, download gpqa_diamond.csv and gpqa_main.csv, "
                "and put them in the gpqa/ folder of the data folder"),
        files=[Prepared("gpqa_diamond.csv", datasets=("gpqa",)), Prepared("gpqa_main.csv", datasets=("gpqa_main",))])),
    Entry("livecodebench", _PREPARE + "unavailable", "LiveCodeBench code_generation_lite releases (JSONL)", dict(
        datasets=["livecodebench"], hub="livecodebench/code_generation_lite", licence="see card",
        holds="stdin/stdout problems",
        manual=("LiveCodeBench is on the Hugging Face hub: download the test*.jsonl files of "
                "https://huggingface.co/datasets/livecodebench/code_generation_lite and put them in the "
                "livecodebench/ folder of the data folder"),
        files=[Prepared("test*.jsonl")])),
], spec_type=DataSource)
"""Data sources by folder name; each entry's target is its prepare function (upstream files -> the loaders' files)."""


def source(name: str) -> DataSource:
    """The source named `name`, or the one serving data set `name` (`mbpp` -> `mbpp_sanitized`).

    Args:
        name: A data source's name or a registered data set's name.

    Returns:
        Its DataSource; an unknown name is an UnknownName error listing the sources.
    """
    if name in SOURCES:
        return SOURCES.get(name).spec
    serving = serving_source(name)
    if serving is None:
        SOURCES.get(name)  # raises UnknownName with the known names
    return serving  # type: ignore[return-value]


def serving_source(dataset: str) -> DataSource | None:
    """The source whose files data set `dataset` reads; None for a data set no source serves."""
    return next((e.spec for e in SOURCES if dataset in e.spec.datasets), None)


def require_files(dataset: str, data_dir: Path, explicit: Any = None) -> None:
    """An InputError naming the first missing file and how to get it, unless data set `dataset`'s files are here.

    Args:
        dataset: A registered data set's name (one no source serves is not checked).
        data_dir: The data folder it is read from.
        explicit: The --data-dir the user gave, if any (repeated in the fetch command).
    """
    serving = serving_source(dataset)
    missing = serving.missing(data_dir, dataset) if serving else []
    if missing:
        flag = f" --data-dir {shlex.quote(str(explicit))}" if explicit else ""
        raise InputError(f"data set {dataset!r} is not here (no {missing[0]}): {serving.how_to_get(flag)}")
