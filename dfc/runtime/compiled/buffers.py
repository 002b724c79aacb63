"""Buffers for a loop's temporaries: an array made and read within one iteration is not allocated anew in
every iteration but written into one buffer, allocated when the loop starts.

In a small-op loop (HMC's leapfrog step: two 8x8 matrix-vector products and four elementwise groups)
each allocation costs numba's allocator call, its free, and the atomic reference counts of the new array
and its views, about as much as the arithmetic. A value qualifies when

* its node is an item of the loop frame being emitted (not of a loop nested in it, whose own start
  allocates its buffers), with a static shape (the buffer's size) and one array output;
* every use of it, followed through the views made of it (Reshape, ExpandDims, Squeeze), is an op of
  the same frame that reads it and keeps nothing of it: an elementwise group (whose loop reads its
  elements into another array), a MatMul (numpy's loop reads it), a reduction to one value.

So no loop variable (a NextIteration input), Exit value, pushed gradient value, TensorArray element,
Variable value, cond output (Switch, Merge) or value entering a nested loop is ever a buffer, and every
reader of a buffer's value in iteration i has run before iteration i + 1 overwrites it. A loop entered
again (a nested loop, once per outer iteration) allocates its buffers again, so values that left an
earlier run of it are untouched.

The producers that write into a buffer: elementwise groups (fusion.py) and MatMul (math_lower.py,
npcall.matmul_into). A size that differs from the static one at run time raises, and the fused path
replays the frame. $DFC_COMPILED_BUFFERS=0 turns buffers off (a benchmark's baseline).
"""
import math
import os

from dfc.runtime.kernels.lowering import scalar_type

ENABLED = os.environ.get("DFC_COMPILED_BUFFERS", "1") != "0"
VIEWS = frozenset({"Reshape", "ExpandDims", "Squeeze"})     # lowered as views of their input (H.reshape)
REDUCTIONS = frozenset({"Sum", "Prod", "Max", "Min", "All", "Any", "Mean"})


class LoopBuffers:
    """The buffers of the loop frames a FrameSource is emitting, innermost last."""

    def __init__(self, gen):
        self.gen = gen
        self._open = []     # per loop frame being emitted: (its node items, line position, indentation, lines)

    def open(self, a, ind):
        """Frame a's loop starts here (its `while True:` is the next line, at indentation ind)."""
        items = {it[1] for it in a.order if it[0] == "node"}
        self._open.append((items, len(self.gen.lines), ind, []))

    def close(self):
        """Frame a's loop is emitted: its buffers are allocated just before it."""
        _, pos, ind, lines = self._open.pop()
        self.gen.lines[pos:pos] = [ind + x for x in lines]

    def get(self, i, t):
        """The name of a buffer for node i's output 0 (Type t) in the innermost loop being emitted, or None
        if the value does not qualify (see the module docstring)."""
        if not ENABLED or not self._open or t.ndim == 0 or t.dtype == "resource" or None in t.shape:
            return None
        items, _, _, lines = self._open[-1]
        if i not in items or len(self.gen.plan.out_edges[i]) != 1 or not self._only_read(i, items):
            return None
        name = f"B{i}_"
        lines.append(f"{name} = np.empty({math.prod(t.shape)}, {scalar_type(t.dtype)})")
        return name

    def _only_read(self, i, items):
        """Whether every use of node i's output 0 (through views) reads it within the iteration."""
        p, fusion = self.gen.plan, self.gen.fusion
        for dst, _ in p.out_edges[i][0]:
            if dst not in items:
                return False
            op = p.nodes[dst].op
            if dst in fusion.roots or dst in fusion.inline or op == "MatMul":
                continue
            if op in REDUCTIONS and all(self.gen._type(dst, k, "output").ndim == 0
                                        for k in range(len(p.out_edges[dst]))):
                continue
            if op in VIEWS and len(p.out_edges[dst]) == 1 and self._only_read(dst, items):
                continue
            return False
        return True
