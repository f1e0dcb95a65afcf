"""What scoring one candidate with an RM costs (`RMCost`, on its card or in a cost file), and `CostTable`: each pool
RM's cost per candidate in the one currency routing compares them in, GFLOP-equivalents. A model reads
`rates.tokens_per_pair` tokens at 2 FLOPs per active parameter each; an API judge's price and a rule's CPU seconds
convert at the rates of `CostRates` (docs/selection.md, "Routing under a budget", gives their sources).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from morkit.core.errors import InputError

COST_UNIT = "GFLOP"
"""The unit of a CostTable: GFLOP-equivalents per scored candidate (a query's cost is that times its candidates)."""
TOKENS_PER_PAIR = 512
"""Tokens a model RM reads per (question, answer) pair where the caller says nothing else."""
JUDGE_OUTPUT_TOKENS = 256
"""Tokens an API judge writes per candidate (its verdict and reasoning), for a price per call from token prices."""
FLOP_PER_USD = 2 * 70.6e9 * 1e6 / 0.88
"""FLOP-equivalents a dollar buys: an open-weight model's forward FLOPs at a public API's price for it
(Llama-3-70B-Instruct, 70.6B parameters, at $0.88 per million tokens); it prices an API judge in FLOPs."""
FLOP_PER_CPU_SECOND = 1e11
"""FLOP-equivalents of one CPU second (about one core's fp32 peak); it prices a rule's measured CPU time."""


@dataclass(frozen=True)
class CostRates:
    """How costs convert into GFLOP-equivalents per candidate.

    Args:
        tokens_per_pair: Tokens a model RM reads per (question, answer) pair.
        flop_per_usd: FLOP-equivalents of one US dollar (an API judge's price).
        flop_per_cpu_second: FLOP-equivalents of one CPU second (a rule's run time).
        judge_output_tokens: Tokens an API judge writes per candidate, for prices given per token.
    """

    tokens_per_pair: int = TOKENS_PER_PAIR
    flop_per_usd: float = FLOP_PER_USD
    flop_per_cpu_second: float = FLOP_PER_CPU_SECOND
    judge_output_tokens: int = JUDGE_OUTPUT_TOKENS


@dataclass(frozen=True)
class RMCost:
    """What one RM costs per scored candidate, in the unit it is known in: a model's active parameters (2 FLOPs
    each per token read), an API judge's price per call (user-set: prices change), a rule's CPU seconds (measured),
    or GFLOP-equivalents given directly; `source` says where the figure comes from.

    Args:
        active_params: Parameters active per token (a mixture of experts: the active ones).
        usd_per_call: Price of scoring one candidate, in US dollars.
        cpu_seconds: CPU seconds to score one candidate.
        gflop: GFLOP-equivalents per candidate, given directly.
        source: Where the figure comes from (a model card, a price page, a measurement).
    """

    active_params: float | None = None
    usd_per_call: float | None = None
    cpu_seconds: float | None = None
    gflop: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        given = [f for f in ("active_params", "usd_per_call", "cpu_seconds", "gflop") if getattr(self, f) is not None]
        if len(given) != 1:
            raise InputError("a cost needs exactly one of active_params, usd_per_call, cpu_seconds, gflop; got "
                             + (", ".join(given) or "none"))
        value = getattr(self, given[0])
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise InputError(f"cost {given[0]} must be a non-negative number, not {value!r}")

    def per_candidate(self, rates: CostRates = CostRates()) -> float:
        """GFLOP-equivalents to score one candidate.

        Args:
            rates: The conversion rates.

        Returns:
            The cost in COST_UNIT.
        """
        if self.active_params is not None:
            return 2.0 * self.active_params * rates.tokens_per_pair / 1e9
        if self.usd_per_call is not None:
            return self.usd_per_call * rates.flop_per_usd / 1e9
        if self.cpu_seconds is not None:
            return self.cpu_seconds * rates.flop_per_cpu_second / 1e9
        return float(self.gflop)

    def describe(self) -> str:
        """The cost as `morkit rms` shows it: "16.1 GFLOP/token", "$0.0040/call", "2.1 ms CPU/pair"."""
        if self.active_params is not None:
            return f"{2 * self.active_params / 1e9:.3g} GFLOP/token"
        if self.usd_per_call is not None:
            return f"${self.usd_per_call:.2g}/call"
        if self.cpu_seconds is not None:
            return f"{self.cpu_seconds * 1e3:.2g} ms CPU/pair"
        return f"{self.gflop:.3g} GFLOP/pair"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in (("active_params", self.active_params), ("usd_per_call", self.usd_per_call),
                                  ("cpu_seconds", self.cpu_seconds), ("gflop", self.gflop),
                                  ("source", self.source)) if v not in (None, "")}

    @classmethod
    def from_mapping(cls, obj: Mapping[str, Any], rates: CostRates = CostRates(), where: str = "cost") -> "RMCost":
        """A cost from a cost file's table: `active_params` (or `params`), `usd_per_call` (or `usd_per_1m_input`
        and `usd_per_1m_output`, priced at `rates`' tokens), `cpu_seconds` or `gflop`, and `source` (or the
        `params_source` / `price_source` of the field used).

        Args:
            obj: The table.
            rates: Tokens per pair and per judge verdict, for prices per token.
            where: The table's name, for errors.

        Returns:
            The cost.

        Raises:
            InputError: The table gives none of the fields, or a field is not a non-negative number.
        """
        if "active_params" in obj or "params" in obj:
            value = obj.get("active_params", obj.get("params"))
            return cls._checked(where, active_params=value, source=obj.get("params_source", obj.get("source", "")))
        if "usd_per_1m_input" in obj and "usd_per_1m_output" in obj:
            price = (_number(obj["usd_per_1m_input"], where) * rates.tokens_per_pair
                     + _number(obj["usd_per_1m_output"], where) * rates.judge_output_tokens) / 1e6
            return cls._checked(where, usd_per_call=price, source=obj.get("price_source", obj.get("source", "")))
        for name in ("usd_per_call", "cpu_seconds", "gflop"):
            if name in obj:
                return cls._checked(where, **{name: obj[name]}, source=obj.get("source", ""))
        raise InputError(f"{where}: no cost: give active_params (or params), usd_per_call (or usd_per_1m_input and "
                         "usd_per_1m_output), cpu_seconds or gflop")

    @classmethod
    def _checked(cls, where: str, source: Any = "", **value: Any) -> "RMCost":
        (name, number), = value.items()
        try:
            return cls(**{name: _number(number, f"{where}.{name}")}, source=str(source))
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None

    @classmethod
    def parse(cls, text: str, where: str = "--cost") -> "RMCost":
        """A cost as a command line gives it: "8B" or "8e9params" (active parameters), "$0.02" (US dollars per
        call), "3ms" or "0.003s" (CPU seconds per pair), "40GFLOP" (per pair).

        Args:
            text: The value.
            where: The flag or field, for errors.

        Returns:
            The cost, its source "given by the user".

        Raises:
            InputError: The value has none of these forms.
        """
        raw = text.strip().replace("_", "")
        match = re.fullmatch(r"(\$)?\s*([0-9.]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)", raw, flags=re.IGNORECASE)
        units = {"b": ("active_params", 1e9), "m": ("active_params", 1e6), "params": ("active_params", 1.0),
                 "s": ("cpu_seconds", 1.0), "ms": ("cpu_seconds", 1e-3), "gflop": ("gflop", 1.0)}
        if match:
            dollar, number, unit = match.group(1), match.group(2), match.group(3).lower()
            try:
                value = float(number)
            except ValueError:
                value = None
            if value is not None and dollar and not unit:
                return cls(usd_per_call=value, source="given by the user")
            if value is not None and not dollar and unit in units:
                name, scale = units[unit]
                return cls(**{name: value * scale}, source="given by the user")
        raise InputError(f"{where} {text!r}: give the active parameters (8B, 8e9params), a price per call ($0.02), "
                         "CPU seconds per pair (3ms, 0.003s) or GFLOP per pair (40GFLOP)")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InputError(f"{where}: expected a non-negative number, not {value!r}")
    return float(value)


PACKAGED_COSTS = Path(__file__).resolve().parent.parent / "resources" / "costs"


def packaged_cost_files() -> list[str]:
    """The names of the cost files morkit ships (`--costs NAME`), e.g. "rewardmath"."""
    return sorted(p.stem for p in PACKAGED_COSTS.glob("*.toml"))


def read_cost_file(name_or_path: str | Path, rates: CostRates = CostRates()) -> dict[str, RMCost]:
    """The costs of a cost file: a packaged one by name (`packaged_cost_files`) or a TOML path, one table per RM
    under `[costs.NAME]` (or `[columns.NAME]`), its fields as `RMCost.from_mapping` reads them.

    Args:
        name_or_path: A packaged file's name, or a path.
        rates: Tokens per pair and per judge verdict, for prices per token.

    Returns:
        RM name -> its cost.

    Raises:
        InputError: The file is missing, is not TOML, or a table gives no cost (naming the file and RM).
    """
    from morkit.data.toml import read_toml

    path = Path(name_or_path)
    if not path.suffix and (PACKAGED_COSTS / f"{name_or_path}.toml").is_file():
        path = PACKAGED_COSTS / f"{name_or_path}.toml"
    elif not path.is_file():
        raise InputError(f"--costs {name_or_path}: no such file, and not a packaged cost file ("
                         + ", ".join(packaged_cost_files()) + ")")
    tables = read_toml(path)
    rows = tables.get("costs", tables.get("columns"))
    if not isinstance(rows, Mapping) or not rows:
        raise InputError("expected [costs.NAME] tables, one per RM", path=str(path))
    out = {}
    for name, row in rows.items():
        if not isinstance(row, Mapping):
            raise InputError(f"costs.{name}: expected a table", path=str(path))
        try:
            out[name] = RMCost.from_mapping(row, rates, f"costs.{name}")
        except InputError as exc:
            raise InputError(str(exc), path=str(path)) from None
    return out


@dataclass(frozen=True)
class CostTable:
    """Each pool RM's cost per scored candidate in COST_UNIT, and where each figure comes from; an ensemble costs
    the sum of its members', a query that times its candidates.

    Args:
        per_candidate: RM name -> cost per candidate.
        sources: RM name -> where its figure comes from.
        unit: The unit (COST_UNIT).
    """

    per_candidate: Mapping[str, float]
    sources: Mapping[str, str] = field(default_factory=dict)
    unit: str = COST_UNIT

    def covers(self, names: Iterable[str]) -> list[str]:
        """The `names` without a cost here."""
        return [n for n in names if n not in self.per_candidate]

    def vector(self, names: Sequence[str]) -> np.ndarray:
        """(len(names),) each RM's cost per candidate.

        Raises:
            InputError: An RM has no cost here.
        """
        lacking = self.covers(names)
        if lacking:
            raise InputError(f"no cost for {', '.join(lacking)}: give one (--cost NAME=8B, --costs FILE)")
        return np.array([self.per_candidate[n] for n in names], dtype=np.float64)

    def of(self, members: Iterable[str], candidates: int = 1) -> float:
        """What scoring `candidates` candidates with every one of `members` costs."""
        return float(self.vector(list(members)).sum()) * candidates

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "per_candidate": dict(self.per_candidate), "sources": dict(self.sources)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "CostTable":
        return cls({str(k): float(v) for k, v in obj["per_candidate"].items()},
                   {str(k): str(v) for k, v in obj.get("sources", {}).items()}, str(obj.get("unit", COST_UNIT)))


def card_cost(name: str) -> RMCost | None:
    """The cost on registered RM `name`'s card (its `cost`, else its parameter count); None when it has neither or
    is not registered."""
    from morkit.reward_models.catalog import REWARD_MODELS

    if name not in REWARD_MODELS:
        return None
    card = REWARD_MODELS.get(name).spec
    if card.cost is not None:
        return card.cost
    if card.n_params:
        return RMCost(active_params=card.n_params, source="its card's parameter count")
    return None


def cost_table(rm_names: Sequence[str], *, files: Sequence[str | Path] = (),
               given: Mapping[str, RMCost] | None = None, rates: CostRates = CostRates()) -> CostTable:
    """The CostTable of `rm_names`: each RM's cost from `given` (e.g. --cost), else the last of `files` naming it,
    else its registered card.

    Args:
        rm_names: The RMs (a pool's).
        files: Cost files, packaged names or paths (read_cost_file).
        given: RM name -> cost, first in precedence.
        rates: How costs convert into COST_UNIT.

    Returns:
        The table over `rm_names`.

    Raises:
        InputError: An RM has no cost anywhere (naming every such RM), or a file is missing or malformed.
    """
    found: dict[str, RMCost] = {}
    for source in files:
        found.update(read_cost_file(source, rates))
    found.update(given or {})
    costs, lacking = {}, []
    for name in rm_names:
        cost = found.get(name) or card_cost(name)
        if cost is None:
            lacking.append(name)
        else:
            costs[name] = cost
    if lacking:
        raise InputError(f"no cost for {', '.join(lacking)}: give one with --cost NAME=VALUE (8B, $0.02, 3ms, "
                         f"40GFLOP) or a cost file (--costs FILE; packaged: {', '.join(packaged_cost_files())})")
    return CostTable({n: c.per_candidate(rates) for n, c in costs.items()},
                     {n: c.source or c.describe() for n, c in costs.items()})
