"""Reward models that run here with no download: a SmolLM2 ORM, a SmolLM2 yes/no judge, a MiniLM probe. All three
give a probability in [0, 1]; their backbones are the process's resident models (morkit.runtime.models).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from morkit.core.errors import UnavailableError
from morkit.reward_models.base import EMPTY_ANSWER_SCORE
from morkit.reward_models.heads import LogisticHead, load_packaged_head
from morkit.reward_models.backends.hf import Batching
from morkit.reward_models.backends.pooled import Backbone, PooledRM
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
    """A PooledRM whose head is a trained logistic probe over the pooled features."""

    head_name = ""

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


class SmolLM2ORM(FeatureHeadRM):
    """Sequence-classification ORM: SmolLM2's final hidden state at the last token, then a trained head."""

    name = "smollm2-orm"
    kind = "orm"
    head_name = "smollm2-orm"

    def render(self, question: str, answer: str) -> list[int]:
        return chat_ids(self.backbone.tokenizer, question, answer)


class MiniLMProbe(FeatureHeadRM):
    """Embedding probe: mean-pooled, L2-normalised MiniLM embedding of [question, answer], then a trained head."""

    name = "minilm-probe"
    kind = "orm"
    head_name = "minilm-probe"
    causal = False  # a bidirectional encoder: no prefix reuse
    window = 256  # the length its head was fitted at (the encoder's own max_seq_length)
    absolute_positions = True  # BERT: 512 learned positions, a hard limit

    def render(self, question: str, answer: str) -> list[int]:
        return self.backbone.tokenizer(question, answer, verbose=False)["input_ids"]

    def pool(self, hidden: Any, mask: Any, ids: Any) -> Any:
        import torch

        weights = mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return torch.nn.functional.normalize(mean, dim=-1)


class SmolLM2Judge(PooledRM):
    """LLM judge: P(yes) over {yes, Yes} vs {no, No} for the next token after a yes/no question."""

    name = "smollm2-judge"
    kind = "judge"

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


def smollm2_orm(device: str | None = None, head: str | Path | None = None, **kwargs: Any) -> SmolLM2ORM:
    return SmolLM2ORM(load_smollm2(device), load_packaged_head("smollm2-orm", head), **kwargs)


def minilm_probe(device: str | None = None, head: str | Path | None = None, **kwargs: Any) -> MiniLMProbe:
    return MiniLMProbe(load_minilm(device), load_packaged_head("minilm-probe", head), **kwargs)


def smollm2_judge(device: str | None = None, **kwargs: Any) -> SmolLM2Judge:
    return SmolLM2Judge(load_smollm2(device), **kwargs)


__all__ = [
    "Batching", "MiniLMProbe", "SmolLM2Judge", "SmolLM2ORM", "Truncation",
    "load_minilm", "load_smollm2", "minilm_probe", "smollm2_judge", "smollm2_orm",
]


class _Embedded:
    """A family of the embedded models: their factory in this process; no vLLM class of morkit's."""

    architecture: str | None = None
    vllm_class: str | None = None
    pooling = "embed"  # vLLM reads the raw last-token state; morkit's head runs on it

    def __init__(self, factory: Any):
        self.factory = factory

    def load(self, card: Any, **options: Any) -> Any:
        return self.factory(**options)

    def engine_spec(self, card: Any, options: Any) -> Any:
        from morkit.core.errors import InputError

        raise InputError(f"reward model {card.name!r} runs only on transformers; drop --placement vllm / --url for it")


class _SmolLM2ORMFamily(_Embedded):
    """SmolLM2's ORM; on vLLM: the checkpoint as a raw last-token embedder, with the trained probe on top."""

    def engine_spec(self, card: Any, options: Any = None) -> Any:
        from transformers import AutoTokenizer

        from morkit.core.types import Score
        from morkit.reward_models.backends.engine_rm import EngineSpec, empty_answers_score
        from morkit.reward_models.backends.pooling_io import row_of
        from morkit.runtime import assets

        name = card.name
        root = assets.smollm2_checkpoint()
        tokenizer = AutoTokenizer.from_pretrained(root)
        head = load_packaged_head(card.head)

        def finish(data: Any) -> Score:
            return Score(float(head.probabilities(np.asarray([row_of(data, None)]))[0]))

        return EngineSpec(card=card, family=self, model_dir=root, render=lambda q, a: chat_ids(tokenizer, q, a),
                          tokenizer=tokenizer, max_context=SmolLM2ORM.window, finish=finish,
                          not_shown=empty_answers_score(EMPTY_ANSWER_SCORE))


class _SmolLM2JudgeFamily(_Embedded):
    """SmolLM2's yes/no judge; on vLLM: the raw last-token state against the yes/no rows of the tied embeddings."""

    def engine_spec(self, card: Any, options: Any = None) -> Any:
        from transformers import AutoTokenizer

        from morkit.core.types import Score
        from morkit.reward_models.backends.engine_rm import EngineSpec, empty_answers_score
        from morkit.reward_models.backends.pooling_io import row_of
        from morkit.reward_models.ctts.common import read_tensors
        from morkit.runtime import assets

        root = assets.smollm2_checkpoint()
        tokenizer = AutoTokenizer.from_pretrained(root)
        judge = SmolLM2Judge(Backbone(None, tokenizer, "cpu"))  # its rendering and answer ids need no model
        yes, no = judge._answer_ids["yes"], judge._answer_ids["no"]
        embeddings = read_tensors(root, ["model.embed_tokens.weight"])["model.embed_tokens.weight"]
        rows = embeddings[yes + no].double().numpy()

        def judge_finish(data: Any) -> Score:
            logits = rows @ np.asarray(row_of(data, None), dtype=np.float64)
            probs = np.exp(logits - logits.max())
            return Score(float(probs[: len(yes)].sum() / probs.sum()))

        return EngineSpec(card=card, family=self, model_dir=root,
                          render=judge.render, tokenizer=tokenizer, max_context=SmolLM2Judge.window,
                          finish=judge_finish,
                          not_shown=empty_answers_score(EMPTY_ANSWER_SCORE))


SMOLLM2_ORM = _SmolLM2ORMFamily(smollm2_orm)
MINILM_PROBE = _Embedded(minilm_probe)
SMOLLM2_JUDGE = _SmolLM2JudgeFamily(smollm2_judge)
