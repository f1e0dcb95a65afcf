"""TMAS hybrid reward in TRL's GRPOTrainer (morkit.loops.tmas.grpo): rows, batching, and a real GRPO step."""

from __future__ import annotations

import itertools

import pytest

from morkit.llm.base import ScriptedLLM
from morkit.loops.tmas.banks import ExperienceBank, GuidelineBank
from morkit.loops.tmas.grpo import (
    banks_from_state,
    previous_round,
    check_grouping,
    cpu_grpo_config,
    experience_bank,
    problem_blocks,
    rollout_prompt,
    rows_per_problem,
    tmas_rows,
)
from morkit.loops.tmas.novelty import NoveltyJudge
from morkit.loops.tmas.prompts import exploit_prompt, explore_prompt
from morkit.loops.tmas.rewards import HybridReward, HybridRewardConfig

EXPERIENCE = ExperienceBank().apply_reply("ADD result: 3 bags of 4 apples is 12 apples").bank
GUIDELINES = GuidelineBank().apply_reply("STRATEGY: multiply the counts").bank
ROUND_1 = [{"iteration": 1, "index": 0, "branch": "exploit", "text": "4 + 4 = 8. The answer is 8.", "answer": "8",
            "score": 0.2, "summary": "Verifiers: adding is wrong, multiply the bags by 4."},
           {"iteration": 1, "index": 1, "branch": "explore", "text": "3 x 4 = 12. The answer is 12.", "answer": "12",
            "score": 0.9, "summary": "Verifiers: correct, 3 x 4 = 12."}]
PROBLEMS = [{"id": f"q{i}", "problem": f"Tom has {i} bags of 4 apples. How many apples?", "answer": str(4 * i),
             "state": {"experience": EXPERIENCE.to_json(), "guidelines": GUIDELINES.to_json(), "rollouts": ROUND_1}}
            for i in range(1, 5)]


def test_rows_carry_the_columns_the_reward_reads():
    rows = tmas_rows(PROBLEMS[:1])
    assert [r["rollout_type"] for r in rows] == ["base", "bank", "explore"]
    assert {r["problem_id"] for r in rows} == {"q1"} and {r["answer"] for r in rows} == {"4"}
    base, bank, explore = (r["prompt"] for r in rows)
    problem = PROBLEMS[0]["problem"]
    # the loop's own prompts: exploit without memory (base), with R_(t-1) and the experience bank (bank), explore
    assert base == [dict(m) for m in exploit_prompt(problem, [], None, 2000, False)]
    assert bank == [dict(m) for m in exploit_prompt(problem, previous_round(PROBLEMS[0]["state"]), EXPERIENCE,
                                                    2000, True)]
    assert explore == [dict(m) for m in explore_prompt(problem, GUIDELINES, None)]
    assert "apples is 12" not in base[-1]["content"] and "[1] result: 3 bags of 4 apples is 12" in bank[-1]["content"]
    assert "- multiply the counts" in explore[-1]["content"] and problem in explore[-1]["content"]
    assert [r["guideline_bank"] for r in rows] == [[], [], ["multiply the counts"]]
    assert banks_from_state({"experience": EXPERIENCE, "guidelines": GUIDELINES}) == (
        EXPERIENCE, ("multiply the counts",))
    assert banks_from_state({"experience": EXPERIENCE.to_json(), "guidelines": None})[0].render() == EXPERIENCE.render()
    assert experience_bank("ADD result: 3 bags of 4 apples is 12 apples").render() == EXPERIENCE.render()
    assert ExperienceBank.from_json(EXPERIENCE.to_json()) == EXPERIENCE == experience_bank(EXPERIENCE.to_json())
    assert ExperienceBank.from_json({"entries": [{"id": 4, "kind": "avoid", "text": "t"}]}).next_id == 5
    with pytest.raises(ValueError, match="experience bank"):
        experience_bank(3)
    assert tmas_rows([{"id": 1, "problem": "p", "answer": "2"}], types=["base"])[0]["problem_id"] == "1"
    with pytest.raises(ValueError, match="answer"):
        tmas_rows([{"id": 1, "problem": "p"}])
    with pytest.raises(ValueError, match="rollout_type"):
        rollout_prompt("p", "sideways")


def test_rows_refuse_a_branch_without_its_memory():
    bare = {"id": "q", "problem": "p", "answer": "2", "previous": ["The answer is 2."]}
    with pytest.raises(ValueError, match="'q': a bank row needs a non-empty experience bank"):
        tmas_rows([{**bare, "guidelines": GUIDELINES}])
    with pytest.raises(ValueError, match="'q': an explore row needs guideline strategies"):
        tmas_rows([{**bare, "experience": EXPERIENCE}])
    assert [r["rollout_type"] for r in tmas_rows([bare], types=["base"])] == ["base"]


def test_problem_blocks_keep_a_problems_rows_together():
    rows = tmas_rows(PROBLEMS)
    interleaved = sorted(rows, key=lambda r: r["rollout_type"])  # all bases first: problems apart
    with pytest.raises(ValueError, match="contiguous"):
        rows_per_problem(interleaved)
    ordered = problem_blocks(interleaved, seed=3)
    assert rows_per_problem(ordered) == 3 and sorted(map(id, ordered)) == sorted(map(id, rows))
    assert [r["problem_id"] for r in problem_blocks(interleaved)][::3] == ["q1", "q2", "q3", "q4"]
    with pytest.raises(ValueError, match="different numbers"):
        rows_per_problem(rows[:-1])


def reward_calls(rows, args):
    """The row indices of each reward call, replaying TRL's RepeatSampler and per-process generation batches."""
    pytest.importorskip("trl")
    from trl.trainer.utils import RepeatSampler

    sampler = RepeatSampler(rows, mini_repeat_count=args.num_generations,
                            batch_size=args.generation_batch_size // args.num_generations,
                            repeat_count=args.num_iterations * args.steps_per_generation,
                            shuffle=args.shuffle_dataset, seed=args.seed)
    local = args.per_device_train_batch_size * args.steps_per_generation
    stream = list(sampler)
    # one generation (one reward call) per steps_per_generation * num_iterations optimiser steps
    every = local * args.steps_per_generation * args.num_iterations
    return [stream[i:i + local] for i in range(0, len(stream), every)]


@pytest.mark.parametrize("problems_per_step, generations, accumulation", [(1, 2, 1), (2, 2, 1), (1, 4, 2)])
def test_trl_batching_puts_bank_and_base_of_a_problem_in_one_reward_call(tmp_path, problems_per_step, generations,
                                                                         accumulation):
    pytest.importorskip("trl")
    rows = problem_blocks(tmas_rows(PROBLEMS), seed=0)
    args = cpu_grpo_config(tmp_path, rows_per_problem=3, num_generations=generations,
                           problems_per_step=problems_per_step, gradient_accumulation_steps=accumulation)
    assert check_grouping(rows, args) == 3
    calls = reward_calls(rows, args)
    assert calls
    for call in calls:
        problems = {rows[i]["problem_id"] for i in call}
        for pid in problems:  # every problem in the call has all its rows, each num_generations times
            kinds = [rows[i]["rollout_type"] for i in call if rows[i]["problem_id"] == pid]
            assert sorted(kinds) == sorted(["base", "bank", "explore"] * generations)


def test_check_grouping_refuses_settings_that_split_problems(tmp_path):
    pytest.importorskip("trl")
    rows = problem_blocks(tmas_rows(PROBLEMS))
    shuffled = cpu_grpo_config(tmp_path, rows_per_problem=3, shuffle_dataset=True)
    with pytest.raises(ValueError, match="shuffle_dataset"):
        check_grouping(rows, shuffled)
    split = [c for c in reward_calls(rows, shuffled)
             if any(sum(rows[j]["problem_id"] == rows[i]["problem_id"] for j in c) != 3 * 2 for i in c)]
    assert split  # what the check prevents: TRL's shuffle sends a problem's rows to different calls
    with pytest.raises(ValueError, match="multiple of rows_per_problem"):
        check_grouping(rows, cpu_grpo_config(tmp_path, rows_per_problem=3, per_device_train_batch_size=4))


@pytest.mark.parametrize("override", [dict(scale_rewards="group"), dict(scale_rewards=True),
                                      dict(multi_objective_aggregation="normalize_then_sum")])
def test_check_grouping_refuses_scaling_that_cancels_the_bank_bonus_with_row_groups(tmp_path, override):
    pytest.importorskip("trl")
    rows = problem_blocks(tmas_rows(PROBLEMS))
    args = cpu_grpo_config(tmp_path, rows_per_problem=3, **override)
    with pytest.raises(ValueError, match="cancels it"):
        check_grouping(rows, args, grouping="row")
    without_bank = problem_blocks(tmas_rows(PROBLEMS, types=["base", "explore"]))
    assert check_grouping(without_bank, cpu_grpo_config(tmp_path, rows_per_problem=2, **override),
                          grouping="row") == 2  # no bonus
    assert check_grouping(rows, cpu_grpo_config(tmp_path, rows_per_problem=3, scale_rewards="batch"),
                          grouping="row") == 3
    flagged = [{**{k: v for k, v in r.items() if k != "rollout_type"}, "used_bank": r["rollout_type"] == "bank"}
               for r in rows]  # bank rows marked the older way are found too
    aliased = [{**r, "rollout_type": "exploit" if r["rollout_type"] == "bank" else r["rollout_type"]} for r in rows]
    for marked in (flagged, aliased):
        with pytest.raises(ValueError, match="cancels it"):
            check_grouping(marked, args, grouping="row")


@pytest.mark.slow
def test_one_grpo_step_with_the_hybrid_reward(tmp_path, data_dir):
    """A real GRPOTrainer step on SmolLM2-135M-Instruct (CPU) with the hybrid reward and a scripted judge."""
    pytest.importorskip("trl")
    import json

    from morkit.loops.tmas.grpo import grpo_trainer, load_policy

    lines = (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()[:2]
    problems = [{"id": f"gsm8k-{i}", "problem": row["question"], "answer": row["answer"].split("####")[-1].strip(),
                 "experience": EXPERIENCE, "guidelines": GUIDELINES, "previous": ROUND_1}
                for i, row in enumerate(map(json.loads, lines))]
    rows = problem_blocks(tmas_rows(problems))
    classes = itertools.cycle(["NOVELTY: 1", "NOVELTY: -1"])  # the two rollouts of an explore row differ
    judge_prompts = []
    judge = ScriptedLLM(lambda conv, i: judge_prompts.append(conv) or next(classes))
    hybrid = HybridReward(HybridRewardConfig(beta=0.5), NoveltyJudge(judge))
    calls = []

    def tmas_hybrid(prompts, completions, **columns):
        out = hybrid(prompts, completions, **columns)
        calls.append({"columns": columns, "n": len(completions), "out": out, "parts": hybrid.last})
        return out

    model, tokenizer = load_policy()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    args = cpu_grpo_config(tmp_path, rows_per_problem=3, num_generations=2, max_completion_length=16,
                           max_steps=1, learning_rate=1e-4)
    trainer = grpo_trainer(rows, tmas_hybrid, args, model, tokenizer)
    trainer.train()

    assert len(calls) == 1 and calls[0]["n"] == 6
    columns = calls[0]["columns"]
    for name in ("problem_id", "rollout_type", "answer", "guideline_bank", "problem", "trainer_state", "log_metric"):
        assert name in columns
    assert columns["rollout_type"] == ["base", "base", "bank", "bank", "explore", "explore"]
    assert len(set(columns["problem_id"])) == 1
    assert all(isinstance(r, float) for r in calls[0]["out"])
    parts = calls[0]["parts"]
    assert [p.novelty for p in parts[4:]] == [1, -1] and len(judge_prompts) == 2
    assert "- multiply the counts" in judge_prompts[0][-1]["content"]
    for part in parts[:4]:  # base: +-1; bank: +-1, plus beta * (1 - p_base) when right (p_base from the two bases)
        p_base = sum(p.correct for p in parts[:2]) / 2
        bonus = 0.5 * (1 - p_base) if part.rollout_type == "bank" and part.correct else 0.0
        assert part.reward == pytest.approx((1.0 if part.correct else -1.0) + bonus)
    logged = trainer.state.log_history[0]
    assert logged["rewards/tmas_hybrid/mean"] == pytest.approx(sum(calls[0]["out"]) / 6)
    assert "reward" in logged and "tmas/novel_fraction" in logged
    changed = [n for n, p in model.named_parameters() if not p.detach().equal(before[n])]
    assert changed  # the explore rollouts' rewards differ, so their advantages are not zero
