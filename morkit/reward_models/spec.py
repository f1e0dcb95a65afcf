"""RMSpec: what one registered reward model is and needs, as typed fields (the catalog holds one per RM); listing
and checking RMs read these alone, so they import no model code.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Mapping

from morkit.core.errors import InputError
from morkit.core.registry import spec_fields
from morkit.reward_models.applicability import ALL, Applicability

FAMILIES = ("transformers", "python", "sandbox", "vllm", "remote")
"""How an RM's code runs: `transformers` (a model with morkit's transformers implementation, which the scoring
options may also place on a vLLM engine, vLLM servers or Ray actors), `python` (plain code), `sandbox` (candidate
code in a subprocess), `vllm` / `remote` (the bare engine and server clients, given their model as options)."""


@dataclass(frozen=True)
class RMSpec:
    """One registered RM: its kind and code family, what it needs here, the queries it scores, how it runs on vLLM.

    Args:
        kind: `orm`, `prm`, `judge`, `rule` or `table` (`orm|prm`: either, by its load options).
        backend: Its code family, one of FAMILIES.
        packages: Import names it needs.
        needs: What to install or give, as `morkit rms` shows it.
        options: Load options that must be given (the bare vllm / remote clients).
        head: A packaged trained head; its hash keys the score cache.
        version: Keys the score cache where there is no head.
        model_id: The Hugging Face id of its weights (a CTTS-MM model).
        required: Files of those weights that must be present.
        n_params: Its parameter count, for the bf16 size `morkit rms` shows.
        window: The tokens it reads by default (a CTTS-MM model's comes from its config).
        applies: The queries it scores.
        engine: `module:function` giving its EngineSpec (how vLLM and servers run it).
    """

    kind: str = "orm"  # orm | prm | judge | rule | table (orm|prm: either, by its options)
    backend: str = "python"  # its code family, one of FAMILIES
    packages: tuple[str, ...] = ()  # import names it needs
    needs: str = ""  # what to install or give, for `morkit rms`
    options: tuple[str, ...] = ()  # load options that must be given (the bare vllm / remote clients)
    head: str | None = None  # a packaged trained head: its hash keys the score cache
    version: str | None = None  # keys the score cache where there is no head
    model_id: str | None = None  # Hugging Face weights (a CTTS-MM model)
    required: tuple[str, ...] = ("config.json",)  # files of those weights that must be present
    n_params: float | None = None  # parameters, for the bf16 size `morkit rms` shows
    window: int | None = None  # the tokens it reads by default (a CTTS-MM model's comes from its config)
    applies: Applicability = ALL  # the queries it scores
    engine: str | None = None  # "module:function" giving its EngineSpec (how vLLM and servers run it)

    @classmethod
    def of(cls, name: str, **given: Any) -> "RMSpec":
        """The spec from keyword fields (a registration's metadata); an unknown field is an error naming it.

        Args:
            name: The RM's registered name, for error messages.
            **given: RMSpec fields; lists become tuples and `applies` may be anything Applicability.of takes.

        Returns:
            The spec.

        Raises:
            InputError: A field is unknown, or `backend` is not one of FAMILIES.
        """
        given = spec_fields(cls, f"reward model {name!r}", given, tuples=("packages", "options", "required"),
                            unknown_is="unknown spec field")
        if "applies" in given:
            given["applies"] = Applicability.of(given["applies"])
        spec = cls(**given)
        if spec.backend not in FAMILIES:
            raise InputError(f"reward model {name!r}: backend must be one of {', '.join(FAMILIES)}, got {spec.backend!r}")
        return spec

    @property
    def loads_model(self) -> bool:
        """A model that the scoring options place (transformers, a vLLM engine, servers, Ray); one is resident at a
        time. A `vllm` entry (a user's own in-process engine) is one too: it loads as its factory builds it."""
        return self.backend in ("transformers", "vllm")

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
