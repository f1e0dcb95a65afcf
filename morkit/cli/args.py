"""Argument parsing the verbs share: a parser whose errors are one line, checked value types, option groups.

Value types reuse morkit.core.checks, so `--chunk 0` and `ScoringOptions.from_flags(chunk=0)` say the same thing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, NoReturn

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.registry import Registry
from morkit.reward_models.base import REDUCTIONS
from morkit.reward_models.options import MAX_REQUEST_PAIRS, PLACEMENT_CHOICES, ScoringOptions
from morkit.reward_models.truncation import DEFAULT_POLICY, POLICY_HELP, TRUNCATION_POLICIES

CONTRACT = "JSONL, one query per line: see docs/jsonl.md"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (`morkit: error: ... (see morkit VERB --help)`), like every
    other morkit error, and exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"morkit: error: {' '.join(message.split())} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def checked(convert: Callable[[str], Any], check: Callable[[Any, str], Any]) -> Callable[[str], Any]:
    """An argparse type: convert the text, then apply a morkit check; a failure names the flag in one line."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {'whole ' if convert is int else ''}number: {text!r}") from None
        try:
            return check(value, "")
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc).strip()) from None

    parse.__name__ = check.__name__  # argparse names the type in its messages
    return parse


POSITIVE_INT = checked(int, checks.positive_int)
NON_NEGATIVE_INT = checked(int, checks.non_negative_int)
NON_NEGATIVE = checked(float, checks.non_negative)
POSITIVE = checked(float, checks.positive)
PROBABILITY = checked(float, checks.probability)
SHARE = checked(float, checks.share)


def non_empty(text: str) -> str:
    """An argparse type for text that must not be empty."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def choices_help(registry: Registry, default: str | None = None) -> str:
    """Help text listing a registry's names with their summaries."""
    text = "; ".join(f"{e.name}: {e.summary}" for e in registry)
    return f"{text} (default {default})" if default else text


def add_agent_choices(p: argparse.ArgumentParser, *, prompt: bool = True) -> None:
    """`--agent-preset` and (with `prompt`) `--agent-prompt`, beside `--agents` in every verb with agents; the
    loops, which write their own prompts, take the preset only."""
    from morkit.llm.presets import AGENT_PRESETS, AGENT_PROMPTS, DEFAULT_AGENT_PRESET

    default = f"in place of the file's `preset` (default: the file's, else {DEFAULT_AGENT_PRESET})"
    if not prompt:  # `morkit loop`: what each loop takes from the agents' sampling
        p.add_argument("--agent-preset", choices=AGENT_PRESETS.names(), metavar="NAME",
                       help=f"sampling for the keys the agents file leaves unset, {default}. ATLAS's solvers sample "
                            "with their agent's settings; TMAS and StreamMA take only max_tokens (without "
                            "--gen-tokens) and sample with their own settings, as does ATLAS's orchestrator: "
                            + choices_help(AGENT_PRESETS))
        return
    p.add_argument("--agent-preset", choices=AGENT_PRESETS.names(), metavar="NAME",
                   help="sampling for the keys the agents file leaves unset, every agent's and the aggregator's, "
                        f"{default}: " + choices_help(AGENT_PRESETS))
    p.add_argument("--agent-prompt", choices=AGENT_PROMPTS.names(), metavar="NAME",
                   help="ask every agent with this named prompt (a system message and a user template), in place "
                        "of the agents file's `system`, `user` and `prompt`; the aggregator keeps its own. CTTS-MM's "
                        "Figure I prompts, one per benchmark: " + ", ".join(AGENT_PROMPTS.names()))


def agents_from_flags(args: argparse.Namespace) -> Any:
    """The AgentsConfig of `--agents` (None: the packaged pool) with `--agent-preset` and `--agent-prompt`."""
    from morkit.llm.agents import load_agents

    return load_agents(args.agents, preset=args.agent_preset, prompt=getattr(args, "agent_prompt", None))


def add_device_options(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    g = p.add_argument_group("scoring")
    g.add_argument("--device", help="torch device for models (default: auto = cuda, mps, else cpu)")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return g


def add_scoring_options(p: argparse.ArgumentParser, *, reduction: bool = True) -> None:
    """The scoring flags; `reduction=False` where the pool's own reduction applies (pool add)."""
    g = add_device_options(p)
    g.add_argument("--batch-size", type=POSITIVE_INT,
                   help="transformers: max sequences per forward pass (default 16); vLLM servers (--url): pairs per "
                        f"/pooling request (default 16, at most {MAX_REQUEST_PAIRS}); not for --placement vllm")
    g.add_argument("--max-tokens", type=POSITIVE_INT,
                   help="max tokens per (question, answer) pair (default: the model's window; `morkit rms NAME` "
                        "shows it)")
    g.add_argument("--truncation", choices=TRUNCATION_POLICIES, default=DEFAULT_POLICY, help=POLICY_HELP)
    if reduction:
        g.add_argument("--reduction", choices=REDUCTIONS, default="min",
                       help="how a cached PRM step list becomes one score (default min)")
    g.add_argument("--chunk", type=POSITIVE_INT, default=64, help="pairs per scoring call, cached as each finishes")
    add_engine_options(p)
    g.add_argument("--cache", help="score cache file (default: scores.sqlite in morkit's cache folder, "
                                   "$MORKIT_CACHE_DIR, else ~/.cache/morkit)")
    g.add_argument("--no-cache", action="store_true", help="neither read nor write the score cache")


def url(text: str) -> str:
    """An argparse type for `--url`: URL, or RM=URL to bind a server to one RM."""
    from morkit.reward_models.options import split_url

    try:
        split_url(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """Where model RMs run, and how much of the device they may take."""
    from morkit.runtime.device import DTYPES

    g = p.add_argument_group("model placement (model RMs: the CTTS-MM eight, smollm2-orm, smollm2-judge)")
    g.add_argument("--placement", choices=PLACEMENT_CHOICES, default="transformers",
                   help="run model RMs in this process with transformers (default) or in an offline vLLM engine")
    g.add_argument("--url", action="append", default=[], type=url, metavar="[RM=]URL",
                   help="score model RMs on this vLLM server (`vllm serve DIR --runner pooling --served-model-name "
                        "RM`); RM=URL binds it to one RM; repeatable (requests are spread over the servers)")
    g.add_argument("--dtype", choices=("auto", *DTYPES), default=None,
                   help="model dtype (default auto: bfloat16 on GPUs, float32 on CPU)")
    g.add_argument("--tensor-parallel-size", type=POSITIVE_INT,
                   help="offline vLLM engine (--placement vllm) only: GPUs that share one model's weights (default 1)")
    g.add_argument("--device-map", choices=("auto", "balanced", "sequential"),
                   help="transformers placement only: spread one model's layers over every visible GPU")
    g.add_argument("--max-model-len", type=POSITIVE_INT,
                   help="offline vLLM engine (--placement vllm) only: its context length, which also bounds every pair "
                        "(default: --max-tokens, else the model's window)")
    g.add_argument("--gpu-memory-utilization", type=SHARE,
                   help="offline vLLM engine (--placement vllm) only: share of device memory it may take "
                        "(default 0.9 on GPU, 0.2 on CPU)")
    g.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                   help="spread each model RM's scoring over a Ray cluster (Ray Data, one RM replica per actor, "
                        "a GPU share per replica from --placement/--tensor-parallel-size; rules and tables stay "
                        "here); finished batches go to the score cache as they come back. ADDRESS: HOST:PORT or "
                        "ray://HOST:PORT; without it (or `auto`), $RAY_ADDRESS, else a new local Ray instance. Before an "
                        "input file, write --ray auto so the file is not read as the address")
    g.add_argument("--ray-workers", type=POSITIVE_INT, metavar="N",
                   help="Ray actors (RM replicas) per RM (default: as many as the cluster's GPUs hold, else one "
                        "per node)")
    g.add_argument("--no-prefix-reuse", action="store_true",
                   help="score every candidate's full prompt (default: a question's shared prompt prefix is "
                        "computed once, by KV reuse or vLLM prefix caching)")


def output_file(path: str | None, flag: str = "-o/--output") -> None:
    """Before any work: `path` must be writable as a file (not a directory, no file where a folder should be)."""
    from morkit.data.jsonl import output_file_problem

    problem = None if path is None else output_file_problem(path)
    if problem:
        raise InputError(f"{flag} {path}: {problem}")


def output_dir(path: str, flag: str = "-o/--output") -> None:
    """Before any work: `path` must be a pool directory to write (absent, empty, or an older pool, never a file)."""
    from morkit.question_pool.store import pool_target_problem

    problem = pool_target_problem(path)
    if problem:
        raise InputError(f"{flag} {path}: {problem}")


def scoring_options(args: argparse.Namespace) -> ScoringOptions:
    """The scoring flags as ScoringOptions; a --cache that cannot hold the score cache is an error naming it."""
    from morkit.reward_models.cache import cache_problem
    from morkit.reward_models.options import DEFAULT_CACHE

    if args.cache and not args.no_cache:
        problem = cache_problem(args.cache)
        if problem:
            raise InputError(f"--cache {args.cache}: {problem}")
    cache = None if args.no_cache else (args.cache or DEFAULT_CACHE)  # resolved when it opens, as in Python
    return ScoringOptions.from_flags(
        device=args.device, batch_size=args.batch_size, max_tokens=args.max_tokens, truncation=args.truncation,
        reduction=getattr(args, "reduction", "min"), chunk=args.chunk, cache=cache, progress=not args.quiet,
        placement=args.placement, urls=tuple(args.url), dtype=args.dtype,
        tensor_parallel_size=args.tensor_parallel_size, device_map=args.device_map, max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization, prefix_reuse=not args.no_prefix_reuse, ray=args.ray,
        ray_workers=args.ray_workers)


DATA_DIR_HELP = "folder of the data sets (default $MORKIT_DATA_DIR, else the cache's data/)"


def add_input_options(p: argparse.ArgumentParser) -> None:
    from morkit.data.datasets import DATASETS

    p.add_argument("--dataset", action="append", metavar="NAME[:N]", default=[],
                   help="a registered data set (its first N questions), repeatable: " + ", ".join(DATASETS.names()))
    p.add_argument("--data-dir", help=DATA_DIR_HELP)


def add_select_options(p: argparse.ArgumentParser, flag: str = "--method") -> None:
    from morkit.selection.methods import DEFAULT_METHOD, DEFAULT_NEIGHBOURHOOD, NEIGHBOURHOODS, SELECTION_METHODS

    p.add_argument(flag, dest="selection", choices=SELECTION_METHODS.names(), default=None,  # None: not given
                   help="how each query's RM ensemble is chosen: " + choices_help(SELECTION_METHODS, DEFAULT_METHOD))
    p.add_argument("--k", type=POSITIVE_INT, default=100,
                   help="pool neighbours per query (default 100, as in the paper)")
    p.add_argument("--neighbours", dest="neighbourhood", choices=NEIGHBOURHOODS, default=DEFAULT_NEIGHBOURHOOD,
                   help="which k pool questions PRES reads: 'all', the k nearest; 'valid', the k nearest with both "
                        "a correct and a wrong answer (the paper's valid questions, filtered in the search). The "
                        "paper's 'top-k questions' allows either (docs/selection.md). Default "
                        f"{DEFAULT_NEIGHBOURHOOD}; 'valid' applies to pres and pres-top1 only")


COSTS_HELP = ("a cost file, packaged (by name: morkit/resources/costs/NAME.toml) or a TOML path with a [costs.NAME] "
              "table per RM; repeatable, a later file wins for an RM both name; an RM no file or --cost names is "
              "costed from its card")
COST_HELP = ("one RM's cost per scored candidate, repeatable, before any file or card: NAME=8B (active parameters), "
             "NAME=$0.02 (price per call), NAME=3ms (CPU time per pair) or NAME=40GFLOP")


def add_cost_options(p: argparse.ArgumentParser, what: str) -> None:
    """`--costs NAME|FILE` and `--cost NAME=VALUE` (repeatable): where the RMs' costs come from; `what` says what
    they are for."""
    p.add_argument("--costs", action="append", default=[], metavar="NAME|FILE", help=f"{what}: {COSTS_HELP}")
    p.add_argument("--cost", action="append", default=[], metavar="NAME=VALUE", help=COST_HELP)


def cost_options(args: argparse.Namespace) -> Any:
    """The CostOptions of `--costs` and `--cost` (None where neither is given); a bad `--cost` names it."""
    from morkit.selection.budget import CostOptions

    files, given = getattr(args, "costs", None) or [], getattr(args, "cost", None) or []
    if not files and not given:
        return None
    return CostOptions(tuple(files), tuple(CostOptions.parse_given(text) for text in given))


def add_budget_options(p: argparse.ArgumentParser) -> None:
    """`--budget`, `--cost-weight` and the cost flags of routing under a budget (`select`, `rank`, `serve`)."""
    g = p.add_argument_group("routing under a budget (learned, pres, pres-top1; docs/selection.md)")
    g.add_argument("--budget", metavar="B",
                   help="the most scoring one query may cost: GFLOP-equivalents per query (3e5; a model RM costs "
                        "2 x its active parameters x the tokens it reads per candidate), or a share of the full "
                        "route's cost, every pool RM the query can use (25%%); each query gets the best ensemble "
                        "that fits, and a query nothing fits is an error")
    g.add_argument("--cost-weight", type=NON_NEGATIVE, metavar="LAMBDA",
                   help="trade accuracy for cost: pick by accuracy - LAMBDA x cost per query in GFLOP-equivalents "
                        "(1e-5: 1,000 GFLOP per query weighs one percentage point (0.01) of best-of-n); default 0")
    add_cost_options(g, "RM costs beyond the pool's stored ones (with either, every line carries its cost)")


def budget(args: argparse.Namespace) -> Any:
    """The Budget of `--budget` and `--cost-weight` (None where neither limits anything: `--cost-weight 0` alone)."""
    from morkit.selection.budget import Budget, limiting

    text, weight = getattr(args, "budget", None), getattr(args, "cost_weight", None)
    if text is None and weight is None:
        return None
    return limiting(Budget.parse(text, weight or 0.0) if text is not None else Budget(cost_weight=weight))


def spend_share(text: str) -> float:
    """An argparse type for `--spend`: a share of queries in (0, 1), written 0.25 or 25%."""
    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = float(raw[:-1] if percent else raw) / (100.0 if percent else 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a share of queries: {text!r} (write 0.25 or 25%)") from None
    try:
        return checks.share(value, "the share of queries to escalate")
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_cascade_options(p: argparse.ArgumentParser) -> None:
    """`--cascade`, `--then`, `--below` and `--spend`: rank with a cascade of two learned routes (`rank`, `serve`;
    `select` refuses them in one line)."""
    g = p.add_argument_group("cascade: escalate when unsure (the learned selector; docs/selection.md)")
    g.add_argument("--cascade", nargs="+", metavar="NAME",
                   help="the cheap pool RMs: each query is ranked by the learned selector over these first (rank "
                        "and serve; select refuses a cascade, as it scores nothing to decide by). Before the input "
                        "file, end the list with --")
    g.add_argument("--then", nargs="+", metavar="NAME",
                   help="the expensive pool RMs (none of --cascade's): a query whose cheap pick is unsure is filled "
                        "with these too and ranked again by the learned selector over both sets; its line says "
                        "\"escalated\": true and, where costs are known, its cost counts both routes' RMs")
    g.add_argument("--below", type=PROBABILITY, metavar="P",
                   help="escalate a query whose cheap pick's calibrated confidence is below P, in [0, 1] (0: never, "
                        "1: always); or give --spend")
    g.add_argument("--spend", type=spend_share, metavar="SHARE",
                   help="escalate this share of queries, 0.25 or 25%%: the threshold is that quantile of the cheap "
                        "route's confidence on the pool's out-of-fold picks; or give --below")


def cascade_options(args: argparse.Namespace) -> Any:
    """The CascadeOptions of the cascade flags (None where none is given); --then, --below or --spend without
    --cascade is a one-line InputError, and CascadeOptions checks the rest."""
    from morkit.selection.cascade_options import CascadeOptions

    cheap, then = getattr(args, "cascade", None), getattr(args, "then", None)
    below, spend = getattr(args, "below", None), getattr(args, "spend", None)
    if cheap is None:
        given = [flag for flag, value in (("--then", then), ("--below", below), ("--spend", spend))
                 if value is not None]
        if given:
            raise InputError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} only with --cascade NAME "
                             "... (the cheap RMs)")
        return None
    return CascadeOptions(tuple(cheap), tuple(then or ()), below=below, spend=spend)


def add_fixed_option(p: argparse.ArgumentParser, verb: str = "score") -> None:
    """`--rm NAME` (repeatable): the `fixed` selection method's ensemble instead of routing per query."""
    p.add_argument("--rm", action="append", default=[], metavar="NAME",
                   help=f"{verb} with this fixed pool RM instead of routing per query; repeat for a fixed ensemble "
                        "(the pool's best-weighted ensemble of exactly these RMs: the 'fixed' method, which --rm "
                        "selects; another --method beside it is an error)")


def select_options(args: argparse.Namespace) -> Any:
    """The SelectOptions of the flags; `--rm` (add_fixed_option) alone selects the `fixed` method with its RMs, and
    beside a method given that is not `fixed` it is a one-line InputError (SelectOptions checks it); the budget
    flags (add_budget_options) and the cascade flags (add_cascade_options) where the verb has them."""
    from morkit.selection.budget import CostOptions
    from morkit.selection.methods import DEFAULT_METHOD, SelectOptions

    rms = tuple(getattr(args, "rm", None) or ())
    method = args.selection or ("fixed" if rms else DEFAULT_METHOD)
    return SelectOptions(method=method, k=args.k, neighbourhood=args.neighbourhood,
                         singles_only=getattr(args, "singles_only", False),
                         allow_run=not getattr(args, "no_run", False),
                         abstain_below=getattr(args, "abstain_below", None), rms=rms, budget=budget(args),
                         costs=cost_options(args) or CostOptions(), cascade=cascade_options(args))
