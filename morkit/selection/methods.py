"""The per-query selection methods, in SELECTION_METHODS: name -> factory(pool, **options) -> SelectionMethod.

A method implements `choose(neighbours, available) -> Choice` (see morkit.selection.base). Metadata:
`singles_only` says whether the method accepts `singles_only=True`. Add one with

    SELECTION_METHODS.register("mine", "mypkg.select:Mine", "what it picks", singles_only=False)
"""

from __future__ import annotations

from morkit.core.registry import Entry, Registry

DEFAULT_METHOD = "stacker"

SELECTION_METHODS = Registry("selection method", [
    Entry("stacker", "morkit.selection.stacker:Stacker",
          "listwise weights over every usable RM, learned on the pool by cross-validation (default)",
          {"singles_only": False}),
    Entry("pres", "morkit.selection.pres:pres",
          "the CTTS-MM rule: the ensemble with the highest similarity-weighted PRR over the k nearest pool questions",
          {"singles_only": True}),
    Entry("pres-top1", "morkit.selection.pres:pres_top1",
          "the PRES rule on each neighbour's best-of-n hit instead of PRR", {"singles_only": True}),
])
