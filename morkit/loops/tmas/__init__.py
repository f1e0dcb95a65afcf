"""TMAS: test-time memory-augmented search (the loop, its memory banks, and its RL reward functions)."""

from morkit.loops.tmas.loop import TMAS, TMASConfig

__all__ = ["TMAS", "TMASConfig"]
