"""RMCard: one registered reward model, as typed fields: what it is, what it needs here, the queries it scores, its
window and weights, and the family whose code builds it on every placement. The catalog holds one card per RM;
listing and checking RMs read cards alone, so they import no model code.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from morkit.core.errors import InputError
from morkit.core.registry import spec_fields
from morkit.reward_models.applicability import ALL, Applicability

RUNS = ("transformers", "python", "sandbox", "vllm", "remote")
"""How an RM's code runs (its card's `runs`): `transformers` (a model with morkit's transformers implementation,
which the scoring options may also place on a vLLM engine, vLLM servers or Ray actors), `python` (plain code),
`sandbox` (candidate code in a subprocess), `vllm` / `remote` (the bare engine and server clients, given their
model as options)."""

UNKNOWN_CONTEXT = 4096  # a window for a checkpoint whose config has no max_position_embeddings


def max_positions(root: Path) -> int | None:
    """`max_position_embeddings` from the config.json in checkpoint folder `root` (None where it has none)."""
    value = json.loads((Path(root) / "config.json").read_text()).get("max_position_embeddings")
    return value if isinstance(value, int) and value > 0 else None


def weights_needs(model_id: str, n_params: float) -> str:
    """What a card of downloadable weights needs, as `morkit rms` shows it."""
    from morkit.reward_models.weights import bf16_gib

    return (f"weights of {model_id} (local path, $MORKIT_WEIGHTS_DIR or HF cache), torch, transformers; "
            f"~{bf16_gib(n_params):.0f} GiB GPU memory in bf16")


@dataclass(frozen=True)
class RMCard:
    """One registered RM: its kind, how its code runs and which family builds it, what it needs here, the queries
    it scores, its window and its weights.

    Args:
        name: Its registered name.
        kind: `orm`, `prm`, `judge`, `rule` or `table` (`orm|prm`: either, by its load options).
        runs: How its code runs, one of RUNS.
        family: The Family that builds a model RM (`runs="transformers"`) on every placement: its registry target
            ("module:attr", resolved on first use, or the object), set from that target when it is registered;
            None: plain code built by its registry target (rules, tables, the bare clients).
        description: A one-line description of the model (a card with weights: shown after its model id).
        packages: Import names it needs.
        needs: What to install or give, as `morkit rms` shows it.
        options: Load options that must be given (the bare vllm / remote clients).
        head: A packaged trained head; its hash keys the score cache.
        version: Keys the score cache where there is no head.
        model_id: The Hugging Face id of its weights.
        required: Files of those weights that must be present.
        n_params: Its parameter count, for the bf16 size `morkit rms` shows.
        window: The tokens it reads by default; None for a card with weights: the checkpoint's config says.
        trained_context: The longest sequence its model card says it was trained on (caps the window).
        applies: The queries it scores.
        cost: What scoring one candidate costs (an RMCost); None for a model card: 2 FLOPs per parameter per token.
    """

    name: str = ""
    kind: str = "orm"  # orm | prm | judge | rule | table (orm|prm: either, by its options)
    runs: str = "python"  # how its code runs, one of RUNS
    family: Any = None  # a model RM's Family, its registry target ("module:attr" or the object); None: plain code
    description: str = ""  # one line about the model
    packages: tuple[str, ...] = ()  # import names it needs
    needs: str = ""  # what to install or give, for `morkit rms`
    options: tuple[str, ...] = ()  # load options that must be given (the bare vllm / remote clients)
    head: str | None = None  # a packaged trained head: its hash keys the score cache
    version: str | None = None  # keys the score cache where there is no head
    model_id: str | None = None  # Hugging Face weights
    required: tuple[str, ...] = ("config.json",)  # files of those weights that must be present
    n_params: float | None = None  # parameters, for the bf16 size `morkit rms` shows
    window: int | None = None  # the tokens it reads by default (None with weights: from their config)
    trained_context: int | None = None  # the trained length its model card states, if it says
    applies: Applicability = ALL  # the queries it scores
    cost: Any = None  # a morkit.reward_models.cost.RMCost; None: from `n_params` where it has one

    @classmethod
    def of(cls, name: str, **given: Any) -> "RMCard":
        """The card from keyword fields (a registration's metadata); an unknown field is an error naming it.

        Args:
            name: The RM's registered name (the card's `name`).
            **given: RMCard fields but `family` (a model RM's family is its registry target, written once there);
                lists become tuples and `applies` may be anything Applicability.of takes.

        Returns:
            The card.

        Raises:
            InputError: A field is unknown or is `family`, or `runs` is not one of RUNS.
        """
        if "family" in given:
            raise InputError(f"reward model {name!r}: its family is its registry target "
                             "(register(name, FAMILY, summary, runs='transformers', ...)); drop family=")
        given = spec_fields(cls, f"reward model {name!r}", given, tuples=("packages", "options", "required"),
                            unknown_is="unknown card field", exclude=("name", "family"))
        if "applies" in given:
            given["applies"] = Applicability.of(given["applies"])
        card = cls(name=name, **given)
        if card.runs not in RUNS:
            raise InputError(f"reward model {name!r}: runs must be one of {', '.join(RUNS)}, got {card.runs!r}")
        return card

    @property
    def loads_model(self) -> bool:
        """A model that the scoring options place (transformers, a vLLM engine, servers, Ray); one is resident at a
        time. A `vllm` entry (a user's own in-process engine) is one too: it loads as its factory builds it."""
        return self.runs in ("transformers", "vllm")

    def absent(self, options: Mapping[str, Any] | None = None) -> tuple[str, str] | None:
        """(what, why) for the first need absent here: "packages", "head" or "weights"; None when all are here.
        Weights are looked for in the default places unless `options` give an explicit `path`.

        Args:
            options: The RM's load options; a `path` among them skips the check for weights.

        Returns:
            `(what, why)` for the first absent need (`what` is "packages", "head" or "weights"), or None.
        """
        absent = [m for m in self.packages if importlib.util.find_spec(m) is None]
        if absent:
            return "packages", f"python packages not installed: {', '.join(absent)}"
        if self.head:
            from morkit.reward_models.heads import packaged_head_path

            if not packaged_head_path(self.head).is_file():
                return "head", f"trained head {self.head}.safetensors is missing"
        if self.model_id and not (options or {}).get("path"):
            from morkit.reward_models.weights import weights_missing

            reason = weights_missing(self.model_id, self.required)
            if reason:
                return "weights", reason
        return None

    # -- its window ------------------------------------------------------------------------------

    def context_window(self, max_positions: int | None) -> int:
        """The tokens it reads by default: its declared `window`, else the checkpoint's `max_position_embeddings`
        capped by the length its model card says it was trained on (a longer input is beyond what the score was
        fitted for).

        Args:
            max_positions: The checkpoint config's `max_position_embeddings`; None where unknown.

        Returns:
            The window in tokens.
        """
        if self.window:
            return self.window
        limits = [n for n in (max_positions, self.trained_context) if n]
        return min(limits) if limits else UNKNOWN_CONTEXT

    def window_at(self, root: Path) -> int:
        """Its window with its checkpoint in folder `root`.

        Args:
            root: The checkpoint folder (its config.json is read).

        Returns:
            The window in tokens.
        """
        return self.window or self.context_window(max_positions(root))

    def describe_context(self, max_positions: int | None) -> str:
        """How its window is set, for `morkit rms NAME`.

        Args:
            max_positions: The checkpoint config's `max_position_embeddings`; None where no config was found.

        Returns:
            One line: the window and where it comes from.
        """
        if self.window:
            return f"{self.window:,} tokens (--max-tokens overrides)"
        cap = self.trained_context
        card = f", capped at {cap:,} (trained length on its model card)" if cap else ""
        if max_positions is None:
            return f"the checkpoint's max_position_embeddings{card}; weights not found here (--max-tokens overrides)"
        return (f"{self.context_window(max_positions):,} tokens: max_position_embeddings {max_positions:,} in its "
                f"config{card} (--max-tokens overrides)")
