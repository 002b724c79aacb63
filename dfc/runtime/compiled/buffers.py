"""Buffers for a loop's arrays: an array made and read within one iteration is not allocated anew in every
iteration but written into one buffer, allocated when the loop starts; a loop variable's new value, read in
its iteration and the next, into one of two, by the parity of the iteration.

In a small-op loop (HMC's leapfrog step: two 8x8 matrix-vector products and four elementwise groups)
each allocation costs numba's allocator call, its free, and the atomic reference counts of the new array
and its views, about as much as the arithmetic. A value gets one buffer when

* its node is an item of the loop frame being emitted (not of a loop nested in it, whose own start
  allocates its buffers), with a static shape (the buffer's size) and one array output;
* every use of it, followed through the views made of it (Reshape, ExpandDims, Squeeze, Identity), is an
  op of the same frame that reads it and keeps nothing of it: an elementwise group (whose loop reads its
  elements into another array), a MatMul (numpy's loop reads it), a reduction to one value.

It gets two when, besides such reads, it is passed to the next iteration (one NextIteration), where the loop
variable is only read in the same way or leaves the loop (Exit): iteration i writes buffer i % 2 while the
value of iteration i - 1 is read from the other; when the loop stops, nothing writes either again.

So no pushed gradient value, TensorArray element, Variable value, cond output (Switch, Merge), value
entering a nested loop, or loop variable kept unchanged for another iteration is ever a buffer, and every
reader of a buffer's value has run before the buffer is written again. A loop entered again (a nested
loop, once per outer iteration) allocates its parity buffers again, so values that left an earlier run of
it (its Exits) are untouched; its temporaries, which never leave an iteration, are allocated once, at the
top of the function.

The code reads and writes a buffer through an unmanaged alias (helpers.unmanaged: no meminfo), so the
reference counts numba makes of it in every iteration (choosing a parity's buffer, a view of it, passing it
to a loop variable) are no-ops instead of two atomic operations each (measured: a quarter of HMC's
compiled run). The allocated array, its owner, is named once more after the loop (H.keep), so it lives
until the loop is done; a loop variable's value that leaves the loop is its owner, never the alias.

The producers that write into a buffer: elementwise groups (fusion.py) and MatMul (math_lower.py,
npcall.matmul_into). A size that differs from the static one at run time raises, and the fused path
replays the frame. $DFC_COMPILED_BUFFERS=0 turns buffers off (a benchmark's baseline).
"""
import math

from dfc import config
from dfc.runtime import emit as E
from dfc.ir.kinds import EXIT, NEXT, SWITCH
from dfc.runtime.kernels.lowering import scalar_type

ENABLED = config.env("DFC_COMPILED_BUFFERS")
RESHAPES = frozenset({"Reshape", "ExpandDims", "Squeeze"})     # lowered as views of their input (H.reshape)
VIEWS = RESHAPES | {"Identity", "StopGradient"}                 # their input, or a view of it
REDUCTIONS = frozenset({"Sum", "Prod", "Max", "Min", "All", "Any", "Mean"})


class _Loop:
    """A loop frame being emitted: its analysis, node items, where its `while True:` goes and at which
    indentation; the (name, expression) assignments making its temporaries' buffers and views of them
    (`once`) and its parity buffers (`each`); the owners among those names (the allocated arrays); {value
    name: the temporary's buffer or view it is}; {Merge node: (the node whose value is in the parity
    buffers, the shape a flat one is seen with or None)}."""

    def __init__(self, a, items, pos, ind):
        self.a, self.items, self.pos, self.ind = a, items, pos, ind
        self.once, self.each, self.owners, self.exact, self.parity = [], [], [], {}, {}

    def buffer(self, to, alias, alloc):
        """Assignments (appended to list `to`) allocating owner `alias`m and making `alias` its unmanaged alias
        (helpers.unmanaged)."""
        owner = E.fmt("{}m", alias)
        to += [(owner, alloc), (alias, E.fmt("H.unmanaged({})", owner))]
        self.owners.append(owner)


class LoopBuffers:
    """The buffers of the loop frames a FrameSource is emitting, innermost last."""

    def __init__(self, gen):
        self.gen = gen
        self._open = []     # _Loop per loop frame being emitted

    def open(self, a, ind):
        """Frame a's loop starts here (its `while True:` is the next line, at indentation ind)."""
        items = {it[1] for it in a.order if it[0] == "node"}
        self._open.append(_Loop(a, items, len(self.gen.lines), ind))

    def close(self):
        """Frame a's loop is emitted (its last line is the last one): its buffers are allocated just before it
        (a nested loop's temporaries once, at the top of the function: they never leave an iteration), their
        owners kept after it, and a loop variable in parity buffers leaves the loop as its owner."""
        lp = self._open.pop()
        if not lp.owners:
            return
        a, p, gl, ind = lp.a, self.gen.plan, self.gen.lines, lp.ind
        it = E.ident("it", a.fid)
        for k, e in enumerate(a.exits):     # the codegen's Exit value x (the alias, after an iteration): its owner
            m = a.switches[p.ins[e][0][0]]
            if m in lp.parity:
                i, shape = lp.parity[m]
                b0, b1 = (E.ident("B", i, q, tail="m") for q in (0, 1))
                if shape is not None:
                    b0, b1 = E.fmt("H.reshape({}, {})", b0, shape), E.fmt("H.reshape({}, {})", b1, shape)
                gl.w(ind, "if {} > 0 and not {}:", it, E.ident("dx", a.fid, k))
                gl.w(ind, "    {} = {} if {} % 2 == 1 else {}", E.ident("x", a.fid, k), b0, it, b1)
        # an owner named after the loop lives until then; one made at the top and named inside an outer loop
        # lives until that loop is done
        for b in lp.owners:
            gl.w(ind, "H.keep({})", b)
        here = lp.each
        if self._open:
            self.gen.placeholders.update(lp.once)
        else:
            here = lp.once + here
        gl[lp.pos:lp.pos] = [E.fmt("{}{} = {}", ind, name, expr) for name, expr in here]

    def get(self, i, t, shaped=False):
        """An expression for the buffer node i's output 0 (Type t) is written into in the innermost loop being
        emitted, or None if the value does not qualify (see the module docstring). The buffer is flat, or
        (shaped) of t's shape; the caller's value is that buffer itself when it is shaped or 1-D."""
        if not ENABLED or not self._open or t.ndim == 0 or t.dtype == "resource" or None in t.shape:
            return None
        lp = self._open[-1]
        if i not in lp.items or len(self.gen.plan.out_edges[i]) != 1:
            return None
        dims = E.items([E.lit(d) for d in (t.shape if shaped else (math.prod(t.shape),))])
        alloc = E.fmt("np.empty(({}), {})", dims, scalar_type(t.dtype))
        uses = self.gen.plan.out_edges[i][0]
        if all(self._reads(d, lp.items) for d, _ in uses):
            b = E.ident("B", i, tail="_")
            lp.buffer(lp.once, b, alloc)
            if shaped or t.ndim == 1:
                lp.exact[E.ident("v", i, 0)] = b
            return b
        m = self._carried(uses, lp.a, lp.items)
        if m is not None:
            lp.parity[m] = (i, None if shaped or t.ndim == 1 else E.fmt("({})", E.items([E.lit(d) for d in t.shape])))
            b0, b1 = E.ident("B", i, 0), E.ident("B", i, 1)
            lp.buffer(lp.each, b0, alloc)
            lp.buffer(lp.each, b1, alloc)
            return E.fmt("({} if {} % 2 == 0 else {})", b0, E.ident("it", lp.a.fid), b1)
        return None

    def only_read(self, i):
        """Whether node i's one output, in the innermost loop being emitted, is only read within the iteration
        (as a buffer's value is; also as a reshape's shape), so an alias without reference counts may stand
        for it (a constant: codegen.Emit.const)."""
        if not ENABLED or not self._open:
            return False
        items, p = self._open[-1].items, self.gen.plan
        return i in items and len(p.out_edges[i]) == 1 and all(
            self._reads(d, items) or (port > 0 and p.nodes[d].op in RESHAPES and d in items)
            for d, port in p.out_edges[i][0])

    def view(self, i, x, t):
        """For a RESHAPES op node i of value x to static Type t: when x is a buffer
        (or a view of one) of the innermost loop, the name of the same view made once when the loop starts
        (a view made in every iteration costs two atomic reference counts), else None."""
        if not self._open or t.ndim == 0 or None in t.shape:
            return None
        lp = self._open[-1]
        if x not in lp.exact:
            return None
        name = E.ident("V", i, tail="_")
        lp.once.append((name, E.fmt("H.reshape({}, ({}))", lp.exact[x], E.items([E.lit(d) for d in t.shape]))))
        lp.exact[E.ident("v", i, 0)] = name
        return name

    def _reads(self, dst, items):
        """Whether node dst only reads its input within the iteration (through views of it, their uses)."""
        p, fusion = self.gen.plan, self.gen.fusion
        if dst not in items:
            return False
        op = p.nodes[dst].op
        if dst in fusion.roots or dst in fusion.inline or op == "MatMul":
            return True
        if op in REDUCTIONS:
            return all(self.gen._type(dst, k, "output").ndim == 0 for k in range(len(p.out_edges[dst])))
        return op in VIEWS and len(p.out_edges[dst]) == 1 and all(self._reads(d, items) for d, _ in
                                                                  p.out_edges[dst][0])

    def _carried(self, uses, a, items):
        """The loop variable (its Merge node) a value with these uses is passed to, if the value is read within
        its iteration and passed to the next one, where it is only read (or leaves the loop): two buffers,
        one per parity of the iteration. Else None."""
        p = self.gen.plan
        nexts = [d for d, _ in uses if p.kind[d] == NEXT]
        if len(nexts) != 1 or not all(self._reads(d, items) for d, _ in uses if d != nexts[0]):
            return None
        merges = p.out_edges[nexts[0]][0]
        if len(merges) != 1 or merges[0][0] not in a.merges:
            return None
        m = merges[0][0]
        switch = p.out_edges[m][0]
        if any(p.out_edges[m][1:]) or len(switch) != 1 or p.kind[switch[0][0]] != SWITCH:
            return None
        out_false, out_true = p.out_edges[switch[0][0]]
        ok = all(p.kind[d] == EXIT for d, _ in out_false) and all(self._reads(d, items) for d, _ in out_true)
        return m if ok else None
