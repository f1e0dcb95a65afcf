"""The embedded RMs on their real weights: exact score extraction, batch-size invariance, truncation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from morkit.core.errors import InputError
from morkit.reward_models.base import EMPTY_ANSWER_SCORE
from morkit.reward_models.embedded.models import (
    MiniLMProbe,
    SmolLM2Judge,
    SmolLM2ORM,
    chat_ids,
)
from morkit.reward_models.heads import load_packaged_head
from morkit.reward_models.backends.hf import Batching
from morkit.reward_models.truncation import Truncation

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def orm(smollm2):
    return SmolLM2ORM(smollm2, load_packaged_head("smollm2-orm"))


def test_orm_score_is_head_of_last_token_state(orm, smollm2, gsm8k_pairs):
    question, answer, _ = gsm8k_pairs[0]
    text = smollm2.tokenizer.apply_chat_template(
        [{"role": "user", "content": question}, {"role": "assistant", "content": answer}], tokenize=False)
    ids = smollm2.tokenizer(text, return_tensors="pt", add_special_tokens=False)
    assert ids["input_ids"][0].tolist() == orm.render(question, answer)
    with torch.inference_mode():
        hidden = smollm2.model(**ids).last_hidden_state[0, -1].double().numpy()
    head = orm.trained_head
    expected = 1 / (1 + np.exp(-(((hidden - head.mean) / head.scale) @ head.weight + head.bias)))
    (score,) = orm.score([(question, answer)])
    assert score.value == pytest.approx(expected, abs=1e-5)
    assert 0.0 < score.value < 1.0 and not score.truncated


def test_scores_do_not_depend_on_batch_size(orm, gsm8k_pairs):
    pairs = [(q, a) for q, a, _ in gsm8k_pairs]
    orm.batching = Batching(max_batch=1)
    one = np.array([s.value for s in orm.score(pairs)])
    orm.batching = Batching(max_batch=32, max_tokens=1 << 20)
    many = np.array([s.value for s in orm.score(pairs)])
    reversed_many = np.array([s.value for s in orm.score(pairs[::-1])])[::-1]
    orm.batching = Batching()
    assert np.abs(one - many).max() <= 1e-4
    assert np.abs(many - reversed_many).max() <= 1e-4
    assert np.ptp(one) > 1e-3  # the answers really get different scores


def test_truncation_is_explicit(smollm2, gsm8k_pairs):
    question, answer, _ = gsm8k_pairs[1]
    limit = len(chat_ids(smollm2.tokenizer, question, "")) + 24  # room for 24 answer tokens, not all of them
    assert len(chat_ids(smollm2.tokenizer, question, answer)) > limit
    rm = SmolLM2ORM(smollm2, load_packaged_head("smollm2-orm"), truncation=Truncation(max_tokens=limit))
    (encoded,) = rm.encode([(question, answer)])
    assert encoded.truncated and limit - 4 <= len(encoded.ids) <= limit
    assert encoded.ids[-2:] == tuple(chat_ids(smollm2.tokenizer, "q", "a")[-2:])  # template end kept
    (score,) = rm.score([(question, answer)])
    assert score.truncated
    left = SmolLM2ORM(smollm2, None, truncation=Truncation(max_tokens=limit, policy="left"))
    assert left.encode([(question, answer)])[0].ids != encoded.ids
    strict = SmolLM2ORM(smollm2, None, truncation=Truncation(max_tokens=limit, policy="error"))
    with pytest.raises(InputError, match=f"over the limit of {limit}"):
        strict.encode([(question, answer)])


def test_empty_answer_gets_the_documented_floor_without_a_model_call(orm, monkeypatch):
    monkeypatch.setattr(orm, "pooled", lambda pairs: pytest.fail("empty answers must not reach the model"))
    assert [s.value for s in orm.score([("q", ""), ("q", "  \n")])] == [EMPTY_ANSWER_SCORE] * 2


def test_judge_is_p_yes_from_the_language_model_head(smollm2, gsm8k_pairs):
    from transformers import AutoModelForCausalLM

    from morkit.runtime.assets import smollm2_checkpoint

    judge = SmolLM2Judge(smollm2)
    question, answer, _ = gsm8k_pairs[2]
    (score,) = judge.score([(question, answer)])
    lm = AutoModelForCausalLM.from_pretrained(smollm2_checkpoint()).eval()
    ids = torch.tensor([judge.render(question, answer)])
    with torch.inference_mode():
        logits = lm(input_ids=ids).logits[0, -1].double()
    tok = smollm2.tokenizer
    words = [tok.encode(w, add_special_tokens=False)[0] for w in ("yes", "Yes", "no", "No")]
    probs = torch.softmax(logits[words], dim=-1)
    assert score.value == pytest.approx(float(probs[:2].sum()), abs=1e-5)


def test_minilm_pooling_matches_sentence_transformers(minilm):
    from sentence_transformers import SentenceTransformer

    from morkit.reward_models.backends.hf import run_batches
    from morkit.reward_models.truncation import Encoded
    from morkit.runtime.assets import minilm_path

    texts = ["Natalia sold clips to 48 of her friends.", "The answer is 72."]
    probe = MiniLMProbe(minilm, None)
    encoded = [Encoded(tuple(minilm.tokenizer(t)["input_ids"])) for t in texts]
    ours = torch.stack(run_batches(minilm.model, encoded, probe.pool, pad_id=minilm.pad_id, device="cpu"))
    reference = SentenceTransformer(str(minilm_path()), device="cpu").encode(texts, convert_to_tensor=True)
    assert torch.allclose(ours, reference.float(), atol=1e-5)


def test_packaged_heads_record_how_they_were_chosen_and_how_they_did():
    for name in ("smollm2-orm", "minilm-probe"):
        info = load_packaged_head(name).info
        assert info["rm"] == name and info["held_out"]["questions"] >= 20
        assert info["selection"]["cv_mean_prr"] > 0.55, (name, info["selection"])  # signal on training folds
        assert 0.0 <= info["held_out"]["mean_prr"] <= 1.0


def test_calibration_keeps_the_within_question_order_when_difficulty_points_the_other_way():
    """Scores rank answers right inside each question, but harder questions score higher overall:
    a plain 1-D logistic fit across questions gives a negative slope and would flip every ranking."""
    from morkit.question_pool.prr import prr
    from morkit.services.train_heads import _calibrate

    rng = np.random.default_rng(0)
    s, y, g = [], [], []
    for q in range(200):
        easy = q % 2 == 0
        labels = rng.random(4) < (0.9 if easy else 0.1)
        base = 0.0 if easy else 5.0  # hard questions get higher raw scores
        s.extend(base + labels + 0.1 * rng.standard_normal(4))
        y.extend(labels)
        g.extend([q] * 4)
    s, y, g = np.array(s), np.array(y), np.array(g)
    slope, bias = _calibrate(s, y, g)
    assert slope > 0
    p = 1 / (1 + np.exp(-(slope * s + bias)))
    prrs = [prr(p[g == q], y[g == q]) for q in range(200)]
    assert np.nanmean(prrs) > 0.9


def test_shipped_heads_rank_their_own_held_out_answers_better_than_chance():
    for name in ("smollm2-orm",):
        held = load_packaged_head(name).info["held_out"]
        assert held["mean_prr"] > 0.5 and held["best_of_n"] > held["random_pick"], (name, held)


def test_each_model_is_resident_once_and_shared_with_its_other_users(smollm2, minilm):
    """SmolLM2's RMs share the local LLM's weights, the probe shares the embedder's, and both equal a plain load."""
    from transformers import AutoModel

    from morkit.llm.local import LocalLLM
    from morkit.question_pool.embed import load_embedder
    from morkit.runtime import assets, models

    assert smollm2.model is LocalLLM(device="cpu").loaded.model.model
    assert minilm.model is load_embedder(None, "cpu").model[0].auto_model
    kinds = [key[0] for key in models.resident_keys()]
    assert kinds.count("causal-lm") == 1 and kinds.count("sentence-transformer") == 1
    for backbone, path in ((smollm2, assets.smollm2_checkpoint()), (minilm, assets.minilm_path())):
        plain = AutoModel.from_pretrained(path, dtype="float32").eval()
        tokens = torch.tensor([backbone.tokenizer("Natalia sold clips.")["input_ids"]])
        with torch.inference_mode():
            assert torch.equal(backbone.model(tokens).last_hidden_state, plain(tokens).last_hidden_state)


def test_release_drops_resident_models_and_the_next_request_loads_anew():
    from morkit.runtime import models

    first = models.resident(("test-kind", "x"), object)
    assert models.resident(("test-kind", "x"), object) is first
    assert models.release_models("test-kind") == 1 and ("test-kind", "x") not in models.resident_keys()
    assert models.resident(("test-kind", "x"), object) is not first
    models.release_models("test-kind")


@pytest.mark.parametrize("policy", ["middle", "right", "left", "error"])
def test_minilm_keeps_its_window_under_every_policy_and_a_long_question(minilm, policy):
    # The reported crash: --truncation left replaced the probe's 256-token window by 2048, past MiniLM's 512
    # positions, and a question longer than the window was not cut at all.
    from morkit.reward_models.options import ScoringOptions
    from morkit.reward_models.catalog import resolve_rm

    options = resolve_rm("minilm-probe", ScoringOptions(truncation=policy)).load_options()
    rm = MiniLMProbe(minilm, load_packaged_head("minilm-probe"), truncation=options["truncation"])
    assert (rm.truncation.limit, rm.truncation.policy) == (256, policy)
    question = "How many apples are left after the long story ends? " * 60
    answer = "We count them one by one. " * 40 + "So the answer is 7."
    if policy == "error":
        with pytest.raises(InputError, match="over the limit of 256"):
            rm.encode([(question, answer)])
        return
    (encoded,) = rm.encode([(question, answer)])
    assert encoded.question_cut and len(encoded.ids) <= 256
    (score,) = rm.score([(question, answer)])
    assert score.truncated and 0.0 < score.value < 1.0


def test_minilm_refuses_a_limit_past_its_positions(minilm):
    with pytest.raises(InputError, match="reads at most 512 tokens"):
        MiniLMProbe(minilm, None, truncation=Truncation(1024))
