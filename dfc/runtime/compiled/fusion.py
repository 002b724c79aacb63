"""Elementwise groups of a compiled loop frame: a tree of elementwise ops runs as flat loops, one allocation.

Compiled one op at a time, every elementwise op on an array allocates its result and walks it once (and
numba's n-d array expressions walk with per-element index arithmetic LLVM does not vectorize). Here an
elementwise op whose array result is used once, by another elementwise op of the same frame and the same
part of the iteration (before or after the loop predicate), and by no control edge, is computed inside its
consumer: a group is a root op (whose result is kept) and the tree of such single-use ops under it. It runs
as one flat loop over the broadcast shape of its array inputs (each a C-contiguous flat view, a broadcast
input copied to that shape first), computing each element with the ops' own rank-0 lowerings
(math_lower.elementwise: NATIVE), so every element has the bits the op-by-op code gives it.

Ops computed by numpy's own loops (transcendentals, maximum/minimum, power: math_lower.Loop) stay whole-array
calls of that loop, as the op-by-op code makes them: the group first writes the loop's input into a buffer
(a flat loop over the subtree below it), calls numpy's loop on it in place, and reads the buffer in the loop
above. A root that is such a loop's result is the buffer itself.

Deadness: the group is skipped, and its root is dead, when any of its inputs (or control inputs) is dead;
the single-use ops inside it are never read elsewhere, so that is what the op-by-op code does. An error
(shapes that do not broadcast, integer division by zero) raises from the group, and the fused path replays
the frame and names the node, as for any compiled frame.

$DFC_COMPILED_FUSION=0 turns grouping off (every op computed on its own, as a benchmark's baseline).
"""

from dfc import config
from dfc.runtime import emit as E
from dfc.ir.kinds import ENTER, EXIT, MERGE, NEXT, SWITCH
from dfc.runtime.kernels.lowering import LOWERINGS, Unsupported, scalar_type as st
from dfc.runtime.kernels.math_lower import NATIVE, elementwise


def _scalar(t):
    """The rank-0 Type of t's dtype (an element)."""
    e = object.__new__(type(t))
    e.dtype, e.shape, e.ndim = t.dtype, (), 0
    return e


ENABLED = config.env("DFC_COMPILED_FUSION")


class Fusion:
    """Which nodes of a compiled frame are group roots and which are computed inside their consumer."""

    def __init__(self, gen):
        self.gen, self.plan = gen, gen.plan
        p = self.plan
        self.inline, self.roots, self._specs = set(), set(), {}
        # never inlined: a control input, a fetched value (the run's result)
        self._kept = {c for cs in p.ctrl_ins for c in cs} | {i for i, _ in getattr(p, "fetches", ())}

    def spec(self, i):
        """NATIVE, a math_lower.Loop, or None (not fused) for node i."""
        if i not in self._specs:
            self._specs[i] = self._spec(i)
        return self._specs[i]

    def _spec(self, i):
        from dfc.runtime.compiled.codegen import Blocked
        p = self.plan
        if p.kind[i] in (SWITCH, MERGE, EXIT, ENTER, NEXT) or len(p.out_edges[i]) != 1 or not p.ins[i]:
            return None
        try:
            ins = [self.gen._type(s, port, "input") for s, port in p.ins[i]]
            out = self.gen._type(i, 0, "output")
        except Blocked:
            return None         # the op-by-op code says why
        if out.dtype == "resource" or out.ndim == 0 or any(t.dtype == "resource" for t in ins):
            return None
        return elementwise(p.nodes[i].op, ins, out)

    def plan_frame(self, a):
        """Mark the group roots and inlined nodes among frame a's items."""
        if not ENABLED:
            return
        p = self.plan
        items = {it[1]: it in a.body for it in a.order if it[0] == "node"}
        for i, body in items.items():
            if self.spec(i) is None:
                continue
            self.roots.add(i)
            uses = p.out_edges[i][0]
            if i in self._kept or len(uses) != 1:
                continue
            c = uses[0][0]
            if c in items and items[c] == body and self.spec(c) is not None:
                self.inline.add(i)
                self.roots.discard(i)

    def emit(self, r, a, ind):
        """The statements computing group root r (at indentation ind)."""
        _Group(self, r, a).emit(ind)


class _Group:
    def __init__(self, fusion, root, a):
        self.f, self.gen, self.plan, self.root, self.a = fusion, fusion.gen, fusion.plan, root, a
        self.leaves = {}        # ref -> (flat name, Type) of the array inputs
        self.deads = []
        self.tag = self.gen.fresh("g")
        self.phases = []        # finished statement blocks, in the order they run
        self.n = E.fmt("{}n", self.tag)
        self._walk(root)

    def _walk(self, i):
        p, g = self.plan, self.gen
        for sp in list(p.ins[i]) + [(c, 0) for c in p.ctrl_ins[i]]:
            if sp[0] in self.f.inline and sp in p.ins[i]:
                self._walk(sp[0])
                continue
            d = g.dead(sp, self.a)
            if d is not None and d not in self.deads:
                self.deads.append(d)
            if sp not in p.ins[i]:
                continue
            t = g._type(sp[0], sp[1], "input")
            ref = g.ref(sp, self.a)
            if t.ndim and ref not in self.leaves:
                self.leaves[ref] = (E.fmt("{}f{}", self.tag, E.lit(len(self.leaves))), t)

    def emit(self, ind):
        g, r = self.gen, self.root
        out = g._type(r, 0, "output")
        w = g.w
        pad = ind
        if self.deads:
            w(ind, "if {}:", E.join(" or ", self.deads))
            w(ind, "    {} = True", E.ident("d", r, 0))
            w(ind, "    {} = {}", E.ident("v", r, 0), self.gen.dead_value(out))
            w(ind, "else:")
            pad = E.deeper(ind)
            w(pad, "{} = False", E.ident("d", r, 0))
            g.flagged.add((r, 0))
        refs = list(self.leaves)
        shape, nd = E.fmt("{}s", self.tag), out.ndim
        differ = E.join(" or ", [E.fmt("{}.shape != {}", x, shape) for x in refs[1:]])
        same = [x for x in refs if self.leaves[x][1].ndim == nd]    # (an input of lower rank is broadcast)
        if refs and nd == 1 and None not in out.shape and all(self.leaves[x][1].shape == out.shape for x in refs):
            # one static shape (the types say so): the inputs are their own flat views, read as they are (a
            # view chosen at run time would cost two atomic reference counts per input). Should the types be
            # wrong, the group raises and the fused path replays the frame.
            w(pad, "{} = {}.shape", shape, refs[0])
            if len(refs) > 1:
                w(pad, "if {}:", differ)
                w(pad, "    raise ValueError('operands of an elementwise group differ from their static shape')")
            for ref in refs:
                self.leaves[ref] = (ref, self.leaves[ref][1])
            refs = []
        elif len(same) == len(refs):        # the shape of the first input, unless they differ
            w(pad, "{} = {}.shape", shape, same[0])
            if len(refs) > 1:
                w(pad, "if {}:", differ)
                w(pad, "    {} = np.broadcast_shapes({})", shape, E.items([E.fmt("{}.shape", x) for x in refs]))
        else:
            w(pad, "{} = np.broadcast_shapes({})", shape, E.items([E.fmt("{}.shape", x) for x in refs]))
        for ref in refs:
            name, t = self.leaves[ref]
            if t.ndim < nd:
                w(pad, "{} = H.spread({}, {})", name, ref, shape)
            elif nd == 1:                   # (a 1-D input of the shape is its own flat view)
                w(pad, "{} = {} if {}.shape == {} else H.flat({}, {})", name, ref, ref, shape, ref, shape)
            else:
                w(pad, "{} = H.flat({}, {})", name, ref, shape)
        w(pad, "{} = {}[0]" if nd == 1 else "{} = H.size_of({})", self.n, shape)
        body = self._phase(pad)
        expr, kind, arr = self._elem(r, body)
        if kind == "buf":           # the root is a numpy loop's result: its buffer
            result = E.fmt("H.reshape({}, {})", arr, shape) if nd > 1 else arr
        else:
            spare = [b for b, dt in body["bufs"] if dt == out.dtype]
            if spare:               # written in place into a buffer the loop reads element by element
                res, pre = spare[0], []
            else:
                res = E.fmt("{}r", self.tag)
                pre = self._array(res, out.dtype, g.buffers.get(r, out))
            self._finish(body, [(res, expr)], pre)
            result = E.fmt("H.reshape({}, {})", res, shape) if nd > 1 else res
        for block in self.phases:
            g.lines.extend(block)
        w(pad, "{} = {}", E.ident("v", r, 0), result)

    # ---------------------------------------------------------------- phases: a flat loop each
    def _array(self, name, dtype, buf):
        """Statements making `name` a flat array of the group's n elements of dtype: the loop's buffer `buf`
        (buffers.py; its size checked), or with buf None a new one."""
        if buf is None:
            return [E.fmt("{} = np.empty({}, {})", name, self.n, st(dtype))]
        return [E.fmt("{} = {}", name, buf), E.fmt("if {}.shape[0] != {}:", name, self.n),
                E.fmt("    raise ValueError('an elementwise group differs from its static shape')")]

    def _result_buffer(self, i, spec):
        """The loop's buffer (buffers.py) numpy's loop of node i writes, when i is the group's root and that
        loop's output is the group's result (not converted after), else None."""
        t = self.gen._type(i, 0, "output")
        root = i == self.root and spec.post is None and t.dtype == spec.dtypes[-1]
        return self.gen.buffers.get(i, t) if root else None

    def _phase(self, ind):
        return {"ind": ind, "j": self.gen.fresh("j"), "lines": E.Lines(), "bufs": []}

    def _finish(self, ph, stores, pre=()):
        """Close phase ph: `pre` statements, then its loop storing each (array, element expression) of
        `stores` (no loop if there is nothing to store)."""
        ind, j = ph["ind"], ph["j"]
        block = [E.fmt("{}{}", ind, x) for x in pre]
        if stores:
            block += [E.fmt("{}for {} in range({}):", ind, j, self.n)] + ph["lines"]
            block += [E.fmt("{}    {}[{}] = {}", ind, arr, j, x) for arr, x in stores]
        self.phases.append(block)

    def _elem(self, i, ph):
        """(element expression of node i inside phase ph, kind, array): kind "buf" if it is the element of a
        whole-array buffer `array` (a numpy loop's result), else "expr" (array None)."""
        p, g = self.plan, self.gen
        node = p.nodes[i]
        ins = [_scalar(g._type(s, port, "input")) for s, port in p.ins[i]]
        out = _scalar(g._type(i, 0, "output"))
        spec = self.f.spec(i)
        from dfc.runtime.compiled.codegen import Emit
        v = E.fmt("{}e{}", self.tag, E.lit(i))
        inner = E.deeper(ph["ind"])
        if spec == NATIVE:
            args = [self._input(sp, ph)[0] for sp in p.ins[i]]
            saved, g.lines = g.lines, ph["lines"]
            try:
                expr = LOWERINGS[node.op](Emit(g, node, args, ins, [out], inner))[0]
            finally:
                g.lines = saved
            ph["lines"].w(inner, "{} = {}", v, expr)
            return v, "expr", None
        # numpy's loop over whole arrays: its inputs computed by a loop of their own first
        sub = self._phase(ph["ind"])
        args = [self._input(sp, sub) for sp in p.ins[i]]
        k = E.lit(Emit(g, node, [], ins, [out], inner).loop(spec.ufunc, spec.dtypes))
        whole = {x: arr for x, kind, arr in args if kind in ("leaf", "buf")}
        bufs = {arr for _, kind, arr in args if kind == "buf"}      # single-use buffers of loops below
        varying = [x for x, kind, _ in args if kind != "scalar"]
        ptrs, steps, stores, pre, dst = [], [], [], [], None
        for x, t in zip(spec.pre([x for x, _, _ in args]), spec.dtypes):
            if x in whole:                              # a whole array already: passed as it is
                arr = whole[x]
                if dst is None and arr in bufs and t == spec.dtypes[-1]:
                    dst = arr
            elif not any(y in x for y in varying):      # one value: one element, stride 0
                arr = g.fresh("c")
                pre.append(E.fmt("{} = np.full(1, {})", arr, x))
                ptrs.append(arr)
                steps.append(E.lit(0))
                continue
            else:                                       # an element expression: into a buffer of its own
                arr = g.fresh("b")
                in_place = dst is None and t == spec.dtypes[-1]
                pre += self._array(arr, t, self._result_buffer(i, spec) if in_place else None)
                stores.append((arr, x))
                if in_place:
                    dst = arr                           # numpy's loop runs in place on it
            ptrs.append(arr)
            steps.append(E.fmt("{}.itemsize", arr))
        if dst is None:
            dst = g.fresh("b")
            pre += self._array(dst, spec.dtypes[-1], self._result_buffer(i, spec))
        self._finish(sub, stores, pre)
        # the arrays' addresses (P.address: not .ctypes.data, whose object costs two atomic reference counts
        # per array), each array named again after the call (H.keep) so numba frees none of them before it
        arrays = list(dict.fromkeys(ptrs + [dst]))
        self.phases.append([
            E.fmt("{}P.run(LP, {}, ({},), ({}P.address({}), ), ({}{}.itemsize, ))", ph["ind"], k, self.n,
                  E.items([E.fmt("P.address({})", x) for x in ptrs]), dst, E.items(steps), dst),
            E.fmt("{}{}", ph["ind"], E.join("; ", [E.fmt("H.keep({})", x) for x in arrays]))])
        y = E.fmt("{}[{}]", dst, ph["j"])
        ph["bufs"].append((dst, spec.dtypes[-1]))
        if spec.post is None:
            return y, "buf", dst
        ph["lines"].w(inner, "{} = {}", v, spec.post(y))
        return v, "expr", None

    def _input(self, sp, ph):
        """(element expression, kind, array) of input sp inside phase ph: kind "leaf" (an array input's
        element), "scalar" (a rank-0 input), or as _elem gives it for a node inside the group."""
        if sp[0] in self.f.inline:
            return self._elem(sp[0], ph)
        ref = self.gen.ref(sp, self.a)
        if ref in self.leaves:
            name = self.leaves[ref][0]
            return E.fmt("{}[{}]", name, ph["j"]), "leaf", name
        return ref, "scalar", None
