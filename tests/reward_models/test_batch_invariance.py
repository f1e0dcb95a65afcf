"""A pair's score does not depend on its batch: the batched core and prefix reuse, at every batch size, padding cap
and input order, give each sequence's one-at-a-time result within 1e-5 (a tiny random Llama, then SmolLM2)."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from morkit.reward_models.backends.hf import Batching, last_token_pool, run_batches
from morkit.reward_models.backends.prefix import run_grouped
from morkit.reward_models.truncation import Encoded

TOL = 1e-5
BATCHINGS = [Batching(max_batch=1), Batching(max_batch=3), Batching(), Batching(max_padding=0.0),
             Batching(max_batch=32, max_tokens=1 << 20, max_padding=None)]  # the last pads heavily


def pool(hidden, mask, _ids):
    return last_token_pool(hidden, mask)


@pytest.fixture(scope="module")
def model():
    config = transformers.LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                      pad_token_id=0)
    torch.manual_seed(0)
    return transformers.LlamaModel(config).eval()


@pytest.fixture(scope="module")
def inputs():
    """Six questions x four candidates: a shared prompt of 18-40 tokens, answers of 1-60 (lengths spread widely)."""
    rng = random.Random(0)
    keys, seqs = [], []
    for q in range(6):
        prompt = [rng.randrange(1, 300) for _ in range(rng.randint(18, 40))]
        for _ in range(4):
            keys.append(q)
            seqs.append(prompt + [rng.randrange(1, 300) for _ in range(rng.randint(1, 60))])
    return keys, seqs


def alone(model, seqs):
    with torch.inference_mode():
        return [model(input_ids=torch.tensor([s])).last_hidden_state[0, -1] for s in seqs]


def worst(rows, want) -> float:
    return max(float((a - b).abs().max()) for a, b in zip(rows, want))


@pytest.mark.parametrize("order", ["as given", "reversed", "shuffled"])
@pytest.mark.parametrize("batching", BATCHINGS, ids=lambda b: f"{b.max_batch}-{b.max_padding}")
def test_batched_and_prefix_paths_equal_one_at_a_time(model, inputs, batching, order):
    keys, seqs = inputs
    index = list(range(len(seqs)))
    if order == "reversed":
        index.reverse()
    elif order == "shuffled":
        random.Random(1).shuffle(index)
    want = alone(model, [seqs[i] for i in index])
    encoded = [Encoded(tuple(seqs[i])) for i in index]
    batched = run_batches(model, encoded, pool, pad_id=0, device="cpu", batching=batching)
    grouped = run_grouped(model, [keys[i] for i in index], encoded, pool, pad_id=0, device="cpu", batching=batching)
    assert worst(batched, want) <= TOL
    assert worst(grouped, want) <= TOL


def test_the_heavy_padding_case_really_pads(inputs):
    _, seqs = inputs
    lengths = [len(s) for s in seqs]
    (only,) = Batching(max_batch=32, max_tokens=1 << 20, max_padding=None).plan(lengths)
    assert 1 - sum(lengths) / (len(only) * max(lengths)) > 0.3  # the invariance above is tested under real padding
    assert len(Batching().plan(lengths)) > 4  # and the default cap splits it


@pytest.mark.slow
def test_smollm2_scores_equal_one_at_a_time_at_any_batch(smollm2, gsm8k_pairs):
    from morkit.reward_models.embedded.models import SmolLM2ORM
    from morkit.reward_models.heads import load_packaged_head

    rm = SmolLM2ORM(smollm2, load_packaged_head("smollm2-orm"), prefix_reuse=False)
    pairs = [(q, a) for q, a, _ in gsm8k_pairs[:8]]  # two questions, four answers each
    rm.batching = Batching(max_batch=1)
    want = [s.value for s in rm.score(pairs)]
    rm.batching = Batching(max_batch=32, max_tokens=1 << 20, max_padding=None)  # one padded batch, reversed order
    padded = [s.value for s in rm.score(pairs[::-1])][::-1]
    rm.batching, rm.prefix_reuse = Batching(), True  # the defaults: capped batches, prefix reuse
    reused = [s.value for s in rm.score(pairs)]
    assert max(abs(a - b) for a, b in zip(padded, want)) <= TOL
    assert max(abs(a - b) for a, b in zip(reused, want)) <= TOL
    assert max(want) - min(want) > 1e-3  # the answers really get different scores
