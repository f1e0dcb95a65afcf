"""The GRPO advantage TMAS states, A_i = (r_i - mean) / (std + delta), over morkit's groups, in TRL.
A problem's Base and Bank rollouts share one group, so the bank bonus survives normalisation; a GRPOTrainer
subclass puts these advantages where TRL's per-row ones were (docs/loops/tmas.md, "Advantages")."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Hashable, Literal, Sequence

from morkit.core import checks
from morkit.core.errors import InputError, UnavailableError
from morkit.loops.tmas.rewards import BANK, BASE, ROLLOUT_TYPES, rollout_types

GROUPINGS = ("problem", "row")


@dataclass(frozen=True)
class GroupAdvantage:
    """The GRPO advantage A_i = (r_i - mean) / (std + delta) and the groups it is taken over."""

    grouping: Literal["problem", "row"] = "problem"
    """problem: a problem's `joint_types` rollouts (Base and Bank) form one group, other rows (explore) a group
    per row, as in TRL; row: TRL's own advantages, per row, as its `scale_rewards` says (TRL's GRPOTrainer
    computes them). The fields below apply to "problem"."""
    joint_types: tuple[str, ...] = (BASE, BANK)
    scale: bool = True
    """Divide by the group's std + delta (the paper's formula); False only centres."""
    delta: float = 1e-4
    """The paper's delta; its value is not given, 1e-4 is TRL's."""
    ddof: int = 1
    """The std's degrees of freedom: 1 (sample std, as TRL's nanstd) or 0 (population std)."""

    def __post_init__(self) -> None:
        checks.one_of(self.grouping, GROUPINGS, "GroupAdvantage.grouping")
        unknown = sorted(set(self.joint_types) - set(ROLLOUT_TYPES))
        if unknown:
            raise InputError(f"GroupAdvantage.joint_types: unknown {', '.join(map(repr, unknown))}; "
                             f"use {', '.join(ROLLOUT_TYPES)}")
        checks.non_negative(self.delta, "GroupAdvantage.delta")
        if isinstance(self.ddof, bool) or self.ddof not in (0, 1):
            raise InputError(f"GroupAdvantage.ddof must be 0 or 1, got {checks.shown(self.ddof)}")

    def groups(self, problem_ids: Sequence[Any], types: Sequence[str] | None, num_generations: int
               ) -> list[Hashable]:
        """Each completion's group under "problem" (`advantage_groups`: a problem's `joint_types` rollouts
        together); "row" leaves the advantages to TRL's own trainer, so it has no groups here."""
        if self.grouping == "row":
            raise InputError("GroupAdvantage(grouping='row') is TRL's own per-row advantage: TRL's GRPOTrainer "
                             "computes it, not GroupAdvantage")
        return advantage_groups(problem_ids, types, num_generations, self.joint_types)

    def advantages(self, rewards: Sequence[float | None], problem_ids: Sequence[Any], types: Sequence[str] | None,
                   num_generations: int) -> list[float]:
        """A_i over `groups`, with this advantage's scale, delta and ddof: what the joint GRPO trainer puts in the
        loss under "problem".

        Args:
            rewards: Each completion's summed reward (None or NaN: none applied).
            problem_ids: Each completion's problem.
            types: Each completion's rollout type (None: every row is base).
            num_generations: Completions per row (TRL's `num_generations`).

        Returns:
            One advantage per completion.

        Raises:
            InputError: The grouping is "row" (TRL's trainer computes those advantages).
        """
        return group_advantages(rewards, self.groups(problem_ids, types, num_generations), scale=self.scale,
                                delta=self.delta, ddof=self.ddof)


def advantage_groups(problem_ids: Sequence[Any], types: Sequence[str] | None, num_generations: int,
                     joint_types: Sequence[str] = (BASE, BANK)) -> list[Hashable]:
    """Each completion's group: its problem for a `joint_types` rollout, else its TRL block (its row's
    `num_generations` consecutive completions). No types: every row is base."""
    checks.positive_int(num_generations, "num_generations")
    if types is not None and len(types) != len(problem_ids):
        raise InputError(f"{len(types)} rollout types for {len(problem_ids)} completions")
    return [("problem", str(pid)) if (types[i] if types is not None else BASE) in joint_types
            else ("row", i // num_generations) for i, pid in enumerate(problem_ids)]


def group_advantages(rewards: Sequence[float | None], groups: Sequence[Hashable], *, scale: bool = True,
                     delta: float = 1e-4, ddof: int = 1) -> list[float]:
    """(r_i - mean) / (std + delta) within each group (std with `ddof`; without `scale`, r_i - mean). A
    missing reward (None or NaN: no reward function applied) is left out of its group and gets 0; a group
    of one has std 0, and with std + delta = 0 (all equal, delta 0) every advantage is 0."""
    if len(rewards) != len(groups):
        raise InputError(f"{len(rewards)} rewards for {len(groups)} group keys")
    present = [None if r is None or math.isnan(r) else float(r) for r in rewards]
    members: dict[Hashable, list[float]] = {}
    for r, g in zip(present, groups):
        if r is not None:
            members.setdefault(g, []).append(r)
    stats = {}
    for g, values in members.items():
        mean = sum(values) / len(values)
        spread = len(values) - ddof
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / spread) if spread > 0 else 0.0
        stats[g] = (mean, std)
    out = []
    for r, g in zip(present, groups):
        if r is None:
            out.append(0.0)
            continue
        mean, std = stats[g]
        if not scale:
            out.append(r - mean)
        else:
            out.append((r - mean) / (std + delta) if std + delta > 0 else 0.0)
    return out


@functools.cache
def joint_trainer_class() -> type:
    """GRPOTrainer with morkit's advantage groups (built on first use: no TRL import at module import)."""
    import torch
    from trl import GRPOTrainer

    class JointGroupGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer; after TRL scores a generation batch, its per-row advantages are replaced by
        `group_advantages` over `advantage_groups` of the same rewards (summed over reward functions with
        their weights, as TRL's sum_then_normalize does)."""

        def __init__(self, *args: Any, tmas_advantage: GroupAdvantage = GroupAdvantage(),
                     tmas_column: str = "problem_id", **kwargs: Any):
            if tmas_advantage.grouping != "problem":
                raise InputError("JointGroupGRPOTrainer is for grouping='problem'; use TRL's GRPOTrainer for 'row'")
            super().__init__(*args, **kwargs)
            self.tmas_advantage, self.tmas_column = tmas_advantage, tmas_column

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            self._tmas_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            return self._tmas_rewards

        def _generate_and_score_completions(self, inputs):
            self._tmas_rewards = None
            output = super()._generate_and_score_completions(inputs)
            if self._tmas_rewards is None:
                raise UnavailableError("this TRL does not score through GRPOTrainer._calculate_rewards; joint "
                                       "advantages need trl 1.16 (or GroupAdvantage(grouping='row'))")
            n = len(inputs)
            start = self.accelerator.process_index * n  # TRL gathers every process's rewards, in process order
            local = self._tmas_rewards[start:start + n]
            summed = (local * self.reward_weights.to(local.device).unsqueeze(0)).nansum(dim=1)
            summed[torch.isnan(local).all(dim=1)] = float("nan")
            columns = {name: [row.get(name) for row in inputs] for name in ("rollout_type", "used_bank")
                       if all(name in row for row in inputs)}
            ids = [row.get(self.tmas_column) for row in inputs]
            if any(i is None for i in ids):
                raise InputError(f"joint advantages need a {self.tmas_column!r} column on every row")
            generations = self.num_generations if self.model.training else self.num_generations_eval
            values = self.tmas_advantage.advantages(summed.tolist(), ids, rollout_types(columns, n), generations)
            advantages = torch.tensor(values, dtype=output["advantages"].dtype, device=output["advantages"].device)
            output["advantages"] = advantages
            logged = self.accelerator.gather(advantages).tolist()  # the completions table shows these too
            for _ in range(min(len(logged), len(self._logs["advantages"]))):
                self._logs["advantages"].pop()
            self._logs["advantages"].extend(logged)
            return output

    return JointGroupGRPOTrainer
