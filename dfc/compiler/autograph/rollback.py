"""Abandoning a partly built cond/loop: the graph is cut back to a mark.

Used when a first attempt shows that the plan of a cond/loop must change
(a return value first set inside it, an empty list's element type).
"""
from dfc.compiler.autograph import core


class Mark:
    def __init__(self):
        self.builder = core.current_builder()
        b = self.builder
        if b is None:
            return
        self.count = b.graph.num_nodes()
        self.effects = dict(b.last_effect)
        self.effect_count = getattr(b, "effect_count", None)
        self.conds = dict(getattr(b, "conds", {}))
        self.loops = dict(getattr(b, "loops", {}))

    def rollback(self):
        b = self.builder
        if b is None:
            return
        b.graph.remove_nodes_after(self.count)
        b.last_effect = self.effects
        if self.effect_count is not None:
            b.effect_count = self.effect_count
        if hasattr(b, "conds"):
            b.conds = self.conds
        if hasattr(b, "loops"):
            b.loops = self.loops
