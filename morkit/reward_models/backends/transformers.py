"""Model RMs in this process: the handle that builds an RM's own transformers implementation with the device, dtype,
device map, batching, prefix reuse and truncation as load options; the model loads when it first has to score.
"""

from __future__ import annotations

from typing import Any

from morkit.reward_models.handles import RMHandle, build
from morkit.reward_models.truncation import Truncation


class TransformersHandle(RMHandle):
    """A model RM loaded by transformers in this process."""

    placement = "transformers"

    def planned_truncation(self) -> Truncation | None:
        return self.options.truncation_for() if self.card.runs == "transformers" else None

    def score_facts(self) -> dict[str, str | None]:
        """Engine `transformers`, the dtype the model runs in and its device map (a CTTS-MM adapter takes the options';
        an embedded model shares the process's resident backbone, in its default dtype), the truncation with the
        card's window."""
        if self.card.runs != "transformers":
            return {"engine": self.card.runs}  # a client built as registered, given no load options
        from morkit.runtime.device import resolve_device, resolve_dtype

        device = resolve_device(self.options.device)
        passed = bool(self.card.model_id)  # what load_options hands on
        dtype = resolve_dtype(device, self.options.dtype if passed else None)
        return {"engine": "transformers", "dtype": str(dtype).removeprefix("torch."),
                "device_map": self.options.transformers.device_map if passed else None,
                "truncation": self.key_truncation()}

    def device_plan(self) -> tuple[str, str, int]:
        device, dtype, _ = super().device_plan()
        spread = 1
        if self.options.transformers.device_map and device.startswith("cuda"):
            import torch

            spread = torch.cuda.device_count()
        return device, dtype, spread

    def load_options(self) -> dict[str, Any]:
        """Keyword options for the RM's transformers implementation (none for another family)."""
        if self.card.runs != "transformers":
            return {}
        from morkit.reward_models.backends.hf import Batching

        options: dict[str, Any] = {"batching": Batching(max_batch=self.options.transformers.batch_size),
                                   "prefix_reuse": self.options.prefix_reuse, "truncation": self.truncation}
        if self.options.device:
            options["device"] = self.options.device
        if self.card.model_id:  # the chat adapters (AdapterFamily) take dtype and a device map too
            if self.options.dtype:
                options["dtype"] = self.options.dtype
            if self.options.transformers.device_map:
                options["device_map"] = self.options.transformers.device_map
        return options

    def load(self) -> Any:
        return build(self.entry, **self.load_options())
