"""Cost tables: each pool RM's cost per scored candidate in GFLOP-equivalents (from --cost, cost files or its card:
`cost_table`), or in measured seconds per pair (the timing ledger); the packaged cost files (resources/costs/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.reward_models.timing import measured  # noqa: F401 - cost.measured(name): an RM's measured seconds
from morkit.reward_models.timing import short_number
from morkit.reward_models.unit_cost import (  # noqa: F401 - what one RM costs, imported from here too
    COST_FIELDS, COST_UNIT, DESCRIPTIVE_KEYS, FILE_KEYS, FLOP_PER_CPU_SECOND, FLOP_PER_USD, JUDGE_OUTPUT_TOKENS,
    TOKENS_PER_PAIR, USER_GIVEN, CostRates, RMCost, check_keys, cost_forms, cost_json, cost_of_card,
    non_negative_number,
)

SECONDS_UNIT = "seconds"
"""The other unit of a CostTable: measured wall seconds per scored candidate on one placement."""
COST_UNITS = (COST_UNIT, SECONDS_UNIT)


PACKAGED_COSTS = Path(__file__).resolve().parent.parent / "resources" / "costs"


def packaged_cost_files() -> list[str]:
    """The names of the cost files morkit ships (`--costs NAME`), e.g. "rewardmath"."""
    return sorted(p.stem for p in PACKAGED_COSTS.glob("*.toml"))


@dataclass(frozen=True)
class CostEntry:
    """One table of a cost file: the RM's name, its cost (None where the file knows none: its note says why) and
    what the file says of it for a reader.

    Args:
        name: The RM's name (a pool's column).
        cost: Its cost, or None.
        model: The model behind the name, where the file says.
        note: The file's note.
    """

    name: str
    cost: RMCost | None
    model: str = ""
    note: str = ""


def cost_file_path(name_or_path: str | Path) -> Path:
    """The file `--costs name_or_path` reads: a packaged cost file by name, else the path.

    Raises:
        InputError: Neither a packaged name nor a file (listing the packaged names).
    """
    path = Path(name_or_path)
    if not path.suffix and (PACKAGED_COSTS / f"{name_or_path}.toml").is_file():
        return PACKAGED_COSTS / f"{name_or_path}.toml"
    if not path.is_file():
        raise InputError(f"--costs {name_or_path}: no such file, and not a packaged cost file ("
                         + ", ".join(packaged_cost_files()) + ")")
    return path


def cost_file_entries(name_or_path: str | Path, rates: CostRates = CostRates()) -> list[CostEntry]:
    """Every table of a cost file, in its order: a packaged one by name (`packaged_cost_files`) or a TOML path,
    one table per RM under `[costs.NAME]`, its fields as `RMCost.from_mapping` reads them.
    A table without a cost must say why in its `note`.

    Args:
        name_or_path: A packaged file's name, or a path.
        rates: Tokens per pair and per judge verdict, for prices per token.

    Returns:
        One entry per table.

    Raises:
        InputError: The file is missing or is not TOML, or a table is malformed or gives no cost and no note
            (naming the file and the RM).
    """
    from morkit.data.toml import read_toml

    path = cost_file_path(name_or_path)
    tables = read_toml(path)
    rows = tables.get("costs")
    if not isinstance(rows, Mapping) or not rows:
        raise InputError("expected [costs.NAME] tables, one per RM", path=str(path))
    out = []
    for name, row in rows.items():
        if not isinstance(row, Mapping):
            raise InputError(f"costs.{name}: expected a table", path=str(path))
        note = row.get("note", "")
        try:
            if not isinstance(note, str):
                raise InputError(f"costs.{name}.note: expected text, not {note!r}")
            check_keys(row, f"costs.{name}")
            known = not note.strip() or cost_forms(row)  # a table without a cost says why in its note
            cost = RMCost.from_mapping(row, rates, f"costs.{name}") if known else None
        except InputError as exc:
            raise InputError(str(exc), path=str(path)) from None
        out.append(CostEntry(name, cost, str(row.get("model", "")), note))
    return out


def cost_file_rows(entries: Sequence[CostEntry], rates: CostRates = CostRates()) -> list[list[str]]:
    """A cost file's entries as `morkit rms --costs` and the docs list them: [name, model, cost as it reads
    (`RMCost.describe`), GFLOP-equivalents per candidate at `rates`]; "unknown" where it has none."""
    return [[e.name, e.model or "-", e.cost.describe() if e.cost else "unknown",
             short_number(e.cost.per_candidate(rates)) if e.cost else "-"] for e in entries]


def read_cost_file(name_or_path: str | Path, rates: CostRates = CostRates()) -> dict[str, RMCost]:
    """The costs of a cost file (`cost_file_entries`): RM name -> its cost; an RM whose table gives none is left
    out (its note says why), so using it is an error naming it (`cost_table`).

    Args:
        name_or_path: A packaged file's name, or a path.
        rates: Tokens per pair and per judge verdict, for prices per token.

    Returns:
        RM name -> its cost.

    Raises:
        InputError: The file is missing, is not TOML, or a table is malformed (naming the file and RM).
    """
    return {e.name: e.cost for e in cost_file_entries(name_or_path, rates) if e.cost is not None}


@dataclass(frozen=True)
class CostTable:
    """Each pool RM's cost per scored candidate in `unit` (COST_UNIT, GFLOP-equivalents; or SECONDS_UNIT, measured
    seconds), and where each figure comes from; an ensemble costs the sum of its members', a query that times its
    candidates.

    Args:
        per_candidate: RM name -> cost per candidate, each a finite non-negative number.
        sources: RM name -> where its figure comes from.
        unit: The unit, one of COST_UNITS.

    Raises:
        InputError: A cost is not a finite non-negative number (naming the RM), or the unit is unknown.
    """

    per_candidate: Mapping[str, float]
    sources: Mapping[str, str] = field(default_factory=dict)
    unit: str = COST_UNIT

    def __post_init__(self) -> None:
        if self.unit not in COST_UNITS:
            raise InputError(f"cost table unit {checks.shown(self.unit)}: one of {', '.join(COST_UNITS)}")
        for name, value in self.per_candidate.items():
            non_negative_number(value, f"cost of {name}")

    def covers(self, names: Iterable[str]) -> list[str]:
        """The RMs of `names` this table has no cost for.

        Args:
            names: RM names.

        Returns:
            Those without a cost here, in order.
        """
        return [n for n in names if n not in self.per_candidate]

    def vector(self, names: Sequence[str]) -> np.ndarray:
        """Each RM's cost per candidate, in order.

        Args:
            names: RM names.

        Returns:
            (len(names),) costs in `unit`.

        Raises:
            InputError: An RM has no cost here.
        """
        lacking = self.covers(names)
        if lacking:
            raise InputError(f"no cost for {', '.join(lacking)}: give one (--cost NAME=8B, --costs FILE)")
        return np.array([self.per_candidate[n] for n in names], dtype=np.float64)

    def of(self, members: Iterable[str], candidates: int = 1) -> float:
        """What scoring `candidates` candidates with every one of `members` costs.

        Args:
            members: The RMs of an ensemble (a route).
            candidates: The query's candidates.

        Returns:
            The sum of the members' costs per candidate, times `candidates`, in `unit`.

        Raises:
            InputError: A member has no cost here.
        """
        return float(self.vector(list(members)).sum()) * candidates

    def to_json(self) -> dict[str, Any]:
        """The table as JSON (what a pool stores).

        Returns:
            {"unit", "per_candidate", "sources"}.
        """
        return {"unit": self.unit, "per_candidate": dict(self.per_candidate), "sources": dict(self.sources)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "CostTable":
        """The table `to_json` wrote.

        Args:
            obj: Its JSON.

        Returns:
            The table (unit COST_UNIT where `obj` names none).

        Raises:
            InputError: `obj` is not such a table, naming the field ("per_candidate: expected a table of RM ->
                number", "per_candidate.a: expected a non-negative number, not 'a lot'").
        """
        if not isinstance(obj, Mapping):
            raise InputError("expected a table {unit, per_candidate, sources}")
        per, sources = obj.get("per_candidate"), obj.get("sources", {})
        if not isinstance(per, Mapping):
            raise InputError("per_candidate: expected a table of RM -> number")
        if not isinstance(sources, Mapping) or not all(isinstance(v, str) for v in sources.values()):
            raise InputError("sources: expected a table of RM -> text")
        unit = obj.get("unit", COST_UNIT)
        if unit not in COST_UNITS:
            raise InputError(f"unit: one of {', '.join(COST_UNITS)}, not {checks.shown(unit)}")
        return cls({str(k): non_negative_number(v, f"per_candidate.{k}") for k, v in per.items()},
                   {str(k): v for k, v in sources.items()}, unit)


def cost_table(rm_names: Sequence[str], *, files: Sequence[str | Path] = (),
               given: Mapping[str, RMCost] | None = None, rates: CostRates = CostRates(), unit: str = COST_UNIT,
               placement: str = "transformers", device: str | None = None) -> CostTable:
    """The CostTable of `rm_names`. In GFLOP-equivalents (the default unit): each RM's cost from `given` (e.g.
    --cost), else the last of `files` naming it, else its registered card. In seconds: each RM's measured wall
    seconds per pair (the timing ledger, morkit.reward_models.timing) on `placement` (an RM that loads no model:
    `python`) and `device`.

    Args:
        rm_names: The RMs (a pool's).
        files: Cost files, packaged names or paths (read_cost_file).
        given: RM name -> cost, first in precedence.
        rates: How costs convert into COST_UNIT.
        unit: COST_UNIT or SECONDS_UNIT.
        placement: In seconds: where the model RMs ran (transformers, vllm, servers, ray).
        device: In seconds: the device they ran on ("cpu", "cuda", "cuda:0"); None: the latest measured.

    Returns:
        The table over `rm_names`.

    Raises:
        InputError: An RM has no cost anywhere, or no measurement (naming every such RM and how to get one), a
            file is missing or malformed, the unit is unknown, or costs are given with unit seconds.
    """
    if unit not in COST_UNITS:
        raise InputError(f"cost unit {unit!r}: one of {', '.join(COST_UNITS)}")
    if unit == SECONDS_UNIT:
        if files or given:
            raise InputError("cost unit seconds reads measured seconds per pair; --cost and --costs give "
                             "GFLOP-equivalents (use unit GFLOP with them)")
        return _measured_table(rm_names, placement, device)
    from morkit.reward_models.catalog import REWARD_MODELS

    found: dict[str, RMCost] = {}
    for source in files:
        found.update(read_cost_file(source, rates))
    found.update(given or {})
    costs, lacking = {}, []
    for name in rm_names:
        cost = found.get(name) or (cost_of_card(REWARD_MODELS.get(name).spec) if name in REWARD_MODELS else None)
        if cost is None:
            lacking.append(name)
        else:
            costs[name] = cost
    if lacking:
        raise InputError(f"no cost for {', '.join(lacking)}: give one with --cost NAME=VALUE (8B, $0.02, 3ms, "
                         f"40GFLOP) or a cost file (--costs FILE; packaged: {', '.join(packaged_cost_files())})")
    return CostTable({n: c.per_candidate(rates) for n, c in costs.items()},
                     {n: c.source or c.describe() for n, c in costs.items()})


def _measured_table(rm_names: Sequence[str], placement: str, device: str | None) -> CostTable:
    """The table of measured wall seconds per pair: each RM's latest measurement on its placement (and a model RM's
    on `device`)."""
    from morkit.reward_models.catalog import REWARD_MODELS

    per, sources, lacking = {}, {}, []
    for name in rm_names:
        loads = name in REWARD_MODELS and REWARD_MODELS.get(name).spec.loads_model
        where = placement if loads or name not in REWARD_MODELS else "python"
        on = device if loads else None  # a rule runs in this process, whatever the models' device
        found = [m for m in measured(name) if m.on(where, on)]
        if not found:
            lacking.append(f"{name} (on {where}{f' {on}' if on else ''})")
            continue
        per[name] = found[0].seconds_per_pair
        sources[name] = f"measured: {found[0].describe()}"
    if lacking:
        raise InputError(f"no measured seconds per pair for {', '.join(lacking)}: run `morkit score` with it once "
                         "(--rm NAME) on that placement to measure it")
    return CostTable(per, sources, SECONDS_UNIT)
