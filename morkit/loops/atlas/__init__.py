"""ATLAS: an orchestrator whose one action, `explore`, dispatches fresh solvers, then synthesises."""

from morkit.loops.atlas.loop import ATLAS, ATLASConfig, Solver

__all__ = ["ATLAS", "ATLASConfig", "Solver"]
