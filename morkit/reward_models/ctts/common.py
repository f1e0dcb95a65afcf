"""Shared machinery of the CTTS-MM adapters: a transformers backbone plus head tensors loaded by name (missing or
unexpected ones are an error, never random); chat rendering and checkpoint reading are every family's
(morkit.reward_models.families.checkpoint).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from morkit.core.errors import UnavailableError
from morkit.reward_models.backends.hf import Batching
from morkit.reward_models.backends.pooled import Backbone, PooledRM
from morkit.reward_models.families.checkpoint import checkpoint_index, load_tokenizer, read_tensors, render_chat
from morkit.reward_models.truncation import Truncation
from morkit.reward_models.weights import locate_weights
from morkit.runtime.device import resolve_device, resolve_dtype
from morkit.runtime.models import quiet_loading

QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


def head_state(root: Path, prefix: str, model_id: str) -> dict[str, Any]:
    """Every checkpoint tensor under `prefix.`, with the prefix removed (`load_strict` names what is absent)."""
    names = [n for n in checkpoint_index(root) if n == prefix or n.startswith(prefix + ".")]
    return {n[len(prefix) + 1:] if n != prefix else "": t for n, t in read_tensors(root, names).items()}


def load_strict(module: Any, state: Mapping[str, Any], *, prefix: str, model_id: str, source: Any,
                optional: Sequence[str] = ()) -> Any:
    """Load `state` into `module`; a missing or unexpected tensor is an error naming it and the checkpoint."""
    own = module.state_dict()
    full = (lambda k: f"{prefix}.{k}") if prefix else (lambda k: k)
    missing = [k for k in own if k not in state and not any(k.endswith(o) for o in optional)]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append("missing head tensor(s) " + ", ".join(full(k) for k in missing))
        if unexpected:
            parts.append("unexpected head tensor(s) " + ", ".join(full(k) for k in unexpected))
        raise UnavailableError(f"{model_id}: checkpoint {source}: {'; '.join(parts)}")
    bad = [k for k in state if tuple(state[k].shape) != tuple(own[k].shape)]
    if bad:
        shapes = ", ".join(f"{full(k)} {tuple(state[k].shape)} (expected {tuple(own[k].shape)})" for k in bad)
        raise UnavailableError(f"{model_id}: checkpoint {source}: head tensor shape mismatch: {shapes}")
    module.load_state_dict(dict(state), strict=False)
    return module


def load_backbone(class_name: str, root: Path, *, model_id: str, dtype: Any, device: str,
                  allowed_extra: Sequence[str], attn_implementation: str | None = None,
                  device_map: Any = None) -> Any:
    """A bare transformers backbone (e.g. Qwen2Model) from a checkpoint that also holds head tensors.

    Every backbone tensor must be in the checkpoint; tensors it does not use must start with one of
    `allowed_extra` (the head names, an unused LM head), else the checkpoint is not the one expected.
    """
    import transformers

    cls = getattr(transformers, class_name)
    kwargs: dict[str, Any] = {"dtype": dtype, "output_loading_info": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if device_map is not None:
        kwargs["device_map"] = device_map
    with quiet_loading():
        model, info = cls.from_pretrained(str(root), **kwargs)
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise UnavailableError(f"{model_id}: checkpoint {root} lacks backbone tensor(s): {', '.join(missing[:8])}"
                               + (" ..." if len(missing) > 8 else ""))
    stray = sorted(k for k in info.get("unexpected_keys") or ()
                   if not any(k == p or k.startswith(p + ".") for p in allowed_extra))
    if stray:
        raise UnavailableError(f"{model_id}: checkpoint {root} has unexpected tensor(s): {', '.join(stray[:8])}")
    model.config.use_cache = False
    if device_map is None:
        model = model.to(device)
    return model.eval()


def first_pad_pool_index(ids: Any, mask: Any, pad_id: int | None) -> Any:
    """Position of the token before the first `pad_id` in each row (last real token when none).

    This is the pooling rule of the reference classes (`eq(input_ids, pad).argmax - 1`); on right
    padded rows it differs from the last real token only if the pad id occurs inside the text.
    """
    import torch

    length = mask.sum(dim=1)
    if pad_id is None:
        return length - 1
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    is_pad = (ids == pad_id) & mask.bool()
    first = torch.where(is_pad, positions, length.unsqueeze(1)).min(dim=1).values
    return torch.where(first > 0, first - 1, length - 1)


# -- the adapter base ---------------------------------------------------------------------------

class CttsRM(PooledRM):
    """A chat reward model: chat rendering, a backbone, a custom head applied on its own device/dtype.

    A subclass says how its architecture is built; its family binds it to a card (AdapterFamily.adapter_class),
    which sets `card` and, from it, the name, kind, model id and required files, so these facts are written once."""

    card: Any = None  # the RMCard it is bound to
    model_id = ""
    kind = "orm"
    empty_score: float | None = None  # raw-logit scale: empty answers go through the model
    backbone_class = ""
    system_prompt: str | None = None
    allowed_extra: tuple[str, ...] = ()
    required_files: tuple[str, ...] = ("config.json",)
    default_attn: str | None = None
    device_map: Any = None  # the device map `load` spread it with (its cache key holds it)

    def __init__(self, backbone: Backbone, score_head: Any, truncation: Truncation | None = None,
                 batching: Batching | None = None, path: Path | None = None, prefix_reuse: bool = True):
        self.path = path  # before the base class asks for the window, which reads its config
        super().__init__(backbone, truncation, batching, prefix_reuse)
        self.score_head = score_head

    def identity_facts(self) -> dict[str, str | None]:
        """Its cache key's facts (catalog.identity_of): the version of the weights folder it loaded (not the default
        location's), its engine, its backbone's dtype, the device map it was spread with and its truncation."""
        from morkit.reward_models.identity import folder_version, model_dtype, truncation_part

        return {"weights": folder_version(self.path) if self.path else None, "engine": "transformers",
                "dtype": model_dtype(self.backbone.model),
                "device_map": None if self.device_map is None else str(self.device_map),
                "truncation": truncation_part(self.truncation)}

    def context_window(self) -> int:
        """The checkpoint's max_position_embeddings, capped by the training length its model card states."""
        if self.path:
            return self.card.window_at(self.path)
        return self.card.context_window(getattr(self.backbone.model.config, "max_position_embeddings", None))

    @classmethod
    def messages(cls, question: str, answer: str) -> list[dict[str, str]]:
        turns = [{"role": "system", "content": cls.system_prompt}] if cls.system_prompt else []
        return turns + [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]

    def render(self, question: str, answer: str) -> list[int]:
        return render_chat(self.backbone.tokenizer, self.messages(question, answer))

    def run_head(self, x: Any) -> Any:
        """The head on pooled rows `x`, on the head's device and dtype; float32 CPU out."""
        import torch

        param = next(self.score_head.parameters())
        with torch.inference_mode():
            return self.score_head(x.to(param.device, param.dtype)).float().cpu()

    def head(self, pooled: Sequence[Any]) -> list[float]:
        import torch

        return self.run_head(torch.stack(list(pooled))).reshape(len(pooled), -1)[:, 0].tolist()

    @classmethod
    def build_head(cls, root: Path, config: Any, dtype: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def load(cls, path: str | Path | None = None, device: str | None = None, dtype: str | None = None,
             attn_implementation: str | None = None, device_map: Any = None, **kwargs: Any) -> "CttsRM":
        """Find the weights (never downloading), build backbone and head, and return the adapter."""
        root = locate_weights(cls.model_id, path, required=cls.required_files)
        device = resolve_device(device)
        torch_dtype = resolve_dtype(device, dtype)
        model = load_backbone(cls.backbone_class, root, model_id=cls.model_id, dtype=torch_dtype, device=device,
                              allowed_extra=cls.allowed_extra, device_map=device_map,
                              attn_implementation=attn_implementation or cls.default_attn)
        head = cls.build_head(root, model.config, torch_dtype)
        head = head.to(device).eval()
        tokenizer = load_tokenizer(root)
        rm = cls(Backbone(model, tokenizer, device), head, path=root, **kwargs)
        rm.device_map = device_map
        return rm


def config_value(root: Path, key: str, default: Any) -> Any:
    data = json.loads((root / "config.json").read_text())
    return data.get(key, default)


class FirstPadPooling:
    """Mixin for CttsRM subclasses whose reference class pools at the token before the first pad id."""

    def pool(self, hidden: Any, mask: Any, ids: Any) -> Any:
        import torch

        index = first_pad_pool_index(ids, mask, self.backbone.model.config.pad_token_id)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), index]
