"""Reward models that run here with no download: a SmolLM2 ORM, a SmolLM2 yes/no judge, a MiniLM probe, each giving a
probability on the process's resident backbones. Their families bind each class to its card (embedded/cards.py: name,
kind, head, window); `SmolLM2ORM`, `MiniLMProbe` and `SmolLM2Judge` are the bound classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from morkit.core.errors import InputError, UnavailableError
from morkit.reward_models.base import EMPTY_ANSWER_SCORE
from morkit.reward_models.heads import LogisticHead, load_packaged_head
from morkit.reward_models.backends.hf import Batching
from morkit.reward_models.backends.pooled import Backbone, PooledRM
from morkit.reward_models.card import RMCard
from morkit.reward_models.embedded.cards import MINILM_PROBE_CARD, SMOLLM2_JUDGE_CARD, SMOLLM2_ORM_CARD
from morkit.reward_models.family import bind
from morkit.reward_models.truncation import Truncation
from morkit.runtime import models

JUDGE_INSTRUCTION = (
    "Here is a question and a proposed answer.\n\nQuestion:\n{question}\n\nProposed answer:\n{answer}\n\n"
    "Is the proposed answer correct? Reply with yes or no."
)


def load_smollm2(device: str | None = None, dtype: str | None = None) -> Backbone:
    """SmolLM2-135M-Instruct's decoder (the resident causal LM without its LM head), fp32 on CPU."""
    lm = models.causal_lm(None, device, dtype)
    return Backbone(lm.model.model, lm.tokenizer, lm.device)


def load_minilm(device: str | None = None) -> Backbone:
    """all-MiniLM-L6-v2's encoder, fp32 on every device (the probe head was fitted on fp32 features)."""
    encoder = models.sentence_transformer(None, device)
    return Backbone(encoder[0].auto_model, encoder.tokenizer, str(encoder.device))


def chat_ids(tokenizer: Any, user: str, assistant: str | None) -> list[int]:
    """Token ids of a one-turn chat in the model's own template; a generation prompt when no assistant turn."""
    messages = [{"role": "user", "content": user}]
    if assistant is not None:
        messages.append({"role": "assistant", "content": assistant})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=assistant is None)
    return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]


class FeatureHeadRM(PooledRM):
    """A PooledRM whose head is a trained logistic probe over the pooled features; bound to its card (its family's
    `rm_class`), it loads the card's packaged head."""

    card: RMCard | None = None  # the card it is bound to
    load_backbone: Callable[..., Backbone]  # the resident backbone it runs on, given the device

    @classmethod
    def load(cls, device: str | None = None, head: str | Path | None = None, **kwargs: Any) -> "FeatureHeadRM":
        """The RM on the process's resident backbone, with its card's packaged head (or the head file `head`).

        Args:
            device: The torch device (default: auto).
            head: A head file to use instead of the packaged one.
            **kwargs: PooledRM options (truncation, batching, prefix_reuse).

        Returns:
            The RM.
        """
        return cls(cls.load_backbone(device), load_packaged_head(cls.card.head, head), **kwargs)

    def __init__(self, backbone: Backbone, head: LogisticHead | None, **kwargs: Any):
        super().__init__(backbone, **kwargs)
        self.trained_head = head  # None only while extracting features to train one

    def features(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        rows, _ = self.pooled(pairs)
        return np.stack([row.numpy() for row in rows]).astype(np.float64)

    def head(self, pooled: Sequence[Any]) -> list[float]:
        if self.trained_head is None:
            raise UnavailableError(f"{self.name} has no trained head")
        features = np.stack([row.numpy() for row in pooled]).astype(np.float64)
        return self.trained_head.probabilities(features).tolist()

    def identity_facts(self) -> dict[str, str | None]:
        """Its cache key's facts (catalog.identity_of): the hash of the head it holds (not the packaged one's), its
        engine, its backbone's dtype and its truncation."""
        from morkit.reward_models.identity import held_head_hash, model_dtype, truncation_part

        return {"head": held_head_hash(self.trained_head), "engine": "transformers",
                "dtype": model_dtype(self.backbone.model), "truncation": truncation_part(self.truncation)}


class SmolLM2Probe(FeatureHeadRM):
    """Sequence-classification ORM: SmolLM2's final hidden state at the last token, then a trained head."""

    load_backbone = staticmethod(load_smollm2)

    def render(self, question: str, answer: str) -> list[int]:
        return chat_ids(self.backbone.tokenizer, question, answer)


class MiniLMPairProbe(FeatureHeadRM):
    """Embedding probe: mean-pooled, L2-normalised MiniLM embedding of [question, answer], then a trained head."""

    load_backbone = staticmethod(load_minilm)
    causal = False  # a bidirectional encoder: no prefix reuse
    absolute_positions = True  # BERT: 512 learned positions, a hard limit

    def render(self, question: str, answer: str) -> list[int]:
        return self.backbone.tokenizer(question, answer, verbose=False)["input_ids"]

    def pool(self, hidden: Any, mask: Any, ids: Any) -> Any:
        import torch

        weights = mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return torch.nn.functional.normalize(mean, dim=-1)


class SmolLM2YesNoJudge(PooledRM):
    """LLM judge: P(yes) over {yes, Yes} vs {no, No} for the next token after a yes/no question."""

    card: RMCard | None = None  # the card it is bound to

    @classmethod
    def load(cls, device: str | None = None, **kwargs: Any) -> "SmolLM2YesNoJudge":
        """The judge on the process's resident SmolLM2 (`device`: default auto; `kwargs`: PooledRM options)."""
        return cls(load_smollm2(device), **kwargs)

    def __init__(self, backbone: Backbone, **kwargs: Any):
        super().__init__(backbone, **kwargs)
        tok = backbone.tokenizer
        self._answer_ids: dict[str, list[int]] = {}
        for label, words in (("yes", ("yes", "Yes")), ("no", ("no", "No"))):
            ids = [tok.encode(w, add_special_tokens=False) for w in words]
            self._answer_ids[label] = [i[0] for i in ids if len(i) == 1]
            if not self._answer_ids[label]:
                raise UnavailableError(f"tokenizer has no single-token spelling of {label!r}")

    def render(self, question: str, answer: str) -> list[int]:
        prompt = JUDGE_INSTRUCTION.format(question=question, answer=answer)
        return chat_ids(self.backbone.tokenizer, prompt, None)

    def head(self, pooled: Sequence[Any]) -> list[float]:
        import torch

        embeddings = self.backbone.model.get_input_embeddings().weight
        yes, no = self._answer_ids["yes"], self._answer_ids["no"]
        rows = embeddings[yes + no].detach().float().cpu()
        logits = torch.stack(list(pooled)) @ rows.T
        probs = torch.softmax(logits.double(), dim=-1)
        return probs[:, : len(yes)].sum(dim=-1).tolist()


@dataclass(frozen=True)
class EmbeddedFamily:
    """The family of an embedded RM: its class bound to the card, on one of the process's resident backbones; no
    vLLM class of morkit's, and no engine recipe unless a subclass gives one."""

    rm: type  # the RM class, bound to each card by `rm_class`
    architecture: str | None = None
    vllm_class: str | None = None
    pooling: str = "embed"  # on vLLM: the raw last-token state, with morkit's head applied here

    def rm_class(self, card: RMCard) -> type:
        """The RM class bound to `card`: its name, kind, trained head and window are the card's."""
        return bind(self.rm, card, window=card.context_window(None))

    def load(self, card: RMCard, **options: Any) -> Any:
        """`card`'s RM in this process, on the resident backbone (options: device, head, truncation, batching, ...)."""
        return self.rm_class(card).load(**options)

    def engine_spec(self, card: RMCard, options: Any) -> Any:
        """None here: an InputError (a subclass gives the recipe of a model that vLLM can run)."""
        raise InputError(f"reward model {card.name!r} runs only on transformers; drop --placement vllm / --url for it")


@dataclass(frozen=True)
class SmolLM2ProbeFamily(EmbeddedFamily):
    """SmolLM2's probe; on vLLM: the checkpoint as a raw last-token embedder, with the card's trained head on top."""

    def engine_spec(self, card: RMCard, options: Any = None) -> Any:
        from transformers import AutoTokenizer

        from morkit.core.types import Score
        from morkit.reward_models.backends.engine_rm import EngineSpec, empty_answers_score
        from morkit.reward_models.backends.pooling_io import row_of
        from morkit.runtime import assets

        root = assets.smollm2_checkpoint()
        tokenizer = AutoTokenizer.from_pretrained(root)
        head = load_packaged_head(card.head)

        def finish(data: Any) -> Score:
            return Score(float(head.probabilities(np.asarray([row_of(data, None)]))[0]))

        return EngineSpec(card=card, family=self, model_dir=root, render=lambda q, a: chat_ids(tokenizer, q, a),
                          tokenizer=tokenizer, max_context=self.rm_class(card).window, finish=finish,
                          not_shown=empty_answers_score(EMPTY_ANSWER_SCORE))


@dataclass(frozen=True)
class SmolLM2JudgeFamily(EmbeddedFamily):
    """SmolLM2's yes/no judge; on vLLM: the raw last-token state against the yes/no rows of the tied embeddings."""

    def engine_spec(self, card: RMCard, options: Any = None) -> Any:
        from transformers import AutoTokenizer

        from morkit.core.types import Score
        from morkit.reward_models.backends.engine_rm import EngineSpec, empty_answers_score
        from morkit.reward_models.backends.pooling_io import row_of
        from morkit.reward_models.families.checkpoint import read_tensors
        from morkit.runtime import assets

        root = assets.smollm2_checkpoint()
        tokenizer = AutoTokenizer.from_pretrained(root)
        judge = self.rm_class(card)(Backbone(None, tokenizer, "cpu"))  # its rendering and answer ids need no model
        yes, no = judge._answer_ids["yes"], judge._answer_ids["no"]
        embeddings = read_tensors(root, ["model.embed_tokens.weight"])["model.embed_tokens.weight"]
        rows = embeddings[yes + no].double().numpy()

        def judge_finish(data: Any) -> Score:
            logits = rows @ np.asarray(row_of(data, None), dtype=np.float64)
            probs = np.exp(logits - logits.max())
            return Score(float(probs[: len(yes)].sum() / probs.sum()))

        return EngineSpec(card=card, family=self, model_dir=root,
                          render=judge.render, tokenizer=tokenizer, max_context=judge.window,
                          finish=judge_finish,
                          not_shown=empty_answers_score(EMPTY_ANSWER_SCORE))


SMOLLM2_ORM = SmolLM2ProbeFamily(SmolLM2Probe)
MINILM_PROBE = EmbeddedFamily(MiniLMPairProbe)
SMOLLM2_JUDGE = SmolLM2JudgeFamily(SmolLM2YesNoJudge)

# The embedded RMs as classes bound to their cards, what the catalog's families build (train-head and direct callers
# construct them with a backbone), and their factories on the resident backbones.
SmolLM2ORM = SMOLLM2_ORM.rm_class(SMOLLM2_ORM_CARD)
MiniLMProbe = MINILM_PROBE.rm_class(MINILM_PROBE_CARD)
SmolLM2Judge = SMOLLM2_JUDGE.rm_class(SMOLLM2_JUDGE_CARD)
smollm2_orm = SmolLM2ORM.load
minilm_probe = MiniLMProbe.load
smollm2_judge = SmolLM2Judge.load

__all__ = [
    "Batching", "EmbeddedFamily", "MiniLMProbe", "SmolLM2Judge", "SmolLM2ORM", "Truncation",
    "load_minilm", "load_smollm2", "minilm_probe", "smollm2_judge", "smollm2_orm",
]
