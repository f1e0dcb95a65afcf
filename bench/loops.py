"""Test-time-scaling loops on GSM8K test questions: StreamMA latency by protocol, TMAS and ATLAS cost and accuracy.

What it measures, in three parts (each can be skipped):

1. StreamMA with the local model. A chain of agents (default 3, the paper's chain in its cost study),
   every one the same `LocalLLM()` (SmolLM2-135M-Instruct; the end-of-step marker is a newline, since
   SmolLM2 writes one step per line), S steps per agent, runs each problem under the `single`, `serial`
   and `stream` protocols one after another (`compare_protocols`). Downstream agents follow the paper's
   review protocol (ACCEPT, or ERROR + CORRECTION, passing on the original step or the correction; rising
   authority; every reviewer ends with a summary, the final agent's with the answer). Serial hands each
   agent the complete upstream response, stream one step per turn, so their answers can differ. Reported:
   time to the first step at the last agent, time to the final answer, LLM calls, tokens (prompt,
   generated, and the prompt tokens a KV cache would reuse),
   cost at the paper's prices ($5 / $25 / $0.50 per million input / output / cached tokens), whether
   serial and stream answered alike, accuracy. LocalLLM holds one lock per model, so two calls never run
   at once: pipelining has nothing to overlap there and no speedup is expected.
2. StreamMA with SIMULATED agents: no model, each agent its own simulated server (a fixed time per
   call plus a fixed time per generated word; the solver streams its steps word by word). The solver's
   last step states a wrong answer (an error-prone tail, the paper's premise); a simulated reviewer that
   sees a stated answer before it has written a step of its own adopts it, one that has worked through
   the head corrects it (ERROR + CORRECTION). Same three protocols on chains of 2, 4 and 8 agents: the
   pipelining speedup as depth grows, tokens and KV reuse, and the answers. Simulated, not measured on
   a model: it shows that serial and stream now hand agents different contexts, not that either is
   more accurate.
3. TMAS and ATLAS with the local model and an `LLMVerifier(LocalLLM())` critic (SmolLM2) on GSM8K
   test questions, small settings: per problem the mean LLM calls (the loop's own, then the
   critic's; LoopResult counts both, the table splits them), tokens (prompt + generated), seconds,
   accuracy (final answer equivalent to the reference, morkit.core.grading; "stated" also
   requires the text to state its answer, since extract_answer falls back to the last number in the
   text, which may be the problem's own), and the histogram of stop reasons. SmolLM2-135M is tiny:
   accuracy is low; the point is the cost.

Questions are GSM8K test lines from --start (1100) on, past those other benchmarks use.

    .venv/bin/python bench/loops.py                        # 2 stream problems, 10 TMAS/ATLAS questions
    .venv/bin/python bench/loops.py --threads 1            # on a loaded machine, often much faster
        (about 2 min per stream problem and 3.5 min per TMAS+ATLAS question with 1 thread on a busy
        2-core machine: some 40 min for the defaults)
    .venv/bin/python bench/loops.py --simulated-only       # part 2 only: no model, about 30 s
    .venv/bin/python bench/loops.py --threads 1 --stream-problems 1 --skip-tmas --skip-atlas   # parts 1-2
    .venv/bin/python bench/loops.py --questions 1 --stream-problems 1   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=10, help="GSM8K questions for TMAS and ATLAS")
    p.add_argument("--data-dir", help="folder of the public data sets (default: $MORKIT_DATA_DIR, "
                   "else data/ in morkit's cache folder, which `morkit data fetch NAME` fills)")
    p.add_argument("--stream-problems", type=int, default=2, help="GSM8K questions for StreamMA with the local model")
    p.add_argument("--start", type=int, default=1100, help="first GSM8K test line (0-based) to use")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    p.add_argument("--skip-stream", action="store_true", help="skip StreamMA (local and simulated)")
    p.add_argument("--skip-tmas", action="store_true")
    p.add_argument("--skip-atlas", action="store_true")
    p.add_argument("--simulated-only", action="store_true", help="only the simulated StreamMA part (no model)")
    g = p.add_argument_group("StreamMA, local model")
    g.add_argument("--chain", type=int, default=3, help="agents in the chain (A)")
    g.add_argument("--stream-steps", type=int, default=3, help="S: steps per agent")
    g.add_argument("--stream-max-tokens", type=int, default=64,
                   help="new tokens of a whole response (the solver's, a serial agent's)")
    g.add_argument("--step-tokens", type=int, default=40, help="a stream agent's new tokens per turn")
    g = p.add_argument_group("StreamMA, simulated agents")
    g.add_argument("--sim-depths", type=int, nargs="+", default=[2, 4, 8])
    g.add_argument("--sim-steps", type=int, default=4, help="steps per solution (the solver writes this many)")
    g.add_argument("--sim-step-tokens", type=int, default=12, help="tokens per step")
    g.add_argument("--sim-token-ms", type=float, default=15.0, help="generation time per token")
    g.add_argument("--sim-call-ms", type=float, default=40.0, help="time per call before its first token")
    g = p.add_argument_group("TMAS and ATLAS")
    g.add_argument("--max-tokens", type=int, default=96, help="new tokens per solution (TMAS, ATLAS solver)")
    g.add_argument("--critic-tokens", type=int, default=96, help="new tokens per critique (LLMVerifier)")
    g.add_argument("--synthesis-tokens", type=int, default=128, help="ATLAS synthesis new tokens")
    g.add_argument("--orchestrator-tokens", type=int, default=96,
                   help="ATLAS orchestrator new tokens per turn (its reasoning and ACTION line; the loop's default "
                        "of 1024 is very slow for SmolLM2 on a CPU)")
    g.add_argument("--iterations", type=int, default=2, help="TMAS rounds")
    g.add_argument("--solutions", type=int, default=2, help="TMAS solutions per round")
    g.add_argument("--verifications", type=int, default=1, help="TMAS verifier passes per round")
    g.add_argument("--max-explores", type=int, default=2, help="ATLAS explores")
    g.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write every figure (and each run's answer) to this JSON file")
    return p.parse_args(argv)


# -- data --------------------------------------------------------------------------------------------

def gsm8k_test(start: int, count: int, data_dir: str | None = None) -> list[tuple[str, str, str]]:
    """(id, question, reference final answer) for GSM8K test lines start .. start+count-1."""
    from morkit.data.datasets import load_spec

    return [(q.id, q.question, q.reference) for q in load_spec(f"gsm8k_test:{start + count}", data_dir)[start:]]


STATED_NOTE = ("correct / accuracy: the final answer (grading.extract_answer, which falls back to the last "
               "number in the text) equals the reference; stated: correct AND the text states its answer "
               "('The answer is', '####', boxed), so a solution that only restates the problem's numbers "
               "does not count.")
_STATED = re.compile(r"(?i)\\(?:boxed|fbox)|####|(?:final answer|the answer)\s*(?:is|:|=)")


def states_answer(answer: str) -> bool:
    """Whether the text states a final answer (boxed, '####', 'the answer is'). Without one,
    extract_answer falls back to the last number in the text, which may come from the problem."""
    return bool(_STATED.search(answer or ""))


# -- LLM wrappers ------------------------------------------------------------------------------------

class CountingLLM:
    """Delegates to `llm`, counting conversations and tokens (prompt + generated): the critic's cost."""

    def __init__(self, llm: Any):
        self.llm, self.name, self.calls, self.tokens = llm, llm.name, 0, 0
        self._lock = threading.Lock()

    def chat(self, conversations, params=None):
        from morkit.llm.base import SamplingParams

        out = self.llm.chat(conversations, params or SamplingParams())
        with self._lock:
            self.calls += len(conversations)
            self.tokens += sum(c.prompt_tokens + c.completion_tokens for c in out)
        return out

    def stream(self, conversation, params=None):
        from morkit.llm.base import SamplingParams

        with self._lock:
            self.calls += 1
        return self.llm.stream(conversation, params or SamplingParams())


# -- part 1 and 2: StreamMA ---------------------------------------------------------------------------

_TOKEN_KEYS = ("prompt_tokens", "generated_tokens", "reused_tokens", "prefilled_tokens")


def _protocol_rows(comparisons: list[Any]) -> dict[str, dict[str, Any]]:
    """Mean over problems, per protocol: first step at the last agent, answer time, calls, busy time, tokens
    (prompt, generated, reused by a KV cache, prefilled), KV hit ratio and cost with and without a cache."""
    rows = {}
    for protocol in comparisons[0].results:
        lats = [c.results[protocol].state["latency"] for c in comparisons]
        toks = [c.tokens[protocol] for c in comparisons]
        firsts = [lat["first_step_s"] for lat in lats if lat["first_step_s"] is not None]
        prompt = sum(t["prompt_tokens"] for t in toks)
        rows[protocol] = {"first_step_s": statistics.mean(firsts) if firsts else float("nan"),
                          "answer_s": statistics.mean(lat["answer_s"] for lat in lats),
                          "calls": statistics.mean(lat["calls"] for lat in lats),
                          "busy_s": statistics.mean(lat["busy_total_s"] for lat in lats),
                          **{k: statistics.mean(t[k] for t in toks) for k in _TOKEN_KEYS},
                          "kv_hit_ratio": sum(t["reused_tokens"] for t in toks) / prompt if prompt else 0.0,
                          "usd_no_cache": statistics.mean(t["cost_usd"]["no_cache"] for t in toks),
                          "usd_kv_cache": statistics.mean(t["cost_usd"]["kv_cache"] for t in toks),
                          "stops": dict(Counter(c.results[protocol].stop_reason for c in comparisons))}
    return rows


def _print_protocols(rows: dict[str, dict[str, Any]], correct: tuple[Counter, Counter] | None = None,
                     n: int = 0, indent: str = "  ") -> None:
    head = (f"{indent}{'protocol':<9}{'first step at last agent s':>27}{'final answer s':>16}{'LLM calls':>11}"
            f"{'busy s':>9}{'prompt tok':>12}{'generated':>11}{'KV reused':>11}{'hit':>6}{'$ no cache':>12}"
            f"{'$ KV cache':>12}")
    print(head + (f"{'correct':>9}{'stated':>8}" if correct else "") + "  stop reasons")
    for protocol, r in rows.items():
        line = (f"{indent}{protocol:<9}{r['first_step_s']:>27.2f}{r['answer_s']:>16.2f}{r['calls']:>11.1f}"
                f"{r['busy_s']:>9.2f}{r['prompt_tokens']:>12.0f}{r['generated_tokens']:>11.0f}"
                f"{r['reused_tokens']:>11.0f}{r['kv_hit_ratio']:>6.2f}{r['usd_no_cache']:>12.6f}"
                f"{r['usd_kv_cache']:>12.6f}")
        if correct:
            line += f"{f'{correct[0][protocol]}/{n}':>9}{f'{correct[1][protocol]}/{n}':>8}"
        print(line + "  " + ", ".join(f"{k} x{v}" for k, v in r["stops"].items()))


def stream_local(args: argparse.Namespace, report: dict[str, Any]) -> None:
    from morkit.llm.base import SamplingParams
    from morkit.llm.local import LocalLLM
    from morkit.loops.streamma.loop import StreamMAConfig, compare_protocols

    problems = gsm8k_test(args.start, args.stream_problems, args.data_dir)
    llm = LocalLLM()
    started = time.perf_counter()
    llm.chat([[{"role": "user", "content": "Say hi."}]], SamplingParams(temperature=0.0, max_tokens=4))  # load
    print(f"[stream] model loaded and warmed up in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    config = StreamMAConfig(agents=args.chain, step_marker="\n", steps=args.stream_steps,
                            max_tokens=args.stream_max_tokens, step_max_tokens=args.step_tokens, seed=args.seed)
    comparisons, per_problem = [], []
    correct, stated = Counter(), Counter()
    for number, (qid, question, reference) in enumerate(problems, 1):
        comparison = compare_protocols(llm, question, config, reference=reference)
        comparisons.append(comparison)
        lat = comparison.latencies
        ratio = lat["serial"]["answer_s"] / lat["stream"]["answer_s"]
        same = comparison.results["serial"].answer == comparison.results["stream"].answer
        same_final = comparison.results["serial"].state.get("extracted") == comparison.results["stream"].state.get(
            "extracted")
        for p, r in comparison.results.items():
            correct[p] += bool(r.state.get("correct"))
            stated[p] += bool(r.state.get("correct")) and states_answer(r.answer)
        per_problem.append({"id": qid, "serial_over_stream": ratio, "same_answer_serial_stream": same,
                            "same_final_answer_serial_stream": same_final,
                            "cost_ratio_stream_serial": {c: comparison.cost_ratio(cache=c)
                                                         for c in ("no_cache", "kv_cache")},
                            **{p: {"latency": lat[p], "tokens": comparison.tokens[p], "stop": r.stop_reason,
                                   "answer": r.answer, "extracted": r.state.get("extracted"),
                                   "correct": r.state.get("correct"), "states_answer": states_answer(r.answer),
                                   "reviews": r.state.get("reviews")}
                                for p, r in comparison.results.items()}})
        print(f"[stream] [{number}/{len(problems)}] {qid}: serial/stream {ratio:.2f}x, serial and stream answers "
              f"{'identical' if same else 'differ'} (final answers {'equal' if same_final else 'differ'})",
              file=sys.stderr)
    rows = _protocol_rows(comparisons)
    ratio = rows["serial"]["answer_s"] / rows["stream"]["answer_s"]
    differ = sum(not p["same_answer_serial_stream"] for p in per_problem)
    print(f"\nStreamMA, local model: chain of {args.chain} agents, all the same LocalLLM (SmolLM2-135M-Instruct), "
          f"{len(problems)} GSM8K test question(s) from line {args.start}; S={args.stream_steps} steps per agent, "
          f"step marker '\\n', whole response {args.stream_max_tokens} new tokens, stream turn {args.step_tokens}, "
          f"seed {args.seed}. Means per problem; tokens by the model's tokenizer:")
    _print_protocols(rows, (correct, stated), len(problems))
    print(f"  serial / stream, time to final answer: {ratio:.2f}x (mean of per-problem ratios "
          f"{statistics.mean(p['serial_over_stream'] for p in per_problem):.2f}x); serial and stream answers "
          f"differ on {differ}/{len(problems)}; stream/serial cost: "
          f"{rows['stream']['usd_no_cache'] / rows['serial']['usd_no_cache']:.2f}x without a KV cache, "
          f"{rows['stream']['usd_kv_cache'] / rows['serial']['usd_kv_cache']:.2f}x with one")
    print("  Note: one local model serialises its calls (one lock per model), so the agents cannot run at "
          "the same time: no pipelining gain is expected here; the difference is overhead and noise. "
          "'busy s' sums the agents' time inside LLM calls, waiting for the lock included. 'KV reused': prompt "
          "tokens of a stream turn that repeat the agent's previous turn (a prefix cache would not recompute "
          "them; LocalLLM recomputes them); '$': the paper's prices, $5 / $25 / $0.50 per million.")
    print(f"  {STATED_NOTE}")
    report["stream_local"] = {"config": asdict(config), "means": rows, "serial_over_stream": ratio,
                              "answers_differ": differ, "problems": per_problem}


def stream_simulated(args: argparse.Namespace, report: dict[str, Any]) -> None:
    from morkit.loops.streamma.loop import StreamMAConfig, compare_protocols

    token_s, call_s = args.sim_token_ms / 1000, args.sim_call_ms / 1000
    step_s = call_s + token_s * args.sim_step_tokens
    problem = "A simulated problem (no model answers it; its answer is 42)."
    print(f"\nStreamMA, SIMULATED agents (no model): each agent its own simulated server, {args.sim_call_ms:g} ms "
          f"per call + {args.sim_token_ms:g} ms per word, {args.sim_steps} steps of {args.sim_step_tokens} words per "
          f"solution (about {step_s:.2f}s to write one step); the solver's last step states a wrong answer (41). "
          f"Tokens are words.")
    results = {}
    for depth in args.sim_depths:
        from simulated_agents import SimulatedServer

        servers = [SimulatedServer(f"sim-{i}", steps=args.sim_steps, step_tokens=args.sim_step_tokens,
                                   token_s=token_s, call_s=call_s, marker="\n") for i in range(depth)]
        config = StreamMAConfig(agents=depth, step_marker="\n", steps=args.sim_steps, max_tokens=10_000,
                                step_max_tokens=10_000, queue_size=args.sim_steps)
        comparison = compare_protocols(servers, problem, config, reference="#### 42")
        lat = comparison.latencies
        ratio = lat["serial"]["answer_s"] / lat["stream"]["answer_s"]
        ideal = depth * args.sim_steps / (args.sim_steps + depth - 1)  # the paper's bound A*S/(S+A-1)
        rows = _protocol_rows([comparison])
        answers = {p: r.state.get("extracted") for p, r in comparison.results.items()}
        print(f"  {depth} agents: serial/stream time to the final answer {ratio:.2f}x (bound A*S/(S+A-1) = "
              f"{ideal:.2f}x); final answers " + ", ".join(f"{p} {a}" for p, a in answers.items()))
        _print_protocols(rows, indent="    ")
        results[depth] = {"latency": lat, "tokens": comparison.tokens, "serial_over_stream": ratio, "ideal": ideal,
                          "answers": answers, "cost_ratio_stream_serial": {
                              c: comparison.cost_ratio(cache=c) for c in ("no_cache", "kv_cache")},
                          "stops": {p: r.stop_reason for p, r in comparison.results.items()}}
    print("  A*S/(S+A-1) for A agents and S steps with equal step times: serial writes A*S steps one after "
          "another, the pipeline S+A-1 (the paper's speedup bound). Serial reviews a whole chain in one call, so "
          "its calls are fewer; stream turns re-send a growing prefix, which a KV cache reuses.")
    report["stream_simulated"] = {"token_ms": args.sim_token_ms, "call_ms": args.sim_call_ms,
                                  "steps": args.sim_steps, "step_tokens": args.sim_step_tokens, "depths": results}


# -- part 3: TMAS and ATLAS -----------------------------------------------------------------------------

def run_loop(name: str, make: Any, critic: CountingLLM, problems: list[tuple[str, str, str]],
             report: dict[str, Any]) -> dict[str, Any]:
    """Run `make()` (a fresh loop) on every problem; sums and per-problem records."""
    from morkit.core.grading import is_correct

    totals = {"calls": 0, "critic_calls": 0, "tokens": 0, "critic_tokens": 0, "seconds": 0.0, "correct": 0,
              "stated": 0}
    stops: Counter = Counter()
    records = []
    for number, (qid, question, reference) in enumerate(problems, 1):
        calls0, tokens0 = critic.calls, critic.tokens
        result = make().run(question, reference)
        ok = bool(is_correct(result.answer, reference))
        critic_calls, critic_tokens = critic.calls - calls0, critic.tokens - tokens0
        record = {"id": qid, "calls": result.calls - critic_calls, "critic_calls": critic_calls,
                  "tokens": result.tokens - critic_tokens, "critic_tokens": critic_tokens,
                  "seconds": result.seconds, "correct": ok,
                  "stated": ok and states_answer(result.answer),
                  "stop": result.stop_reason, "answer": result.answer, "reference": reference}
        records.append(record)
        for key in totals:
            totals[key] += record[key]
        stops[result.stop_reason] += 1
        print(f"[{name}] [{number}/{len(problems)}] {qid}: {'ok' if ok else '--'} {result.seconds:.1f}s, "
              f"{record['calls']}+{record['critic_calls']} calls, stop: {result.stop_reason}", file=sys.stderr)
    report[name] = {"totals": totals, "stops": dict(stops), "problems": records}
    return {"totals": totals, "stops": stops}


def loops_local(args: argparse.Namespace, report: dict[str, Any]) -> None:
    from morkit.llm.base import SamplingParams
    from morkit.llm.local import LocalLLM
    from morkit.verify.critic import LLMVerifier

    problems = gsm8k_test(args.start, args.questions, args.data_dir)
    llm = LocalLLM()
    critic = CountingLLM(LocalLLM())
    started = time.perf_counter()
    llm.chat([[{"role": "user", "content": "Say hi."}]], SamplingParams(temperature=0.0, max_tokens=4))  # load
    print(f"[loops] model loaded and warmed up in {time.perf_counter() - started:.1f}s", file=sys.stderr)

    def verifier() -> LLMVerifier:
        return LLMVerifier(critic, SamplingParams(temperature=0.0, max_tokens=args.critic_tokens))

    summaries, settings = {}, {}
    if not args.skip_tmas:
        from morkit.loops.tmas.loop import TMAS, TMASConfig

        cfg = TMASConfig(iterations=args.iterations, solutions=args.solutions, verifications=args.verifications,
                         seed=args.seed, max_tokens=args.max_tokens, agent_max_tokens=args.max_tokens)
        settings["tmas"] = (f"iterations {cfg.iterations}, solutions {cfg.solutions}, verifications "
                            f"{cfg.verifications}, {cfg.max_tokens} new tokens per solution and memory-agent reply")
        summaries["tmas"] = run_loop("tmas", lambda: TMAS(llm, verifier(), cfg), critic, problems, report)
    if not args.skip_atlas:
        from morkit.loops.atlas.loop import ATLAS, ATLASConfig, Effort, Solver

        m = args.max_tokens
        efforts = {"low": Effort(max(m // 2, 1), "Answer briefly."), "medium": Effort(m, "Solve step by step."),
                   "high": Effort(2 * m, "Think step by step carefully and check every step before giving the "
                                         "answer.")}
        cfg = ATLASConfig(max_explores=args.max_explores, efforts=efforts, max_tokens=args.orchestrator_tokens,
                          synthesis_max_tokens=args.synthesis_tokens)
        solver = Solver(llm, SamplingParams(temperature=0.7, max_tokens=m, seed=args.seed))
        settings["atlas"] = (f"max_explores {cfg.max_explores}, solver {m} new tokens (efforts low/medium/high "
                             f"{m // 2}/{m}/{2 * m}), orchestrator {cfg.max_tokens}, "
                             f"synthesis {cfg.synthesis_max_tokens}")
        summaries["atlas"] = run_loop("atlas", lambda: ATLAS(llm, solver, verifier(), cfg), critic, problems, report)
    if not summaries:
        return

    n = len(problems)
    print(f"\nTMAS and ATLAS on {n} GSM8K test question(s) from line {args.start}: every role the local "
          f"SmolLM2-135M-Instruct, critic LLMVerifier(LocalLLM()) with {args.critic_tokens} new tokens, seed "
          f"{args.seed}. Means per problem:")
    for name, text in settings.items():
        print(f"  {name}: {text}")
    print(f"  {'loop':<7}{'accuracy':>9}{'stated':>8}{'loop calls':>12}{'critic calls':>14}{'loop tokens':>13}"
          f"{'critic tokens':>15}{'s':>8}")
    for name, s in summaries.items():
        t = s["totals"]
        print(f"  {name:<7}{t['correct'] / n:>9.1%}{t['stated'] / n:>8.1%}{t['calls'] / n:>12.2f}"
              f"{t['critic_calls'] / n:>14.2f}{t['tokens'] / n:>13.0f}{t['critic_tokens'] / n:>15.0f}"
              f"{t['seconds'] / n:>8.1f}")
    print("  loop calls/tokens: the loop's own LLM calls and tokens (prompt + generated); the critic's are "
          "counted apart (LoopResult and the budget include both). s = wall time per problem, critic included.")
    print(f"  {STATED_NOTE}")
    for name, s in summaries.items():
        print(f"  {name} stop reasons: "
              + ", ".join(f"{reason!r} x{count}" for reason, count in s["stops"].most_common()))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    report: dict[str, Any] = {"args": vars(args)}
    if args.simulated_only:
        stream_simulated(args, report)
    else:
        if not args.skip_stream:
            if args.stream_problems > 0:
                stream_local(args, report)
            stream_simulated(args, report)
        if not (args.skip_tmas and args.skip_atlas) and args.questions > 0:
            loops_local(args, report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
