"""The root frame as one generated function: a run without the scheduler.

Once every loop frame a run enters is a program (fused Python, dfc/runtime/fused.py, or compiled,
dfc/runtime/compiled/), what is left for the tagged-frame scheduler is the straight-line code around the
loops: feeds, the ops before and after them, conds, the gradient sums. Scheduling that costs ~10 us a
node (pending-input tables, a ready queue); a gradient graph has a hundred root nodes. RootProgram
generates the root frame the way fused.py generates a loop body (one kernel call per node in dependency
order, deadness checked only where a cond can make a value dead, each loop frame one call of its
program) and the Run calls it instead of scheduling (executor.Run.execute). It computes exactly what the
scheduler computes: the order of two nodes that do not depend on each other is the only thing that can
differ, and the scheduler does not fix that either.

Not used (the scheduler runs the root as before) for a root with a node fused.py cannot take (Send/Recv,
a kernel that may wait), a loop frame that runs unfused, a run on a GPU, with a memory budget or
accounting, traced, or in a partition; and in a run with a kernel pool while the root has heavy kernels
big enough to overlap (executor.Run decides that from the runs it schedules).
"""
from dfc.runtime import emit as E
from dfc.ir.kinds import ENTER, EXIT, NEXT, SWITCH
from dfc.runtime.fused import (FrameAnalysis, FrameProgram, NotFusable, _NOT_FUSABLE, _TAGGED_OPS, _toposort,
                               call_frame)
from dfc.ir import ops as opreg
from dfc.runtime.values import DEAD

import numpy as np


class RootProgram(FrameProgram):
    """`fn(ctx, kern, feeds, tag=())` -> the values of plan.fetches (DEAD for a dead one); feeds: the values
    of the fed nodes `enters`, in that order (a loop frame program's signature: compiled/__init__.py's
    CompiledFrame runs a RootProgram as it runs a frame). Raises NotFusable when the root cannot be run
    this way."""

    def __init__(self, plan, index):     # noqa: D107 — deliberately not FrameProgram.__init__
        self.plan, self.fid, self.traced, self.index = plan, 0, False, index
        self._traced_fn = None
        self.lines, self.helpers, self._counter = E.Lines(), {}, 0
        self._emit_root()
        self.source = E.source(self.lines)
        env = {"DEAD": DEAD, "np": np}
        env.update(self.helpers)
        self.fn = E.run(self.source, env, "fused root frame")["run"]

    def _emit_root(self):
        p = self.plan
        members = self.index.members[0]
        for i in members:
            op = p.nodes[i].op
            if op in _NOT_FUSABLE or opreg.get(op).async_kernel or p.kind[i] in (ENTER, EXIT, NEXT):
                raise NotFusable(op)
        children = sorted(self.index.children[0])
        for c in children:
            if c not in p.programs:
                raise NotFusable(f"loop frame {p.frame_names[c]} runs on the general path")
        items, producer = self._items(members, children)
        deps = {}
        for it in items:
            deps[it] = {producer[s] if s in producer else ("node", s) for s in self._item_inputs(it)
                        if s in producer or p.fid[s] == 0}
        order = _toposort(items, deps)
        maybe_dead = set()
        for it in order:
            if it[0] == "node" and p.kind[it[1]] == SWITCH:
                maybe_dead.add(it)
                continue
            if any(d in maybe_dead for d in deps[it]):
                maybe_dead.add(it)
        a = FrameAnalysis(0, E.ident("run"), [], [], {}, [], None, order, set(), maybe_dead, producer,
                          {c: E.ident("prog", c) for c in children}, any(p.nodes[i].op in _TAGGED_OPS for i in members),
                          {}, {})
        self.analysis = a
        self.enters = [it[1] for it in order if it[0] == "node" and p.nodes[it[1]].name in p.feed_index]
        self.enter_pos = {i: k for k, i in enumerate(self.enters)}
        self.exits = [i for i, _ in p.fetches]
        L = self.lines
        w = L.w
        i0, i1, ind = E.indent(0), E.indent(1), E.indent(2)
        w(i0, "def run(ctx, kern, enters, tag=()):")
        w(i1, "_n = -1")
        w(i1, "try:")
        w(ind, "_t = ()")
        w(ind, "ctx.tag = _t")
        for it in order:
            if it[0] == "frame":
                self._frame_call(L, ind, it[1], a)
            elif it[1] in self.enter_pos:
                w(ind, "# node {} (fed)", E.lit(it[1]))
                w(ind, "{} = enters[{}]", E.ident("v", it[1], 0), E.lit(self.enter_pos[it[1]]))
            else:
                self._gen_item(L, ind, it, a)
        w(ind, "return [{}]", E.join(", ", [self._ref(f, a) for f in p.fetches]))
        w(i1, "except Exception as _e:")
        w(ind, "raise _wrap(_n, _e) from None")
        self.helpers["_wrap"] = self._wrap

    def _frame_call(self, L, ind, c, a):
        """Run loop frame c's program as executor.Run._enter_fused does: its exits are dead when one of
        its non-constant Enter values is."""
        p = self.plan
        w = L.w
        prog = a.child_programs[c]
        self.helpers[prog] = p.programs[c].fn
        enters = self.index.enters[c]
        args = [self._ref(p.ins[e][0], a) for e in enters]
        n = len(p.frame_exits[c])
        outs = E.join(", ", [E.ident("x", c, k) for k in range(n)])
        call = E.fmt("{}(ctx, kern, [{}], _t)", prog, E.join(", ", args))
        w(ind, "# loop frame {}", E.lit(c))
        w(ind, "_n = -1")
        live = [x for e, x in zip(enters, args) if not p.is_constant[e]]
        pad = call_frame(w, ind, outs, n, call, live if ("frame", c) in a.maybe_dead else [])
        if a.tagged:
            w(pad, "ctx.tag = _t")


def build(plan, index):
    """The plan's RootProgram, or None when its root frame cannot run as one."""
    try:
        return RootProgram(plan, index)
    except NotFusable as e:
        plan.root_reason = str(e)
        return None

