"""cond and while_loop lowered to Switch/Merge/Enter/Exit/NextIteration (§4.2).

cond: one Switch per external tensor a branch captures (shared by both
branches), one Merge per output. while_loop: Figure 4 for each loop variable
(Enter -> Merge -> Switch -> Identity -> body -> NextIteration -> Merge, and
Switch -> Exit), a LoopCond on the predicate, and a constant Enter for each
captured tensor.
"""
from dfc import nest
from dfc.errors import DfcError, DfcTypeError
from dfc.ir import dtypes as dt
from dfc.ir.dtypes import TType
from dfc.compiler.tracing import Tensor, capture, convert, current_builder, is_weak, const_array, \
    user_location


class Context:
    """A control-flow context: where a node is built and how outside tensors get in."""

    def __init__(self, builder, outer):
        self.builder, self.outer = builder, outer
        self.captured = {}
        self.pivot = None

    def pivot_name(self):
        return self.pivot.node

    def effect_entry(self):
        """Name of the node a first side effect in this context must wait for, if any."""
        return None

    def _cached(self, ref):
        t = self.captured.get(ref)
        if t is not None and t.node in self.builder.graph.nodes:
            return t
        return None

    def frame_context(self):
        c = self
        while c is not None and not isinstance(c, WhileContext):
            c = c.outer
        return c


class CondBranch(Context):
    def __init__(self, builder, outer, state, branch):
        super().__init__(builder, outer)
        self.state, self.branch = state, branch
        self.pivot = self.capture(state.pred)
        self.pivot = builder.make1("Identity", (self.pivot,), ctx=self, name=builder.unique(
            f"{state.name}_{'true' if branch else 'false'}_pivot"))

    def describe(self):
        return f"the {'true' if self.branch else 'false'} branch of {self.state.name}"

    def capture(self, t):
        """t lives in self.outer; return the Switch output that guards it into this branch."""
        b, st = self.builder, self.state
        sw = st.switches.get(t.ref)
        if sw is None or sw.node not in b.graph.nodes:
            sw = st.switches[t.ref] = b.make1("Switch", (t, st.pred), ctx=self.outer,
                                              name=b.unique(f"{st.name}_switch"))
        return Tensor(b, sw.node, self.branch, TType(t.dtype, t.shape, t.ttype.value), self)

    def effect_entry(self):
        c = self.outer
        prev = self.builder.last_effect.get(c)
        if prev is None and c is not None:
            prev = c.effect_entry()
        return prev


class CondState:
    def __init__(self, pred, name, outer=None):
        self.pred, self.name, self.switches = pred, name, {}
        # filled in as the cond is built (gradients may look at a cond still being built)
        self.outer, self.merges, self.branches = outer, [], {}


class WhileContext(Context):
    def __init__(self, builder, outer, frame_name, parallel_iterations, swap_memory):
        super().__init__(builder, outer)
        self.frame_name, self.parallel_iterations = frame_name, parallel_iterations
        self.swap_memory = swap_memory
        self.token = None
        # Filled while building; read by the gradient code.
        self.enters, self.merges, self.switches, self.identities = [], [], [], []
        self.next_iterations, self.exits, self.loop_cond = [], [], None
        self.constant_enters = []

    def describe(self):
        return f"the body of loop {self.frame_name}"

    def capture(self, t):
        """t lives in self.outer; return the constant Enter that makes it visible in every iteration."""
        hit = self._cached(t.ref)
        if hit is not None:
            return hit
        b = self.builder
        e = b.make1("Enter", (t,), {"frame_name": self.frame_name, "is_constant": True,
                                    "parallel_iterations": self.parallel_iterations},
                    ctx=self.outer, out_ctx=self, name=b.unique(f"{self.frame_name}_enter"))
        e.ttype = TType(t.dtype, t.shape, t.ttype.value)
        self.captured[t.ref] = e
        self.constant_enters.append(e)
        return e

    def effect_entry(self):
        return None if self.token is None else self.token.node


# ---------------------------------------------------------------- cond


def cond(pred, true_fn, false_fn, names=None, name=None):
    """Equivalent Python: `return true_fn() if pred else false_fn()`.

    Only the taken branch runs; both are built. Both must return the same
    structure with matching dtypes (Python scalars take the other branch's
    dtype). A Python bool `pred` just calls one branch.
    """
    if not isinstance(pred, Tensor):
        if hasattr(pred, "_dfc_tensor"):
            pred = pred._dfc_tensor()
        else:
            return true_fn() if pred else false_fn()
    b = current_builder()
    loc = user_location()
    if pred.dtype != "bool":
        from dfc.compiler.ops_api import cast
        pred = cast(pred, "bool")
    if pred.shape not in (None, ()):
        raise DfcTypeError(f"cond predicate must be a scalar, got shape {dt.format_shape(pred.shape)}", loc=loc)
    outer = b.ctx
    pred = capture(pred, outer, b, loc)
    state = CondState(pred, b.unique(name or "cond"), outer)
    branches = []
    for branch, fn in ((1, true_fn), (0, false_fn)):
        ctx = CondBranch(b, outer, state, branch)
        b.ctx = ctx
        try:
            out = fn()
        finally:
            b.ctx = outer
        branches.append((ctx, out))
    (tctx, tout), (fctx, fout) = branches
    if not nest.same_structure(tout, fout, expand_composites=True):
        raise DfcTypeError(f"the branches of {state.name} return different structures: {_desc(tout)} vs "
                           f"{_desc(fout)}", loc=loc)
    tflat, fflat = nest.flatten(tout, True), nest.flatten(fout, True)
    names = list(names or [])
    merged = []
    for k, (tv, fv) in enumerate(zip(tflat, fflat)):
        label = names[k] if k < len(names) else f"output {k}"
        if tv is None and fv is None:
            merged.append(None)
            continue
        if tv is None or fv is None:
            raise DfcTypeError(f"{label} is None in one branch of {state.name} but not the other", loc=loc)
        both_weak = all(is_weak(v) or (isinstance(v, Tensor) and v.weak) for v in (tv, fv))
        tv, fv = _unify_pair(b, tctx, tv, fctx, fv, label, state.name, loc)
        m = b.make("Merge", (fv, tv), ctx=outer, name=b.unique(f"{state.name}_merge"),
                   raw=True)
        m[0].weak = both_weak
        merged.append(m[0])
    state.merges = [m for m in merged if m is not None]
    state.branches = {1: tctx, 0: fctx}
    state.outer = outer
    b.conds = getattr(b, "conds", {})
    for m in state.merges:
        b.conds[m.node] = state
    tok_t, tok_f = b.last_effect.get(tctx), b.last_effect.get(fctx)
    if tok_t or tok_f:
        toks = []
        for ctx, last in ((fctx, tok_f), (tctx, tok_t)):
            toks.append(b.make1("Identity", (ctx.pivot,), ctx=ctx, control=[last] if last else [],
                                name=b.unique(f"{state.name}_effects")))
        tok = b.make("Merge", toks, ctx=outer, name=b.unique(f"{state.name}_effects_merge"),
                     raw=True)
        b.last_effect[outer] = tok[0].node
    return nest.pack_sequence_as(tout, merged, expand_composites=True)


def _desc(x):
    return repr(nest.map_structure(lambda v: type(v).__name__, x)) if nest.is_nested(x) else type(x).__name__


def _unify_pair(b, tctx, tv, fctx, fv, label, cname, loc):
    """Both branch outputs as tensors of one dtype, each living in its branch."""
    tt, ft = isinstance(tv, Tensor) or hasattr(tv, "_dfc_tensor"), isinstance(fv, Tensor) or \
        hasattr(fv, "_dfc_tensor")
    if tt:
        tv = _in_ctx(b, tctx, tv)
    if ft:
        fv = _in_ctx(b, fctx, fv)
    if tt and not ft:
        # a Python scalar takes the tensor's dtype unless that changes its value (0.5 against
        # an int tensor): then both take the dtype arithmetic would give them
        d = _scalar_meets(fv, tv.dtype)
        tv, fv = _cast_in(b, tctx, tv, d), _const_in(b, fctx, fv, d)
    elif ft and not tt:
        d = _scalar_meets(tv, fv.dtype)
        tv, fv = _const_in(b, tctx, tv, d), _cast_in(b, fctx, fv, d)
    elif not tt and not ft:
        if is_weak(tv) and is_weak(fv):
            d = "float32" if float in (type(tv), type(fv)) else \
                "int64" if int in (type(tv), type(fv)) else "bool"
        else:
            d = dt.promote(const_array(tv).dtype.name, const_array(fv).dtype.name)
        tv, fv = _const_in(b, tctx, tv, d), _const_in(b, fctx, fv, d)
    if tv.dtype != fv.dtype:
        raise DfcTypeError(f"{label} is {tv.dtype} in the true branch of {cname} but {fv.dtype} in the false "
                           f"branch", loc=loc)
    return tv, fv


def _in_ctx(b, ctx, v):
    v = convert(v)
    old, b.ctx = b.ctx, ctx
    try:
        return capture(v, ctx, b)
    finally:
        b.ctx = old


def _scalar_meets(v, dtype):
    if not is_weak(v):
        return None
    if dtype == "bool" and v in (0, 1):
        return dtype    # `flag = 0` against a bool tensor stays bool
    from dfc.compiler.ops_api import _weak_to
    return _weak_to(v, dtype)


def _cast_in(b, ctx, t, dtype):
    if dtype is None or t.dtype == dtype:
        return t
    from dfc.compiler.ops_api import cast
    old, b.ctx = b.ctx, ctx
    try:
        return cast(t, dtype)
    finally:
        b.ctx = old


def _const_in(b, ctx, v, dtype):
    old, b.ctx = b.ctx, ctx
    try:
        return convert(v, dtype)
    finally:
        b.ctx = old


# ---------------------------------------------------------------- while_loop


class _Retrace(Exception):
    pass


def while_loop(cond_fn, body_fn, loop_vars, parallel_iterations=32, maximum_iterations=None,
               swap_memory=False, names=None, name=None):
    """Equivalent Python:

        while cond_fn(*loop_vars):
            loop_vars = body_fn(*loop_vars)
        return loop_vars

    `loop_vars` is a tuple/list (or one value, then the result is one value) of
    nested structures of tensors, Python scalars and TensorArrays. Python
    scalars are weakly typed: they take the dtype the body gives them. A loop
    variable's dtype may not otherwise change; its shape may (dimensions that
    change become unknown). Up to `parallel_iterations` iterations run at once.
    `maximum_iterations` stops the loop after that many iterations.
    """
    single = not isinstance(loop_vars, (tuple, list))
    lv = (loop_vars,) if single else tuple(loop_vars)
    b = current_builder()
    loc = user_location()
    flat = nest.flatten(lv, True)
    names = list(names or [])
    labels = [names[k] if k < len(names) else f"loop variable {k}" for k in range(len(flat))]
    weak = [is_weak(v) or (isinstance(v, Tensor) and v.weak) for v in flat]
    dtypes, shapes = [], []
    for v in flat:
        if v is None:
            raise DfcTypeError("a loop variable is None", loc=loc)
        t = v if isinstance(v, Tensor) else None
        if t is None and hasattr(v, "_dfc_tensor"):
            t = v._dfc_tensor()
        a = None if t is not None else const_array(v)
        dtypes.append(t.dtype if t is not None else a.dtype.name)
        shapes.append(t.shape if t is not None else a.shape)
    token = False
    for _attempt in range(6):
        cp, effects = b.graph.num_nodes(), dict(b.last_effect)
        try:
            out = _build_loop(b, cond_fn, body_fn, lv, flat, dtypes, shapes, weak, labels, token,
                              parallel_iterations, maximum_iterations, swap_memory, name, loc)
        except _Retrace as r:
            b.graph.remove_nodes_after(cp)
            b.last_effect = effects
            dtypes, shapes, token = r.args
            continue
        return out[0] if single else out
    raise DfcTypeError("loop variable types did not settle after several retraces", loc=loc)


def _build_loop(b, cond_fn, body_fn, lv, flat, dtypes, shapes, weak, labels, token, par, max_iters,
                swap_memory, name, loc):
    outer = b.ctx
    ctx = WhileContext(b, outer, b.unique(name or "while"), int(par), bool(swap_memory))
    inits = []
    for v, d in zip(flat, dtypes):
        t = v._dfc_tensor() if hasattr(v, "_dfc_tensor") and not isinstance(v, Tensor) else v
        t = convert(t, d) if isinstance(t, Tensor) else _const_in(b, outer, t, d)
        inits.append(capture(t, outer, b, loc))
    n_user = len(inits)
    extra = []
    if max_iters is not None:
        extra.append("counter")
        inits.append(_const_in(b, outer, 0, "int64"))
        limit = convert(max_iters, "int64") if isinstance(max_iters, Tensor) else _const_in(b, outer,
                                                                                           int(max_iters), "int64")
    if token:
        extra.append("token")
        prev = b.last_effect.get(outer) or (outer.effect_entry() if outer is not None else None)
        inits.append(b.make1("Const", (), {"value": const_array(0, "int32")}, ctx=outer,
                             control=[prev] if prev else [], name=b.unique(f"{ctx.frame_name}_token")))
    all_shapes = list(shapes) + [t.shape for t in inits[n_user:]]
    for k, t in enumerate(inits):
        e = b.make1("Enter", (t,), {"frame_name": ctx.frame_name, "is_constant": False,
                                    "parallel_iterations": ctx.parallel_iterations},
                    ctx=outer, out_ctx=ctx, name=b.unique(f"{ctx.frame_name}_enter"))
        ctx.enters.append(e)
        m = b.make1("Merge", (e, e), ctx=ctx, name=b.unique(f"{ctx.frame_name}_merge"))
        m.ttype = TType(t.dtype, all_shapes[k])
        m.weak = k < n_user and weak[k]
        ctx.merges.append(m)
    b.ctx = ctx
    try:
        ctx.pivot = ctx.merges[0]
        if token:   # a side effect in the condition waits for the previous iteration's effects
            ctx.token = ctx.merges[-1]
        user_vars = nest.pack_sequence_as(lv, list(ctx.merges[:n_user]), True)
        pred = cond_fn(*user_vars)
        if not isinstance(pred, Tensor):
            if hasattr(pred, "_dfc_tensor"):
                pred = pred._dfc_tensor()
            else:
                raise DfcTypeError(f"the condition of {ctx.frame_name} returned a Python "
                                   f"{type(pred).__name__}, not a tensor; use a Python while loop instead",
                                   loc=loc)
        from dfc.compiler import ops_api
        if pred.dtype != "bool":
            pred = ops_api.cast(pred, "bool")
        if pred.shape not in (None, ()):
            raise DfcTypeError(f"loop condition must be a scalar, got shape {dt.format_shape(pred.shape)}",
                               loc=loc)
        if max_iters is not None:
            counter = ctx.merges[n_user]
            pred = ops_api.logical_and(ops_api.less(counter, limit), pred)
        ctx.loop_cond = b.make1("LoopCond", (pred,), name=b.unique(f"{ctx.frame_name}_loop_cond"))
        for m in ctx.merges:
            sw = b.make("Switch", (m, ctx.loop_cond), name=b.unique(f"{ctx.frame_name}_switch"))
            ctx.switches.append(sw)
            ident = b.make1("Identity", (sw[1],), name=b.unique(f"{ctx.frame_name}_body"))
            ident.weak = m.weak
            ctx.identities.append(ident)
        ctx.pivot = ctx.identities[0]
        if token:
            ctx.token = ctx.identities[-1]
        body_vars = nest.pack_sequence_as(lv, list(ctx.identities[:n_user]), True)
        out = body_fn(*body_vars)
        if len(lv) == 1 and not isinstance(out, (tuple, list)):
            out = (out,)
        if isinstance(out, list) and isinstance(lv, tuple):
            out = tuple(out)
        if not nest.same_structure(lv, out, expand_composites=True):
            raise DfcTypeError(f"the body of {ctx.frame_name} returns {_desc(out)} but the loop variables are "
                               f"{_desc(lv)}", loc=loc)
        oflat = nest.flatten(out, True)
        outs = []
        new_dtypes, new_shapes, retrace = list(dtypes), list(shapes), False
        for k, v in enumerate(oflat):
            if v is None:
                raise DfcTypeError(f"{labels[k]} became None in the loop body", loc=loc)
            if isinstance(v, Tensor) or hasattr(v, "_dfc_tensor"):
                t = capture(convert(v), ctx, b, loc)
            else:
                t = _const_in(b, ctx, v, dtypes[k] if is_weak(v) else None)
            if t.dtype != dtypes[k]:
                if weak[k] and _widens(dtypes[k], t.dtype):
                    new_dtypes[k], retrace = t.dtype, True
                else:
                    raise DfcTypeError(f"{labels[k]} changes dtype from {dtypes[k]} to {t.dtype} in the loop "
                                       f"body; cast it so every iteration has one dtype", loc=loc)
            joined = dt.join_shapes(shapes[k], t.shape)
            if joined != (None if shapes[k] is None else tuple(shapes[k])):
                new_shapes[k], retrace = joined, True
            outs.append(t)
        if not token and b.last_effect.get(ctx):
            token, retrace = True, True
        if retrace:
            raise _Retrace(new_dtypes, new_shapes, token)
        if max_iters is not None:
            outs.append(ops_api.add(ctx.identities[n_user], 1))
        if token:
            outs.append(b.make1("Identity", (ctx.token,), control=[b.last_effect[ctx]],
                                name=b.unique(f"{ctx.frame_name}_effects")))
        for m, t in zip(ctx.merges, outs):
            nx = b.make1("NextIteration", (t,), name=b.unique(f"{ctx.frame_name}_next"))
            ctx.next_iterations.append(nx)
            node = b.graph.nodes[m.node]
            node.inputs[1] = nx.ref
        b.graph._types = None
    finally:
        b.ctx = outer
    for sw in ctx.switches:
        ex = b.make1("Exit", (sw[0],), ctx=ctx, out_ctx=outer, name=b.unique(f"{ctx.frame_name}_exit"))
        ex.weak = len(ctx.exits) < n_user and weak[len(ctx.exits)]
        ctx.exits.append(ex)
    if token:
        b.last_effect[outer] = ctx.exits[-1].node
    b.loops = getattr(b, "loops", {})
    b.loops[ctx.frame_name] = ctx
    return tuple(nest.pack_sequence_as(tuple(lv), list(ctx.exits[:n_user]), True))


def _widens(old, new):
    return old in dt.INTS + ("bool",) and new in dt.NUMERIC or (old == "float32" and new == "float64")


def loop_contexts(builder):
    return getattr(builder, "loops", {})


__all__ = ["cond", "while_loop", "Context", "CondBranch", "WhileContext", "DfcError"]
