"""GRPO with the paper's advantage (issue 31, item 3): a problem's Base and Bank rollouts share one
std-normalised group, in a real GRPOTrainer too; bank prompts carry the previous round's solutions R_(t-1)."""

from __future__ import annotations

import math

import pytest

from morkit.core.errors import InputError
from morkit.loops.tmas.advantages import GroupAdvantage, advantage_groups, group_advantages
from morkit.loops.tmas.banks import ExperienceBank, GuidelineBank
from morkit.loops.tmas.grpo import check_grouping, cpu_grpo_config, problem_blocks, previous_round, tmas_rows
from morkit.loops.tmas.prompts import exploit_prompt

TYPES = ["base", "base", "bank", "bank", "explore", "explore"]
# one problem, G = 2: base 1 of 2 right (p_base 1/2), so with beta = 1 a right bank rollout earns 1 + 1 * (1 - 1/2)
REWARDS = [1.0, -1.0, 1.5, -1.0, 1.0, -0.5]
# by hand: the Base+Bank group {1, -1, 1.5, -1} has mean 0.125 and sample std sqrt(5.1875 / 3) = 1.3149778;
# the explore row {1, -0.5} has mean 0.25 and std sqrt(1.125) = 1.0606602; delta = 1e-4
JOINT = [0.875 / 1.3150778, -1.125 / 1.3150778, 1.375 / 1.3150778, -1.125 / 1.3150778,
         0.75 / 1.0607602, -0.75 / 1.0607602]
EXPERIENCE = ExperienceBank().apply_reply("ADD result: 3 bags of 4 apples is 12 apples").bank
GUIDELINES = GuidelineBank().apply_reply("STRATEGY: multiply the counts").bank


def rollout(iteration, index, text, summary=None, score=None):
    return {"iteration": iteration, "index": index, "branch": "exploit", "text": text,
            "answer": text.rsplit(" ", 1)[-1].rstrip("."), "score": score, "summary": summary}


STATE = {"experience": EXPERIENCE.to_json(), "guidelines": GUIDELINES.to_json(),
         "rollouts": [rollout(1, 0, "The answer is 7.", "Wrong: 3 + 4 is not the count.", 0.1),
                      rollout(2, 0, "The answer is 8.", "Wrong: 4 + 4 adds bags to apples.", 0.2),
                      rollout(2, 1, "3 x 4 = 12. The answer is 12.", "Right: 3 bags of 4 is 12.", 0.9),
                      rollout(3, 0, "The answer is 12.", None, 0.8)]}
PROBLEM = {"id": "apples", "problem": "Tom has 3 bags of 4 apples. How many apples?", "answer": "12", "state": STATE}


def test_the_exact_advantages_of_a_hand_made_group():
    groups = advantage_groups(["apples"] * 6, TYPES, num_generations=2)
    assert groups[:4] == [("problem", "apples")] * 4 and groups[4:] == [("row", 2)] * 2
    advantages = group_advantages(REWARDS, groups)
    assert advantages == pytest.approx(JOINT, rel=1e-6)
    # the bonus survives: a right Bank rollout is ahead of a right Base one; in groups of their own
    # (the other reading), std-normalisation makes the two the same up to delta
    assert advantages[2] - advantages[0] == pytest.approx(0.5 / 1.3150778, rel=1e-6)
    apart = group_advantages(REWARDS, [0, 0, 1, 1, 2, 2])
    assert apart[2] == pytest.approx(apart[0], abs=1e-4)


def test_group_advantage_options_and_missing_rewards():
    groups = advantage_groups(["P"] * 4 + ["Q"] * 2, ["base", "bank", "bank", "explore", "base", "base"], 1)
    assert groups == [("problem", "P")] * 3 + [("row", 3)] + [("problem", "Q")] * 2
    centred = group_advantages([1.0, -1.0, 2.0], ["g"] * 3, scale=False)  # mean 2/3
    assert centred == pytest.approx([1 / 3, -5 / 3, 4 / 3])
    population = group_advantages([1.0, -1.0], ["g"] * 2, ddof=0, delta=0.0)  # std 1
    assert population == pytest.approx([1.0, -1.0])
    # a reward no function gave (None, NaN) is left out of its group and gets 0; a group of one gets 0
    assert group_advantages([None, 3.0, 1.0, math.nan, 5.0], ["g", "g", "g", "g", "alone"], delta=0.0) == \
        pytest.approx([0.0, 1 / math.sqrt(2), -1 / math.sqrt(2), 0.0, 0.0])
    assert advantage_groups(["P"] * 2, None, 2) == [("problem", "P")] * 2  # no types: all base
    with pytest.raises(ValueError, match="grouping"):
        GroupAdvantage(grouping="prompt")
    with pytest.raises(ValueError, match="joint_types"):
        GroupAdvantage(joint_types=("base", "exploit"))
    with pytest.raises(ValueError, match="delta"):
        GroupAdvantage(delta=-1.0)
    with pytest.raises(ValueError, match="ddof"):
        GroupAdvantage(ddof=2)
    with pytest.raises(ValueError, match="rewards"):
        group_advantages([1.0], ["g", "g"])


def test_bank_prompts_carry_the_previous_rounds_solutions_and_summaries():
    rows = tmas_rows([PROBLEM])
    base, bank, explore = (r["prompt"] for r in rows)
    previous = previous_round(STATE)  # the latest round the memory took in: round 2 (round 3 has no summaries)
    assert [(p.index, p.answer, p.summary) for p in previous] == [
        (0, "8", "Wrong: 4 + 4 adds bags to apples."), (1, "12", "Right: 3 bags of 4 is 12.")]
    assert bank == [dict(m) for m in exploit_prompt(PROBLEM["problem"], previous, EXPERIENCE, 2000, True)]
    text = bank[-1]["content"]
    for shown in ("Wrong: 4 + 4 adds bags to apples.", "Right: 3 bags of 4 is 12.", "3 x 4 = 12", EXPERIENCE.render()):
        assert shown in text
    for other in (base, explore):
        assert "adds bags to apples" not in other[-1]["content"] and "3 x 4 = 12" not in other[-1]["content"]
    # given directly; base_previous shows them to base rows too
    given = {**{k: v for k, v in PROBLEM.items() if k != "state"}, "experience": EXPERIENCE,
             "guidelines": GUIDELINES, "previous": [{"text": "The answer is 9.", "summary": "Nine is wrong."}]}
    rows = tmas_rows([given], base_previous=True)
    assert all("Nine is wrong." in r["prompt"][-1]["content"] for r in rows[:2])
    assert "Nine is wrong." not in tmas_rows([given])[0]["prompt"][-1]["content"]
    # without summaries anywhere (verifications=0), R_(t-1) is the last round but one
    unverified = {**STATE, "rollouts": [{**r, "summary": None} for r in STATE["rollouts"]]}
    assert [p.answer for p in previous_round(unverified)] == ["8", "12"]
    # a bank row without R_(t-1) is a prompt inference never shows: refused unless asked for
    bare = {**given, "previous": None}
    with pytest.raises(ValueError, match="previous round's solutions"):
        tmas_rows([bare])
    first_round_shape = tmas_rows([bare], require_previous=False)[1]["prompt"]
    assert first_round_shape == [dict(m) for m in exploit_prompt(PROBLEM["problem"], [], EXPERIENCE, 2000, False)]


def test_check_grouping_with_joint_groups(tmp_path):
    pytest.importorskip("trl")
    rows = problem_blocks(tmas_rows([PROBLEM, {**PROBLEM, "id": "pears"}]))
    # the joint group normalises by its own std, so TRL's per-row scale_rewards no longer matters
    assert check_grouping(rows, cpu_grpo_config(tmp_path, rows_per_problem=3, scale_rewards="group")) == 3
    with pytest.raises(ValueError, match="sum_then_normalize"):
        check_grouping(rows, cpu_grpo_config(tmp_path, rows_per_problem=3,
                                             multi_objective_aggregation="normalize_then_sum"))
    with pytest.raises(ValueError, match="every row needs one"):
        check_grouping([{**r, "problem_id": None} for r in rows[:3]], cpu_grpo_config(tmp_path, rows_per_problem=3))


def scripted_rewards(prompts, completions, rollout_type, **columns):
    """The hand-made rewards, by rollout type and place within the type (TRL passes a row's G completions together)."""
    by_type = {"base": REWARDS[0:2], "bank": REWARDS[2:4], "explore": REWARDS[4:6]}
    seen: dict[str, int] = {}
    out = []
    for kind in rollout_type:
        out.append(by_type[kind][seen.get(kind, 0) % 2])
        seen[kind] = seen.get(kind, 0) + 1
    return out


@pytest.mark.slow
@pytest.mark.parametrize("grouping, expected", [
    ("problem", JOINT),
    ("row", [1.0, -1.0, 1.25, -1.25, 0.75, -0.75])])  # TRL's per-row groups, scale_rewards="none"
def test_a_real_grpo_step_uses_the_joint_group_advantages(tmp_path, grouping, expected):
    pytest.importorskip("trl")
    from morkit.loops.tmas.grpo import grpo_trainer, load_policy

    model, tokenizer = load_policy()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    # short prompts keep the step cheap: the advantage reads only the rewards and the rows' columns
    rows = [{"prompt": [{"role": "user", "content": f"{kind}: 3 x 4 = ?"}], "problem_id": "apples",
             "rollout_type": kind, "answer": "12"} for kind in ("base", "bank", "explore")]
    args = cpu_grpo_config(tmp_path, rows_per_problem=3, num_generations=2, max_completion_length=8,
                           max_steps=1, learning_rate=1e-4)
    trainer = grpo_trainer(rows, scripted_rewards, args, model, tokenizer, advantage=GroupAdvantage(grouping))
    used = []
    compute_loss = trainer._compute_loss

    def recording(model, inputs):
        used.extend(inputs["advantages"].flatten().tolist())
        return compute_loss(model, inputs)

    trainer._compute_loss = recording
    trainer.train()
    assert list(trainer._logs["advantages"]) == pytest.approx(expected, rel=1e-5)  # in row order
    assert sorted(used) == pytest.approx(sorted(expected), rel=1e-5)  # what the loss saw (TRL shuffles rows)
    assert trainer.state.log_history[0]["rewards/scripted_rewards/mean"] == pytest.approx(sum(REWARDS) / 6)
    assert any(not p.detach().equal(before[n]) for n, p in model.named_parameters())


def test_the_default_advantage_is_per_problem_everywhere_grpo_takes_one(tmp_path, monkeypatch):
    """The paper's joint Base+Bank group is the default of GroupAdvantage, of grpo_trainer and of the joint
    trainer: set back to "row" (TRL's per-row groups), the bonus-keeping advantages below would change."""
    pytest.importorskip("trl")
    import inspect

    from morkit.loops.tmas import advantages, grpo

    default = GroupAdvantage()
    assert default.grouping == "problem"
    assert default.advantages(REWARDS, ["apples"] * 6, TYPES, num_generations=2) == pytest.approx(JOINT, rel=1e-6)
    with pytest.raises(InputError, match="TRL's own"):  # "row" is TRL's trainer's, never computed here
        GroupAdvantage("row").advantages(REWARDS, ["apples"] * 6, TYPES, num_generations=2)
    init = inspect.signature(advantages.joint_trainer_class().__init__).parameters
    assert init["tmas_advantage"].default.grouping == "problem"
    assert inspect.signature(grpo.check_grouping).parameters["grouping"].default == "problem"
    # the entry point: grpo_trainer with no advantage builds the joint-group trainer with a per-problem spec
    built = {}

    def recorder(kind):
        def make(**options):
            built.update(kind=kind, **options)
        return make

    monkeypatch.setattr(grpo, "joint_trainer_class", lambda: recorder("joint"))
    monkeypatch.setattr("trl.GRPOTrainer", recorder("trl"))
    rows = [{"prompt": "q", "problem_id": "apples", "rollout_type": kind, "answer": "12"}
            for kind in ("base", "bank", "explore")]
    grpo.grpo_trainer(rows, scripted_rewards, cpu_grpo_config(tmp_path, rows_per_problem=3), object(), object())
    assert built["kind"] == "joint" and built["tmas_advantage"].grouping == "problem"
