"""RMCost: what scoring one candidate with an RM costs, in the unit it is known in (parameters, a price, CPU seconds,
GFLOP), on its card or in a cost file; CostRates convert it into GFLOP-equivalents (docs: Reward models).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.reward_models.timing import short_number

COST_UNIT = "GFLOP"
"""The unit of a CostTable: GFLOP-equivalents per scored candidate (a query's cost is that times its candidates)."""
USER_GIVEN = "given by the user"
"""What `morkit rms` shows for an RM whose card has no cost (the bare vllm / remote clients, whose model is an option):
its cost comes from --cost NAME=... or a cost file."""
TOKENS_PER_PAIR = 512
"""Tokens a model RM reads per (question, answer) pair where the caller says nothing else."""
JUDGE_OUTPUT_TOKENS = 256
"""Tokens a judge writes per candidate (its verdict and reasoning): an API judge's price per call from its token
prices, and the forward passes of an open judge that generates (`RMCost.generates`)."""
FLOP_PER_USD = 2 * 70.6e9 * 1e6 / 0.88
"""FLOP-equivalents a dollar buys: an open-weight model's forward FLOPs at a public API's price for it, which prices
an API judge in FLOPs. The model is Llama-3-70B-Instruct (70.6B parameters); the price is Together AI's serverless
price for it ("Llama 3 70B Instruct Turbo"), $0.88 per million tokens, input and output alike, as listed on
together.ai/pricing in 2024. Prices change: the rate is `CostRates.flop_per_usd`."""
FLOP_PER_CPU_SECOND = 1e11
"""FLOP-equivalents of one CPU second (about one core's fp32 peak); it prices a rule's measured CPU time."""


@dataclass(frozen=True)
class CostRates:
    """How costs convert into GFLOP-equivalents per candidate.

    Args:
        tokens_per_pair: Tokens a model RM reads per (question, answer) pair.
        flop_per_usd: FLOP-equivalents of one US dollar (an API judge's price).
        flop_per_cpu_second: FLOP-equivalents of one CPU second (a rule's run time).
        judge_output_tokens: Tokens a judge writes per candidate (prices given per token; a generating judge).

    Raises:
        InputError: A rate is not a positive number (`judge_output_tokens` may be 0).
    """

    tokens_per_pair: int = TOKENS_PER_PAIR
    flop_per_usd: float = FLOP_PER_USD
    flop_per_cpu_second: float = FLOP_PER_CPU_SECOND
    judge_output_tokens: int = JUDGE_OUTPUT_TOKENS

    def __post_init__(self) -> None:
        for name in ("tokens_per_pair", "flop_per_usd", "flop_per_cpu_second", "judge_output_tokens"):
            value = getattr(self, name)
            number = checks.finite_float(value)
            if number is None or number < 0 or (number == 0 and name != "judge_output_tokens"):
                raise InputError(f"cost rate {name} must be a positive number, not {checks.shown(value)}")




COST_FIELDS = ("active_params", "usd_per_call", "cpu_seconds", "gflop")
"""The units an RMCost may be given in, exactly one per cost."""
FILE_KEYS = {
    "active_params": "active parameters per token", "params": "parameters (when no active_params is given)",
    "params_source": "where the parameter count comes from", "generates": "true: a judge that writes its verdict",
    "usd_per_call": "US dollars per scored candidate", "usd_per_1m_input": "US dollars per million tokens read",
    "usd_per_1m_output": "US dollars per million tokens written", "price_source": "where the price comes from",
    "cpu_seconds": "CPU seconds per scored candidate", "gflop": "GFLOP-equivalents per scored candidate",
    "source": "where the figure comes from"}
"""The keys of a cost file's table that say what an RM costs."""
DESCRIPTIVE_KEYS = {"model": "the model behind the name", "model_source": "where that identity comes from",
                    "kind": "classifier, prm, judge, api-judge, ...", "note": "anything else; why a cost is unknown"}
"""Keys of a cost file's table that describe the RM and are kept for the reader, not read as a cost."""
_FORMS = {"params": ("active_params", "params"), "prices": ("usd_per_1m_input", "usd_per_1m_output"),
          "usd_per_call": ("usd_per_call",), "cpu_seconds": ("cpu_seconds",), "gflop": ("gflop",)}


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
        generates: With `active_params`: a judge that writes its verdict, each written token another pass
            (`CostRates.judge_output_tokens` of them per candidate).

    Raises:
        InputError: Not exactly one of the four units is given, it is not a non-negative number, or `generates`
            is set without `active_params`.
    """

    active_params: float | None = None
    usd_per_call: float | None = None
    cpu_seconds: float | None = None
    gflop: float | None = None
    source: str = ""
    generates: bool = False

    def __post_init__(self) -> None:
        given = [f for f in COST_FIELDS if getattr(self, f) is not None]
        if len(given) != 1:
            raise InputError("a cost needs exactly one of active_params, usd_per_call, cpu_seconds, gflop; got "
                             + (", ".join(given) or "none"))
        non_negative_number(getattr(self, given[0]), f"cost {given[0]}")
        if self.generates and self.active_params is None:
            raise InputError("cost generates=true needs active_params (a judge's written tokens are forward passes)")

    def per_candidate(self, rates: CostRates = CostRates()) -> float:
        """GFLOP-equivalents to score one candidate.

        Args:
            rates: The conversion rates.

        Returns:
            The cost in COST_UNIT.
        """
        if self.active_params is not None:
            tokens = rates.tokens_per_pair + (rates.judge_output_tokens if self.generates else 0)
            return 2.0 * self.active_params * tokens / 1e9
        if self.usd_per_call is not None:
            return self.usd_per_call * rates.flop_per_usd / 1e9
        if self.cpu_seconds is not None:
            return self.cpu_seconds * rates.flop_per_cpu_second / 1e9
        return float(self.gflop)

    def describe(self) -> str:
        """The cost as `morkit rms` shows it, in the unit it is known in.

        Returns:
            "16.1 GFLOP/token", "269 MFLOP/token", "$0.03/call", "2.1 ms CPU/pair" or "40 GFLOP/pair"; a generating
            judge's ends "(generates)".
        """
        if self.active_params is not None:
            flop = 2 * self.active_params
            text = (f"{short_number(flop / 1e9)} GFLOP/token" if flop >= 1e9
                    else f"{short_number(flop / 1e6)} MFLOP/token")
            return text + (" (generates)" if self.generates else "")
        if self.usd_per_call is not None:
            return f"${short_number(self.usd_per_call, 2)}/call"
        if self.cpu_seconds is not None:
            if self.cpu_seconds >= 1:
                return f"{short_number(self.cpu_seconds, 2)} s CPU/pair"
            return f"{short_number(self.cpu_seconds * 1e3, 2)} ms CPU/pair"
        return f"{short_number(self.gflop)} GFLOP/pair"

    def to_json(self) -> dict[str, Any]:
        """Its fields as JSON.

        Returns:
            The fields given (`generates` only when true), `source` where it has one.
        """
        fields = {"active_params": self.active_params, "usd_per_call": self.usd_per_call,
                  "cpu_seconds": self.cpu_seconds, "gflop": self.gflop, "source": self.source,
                  "generates": self.generates or None}
        return {k: v for k, v in fields.items() if v not in (None, "")}

    @classmethod
    def from_mapping(cls, obj: Mapping[str, Any], rates: CostRates = CostRates(), where: str = "cost") -> "RMCost":
        """A cost from a cost file's table: `active_params` (or `params`; `generates = true` for a judge that writes
        its verdict), `usd_per_call` (or `usd_per_1m_input` and `usd_per_1m_output`, priced at `rates`' tokens),
        `cpu_seconds` or `gflop`, and `source` (or the `params_source` / `price_source` of the field used). The
        descriptive keys (DESCRIPTIVE_KEYS: model, model_source, kind, note) are kept for the reader and ignored.

        Args:
            obj: The table.
            rates: Tokens per pair and per judge verdict, for prices per token.
            where: The table's name, for errors.

        Returns:
            The cost.

        Raises:
            InputError: A key is unknown (naming it), the table gives no cost or more than one, half of a token
                price, or a field is not a non-negative number.
        """
        check_keys(obj, where)
        forms = cost_forms(obj)
        if len(forms) > 1:
            raise InputError(f"{where}: give one cost, not {' and '.join(forms)}")
        if not forms:
            raise InputError(f"{where}: no cost: give active_params (or params), usd_per_call (or usd_per_1m_input "
                             "and usd_per_1m_output), cpu_seconds or gflop")
        generates = obj.get("generates", False)
        if not isinstance(generates, bool):
            raise InputError(f"{where}.generates: expected true or false, not {generates!r}")
        form = forms[0]
        if form == "params":
            value = obj.get("active_params", obj.get("params"))
            return cls._checked(where, active_params=value, source=obj.get("params_source", obj.get("source", "")),
                                generates=generates)
        if generates:
            raise InputError(f"{where}: generates=true needs active_params or params (a judge's written tokens "
                             "are forward passes)")
        if form == "prices":
            lacking = [k for k in _FORMS["prices"] if k not in obj]
            if lacking:
                raise InputError(f"{where}: a price per token needs both usd_per_1m_input and usd_per_1m_output; "
                                 f"{lacking[0]} is missing")
            read, written = (non_negative_number(obj[k], f"{where}.{k}") for k in _FORMS["prices"])
            price = (read * rates.tokens_per_pair + written * rates.judge_output_tokens) / 1e6
            return cls._checked(where, usd_per_call=price, source=obj.get("price_source", obj.get("source", "")))
        source = obj.get("price_source" if form == "usd_per_call" else "source", obj.get("source", ""))
        return cls._checked(where, **{form: obj[form]}, source=source)

    @classmethod
    def _checked(cls, where: str, source: Any = "", generates: bool = False, **value: Any) -> "RMCost":
        (name, number), = value.items()
        if not isinstance(source, str):
            raise InputError(f"{where}: its source must be text, not {source!r}")
        return cls(**{name: non_negative_number(number, f"{where}.{name}")}, source=source, generates=generates)

    @classmethod
    def parse(cls, text: str, where: str = "--cost") -> "RMCost":
        """A cost as a command line gives it: "8B", "135M" or "8e9params" (active parameters; "M" in upper case
        only, so it is never read for "ms"), "$0.02" (US dollars per call), "3ms" or "0.003s" (CPU seconds per
        pair), "40GFLOP" (per pair).

        Args:
            text: The value.
            where: The flag or field, for errors.

        Returns:
            The cost, its source "given by the user".

        Raises:
            InputError: The value has none of these forms (a lower-case "m" among them).
        """
        parsed = checks.quantity(text)
        if parsed is not None:
            dollar, value, unit = parsed
            if dollar and not unit:
                return cls(usd_per_call=value, source=USER_GIVEN)
            found = _PARSE_UNITS.get(unit) or (_PARSE_UNITS_ANY_CASE.get(unit.lower()) if unit != "m" else None)
            if found and not dollar:
                name, scale = found
                return cls(**{name: value * scale}, source=USER_GIVEN)
        raise InputError(f"{where} {text!r}: give the active parameters (8B, 135M, 8e9params), a price per call "
                         "($0.02), CPU seconds per pair (3ms, 0.003s) or GFLOP per pair (40GFLOP)")


_PARSE_UNITS = {"M": ("active_params", 1e6)}
"""RMCost.parse's units read as written: "M" (millions of parameters) in upper case only, never a lower-case "m"."""
_PARSE_UNITS_ANY_CASE = {"b": ("active_params", 1e9), "params": ("active_params", 1.0), "s": ("cpu_seconds", 1.0),
                         "ms": ("cpu_seconds", 1e-3), "gflop": ("gflop", 1.0)}
"""RMCost.parse's units in any case."""


def check_keys(obj: Mapping[str, Any], where: str) -> None:
    """Refuse a cost file's table with a key that is neither a cost's (FILE_KEYS) nor descriptive (DESCRIPTIVE_KEYS).

    Raises:
        InputError: Naming `where` and every unknown key.
    """
    unknown = [k for k in obj if k not in FILE_KEYS and k not in DESCRIPTIVE_KEYS]
    if unknown:
        raise InputError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; a cost "
                         f"gives {', '.join(FILE_KEYS)} (and may describe itself with {', '.join(DESCRIPTIVE_KEYS)})")


def cost_forms(obj: Mapping[str, Any]) -> list[str]:
    """The ways a cost file's table gives a cost ("params", "prices", "usd_per_call", "cpu_seconds", "gflop"):
    one for a table with a cost, none for one that only describes an RM (its `note` saying why)."""
    return [form for form, keys in _FORMS.items() if any(k in obj for k in keys)]


def non_negative_number(value: Any, where: str) -> float:
    """`value` as a float when it is a finite non-negative real number (not a bool).

    Raises:
        InputError: "`where`: expected a non-negative number, not ..." otherwise.
    """
    number = checks.finite_float(value)
    if number is None or number < 0:
        raise InputError(f"{where}: expected a non-negative number, not {checks.shown(value)}")
    return number


def cost_of_card(card: Any) -> RMCost | None:
    """The cost on an RMCard: its `cost`, else 2 FLOPs per token for each parameter of `n_params`; None when it has
    neither (its cost is USER_GIVEN)."""
    if card.cost is not None:
        return card.cost
    if card.n_params:
        model = f" ({card.model_id})" if card.model_id else ""
        return RMCost(active_params=card.n_params, source=f"its card's parameter count{model}")
    return None


def cost_json(card: Any, rates: CostRates = CostRates()) -> dict[str, Any]:
    """An RMCard's cost as `morkit rms --json` gives it: the RMCost's fields, its GFLOP-equivalents per candidate at
    `rates` and how it reads (`describe`); {"source": USER_GIVEN, "describe": USER_GIVEN} where the card has none."""
    cost = cost_of_card(card)
    if cost is None:
        return {"source": USER_GIVEN, "describe": USER_GIVEN}
    return {**cost.to_json(), "gflop_per_candidate": cost.per_candidate(rates), "describe": cost.describe()}
