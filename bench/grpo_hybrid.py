"""A few GRPO steps with TRL's GRPOTrainer and the TMAS hybrid reward, on SmolLM2-135M-Instruct (CPU).

Each GSM8K test problem (from --start) becomes three rows: base, bank and explore (morkit.loops.tmas.grpo).
They carry an illustrative experience bank, guideline bank and previous round (two solutions with their
verification summaries, which the bank prompt shows); a problem's `state` from a real TMAS run gives all
three instead. The rows are laid out problem by problem, so one optimiser step scores --problems-per-step
whole problems: every reward call sees a problem's Bank and Base rollouts together. The advantage is the
paper's, over a joint Base+Bank group per problem (--grouping problem, the default) or TRL's per-row
groups (--grouping row, morkit's earlier behaviour). The novelty judge of the explore rows is SmolLM2
itself (--judge local, the default) or a scripted judge alternating 1 / 0 (--judge scripted: no judge cost).

Printed per step: seconds (optimiser step including generation, reward and judge), the mean reward,
per rollout type the mean reward, accuracy, the bank rows' p_base and bonus, and the explore rows'
novelty classes with how each class was set (judge, unparsed reply -> fallback, empty bank); and the first
problem's completions as [type, reward, advantage]. The last line is a summary as JSON.

    .venv/bin/python bench/grpo_hybrid.py                           # 2 steps, 1 problem a step, local judge
    .venv/bin/python bench/grpo_hybrid.py --steps 1 --judge scripted --max-completion-length 32
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EXPERIENCE = "ADD result: read every quantity in the problem and what it counts\nADD avoid: adding numbers with different units"
GUIDELINES = "STRATEGY: compute step by step in the order the problem tells the story"
PREVIOUS = [{"text": "I add all the numbers in the problem together. The answer is 20.",
             "summary": "Wrong: the numbers count different things and cannot simply be added."},
            {"text": "I follow the story one quantity at a time, but stop before the last step. The answer is 6.",
             "summary": "Incomplete: the order is right, the final step is missing."}]


def gsm8k_problems(data_dir: Path, start: int, count: int) -> list[dict]:
    from morkit.loops.tmas.banks import ExperienceBank, GuidelineBank

    experience = ExperienceBank().apply_reply(EXPERIENCE).bank
    guidelines = GuidelineBank().apply_reply(GUIDELINES).bank
    lines = (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()[start:start + count]
    return [{"id": f"gsm8k-test-{start + i}", "problem": row["question"],
             "answer": row["answer"].split("####")[-1].strip().replace(",", ""),
             "experience": experience, "guidelines": guidelines, "previous": PREVIOUS}
            for i, row in enumerate(map(json.loads, lines))]


def step_report(step: int, seconds: float, parts, advantages, first_problem: int) -> dict:
    by_type: dict[str, list] = {}
    for p in parts:
        by_type.setdefault(p.rollout_type, []).append(p)
    out: dict = {"step": step, "seconds": round(seconds, 2),
                 "reward_mean": round(statistics.fmean(p.reward for p in parts), 3) if parts else None}
    for kind, rows in sorted(by_type.items()):
        entry = {"n": len(rows), "reward_mean": round(statistics.fmean(p.reward for p in rows), 3),
                 "accuracy": round(statistics.fmean(p.correct for p in rows), 3)}
        if kind == "bank":
            entry["p_base"] = rows[0].p_base
            entry["bonus_mean"] = round(statistics.fmean(p.bonus for p in rows), 3)
        if kind == "explore":
            entry["novelty"] = dict(Counter(p.novelty for p in rows))
            entry["novelty_source"] = dict(Counter(p.novelty_source for p in rows))
            replies = [p.judge_reply for p in rows if p.judge_reply]
            if replies:
                entry["judge_reply"] = replies[0][:160]
        out[kind] = entry
    out["first_problem"] = [[p.rollout_type, round(p.reward, 3), round(a, 4)]
                            for p, a in zip(parts[:first_problem], advantages[:first_problem])]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", help="folder of the public data sets (default: $MORKIT_DATA_DIR, else data/ "
                                           "in morkit's cache folder, which `morkit data fetch gsm8k` fills)")
    parser.add_argument("--start", type=int, default=0, help="first GSM8K test line")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--problems-per-step", type=int, default=1)
    parser.add_argument("--generations", type=int, default=2, help="num_generations (G)")
    parser.add_argument("--max-completion-length", type=int, default=48)
    parser.add_argument("--beta", type=float, default=0.5, help="bank bonus scale")
    parser.add_argument("--judge", choices=("local", "scripted"), default="local")
    parser.add_argument("--grouping", choices=("problem", "row"), default="problem",
                        help="advantage groups: a problem's Base+Bank rollouts together, or TRL's per row")
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()

    import itertools

    import torch
    from transformers import TrainerCallback

    from morkit.llm.base import ScriptedLLM
    from morkit.loops.tmas.advantages import GroupAdvantage
    from morkit.loops.tmas.grpo import (
        cpu_grpo_config,
        grpo_trainer,
        load_policy,
        problem_blocks,
        tmas_rows,
    )
    from morkit.loops.tmas.novelty import NoveltyJudge
    from morkit.loops.tmas.rewards import HybridReward, HybridRewardConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    from morkit.core import settings

    problems = gsm8k_problems(settings.data_dir(args.data_dir), args.start, args.steps * args.problems_per_step)
    rows = problem_blocks(tmas_rows(problems))
    if args.judge == "local":
        from morkit.llm.local import LocalLLM

        llm = LocalLLM(device="cpu")
    else:
        classes = itertools.cycle(['{"classification": 1}', '{"classification": 0}'])
        llm = ScriptedLLM(lambda conversation, i: next(classes))
    reward = HybridReward(HybridRewardConfig(beta=args.beta), NoveltyJudge(llm))
    reports: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.began = time.perf_counter()

        def on_step_end(self, a, state, control, **k):
            report = step_report(state.global_step, time.perf_counter() - self.began, reward.last,
                                 list(trainer._logs["advantages"]), 3 * args.generations)
            reports.append(report)
            print(json.dumps(report), flush=True)

    load_began = time.perf_counter()
    model, tokenizer = load_policy()
    with tempfile.TemporaryDirectory(prefix="grpo-hybrid-") as out:
        config = cpu_grpo_config(out, rows_per_problem=3, num_generations=args.generations,
                                 problems_per_step=args.problems_per_step,
                                 max_completion_length=args.max_completion_length, max_steps=args.steps,
                                 learning_rate=args.learning_rate, disable_tqdm=True, log_level="warning")
        trainer = grpo_trainer(rows, reward, config, model, tokenizer, advantage=GroupAdvantage(args.grouping))
        trainer.add_callback(StepTimer())
        setup = time.perf_counter() - load_began
        trainer.train()
    logged = [h for h in trainer.state.log_history if "reward" in h]
    seconds = [r["seconds"] for r in reports]
    print(json.dumps({"summary": True, "judge": args.judge, "grouping": args.grouping, "steps": len(reports),
                      "setup_s": round(setup, 2),
                      "seconds_per_step": round(statistics.fmean(seconds), 2) if seconds else None,
                      "seconds_per_step_after_first": round(statistics.fmean(seconds[1:]), 2) if seconds[1:] else None,
                      "completions_per_step": config.per_device_train_batch_size,
                      "max_completion_length": args.max_completion_length,
                      "trl_reward_per_step": [round(h["reward"], 3) for h in logged],
                      "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
