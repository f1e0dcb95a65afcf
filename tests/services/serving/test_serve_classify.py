"""vLLM's /classify as verl's reward loop posts it: the exact body, vLLM's reply shape, the chat-template split,
rewards that depend on (question, answer) alone, activation, and the same limits, auth and metrics as the rest."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest
from fakes.embedder import HashEmbedder
from fakes.serving import live

from morkit.core.errors import InputError
from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.reward_models.options import ScoringOptions
from morkit.selection.methods import SelectOptions
from morkit.services.serving.app import ServeLimits
from morkit.services.serving.classify import split_chat
from morkit.services.serving.engine import RoutingEngine

QUESTIONS = (28, 37, 54, 41)

LLAMA3_REAL = ("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: "
               "26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+3?<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\nIt is \\boxed{5}.<|eot_id|>")
CHATML_REAL = ("<|im_start|>system\nPlease reason step by step.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
               "<|im_start|>assistant\nIt is \\boxed{5}.<|im_end|>\n")


@pytest.fixture(scope="module")
def probe_engine(math_queries):
    """A pool over math-consensus and the MiniLM probe (a model RM scoring each answer alone), PRES routing."""
    from morkit.services.scoring import score

    train = score(math_queries[:24], ["math-consensus", "minilm-probe"],
                  options=ScoringOptions(cache=None, device="cpu"))
    pool = build_pool(train, HashEmbedder(), config=PoolConfig(max_members=2))
    engine = RoutingEngine(pool, SelectOptions(method="pres"), ScoringOptions(device="cpu"), embedder=HashEmbedder())
    yield engine
    engine.close()


def verl_body(tokenizer, question: str, answer: str) -> dict:
    """What verl's RewardLoopWorker posts (compute_score_disrm, vLLM engine): the chat rendered by the RM's
    tokenizer with the response appended, BOS stripped, activation off."""
    chat = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    text = tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
    if tokenizer.bos_token is not None and text.startswith(tokenizer.bos_token):
        text = text[len(tokenizer.bos_token):]
    return {"model": "/models/Skywork-Reward-V2-Llama-3.1-8B", "input": text, "activation": False}


def pairs(math_queries):
    return [(math_queries[i].question, c.text) for i in QUESTIONS for c in math_queries[i].candidates[:2]]


def test_split_chat_reads_each_template_family():
    assert split_chat(LLAMA3_REAL)[:2] == ("What is 2+3?", "It is \\boxed{5}.")
    assert split_chat(CHATML_REAL) == ("What is 2+3?", "It is \\boxed{5}.", "chatml")
    gemma = "<start_of_turn>user\nWhat is 2+3?<end_of_turn>\n<start_of_turn>model\nIt is 5.<end_of_turn>\n"
    assert split_chat(gemma) == ("What is 2+3?", "It is 5.", "gemma")
    assert split_chat("<|user|>\nWhat is 2+3?<|end|>\n<|assistant|>\nIt is 5.<|end|>\n<|endoftext|>")[:2] == (
        "What is 2+3?", "It is 5.")
    assert split_chat("[INST] What is 2+3? [/INST] It is 5.</s>") == ("What is 2+3?", "It is 5.", "mistral")
    with pytest.raises(InputError, match="no chat template recognised.*chatml, llama3, gemma"):
        split_chat("What is 2+3? It is 5.")
    with pytest.raises(InputError, match="must hold a user turn and the assistant's answer"):
        split_chat("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")


def test_split_chat_is_linear_on_hostile_texts():
    import time

    hostile = ["[INST]" * 40_000, ("[INST]" + "x" * 10) * 15_000, "<|im_start|>user\n" * 15_000,
               "<|start_header_id|>user<|end_header_id|>\n\n" * 6_000, "<start_of_turn>" * 16_000]
    for text in hostile:  # the old lazy [INST] regex: about 2 s at 240 kB, 30 s at 160 kB of '[INST]'
        started = time.perf_counter()
        with pytest.raises(InputError):
            split_chat(text)
        assert time.perf_counter() - started < 0.5, text[:30]


def test_split_chat_reads_the_family_that_opens_the_text_and_refuses_a_mistral_text_without_answer():
    quoting = ("<|start_header_id|>user<|end_header_id|>\n\nWhat does ChatML look like?<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\nLike <|im_start|>user\nhi<|im_end|>.<|eot_id|>")
    assert split_chat(quoting) == ("What does ChatML look like?", "Like <|im_start|>user\nhi<|im_end|>.", "llama3")
    assert split_chat("[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhat is 2+3? [/INST] 5</s>") == (
        "What is 2+3?", "5", "mistral")
    assert split_chat("[INST] a [/INST] b</s>[INST] What is 2+3? [/INST] It is 5.</s>")[:2] == (
        "a", "b</s>[INST] What is 2+3? [/INST] It is 5.")  # one exchange: later turns are the answer's text
    for no_answer in ("[INST] What is 2+3? [/INST]", "[INST] What is 2+3? [/INST] </s>"):
        with pytest.raises(InputError, match="a mistral chat text must hold a user turn and the assistant"):
            split_chat(no_answer)


def test_turn_tokens_a_policy_wrote_stay_in_its_answer():
    # verl renders prompt + response; a response holding its template's turn tokens must not stop training
    assert split_chat("[INST] What is 2+3? [/INST] 5</s>[INST] and 3+4?") == (
        "What is 2+3?", "5</s>[INST] and 3+4?", "mistral")
    wrote = ("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n5<|im_end|>\n<|im_start|>user\n"
             "and 3+4?<|im_end|>\n")
    assert split_chat(wrote) == ("What is 2+3?", "5<|im_end|>\n<|im_start|>user\nand 3+4?", "chatml")
    history = ("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
               "<|im_start|>assistant\n")  # the same text as an answer that wrote a turn and a generation prompt
    assert split_chat(history)[:2] == ("q", "a<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant")


def test_the_reply_is_vllms_classification_response_field_for_field():
    protocol = pytest.importorskip("vllm.entrypoints.pooling.classify.protocol")
    from morkit.services.serving.classify import classify_job, classify_reply

    job = classify_job({"model": "rm", "input": [CHATML_REAL, LLAMA3_REAL], "activation": False})
    reply = classify_reply(job, [0.25, -1.5])
    assert reply == protocol.ClassificationResponse.model_validate(reply).model_dump()  # vLLM's own serialisation
    assert [d["probs"] for d in reply["data"]] == [[0.25], [-1.5]]


@pytest.mark.slow
def test_verls_exact_body_gets_vllms_reply_and_the_routed_reward(probe_engine, math_queries):
    from fakes.ctts_checkpoints import make_tokenizer
    from vllm.entrypoints.pooling.classify.protocol import ClassificationResponse

    question, answer = pairs(math_queries)[0]
    alone = probe_engine.run([_standalone(question, answer)])[0][0].scores[0]
    with live(probe_engine) as url:
        for family in ("llama", "qwen", "gemma"):
            body = verl_body(make_tokenizer(family)[0], question, answer)
            reply = httpx.post(f"{url}/classify", json=body, timeout=60)
            assert reply.status_code == 200, reply.text
            parsed = ClassificationResponse.model_validate(reply.json())  # vLLM's own reply model
            assert parsed.model == body["model"] and parsed.object == "list"
            assert reply.json()["data"][-1]["probs"][-1] == pytest.approx(alone, abs=1e-9)  # what verl reads
        newer = httpx.post(f"{url}/classify", json={**body, "use_activation": False, "activation": None}, timeout=60)
        on = httpx.post(f"{url}/classify", json={"input": [body["input"]]}, timeout=60)  # vLLM's default: on
        chat = httpx.post(f"{url}/classify", json={"messages": [{"role": "user", "content": question}, {
            "role": "assistant", "content": answer}], "use_activation": False}, timeout=60)
    assert newer.json()["data"][0]["probs"] == [pytest.approx(alone, abs=1e-9)]
    assert on.json()["data"][0]["probs"] == [pytest.approx(1 / (1 + math.exp(-alone)), abs=1e-9)]
    assert chat.json()["data"][0]["probs"] == [pytest.approx(alone, abs=1e-9)]


def _standalone(question: str, answer: str):
    from morkit.services.serving.classify import classify_job

    return classify_job({"messages": [{"role": "user", "content": question},
                                      {"role": "assistant", "content": answer}]}).queries


@pytest.mark.slow
def test_a_reward_is_the_same_alone_in_a_batch_and_under_concurrency(probe_engine, math_queries):
    from fakes.ctts_checkpoints import make_tokenizer

    tokenizer = make_tokenizer("qwen")[0]
    texts = [verl_body(tokenizer, q, a)["input"] for q, a in pairs(math_queries)]
    assert len(texts) == 8

    async def one_by_one(url):
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*(client.post(f"{url}/classify", json={"input": t, "activation": False})
                                          for t in texts))

    with live(probe_engine, ServeLimits(max_wait_ms=200)) as url:
        batch = httpx.post(f"{url}/classify", json={"input": texts, "activation": False}, timeout=60).json()
        alone = [httpx.post(f"{url}/classify", json={"input": t, "activation": False}, timeout=60).json()
                 for t in texts]
        concurrent = [r.json() for r in asyncio.run(one_by_one(url))]  # micro-batched together by the server
    rewards = [d["probs"][0] for d in batch["data"]]
    assert [d["index"] for d in batch["data"]] == list(range(8))
    assert [a["data"][0]["probs"][0] for a in alone] == pytest.approx(rewards, abs=1e-6)
    assert [c["data"][0]["probs"][0] for c in concurrent] == pytest.approx(rewards, abs=1e-6)
    assert len({round(r, 6) for r in rewards}) > 2  # answers differ, so do rewards: not a per-request constant


@pytest.mark.slow
def test_classify_has_the_same_limits_auth_and_metrics(probe_engine):
    ok = {"input": CHATML_REAL, "activation": False}
    with live(probe_engine, ServeLimits(max_items=3, max_text_chars=500), api_key="k") as url:
        auth = {"Authorization": "Bearer k"}
        unauthorised = httpx.post(f"{url}/classify", json=ok)
        good = httpx.post(f"{url}/classify", json=ok, headers=auth, timeout=60)
        cases = {
            "no template": ({"input": "plain text"}, 400, "input[0]: no chat template recognised"),
            "token ids": ({"input": [[1, 2, 3]]}, 400, "input[0]: must be a string"),
            "too many": ({"input": [CHATML_REAL] * 4}, 400, "at most 3"),
            "too much text": ({"input": [CHATML_REAL + "x" * 600]}, 413, "--max-text-chars"),
            "activation": ({**ok, "activation": "no"}, 400, "'activation' must be true, false or null"),
            "disagree": ({**ok, "activation": True, "use_activation": False}, 400, "disagree"),
            "no answer": ({"messages": [{"role": "user", "content": "q"}]}, 400, "must end with a user message"),
        }
        replies = {name: httpx.post(f"{url}/classify", json=body, headers=auth) for name, (body, _, _) in
                   cases.items()}
        metrics = httpx.get(f"{url}/metrics", headers=auth).text
    assert unauthorised.status_code == 401 and good.status_code == 200
    for name, (_, status, reason) in cases.items():
        reply = replies[name]
        assert (reply.status_code, reason in reply.json()["error"]) == (status, True), (name, reply.text)
    assert 'morkit_requests_total{route="/classify",status="200"} 1.0' in metrics
    assert 'morkit_requests_total{route="/classify",status="401"} 1.0' in metrics
