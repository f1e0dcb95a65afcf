"""ATLAS: an orchestrator whose one action, `explore`, dispatches fresh solvers; it stops, gives up or answers."""

from morkit.loops.atlas.loop import ATLAS, ATLASConfig, Solver

__all__ = ["ATLAS", "ATLASConfig", "Solver"]
