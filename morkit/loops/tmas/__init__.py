"""TMAS (arXiv 2605.10344, "Scaling Test-Time Compute via Multi-Agent Synergy"): the loop, its config,
prompts, sampling, memory banks, per-iteration curves, and its RL reward functions."""

from morkit.loops.tmas.loop import TMAS, TMASConfig

__all__ = ["TMAS", "TMASConfig"]
