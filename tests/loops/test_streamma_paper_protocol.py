"""StreamMA as its paper's prompt appendix publishes it (issue 31, items 9 and 10): steps end at an END_STEP
line; each reviewer-and-corrector passes forward the most accurate version of a step (the original if it is
correct, its correction if not) and ends with a summary, which goes downstream with its output."""

from __future__ import annotations

import re

from fakes.streamma import PROBLEM, STEPS, PacedLLM, sections

from morkit.llm.base import ScriptedLLM
from morkit.loops.streamma.loop import StreamMA, StreamMAConfig

WRONG = "Now he has 3 + 4 = 8 apples."  # the solver's third step, with a mistake
FIXED = "Now he has 3 + 4 = 7 apples."
SOLVER_STEPS = (STEPS[0], STEPS[1], WRONG, *STEPS[3:])


def solver_text(steps=SOLVER_STEPS) -> str:
    return "".join(f"{step}\nEND_STEP\n" for step in steps)


def corrector(conversation, i) -> str:
    """A reviewer that corrects the wrong sum and, accepting the other steps, restates them in its own words
    (as a reviewer told to write its own step would)."""
    message = conversation[-1]["content"]
    if not sections(message):
        return "SUMMARY: step 3 added 3 + 4 wrongly; corrected to 7.\nEND_STEP"
    ((index, (step,)),) = sections(message)
    own = f"STEP {index + 1}: My own take on step {index + 1}.\nEND_STEP"
    if "= 8" in step:
        return f"ERROR: 3 + 4 is 7, not 8.\nCORRECTION: {FIXED}\n{own}"
    return f"ACCEPT\n{own}"


def test_the_solver_is_split_at_end_step_lines_and_the_blank_line_split_is_a_switch():
    reply = "Tom has 3 apples.\nEND_STEP\nHe buys 4 more.\n\nSo he has 7.\n**END_STEP**\nHe eats 2. The answer is 5."
    llms = [ScriptedLLM(lambda conversation, i: reply), PacedLLM("a1", accept=True)]
    result = StreamMA(llms, config=StreamMAConfig(agents=2)).run(PROBLEM)
    # cut at the END_STEP lines only: the blank line inside the second step does not end it
    assert result.state["solutions"][0] == ["Tom has 3 apples.", "He buys 4 more.\n\nSo he has 7.",
                                            "He eats 2. The answer is 5."]
    reviewer_prompt = llms[1].conversations[0][0]["content"]
    assert "After your response, output END_STEP on its own line." in reviewer_prompt
    # the blank line, morkit's earlier default, and SmolLM2's newline stay switches
    paragraphs = StreamMA([ScriptedLLM(lambda c, i: "A.\n\nB.\nC."), PacedLLM("a1", accept=True)],
                          config=StreamMAConfig(agents=2, step_marker="\n\n")).run(PROBLEM)
    assert paragraphs.state["solutions"][0] == ["A.", "B.\nC."]
    lines = StreamMA([ScriptedLLM(lambda c, i: "A.\nB.\nC."), PacedLLM("a1", accept=True)],
                     config=StreamMAConfig(agents=2, step_marker="\n")).run(PROBLEM)
    assert lines.state["solutions"][0] == ["A.", "B.", "C."]


def test_the_solver_is_told_to_end_each_step_with_an_end_step_line():
    solver = PacedLLM("a0")
    StreamMA([solver, PacedLLM("a1")], config=StreamMAConfig(agents=2)).run(PROBLEM)
    assert "After each step, output END_STEP on its own line." in solver.conversations[0][0]["content"]


def test_a_reviewer_that_finds_an_error_forwards_its_correction_one_that_accepts_the_original():
    last = PacedLLM("a2", accept=True)
    llms = [ScriptedLLM(lambda c, i: solver_text()), ScriptedLLM(corrector), last]
    result = StreamMA(llms, config=StreamMAConfig(agents=3)).run(PROBLEM, reference="#### 5")
    versions = [STEPS[0], STEPS[1], FIXED, *STEPS[3:]]
    assert result.state["solutions"][1] == versions  # its own restatements are not its version
    assert [r["verdict"] for r in result.state["reviews"][1]] == ["accept", "accept", "error", "accept", "accept",
                                                                  "accept"]
    forwarded = result.state["forwarded"][1]
    assert forwarded[2].startswith(f"ERROR: 3 + 4 is 7, not 8.\nCORRECTION: {FIXED}")
    assert forwarded[0].endswith(f"\nSTEP 1: {STEPS[0]}") and "END_STEP" not in "".join(forwarded)
    # the last agent was shown the correction and the accepted originals, and, accepting, keeps them
    shown = [re.sub(r"^.*\nSTEP \d+: ", "", v[0], flags=re.S) for _, v, _ in last.reviews]
    assert shown[:2] == list(STEPS[:2]) and shown[2] == FIXED
    assert result.state["steps"] == versions and result.state["correct"]


def test_every_reviewer_summarises_and_its_summary_goes_downstream():
    llms = [PacedLLM(f"a{i}") for i in range(4)]
    result = StreamMA(llms, config=StreamMAConfig(agents=4)).run(PROBLEM)
    summaries = result.state["summaries"]
    assert summaries[0] is None
    assert all(summaries[i] == f"SUMMARY: checked by a{i}. The answer is 5." for i in (1, 2, 3))
    assert result.state["summary"] == summaries[3] and result.answer.endswith(summaries[3])
    for i in (2, 3):  # the summary turn shows the upstream agent's summary
        finish = llms[i].conversations[-1][-1]["content"]
        assert f"Agent {i}'s summary:\n{summaries[i - 1]}" in finish and not sections(finish)
    serial = [PacedLLM(f"a{i}") for i in range(3)]
    done = StreamMA(serial, config=StreamMAConfig(agents=3, protocol="serial")).run(PROBLEM)
    assert done.state["summaries"][1] and f"Agent 2's summary:\n{done.state['summaries'][1]}" in \
        serial[2].conversations[0][-1]["content"]
    only_last = StreamMA(agents4 := [PacedLLM(f"a{i}") for i in range(4)],
                         config=StreamMAConfig(agents=4, summary="final")).run(PROBLEM)
    assert only_last.state["summaries"][:3] == [None, None, None] and only_last.state["summaries"][3]
    assert not any("summary" in c[-1]["content"].lower() for c in agents4[1].conversations)


def test_reviewers_are_told_the_papers_protocol_in_its_words(paper_text):
    paper = paper_text("streamma")  # each quote below as the paper's text renders it (no final period, cut at "...")
    for quote in ("You are a reviewer-and-corrector.", 'YOU MUST CORRECT ERRORS: When found, state "ERROR: '
                  '[description]" then "CORRECTION: [corrected step]"', "Pass forward the MOST ACCURATE version "
                  "(original if correct, your correction if not).", "YOU CAN OVERRULE PREVIOUS AGENTS",
                  "After all steps, provide DETAILED overall summary with thorough analysis and any corrections made.",
                  "YOU HAVE FINAL CORRECTION AUTHORITY: This is the last chance to fix errors.",
                  "FINAL ANSWER: Must directly address the original problem. Base on CORRECTED versions.",
                  "For each step: final quality check briefl", "After your response, output END_STEP on its own line."):
        assert quote in paper, quote
    llms = [PacedLLM(f"a{i}") for i in range(4)]
    StreamMA(llms, config=StreamMAConfig(agents=4)).run(PROBLEM)
    (first,), (middle,), (final,) = (llms[i].systems() for i in (1, 2, 3))
    for i, system in ((1, first), (2, middle), (3, final)):
        assert system.startswith(f"[Topology: Chain 1→2→3→4] You are Agent {i + 1}. You receive Agent {i}'s output. "
                                 f"You are a reviewer-and-corrector.")
        assert "STEP k" not in system and system.endswith("\n\nAfter your response, output END_STEP on its own line.")
    assert 'YOU MUST CORRECT ERRORS: When found, state "ERROR: [description]" then "CORRECTION: [corrected step]".' \
        in first
    assert "Pass forward the MOST ACCURATE version (original if correct, your correction if not)." in first
    assert "YOU CAN OVERRULE PREVIOUS AGENTS" in middle and "Pass forward the MOST ACCURATE version." in middle
    for system in (first, middle):
        assert "After all steps, provide DETAILED overall summary with thorough analysis and any corrections made." \
            in system
    assert "YOU HAVE FINAL CORRECTION AUTHORITY: This is the last chance to fix errors." in final
    assert "FINAL ANSWER: Must directly address the original problem. Base on CORRECTED versions." in final
    assert "For each step: final quality check briefly" in final and "Pass forward" not in final
    # serial reviewers get the same prompt without the line the paper tags "[Stream only]"
    serial = [PacedLLM(f"a{i}") for i in range(3)]
    StreamMA(serial, config=StreamMAConfig(agents=3, protocol="serial")).run(PROBLEM)
    assert all("END_STEP" not in s for i in (1, 2) for s in serial[i].systems())


def test_morkits_earlier_rewrite_protocol_is_a_switch():
    llms = [ScriptedLLM(lambda c, i: solver_text()), ScriptedLLM(corrector)]
    config = StreamMAConfig(agents=2, review="rewrite", summary="final", authority="ranked")
    result = StreamMA(llms, config=config).run(PROBLEM)
    assert result.state["solutions"][1] == [f"My own take on step {k}." for k in range(1, 7)]


def stepwise(verdict_for):
    """A reviewer whose reply to each upstream step is `verdict_for(index, step)`."""
    def reply(conversation, i) -> str:
        found = sections(conversation[-1]["content"])
        if not found:
            return "SUMMARY: checked. The answer is 5."
        ((index, (step,)),) = found
        return verdict_for(index, step)
    return reply


def test_a_step_heading_before_the_verdict_belongs_to_its_block():
    versions = [STEPS[0], STEPS[1], FIXED, *STEPS[3:]]
    headed = stepwise(lambda k, step: f"Step {k + 1}:\n" + (f"ERROR: 3 + 4 is 7.\nCORRECTION: {FIXED}"
                                                            if "= 8" in step else "ACCEPT"))
    result = StreamMA([ScriptedLLM(lambda c, i: solver_text()), ScriptedLLM(headed)],
                      config=StreamMAConfig(agents=2)).run(PROBLEM)
    assert result.state["solutions"][1] == versions  # was: the heading a verdict-less block, step 3 "unreviewed"
    assert [r["verdict"] for r in result.state["reviews"][1]] == ["accept"] * 2 + ["error"] + ["accept"] * 3


def test_a_step_line_right_after_an_empty_correction_is_the_correction():
    versions = [STEPS[0], STEPS[1], FIXED, *STEPS[3:]]
    below = stepwise(lambda k, step: f"ERROR: 3 + 4 is 7.\nCORRECTION:\nStep {k + 1}: {FIXED}" if "= 8" in step
                     else "ACCEPT")
    result = StreamMA([ScriptedLLM(lambda c, i: solver_text()), ScriptedLLM(below)],
                      config=StreamMAConfig(agents=2)).run(PROBLEM)
    assert result.state["solutions"][1] == versions  # was: an empty correction, "flagged", 3 + 4 = 8 stands
    assert result.state["reviews"][1][2]["source"] == "corrected"
    forwarded = result.state["forwarded"][1][2]
    assert forwarded.endswith(f"CORRECTION:\nStep 3: {FIXED}") and WRONG not in forwarded


def test_serial_matches_verdicts_to_steps_by_the_step_they_name():
    versions = [STEPS[0], STEPS[1], FIXED, *STEPS[3:]]
    headed = "\n".join(f"Step {k}:\n" + (f"ERROR: 3 + 4 is 7.\nCORRECTION: {FIXED}" if k == 3 else "ACCEPT")
                       for k in range(1, 7))
    for reply in (headed, f"Step 3:\nERROR: 3 + 4 is 7.\nCORRECTION: {FIXED}"):
        llms = [ScriptedLLM(lambda c, i: solver_text()), ScriptedLLM(lambda c, i, r=reply: r)]
        result = StreamMA(llms, config=StreamMAConfig(agents=2, protocol="serial")).run(PROBLEM)
        assert result.state["solutions"][1] == versions  # was: the correction shifted onto step 2 or step 4
        assert result.state["reviews"][1][2]["verdict"] == "error"
    # unnamed blocks still answer the steps in order
    plain = "\n".join(f"ERROR: 3 + 4 is 7.\nCORRECTION: {FIXED}" if k == 3 else "ACCEPT" for k in range(1, 7))
    llms = [ScriptedLLM(lambda c, i: solver_text()), ScriptedLLM(lambda c, i: plain)]
    assert StreamMA(llms, config=StreamMAConfig(agents=2, protocol="serial")).run(PROBLEM).state["solutions"][1] \
        == versions


def test_serial_keeps_the_final_agents_answer_without_a_summary_label():
    accepts = "\n".join("ACCEPT" for _ in STEPS)
    final = ScriptedLLM(lambda c, i: f"{accepts}\nAll checked. Final answer: 5 apples remain.")
    result = StreamMA([ScriptedLLM(lambda c, i: solver_text()), final],
                      config=StreamMAConfig(agents=2, protocol="serial")).run(PROBLEM)
    # was: no SUMMARY label, so the final agent's answer line was thrown away
    assert result.state["summaries"][1] and result.answer.endswith("Final answer: 5 apples remain.")


def test_serial_forwards_the_unlabelled_text_of_a_reply():
    accepts = "\n".join("ACCEPT" for _ in STEPS)
    seen: list[str] = []

    def last(conversation, i):
        seen.append(conversation[-1]["content"])
        return accepts
    for reply, kept in ((f"Overall the chain reads well.\n{accepts}\nACCEPT\nA seventh remark.",
                         ("Overall the chain reads well.", "A seventh remark.")),
                        ("All steps check out; nothing to correct.", ("All steps check out; nothing to correct.",))):
        seen.clear()
        llms = [ScriptedLLM(lambda c, i: solver_text()), ScriptedLLM(lambda c, i, r=reply: r), ScriptedLLM(last)]
        StreamMA(llms, config=StreamMAConfig(agents=3, protocol="serial", summary="none")).run(PROBLEM)
        # was: only the labelled blocks went downstream (the preamble, the block past step 6, an unlabelled reply
        # never reached agent 3)
        assert all(text in seen[0] for text in kept)
        assert [s for _, (s,) in sections(seen[0])] == list(SOLVER_STEPS)
