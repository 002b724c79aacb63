"""numba source for one loop frame (its conds and nested loops inlined), from the fused path's analysis.

The generated function `run(e0, e1, ..., K, LP, R)` takes the frame's Enter values (rank-0 tensors as
numpy scalars, others as C-contiguous arrays, resource handles as their typed stand-ins: RESOURCE_USES),
the frame's constant arrays K, numpy loop addresses LP (npcall.py) and R = [run count, *the call's frame
tag] (for kernels called back in object mode: Emit.kernel_call), runs every iteration, and returns the
Exit values followed by one dead flag per Exit. Each frame counts its iterations (`it<fid>`, the fused
path's tag). It
follows dfc/runtime/fused.py item for item: the same order, the same body/non-body split, the same
deadness. A value that a cond can make dead carries a bool `d<node>_<port>` beside it (dead values hold a
typed placeholder, never read); a node with a dead input is skipped and its outputs are dead; Switch and
Merge become if/elif; a nested loop frame becomes a nested `while True` whose Exits are locals.
Chains of elementwise ops on arrays run as one flat loop each (fusion.py).

Every line is emit.Code (dfc/runtime/emit.py), written as fused.py writes its lines: a constant template
filled with the emitter's identifiers (v<node>_<port>, d<node>_<port>, it<frame>, ...), literals and dtype
names; comments name nodes and frames by index.
"""
from dfc.runtime import emit as E
from dfc.ir.kinds import ENTER, EXIT, MERGE, NEXT, SWITCH
from dfc.runtime.fused import FrameProgram
from dfc.runtime.kernels.lowering import LOWERINGS, Unsupported, scalar_type
from dfc.runtime.compiled.buffers import RESHAPES, LoopBuffers
from dfc.runtime.kernels import (array_lower, math_lower, numpy_lower, random_lower,  # noqa: F401
                                 state_lower)   # (registers the lowerings)

# The ops with no lowering, and why: a loop frame holding one stays on the fused Python path, and
# Session.compiled_frames() / `dfc show --fused` give this reason (tests/compiler/test_lowering_coverage.py
# checks that every other op in the registry has a lowering).
_ASYNC = "asynchronous: it waits on other threads or workers, which compiled code cannot do"
_HOST = "it writes to the host (files, the summary log, the terminal), and a compiled frame that fails " \
        "is replayed on the fused path, which would do it twice"
NOT_LOWERED = {
    "Send": "a cross-device transfer between partitions (a partitioned frame runs fused)",
    "Recv": "a cross-device transfer between partitions (a partitioned frame runs fused)",
    **{op: _ASYNC for op in ("QueueHandle", "QueueEnqueue", "QueueEnqueueMany", "QueueDequeue",
                             "QueueDequeueMany", "QueueSize", "QueueClose", "AccumulatorHandle",
                             "AccumulatorApplyGradient", "AccumulatorTakeGradient",
                             "AccumulatorNumAccumulated", "AccumulatorSetGlobalStep")},
    "ApplyOnce": "a synchronous-training update under the locks of Variables that other workers share",
    "Progress": "it drives the terminal's progress bars, throttled by the wall clock",
    "Save": _HOST, "Restore": "it reads a checkpoint file", "SummaryScalar": _HOST, "SummaryHistogram": _HOST,
    "Print": _HOST,
    "Placeholder": "a graph input: fed once per run, outside every loop frame",
    "VarHandle": "it makes or finds a Variable in the session's container (a Python object); a frame takes "
                 "the handle from outside",
    "TensorArrayGrad": "it makes a gradient TensorArray (a Python object); a frame takes the handle from outside",
    **{op: "a sparse optimizer update (rows of a Variable): no lowering yet, so a training loop that applies "
           "sparse gradients runs its frame on the fused path" for op in ("ResourceScatterAdd",
                                                                           "ResourceScatterSub", "SumDuplicates")},
    **{op: "routes rows to and from a sharded Variable's shards (outputs sized by the values): no lowering "
           "yet, so a loop frame holding one runs on the fused path" for op in ("DynamicPartition",
                                                                                 "DynamicStitch")},
}

_DTYPES = ("float32", "float64", "int32", "int64", "bool")
# Resource handles a frame can take, and what compiled code gets for each (dfc/runtime/compiled/__init__.py
# builds it from the Python object and applies its effects after the compiled code succeeded):
#   "push" / "pop": a gradient stack, a typed List of its elements (only pushed, or only popped);
#   "ta_write": a TensorArray the frame only writes: a log (typed List of int64: writer, index and the
#       iteration counters of the writer's frames; typed List of values), written to the store afterwards;
#   "ta_read": a TensorArray the frame only reads: (typed List of its elements, bool array: element can
#       be read, its size);
#   "ta_rw": a TensorArray the frame writes and reads: (typed List of its elements, typed List of bools:
#       element written, then the write log of "ta_write"), its writes made on the Lists as well as logged;
#   "var" / "var_rw": a Variable the frame reads (and assigns): a typed List holding its value.
RESOURCE_USES = ("push", "pop", "ta_write", "ta_read", "ta_rw", "var", "var_rw")
_USE_OF = {"StackPush": "push", "StackPop": "pop", "TensorArrayWrite": "ta_write", "TensorArrayRead": "ta_read",
           "TensorArraySize": "ta_read", "TensorArrayStack": "ta_read", "TensorArrayGather": "ta_read",
           "TensorArrayConcat": "ta_read", "ReadVariable": "var", "Assign": "var", "AssignAdd": "var",
           "AssignSub": "var"}


def module(lines):
    """The module text of generated lines, checked by the emitter (emit.check_module) before anything
    writes or compiles it."""
    return E.check_module(lines)


def head(comment, objmode, params):
    """The first lines of a generated module: its imports, the comment naming what it computes, and the
    `def run(<params>, K, LP, R):` line."""
    return [E.fmt("import numpy as np"), E.fmt("import numba"), E.fmt("from numba import njit"),
            E.fmt("from dfc.runtime.compiled import helpers as H, npcall as P"), E.fmt(""), comment,
            # object mode (kernels called from compiled code, e.g. einsum, dfc.linalg) needs the GIL
            E.fmt("@njit(cache=True, nogil={}, error_model='numpy')", E.lit(not objmode)),
            E.fmt("def run({}K, LP, R):", E.items(params))]


class Blocked(Exception):
    """The frame cannot be compiled; `node` is the node that blocked it (or None), `reason` why."""

    def __init__(self, node, reason):
        super().__init__(f"{node}: {reason}" if node else reason)
        self.node, self.reason = node, reason


class Analyses(FrameProgram):
    """The fused path's FrameAnalysis of a frame and every frame nested in it, without its code.

    (FrameProgram._emit_frame analyses a frame and hands the result to _gen; here _gen only keeps it.)"""

    def __init__(self, plan, fid, index):      # noqa: D107 — deliberately not FrameProgram.__init__
        self.plan, self.fid, self.index = plan, fid, index
        self.traced = False
        self.lines, self.helpers, self._counter = [], {}, 0
        self.by_fid = {}
        self._emit_frame(fid, "run", 0)

    def _gen(self, a):
        self.by_fid[a.fid] = a


class Type:
    """The static type of a value in compiled code: a dtype name and a rank."""
    __slots__ = ("dtype", "ndim", "shape")

    def __init__(self, ttype, what):
        if ttype is not None and ttype.dtype == "resource":     # a stack handle: a typed List (state_lower.py)
            self.dtype, self.shape, self.ndim = "resource", None, None
            return
        if ttype is None or ttype.dtype not in _DTYPES:
            raise Unsupported(f"{what} is a {getattr(ttype, 'dtype', 'value')} (not an array)")
        if ttype.shape is None:
            raise Unsupported(f"{what} has an unknown rank")
        self.dtype, self.shape, self.ndim = ttype.dtype, ttype.shape, len(ttype.shape)

    def with_shape(self, shape):
        """This Type with another shape (same dtype; the rank follows the shape)."""
        t = object.__new__(Type)
        t.dtype, t.ndim, t.shape = self.dtype, len(shape), tuple(shape)
        return t

    def default(self):
        """A placeholder of this type for a dead value."""
        if self.dtype == "resource":
            raise Unsupported("a resource handle that may be dead")
        if self.ndim == 0:
            return E.fmt("False") if self.dtype == "bool" else E.fmt("{}(0)", scalar_type(self.dtype))
        return E.fmt("np.zeros(({}), {})", E.items([E.lit(0)] * self.ndim), scalar_type(self.dtype))


class Emit:
    """What a lowering sees of one node (see dfc/runtime/kernels/lowering.py)."""

    def __init__(self, gen, node, args, ins, outs, ind, index=None):
        self.gen, self.node, self.args, self.ins, self.outs, self.ind = gen, node, args, ins, outs, ind
        self.index = index      # the node's index in the plan (None: a step of a composite lowering)

    def buffer(self, shaped=False):
        """A buffer the node's output 0 may be written into instead of a new array (an expression: a
        C-contiguous array of the output's static size, flat or `shaped` as the output), or None: buffers.py
        says when."""
        return None if self.index is None else self.gen.buffers.get(self.index, self.outs[0], shaped)

    def stmt(self, template, *parts):
        """Add the statement fmt(template, *parts) at the node's indentation."""
        self.gen.lines.w(self.ind, template, *parts)

    def tmp(self):
        return self.gen.fresh("t")

    def tmp_of(self, expr):
        """A fresh local assigned expr (a statement at the node's indentation); its name."""
        t = self.tmp()
        self.stmt("{} = {}", t, expr)
        return t

    def loop(self, ufunc, dtypes, reduction=False):
        """Index into LP of numpy's strided loop of ufunc for exactly these dtypes."""
        from dfc.runtime.compiled.npcall import NoLoop
        key = (ufunc, tuple(dtypes), reduction)
        if key not in self.gen.loops:
            from dfc.runtime.compiled import npcall
            try:
                npcall.loop_address(ufunc, dtypes, reduction)
            except NoLoop as e:
                raise Unsupported(str(e)) from None
            self.gen.loops.append(key)
        return self.gen.loops.index(key)

    def kernel_call(self, out, ins):
        """Statements computing `out` (a fresh local, or a list of one per output of the node) by the node's
        own kernel, called from compiled code in numba's object mode with a context that has the fused path's
        run count and frame tag: for kernels whose exact results numba cannot reproduce (numpy's einsum and
        LAPACK calls, the clock). `ins`: the input expressions. The generated function gets R = [run count,
        *tag of the frame's call]."""
        import json
        outs = out if isinstance(out, list) else [out]
        types = []
        for t in self.outs[:len(outs)]:
            types.append(E.dtype(t.dtype) if t.ndim == 0 else E.fmt("{}[{}]", E.dtype(t.dtype), E.join(
                ", ", [E.fmt(":")] * (t.ndim - 1) + [E.fmt("::1")])))
        chain = self.gen.frame_chain
        # the node travels as data: hex digits of its JSON (a cached module is read by other processes)
        node = E.blob(json.dumps([self.node.name, self.node.op, self.node.attrs]).encode())
        ctr = self.tmp()
        self.stmt("{} = np.array([{}], np.int64)", ctr,
                  E.join("", [E.fmt("{}, {}, ", E.lit(f), E.ident("it", f)) for f in chain]))
        self.gen.objmode = True
        self.stmt("with numba.objmode({}):", E.join(", ", [E.fmt("{}='{}'", o, t) for o, t in zip(outs, types)]))
        ranks = E.fmt("({})", E.items([E.lit(t.ndim) for t in self.outs[:len(outs)]]))
        self.stmt("    {} = H.kernel_call(bytes.fromhex({}).decode(), R, {}, ({}), {})", E.items(outs), node, ctr,
                  E.items(ins), ranks)

    def const(self, value, node_value=False):
        """An expression for a constant array (passed to the compiled function in K). node_value: it is the
        node's output; when a loop only reads that (buffers.LoopBuffers.only_read), the expression is an
        unmanaged alias of it made once at the top of the function (K outlives the call), whose reference
        counts in every iteration do nothing."""
        import numpy as np
        self.gen.consts.append(np.array(value, order="C", copy=True))
        k = len(self.gen.consts) - 1
        if node_value and self.index is not None and self.gen.buffers.only_read(self.index):
            name = E.ident("K", k, tail="_")
            self.gen.placeholders[name] = E.fmt("H.unmanaged(K[{}])", E.lit(k))
            return name
        return E.fmt("K[{}]", E.lit(k))


class FrameSource:
    """The generated source of frame `fid` of a Plan, with what calling it needs.

    source: the module text; enter_types / exit_types: Type per Enter / Exit; consts: arrays for K;
    loops: (ufunc, dtypes, reduction) per LP entry. Raises Blocked naming the node that cannot be lowered.
    """

    def __init__(self, plan, fid, index, types):
        self.plan, self.fid, self.types = plan, fid, types
        self.lines, self.loops, self.consts = E.Lines(), [], []
        self.placeholders = {}         # dead_value: name -> expression
        self._n = 0
        self.flagged = set()           # (node, port) values that carry a dead flag
        self.lift_dummies = {}         # gradient lift Merge -> its dummy Const inputs (see _lifted)
        self.objmode = False           # a lowering calls back into Python (Emit.kernel_call)
        self.exits_may_die = {}        # fid -> whether its Exits may be dead
        self._emitters()
        from dfc.runtime.fused import NotFusable
        try:
            self.an = Analyses(plan, fid, index).by_fid
        except NotFusable as e:
            raise Blocked(None, f"not fused: {e}") from None
        a = self.an[fid]
        p = plan
        self.enter_types = [self._type(e, 0, "Enter") for e in a.enters]
        self.exit_types = [self._type(e, 0, "Exit") for e in a.exits]
        for e, t in zip(a.exits, self.exit_types):
            if t.dtype == "resource":
                raise Blocked(p.nodes[e].name, "a resource handle leaves the frame")
        # resources: Enter position -> (use, element Type); see RESOURCE_USES
        self.ta_writers = []          # TensorArrayWrite nodes: (name, fids of the frames from this one to it)
        self.handle_use = {}          # node using a resource handle -> the handle's use (RESOURCE_USES)
        self.frame_chain = []
        self.resources = {k: self._resource_use(e) for k, e in enumerate(a.enters)
                          if self.enter_types[k].dtype == "resource"}
        params = [E.ident("e", k) for k in range(len(a.enters))]
        self._frame(a, E.indent(1), params)
        outs = [E.ident(base, fid, k) for base in ("x", "dx") for k in range(len(a.exits))]
        self.source = module(head(E.fmt("# loop frame {}", E.lit(fid)), self.objmode, params) + self.hoisted() +
                             self.lines + [E.fmt("    return ({})", E.items(outs)), E.fmt("")])

    def _emitters(self):
        from dfc.runtime.compiled.fusion import Fusion
        self.fusion = Fusion(self)          # elementwise groups: one flat loop each (fusion.py)
        self.buffers = LoopBuffers(self)    # a loop's arrays written into buffers (buffers.py)

    def handle_users(self, i):
        """(node, input slot) of each use of the resource handle node i outputs (its output 0), followed
        through nested-frame Enters and both outputs of cond Switches."""
        p = self.plan
        out, todo, seen = [], [(i, p.out_edges[i][:1])], set()
        while todo:
            j, ports = todo.pop()
            if j in seen:
                continue
            seen.add(j)
            for port in ports:
                for dst, slot in port:
                    if p.kind[dst] in (SWITCH, ENTER) and slot == 0:
                        todo.append((dst, p.out_edges[dst]))
                    else:
                        out.append((dst, slot))
        return out

    def _resource_use(self, enter):
        """How the frame uses the resource handle entering at `enter` (through nested-frame Enters and cond
        Switches): (use, element Type) with use one of RESOURCE_USES; one kind of use per handle."""
        p = self.plan
        uses = set()
        for dst, slot in self.handle_users(enter):
            op = p.nodes[dst].op
            if slot != 0 or op not in _USE_OF:
                raise Blocked(p.nodes[dst].name, f"{op} takes a resource handle (lowered: stacks, "
                              "TensorArray writes or reads, Variable reads and assigns)")
            uses.add((op, dst))
        kinds = {_USE_OF[op] for op, _ in uses}
        if kinds == {"ta_write", "ta_read"}:
            if self._accumulating(enter):
                raise Blocked(p.nodes[enter].name, "a gradient (accumulating) TensorArray both written and read in "
                              "one frame: its reads are sums of the writes in key order, which compiled code does "
                              "not keep")
            kinds = {"ta_rw"}
        if len(kinds) != 1:
            raise Blocked(p.nodes[enter].name, f"a resource used as {' and '.join(sorted(kinds))} in one frame"
                          if kinds else "a resource handle no lowered op uses")
        use = kinds.pop()
        ts = {}
        for op, i in uses:
            if op in ("StackPush", "TensorArrayWrite", "Assign", "AssignAdd", "AssignSub"):
                slot = {"StackPush": 1, "TensorArrayWrite": 2}.get(op, 1)
                t = self._type(p.ins[i][slot][0], p.ins[i][slot][1], "stored value")
            elif op == "TensorArraySize":
                continue
            elif op in ("TensorArrayStack", "TensorArrayGather"):
                t = self._type(i, 0, "read value")
                t = t.with_shape(t.shape[1:]) if t.ndim else None
                if t is None:
                    raise Blocked(p.nodes[i].name, "a TensorArray stacked into a scalar")
            else:
                t = self._type(i, 0, "read value")
            ts[(t.dtype, t.ndim)] = t
        if use == "var" and not any(op == "ReadVariable" for op, _ in uses):
            raise Blocked(p.nodes[enter].name, "a Variable the frame assigns without reading")
        if len(ts) != 1:
            raise Blocked(p.nodes[enter].name, "a resource holding values of different types" if ts else
                          "a TensorArray whose size alone the frame reads")
        if use == "var":
            use = "var_rw" if any(op != "ReadVariable" for op, _ in uses) else "var"
        for _, i in uses:
            self.handle_use[i] = use
        return use, ts.popitem()[1]

    def _accumulating(self, i):
        """Whether the TensorArray handle node i passes on (through Enters, Switches, Identities) may be an
        accumulating (gradient) one."""
        p = self.plan
        while p.nodes[i].op not in ("TensorArray", "TensorArrayGrad"):
            if p.kind[i] not in (ENTER, SWITCH) and p.nodes[i].op != "Identity":
                return True         # (made some other way: assume the worst)
            i = p.ins[i][0][0]
        return p.nodes[i].op == "TensorArrayGrad" or bool(p.nodes[i].attrs.get("accumulate", False))

    def dead_value(self, t):
        """What a dead value of Type t holds (never read): for an array, one empty array made once at the
        top of the function (an allocation per dead value per iteration cost ~50 ns each in cond-heavy
        gradient loops)."""
        if t.ndim == 0 or t.dtype == "resource":
            return t.default()
        name = E.fmt("Z_{}_{}", E.dtype(t.dtype), E.lit(t.ndim))
        self.placeholders[name] = t.default()
        return name

    def hoisted(self):
        """The lines defining the dead-value placeholders, for the top of the function body."""
        return [E.fmt("    {} = {}", name, expr) for name, expr in self.placeholders.items()]

    def fresh(self, base):
        """A new local <base><n>_ (base: a name written in the generator)."""
        self._n += 1
        return E.ident(base, self._n, tail="_")

    def _type(self, i, port, what):
        n = self.plan.nodes[i]
        ts = self.types.get(n.name)
        if port == 0 and self.plan.kind[i] == MERGE and ts is not None and ts[0].shape is None:
            lifted = self._lifted(i)
            if lifted is not None:
                return lifted
        if port == 0 and n.op == "StackPush" and ts is not None and ts[0].shape is None:
            return self._type(*self.plan.ins[i][1], what)     # its output is the pushed value
        try:
            return Type(ts[port] if ts is not None and port < len(ts) else None, f"{what} {n.name} output {port}")
        except Unsupported as e:
            raise Blocked(n.name, str(e)) from None

    def _lifted(self, i):
        """The Type of a gradient lift Merge (dfc/compiler/autodiff/gradients.py `lift`): a value computed in
        one cond branch merged with a scalar zero Const from the other, only to be pushed for the gradient
        (whose cond reads it only in that branch). Its inferred rank is unknown; compiled code gives it the
        value's type and a placeholder of that type where the dummy is taken. None if i is no such Merge."""
        p = self.plan
        if not self._pushed_only(i):
            return None
        real, dummies = {}, []
        for s, port in p.ins[i]:
            n = p.nodes[s]
            t = self.types.get(n.name)[port]
            if n.op == "Const" and t.shape == ():
                dummies.append((s, t.dtype))
            elif t.shape is None and p.kind[s] == MERGE and port == 0 and self._lifted(s) is not None:
                inner = self._lifted(s)         # a lift of a lift (nested conds)
                real[(inner.dtype, inner.ndim)] = inner
            elif t.shape is None or t.dtype not in _DTYPES:
                return None
            else:
                real[(t.dtype, len(t.shape))] = Type(t, "lift")
        if len(real) != 1 or not dummies or any(d != next(iter(real))[0] for _, d in dummies):
            return None
        self.lift_dummies.setdefault(i, {s for s, _ in dummies})
        return next(iter(real.values()))

    def _pushed_only(self, i):
        """Whether Merge i's value is only pushed (output 0 into StackPush slot 1), directly or through lift
        Merges of nested conds."""
        p = self.plan
        if any(p.out_edges[i][1:]):
            return False
        return all((p.nodes[d].op == "StackPush" and slot == 1) or (p.kind[d] == MERGE and self._pushed_only(d))
                   for d, slot in p.out_edges[i][0])

    # ------------------------------------------------------------ references
    def ref(self, sp, a):
        s, port = sp
        if s in a.switches:
            return E.ident("v", a.switches[s], 0)
        if s in a.producer:
            c = a.producer[s][1]
            return E.ident("x", c, self.plan.frame_exits[c].index(s))
        return E.ident("v", s, port)

    def dead(self, sp, a):
        """The dead flag of a value, or None if it is never dead."""
        s, port = sp
        if s in a.switches:
            return None
        if s in a.producer:
            c = a.producer[s][1]
            return E.ident("dx", c, self.plan.frame_exits[c].index(s)) if self.exits_may_die[c] else None
        return E.ident("d", s, port) if (s, port) in self.flagged else None

    def w(self, ind, template, *parts):
        """Add the line fmt(template, *parts) at indentation ind (emit.Lines.w)."""
        self.lines.w(ind, template, *parts)

    # ------------------------------------------------------------ frames
    def _frame(self, a, ind, enter_exprs):
        p = self.plan
        w = self.w
        v, x, dx, count = (lambda j: E.ident("v", j, 0)), (lambda k: E.ident("x", a.fid, k)), \
            (lambda k: E.ident("dx", a.fid, k)), E.ident("it", a.fid)
        for k, e in enumerate(a.enters):
            w(ind, "{} = {}", v(e), enter_exprs[k])
        for m in a.merges:
            w(ind, "{} = {}", v(m), v(p.ins[m][0][0]))
        exit_merge = [a.switches[p.ins[e][0][0]] for e in a.exits]
        for k, m in enumerate(exit_merge):
            w(ind, "{} = {}", x(k), v(m))
            w(ind, "{} = False", dx(k))
        w(ind, "{} = np.int64(0)", count)       # the iteration (the fused path's tag), for TensorArray writes
        self.buffers.open(a, ind)
        w(ind, "while True:")
        ind2 = E.deeper(ind)
        self.frame_chain.append(a.fid)
        self.fusion.plan_frame(a)
        for it in a.order:
            if it not in a.body:
                self._item(it, a, ind2)
        pred_sp = p.ins[a.loop_cond][0]
        t = self._type(pred_sp[0], pred_sp[1], "loop predicate")
        if t.dtype != "bool" or t.ndim != 0:
            raise Blocked(p.nodes[a.loop_cond].name, f"loop predicate is {t.dtype} of rank {t.ndim}, not one bool")
        pred, pdead = self.ref(pred_sp, a), self.dead(pred_sp, a)
        self.exits_may_die[a.fid] = pdead is not None
        if pdead is not None:
            w(ind2, "if {}:", pdead)
            for k in range(len(a.exits)):
                w(ind2, "    {} = True", dx(k))
            w(ind2, "    break")
        w(ind2, "if not {}:", pred)
        for k, m in enumerate(exit_merge):
            w(ind2, "    {} = {}", x(k), v(m))
        w(ind2, "    break")
        for it in a.order:
            if it in a.body:
                self._item(it, a, ind2)
        nexts = []
        for m in a.merges:
            nx = [s for s, _ in p.ins[m] if p.kind[s] == NEXT][0]
            sp = p.ins[nx][0]
            flag = self.dead(sp, a)
            if flag is not None:      # e.g. a cond's Merge: live whenever its predicate is; if not, the
                w(ind2, "if {}:", flag)  # fused path replays the frame (its loop variables are never dead)
                w(ind2, "    raise ValueError('a loop variable is dead')")
            nexts.append(self.ref(sp, a))
        if a.merges:
            w(ind2, "{}= {}", E.items([v(m) for m in a.merges]), E.items(nexts))
        w(ind2, "{} += 1", count)
        self.buffers.close()
        self.frame_chain.pop()

    def _item(self, it, a, ind):
        try:
            self._item_code(it, a, ind)
        except Unsupported as err:
            node = self.plan.nodes[it[1]].name if it[0] == "node" else None
            raise Blocked(node, str(err)) from None
        except E.EmitError as err:      # a bug in a lowering: the frame runs fused (correct) and says why
            node = self.plan.nodes[it[1]] if it[0] == "node" else None
            raise Blocked(node and node.name, f"internal error compiling {node.op if node else 'a group'} "
                                              f"({err}); please report it") from None

    def _item_code(self, it, a, ind):
        p = self.plan
        w = self.w
        if it[0] == "frame":
            c = it[1]
            ca = self.an[c]
            args = [self.ref(p.ins[e][0], a) for e in ca.enters]
            deads = [d for d in (self.dead(p.ins[e][0], a) for e in ca.enters) if d]
            w(ind, "# loop frame {}", E.lit(c))
            if deads:
                w(ind, "if {}:", E.join(" or ", deads))
                for k, e in enumerate(p.frame_exits[c]):
                    w(ind, "    {} = {}", E.ident("x", c, k), self.dead_value(self._type(e, 0, "Exit")))
                    w(ind, "    {} = True", E.ident("dx", c, k))
                w(ind, "else:")
                self._frame(ca, E.deeper(ind), args)
                self.exits_may_die[c] = True
            else:
                self._frame(ca, ind, args)
            return
        i = it[1]
        node = p.nodes[i]
        w(ind, "# node {}", E.lit(i))
        v, d = (lambda k: E.ident("v", i, k)), (lambda k: E.ident("d", i, k))
        args = [self.ref(sp, a) for sp in p.ins[i]]
        deads = [d for d in (self.dead(sp, a) for sp in p.ins[i]) if d]
        deads += [d for d in (self.dead((c, 0), a) for c in p.ctrl_ins[i]) if d]
        nout = len(p.out_edges[i])
        kind = p.kind[i]
        if kind == SWITCH:
            t = self._type(p.ins[i][1][0], p.ins[i][1][1], "Switch predicate")
            if t.dtype != "bool" or t.ndim != 0:
                raise Blocked(node.name, f"Switch predicate is {t.dtype} of rank {t.ndim}, not one bool")
            data, pr = args
            w(ind, "{} = {} = {}", v(0), v(1), data)
            dd = E.fmt("({}) or ", E.join(" or ", deads)) if deads else E.fmt("")
            w(ind, "{} = {}{}", d(0), dd, pr)
            w(ind, "{} = {}not {}", d(1), dd, pr)
            self.flagged.update({(i, 0), (i, 1)})
            return
        if kind == MERGE:
            t = self._type(i, 0, "Merge")
            dummies = self.lift_dummies.get(i, ())
            args = [self.dead_value(t) if sp[0] in dummies else arg for sp, arg in zip(p.ins[i], args)]
            for k, sp in enumerate(p.ins[i]):
                if sp[0] in dummies:
                    continue
                ti = self._type(sp[0], sp[1], "Merge input")
                if (ti.dtype, ti.ndim) != (t.dtype, t.ndim):
                    raise Blocked(node.name, "Merge inputs of different types")
            flags = [self.dead(sp, a) for sp in p.ins[i]]
            first = True
            for k, (arg, fl) in enumerate(zip(args, flags)):
                if fl is None:          # a live input: the chain ends here
                    pad = ind if first else E.deeper(ind)
                    if not first:
                        w(ind, "else:")
                    w(pad, "{}, {}, {} = {}, np.int32({}), False", v(0), v(1), d(0), arg, E.lit(k))
                    break
                w(ind, "if not {}:" if first else "elif not {}:", fl)
                w(ind, "    {}, {}, {} = {}, np.int32({}), False", v(0), v(1), d(0), arg, E.lit(k))
                first = False
            else:
                w(ind, "else:")
                w(ind, "    {}, {}, {} = {}, np.int32(0), True", v(0), v(1), d(0), self.dead_value(t))
            if all(flags):
                self.flagged.update({(i, 0), (i, 1)})
            w(ind, "{} = {}", d(1), d(0))
            return
        if kind == EXIT:
            raise Blocked(node.name, "an Exit outside its frame's Switch")
        if i in self.fusion.inline:
            return              # computed inside its consumer's elementwise group
        if i in self.fusion.roots:
            self.fusion.emit(i, a, ind)
            return
        low = LOWERINGS.get(node.op)
        if low is None:
            why = NOT_LOWERED.get(node.op)
            raise Blocked(node.name, f"op {node.op} has no lowering" + (f" ({why})" if why else ""))
        ins = [self._type(s, port, "input") for s, port in p.ins[i]]
        outs = [self._type(i, k, "output") for k in range(nout)]
        pad = ind
        if deads:
            w(ind, "if {}:", E.join(" or ", deads))
            for k in range(max(nout, 1)):
                w(ind, "    {} = True", d(k))
            for k in range(nout):
                w(ind, "    {} = {}", v(k), self.dead_value(outs[k]))
            w(ind, "else:")
            pad = E.deeper(ind)
            for k in range(max(nout, 1)):
                self.flagged.add((i, k))
                w(pad, "{} = False", d(k))
        view = self.buffers.view(i, args[0], outs[0]) if node.op in RESHAPES and nout == 1 else None
        if view is not None:        # a view of a loop's buffer, made when the loop starts (buffers.py)
            w(pad, "{} = {}", v(0), view)
            return
        e = Emit(self, node, args, ins, outs, pad, i)
        try:
            exprs = low(e)
        except Unsupported as err:
            raise Blocked(node.name, str(err)) from None
        if len(exprs) != nout:
            raise Blocked(node.name, f"lowering gave {len(exprs)} outputs, the op has {nout}")
        for k, x in enumerate(exprs):
            w(pad, "{} = {}", v(k), x)
