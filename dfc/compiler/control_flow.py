"""cond and while_loop lowered to Switch/Merge/Enter/Exit/NextIteration (§4.2).

cond: one Switch per external tensor a branch captures (shared by both
branches), one Merge per output. while_loop: Figure 4 for each loop variable
(Enter -> Merge -> Switch -> Identity -> body -> NextIteration -> Merge, and
Switch -> Exit), a LoopCond on the predicate, and a constant Enter for each
captured tensor.
"""
import numpy as np

from dfc import config, nest
from dfc.errors import DfcError, DfcTypeError
from dfc.ir import dtypes as dt
from dfc.ir.dtypes import TType
from dfc.ir.graph import parse_input
from dfc.ir.loops import LoopBuilder
from dfc.compiler.control_deps import suspended
from dfc.compiler.tracing import Tensor, capture, convert, current_builder, is_weak, const_array, \
    user_location


class Context:
    """A control-flow context: where a node is built and how outside tensors get in."""

    def __init__(self, builder, outer):
        self.builder, self.outer = builder, outer
        self.captured = {}
        self.pivot = None
        # Set on the contexts gradients() builds: the forward loop / cond branch they differentiate.
        self.fwd_loop = self.fwd_branch = None

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
        # The loop variables' Figure 4 nodes (read by the gradient code), and the frame's LoopCond.
        self.loop = loop_builder(builder, self)
        self.loop_cond = None
        self.constant_enters = []

    enters = property(lambda self: self.loop.enters)
    merges = property(lambda self: self.loop.merges)
    switches = property(lambda self: self.loop.switches)
    identities = property(lambda self: self.loop.identities)
    next_iterations = property(lambda self: self.loop.next_iterations)
    exits = property(lambda self: self.loop.exits)

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


def loop_builder(b, ctx, name_of=None):
    """A LoopBuilder for loop variables of loop context `ctx`: Enters are built in the
    enclosing context, Exits lead back out to it; node names are `name_of(role)` (default
    FRAME_role: while_enter, while_merge, ..., while_body for the Identities)."""
    outer = ctx.outer

    def make(op, inputs, attrs, role, ttype):
        where, out = {"Enter": (outer, ctx), "Exit": (ctx, outer)}.get(op, (ctx, ctx))
        name = name_of(role) if name_of is not None else f"{ctx.frame_name}_{role}"
        with suspended(b):      # Figure 4 stays as it is; the loop's condition and body wait instead
            outs = b.make(op, inputs, attrs, ctx=where, out_ctx=out, name=b.unique(name))
        if ttype is not None:
            outs[0].ttype = ttype
        return outs
    return LoopBuilder(b.graph, make, ctx.frame_name, ctx.parallel_iterations)


# ---------------------------------------------------------------- cond


def cond(pred, true_fn, false_fn, names=None, name=None):
    """Equivalent Python: `return true_fn() if pred else false_fn()`.

    Only the taken branch runs; both are built. Both must return the same
    structure with matching dtypes (Python scalars take the other branch's
    dtype). A Python bool `pred` just calls one branch; so does any `pred` outside a graph
    (dfc.config.run_functions_eagerly, or numpy values), which must then be a scalar.
    """
    if current_builder(required=False) is None:
        from dfc.compiler import eager
        return eager.cond(pred, true_fn, false_fn)
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
            d = config.default_float() if float in (type(tv), type(fv)) else \
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

_MAX_ATTEMPTS = 6     # traces of one while_loop call before its variables' types must have settled


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
    change become unknown). Up to `parallel_iterations` iterations run at once (an
    int >= 1). `maximum_iterations` (an int >= 0 or an integer scalar tensor) stops
    the loop after that many iterations; other values are a DfcTypeError.

    The body is traced again (at most a few times) while the variables' types
    settle; a loop nested in it reuses what it settled to in the previous trace,
    so nesting does not multiply the retraces.

    Outside a graph (dfc.config.run_functions_eagerly, or numpy values) it is the Python loop
    above, with maximum_iterations and the same checks of what the body returns.
    """
    loc = user_location()
    parallel_iterations, maximum_iterations = _loop_options(parallel_iterations, maximum_iterations, loc)
    if current_builder(required=False) is None:
        from dfc.compiler import eager
        return eager.while_loop(cond_fn, body_fn, loop_vars, maximum_iterations)
    b = current_builder()
    call = _LoopCall(cond_fn, body_fn, loop_vars, parallel_iterations, maximum_iterations, swap_memory,
                     names, name, loc)
    start = call.start_types()
    site = b.loop_site.child()
    out = _build_from_hint(b, call, site, start)
    if out is None:
        out = _build_settled(b, call, site, start)
    return out[0] if call.single else out


_INT64_MAX = 2 ** 63 - 1


def _count(value, what, least, loc):
    """value as a Python int in [least, int64's maximum], or a DfcTypeError naming the user's line."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise DfcTypeError(f"{what} must be an integer, got {type(value).__name__} {value!r}"[:300], loc=loc)
    if not least <= int(value) <= _INT64_MAX:
        raise DfcTypeError(f"{what} must be in [{least}, 2**63 - 1], got {int(value)}", loc=loc)
    return int(value)


def _loop_options(parallel_iterations, maximum_iterations, loc):
    """while_loop's parallel_iterations (an int >= 1) and maximum_iterations (None, an int >= 0 or an integer
    scalar tensor), checked where the user gives them: the graph holds them as int64."""
    parallel_iterations = _count(parallel_iterations, "while_loop parallel_iterations", 1, loc)
    m = maximum_iterations
    if m is not None and not isinstance(m, Tensor) and hasattr(m, "_dfc_tensor"):
        m = m._dfc_tensor()
    if isinstance(m, Tensor):
        if m.dtype not in dt.INTS or m.shape not in (None, ()):
            raise DfcTypeError(f"while_loop maximum_iterations must be an integer scalar, got a tensor of "
                               f"{m.dtype} {dt.format_shape(m.shape)}", loc=loc)
    elif m is not None:
        m = _count(m, "while_loop maximum_iterations", 0, loc)
    return parallel_iterations, m


class _LoopCall:
    """One dfc.while_loop call: its functions, its loop variables (flattened) and options."""

    def __init__(self, cond_fn, body_fn, loop_vars, parallel_iterations, maximum_iterations, swap_memory,
                 names, name, loc):
        self.cond_fn, self.body_fn = cond_fn, body_fn
        self.single = not isinstance(loop_vars, (tuple, list))
        self.lv = (loop_vars,) if self.single else tuple(loop_vars)
        self.flat = nest.flatten(self.lv, True)
        names = list(names or [])
        self.labels = [names[k] if k < len(names) else f"loop variable {k}" for k in range(len(self.flat))]
        self.weak = [is_weak(v) or (isinstance(v, Tensor) and v.weak) for v in self.flat]
        self.parallel_iterations, self.max_iters = parallel_iterations, maximum_iterations
        self.swap_memory, self.name, self.loc = swap_memory, name, loc

    def start_types(self):
        """The loop variables' own types: where the first trace starts."""
        dtypes, shapes = [], []
        for v in self.flat:
            if v is None:
                raise DfcTypeError("a loop variable is None", loc=self.loc)
            t = v if isinstance(v, Tensor) else None
            if t is None and hasattr(v, "_dfc_tensor"):
                t = v._dfc_tensor()
            a = None if t is not None else const_array(v)
            dtypes.append(t.dtype if t is not None else a.dtype.name)
            shapes.append(t.shape if t is not None else a.shape)
        return _LoopTypes(dtypes, shapes)

    def key(self, start):
        """What an earlier trace of this loop must share for its settled types to be reused."""
        codes = tuple(getattr(fn, "__code__", None) for fn in (self.cond_fn, self.body_fn))
        return (self.loc, codes, tuple(self.labels), tuple(self.weak), self.max_iters is None, start.key())


class _LoopTypes:
    """What one trace of a loop assumes: its variables' dtypes and shapes, and whether it
    carries an effect token (its body has side effects)."""

    def __init__(self, dtypes, shapes, token=False):
        self.dtypes, self.shapes, self.token = list(dtypes), list(shapes), token

    def key(self):
        return tuple(self.dtypes), tuple(self.shapes), self.token


class _Retrace(Exception):
    """The body does not keep the types the loop was built with: build it again with `types`."""

    def __init__(self, types):
        super().__init__("retrace")
        self.types = types


def _build_settled(b, call, site, start):
    """Build the loop from its variables' own types, tracing it again while they settle."""
    types = start
    for _attempt in range(_MAX_ATTEMPTS):
        mark = b.mark()
        try:
            with b.tracing_loop(site):
                ctx, out = _build_loop(b, call, types)
        except _Retrace as r:
            b.rollback(mark)
            types = r.types
            continue
        if types.key() != start.key():
            site.settled[call.key(start)] = (types, _captured_types(ctx))
        return out
    raise DfcTypeError("loop variable types did not settle after several retraces", loc=call.loc)


def _build_from_hint(b, call, site, start):
    """The loop built directly with the types an earlier trace of it settled to (in an earlier
    trace of the loop around it), or None when there is none or this trace of the body is not
    the same as that one (it then builds as usual, from its variables' own types)."""
    hint = site.settled.get(call.key(start))
    if hint is None:
        return None
    types, captured = hint
    mark = b.mark()
    try:
        with b.tracing_loop(site):
            ctx, out = _build_loop(b, call, types)
        if _captured_types(ctx) == captured:
            return out
    except Exception:    # noqa: BLE001 — the usual build meets the same error if it is one
        pass
    b.rollback(mark)
    return None


def _captured_types(ctx):
    """The types (constant values included) of the outside tensors a loop body used."""
    def value_key(v):
        return None if v is None else (v.dtype.str, v.shape, v.tobytes())
    return [(e.dtype, e.shape, value_key(e.ttype.value)) for e in ctx.constant_enters]


def _build_loop(b, call, types):
    """One trace of the loop as Figure 4, assuming `types`; returns (its context, its results).

    Raises _Retrace when the body gives a variable another dtype or shape, or has a first
    side effect (the loop then carries an effect token)."""
    outer = b.ctx
    ctx = WhileContext(b, outer, b.unique(call.name or "while"), int(call.parallel_iterations),
                       bool(call.swap_memory))
    inits, limit = _initial_values(b, call, types, ctx)
    n_user = len(call.flat)
    for k, t in enumerate(inits):
        m = ctx.loop.enter(t, TType(t.dtype, types.shapes[k] if k < n_user else t.shape))
        m.weak = k < n_user and call.weak[k]
    b.ctx = ctx
    try:
        ctx.pivot = ctx.merges[0]
        if types.token:   # a side effect in the condition waits for the previous iteration's effects
            ctx.token = ctx.merges[-1]
        ctx.loop_cond = ctx.loop.loop_cond(_condition(b, call, ctx, limit))
        _start_iteration(call, ctx, types)
        nexts = _next_values(b, call, ctx, types)
        ctx.loop.close(nexts)
    finally:
        b.ctx = outer
    # A variable that started as a Python scalar stays weak only if the body kept it weak: `s = 0;
    # s += x` with a float32 x is a float32 result, like any float32 tensor.
    weak = [w and t.weak for w, t in zip(call.weak, nexts)]
    return ctx, _exit(b, call, ctx, types, weak)


def _initial_values(b, call, types, ctx):
    """The values the loop starts from, as tensors of `types` outside it: the user's variables,
    then an iteration counter (with maximum_iterations) and an effect token (with side effects).
    Returns (those values, the iteration limit or None)."""
    outer = ctx.outer
    inits = []
    for v, d in zip(call.flat, types.dtypes):
        t = v._dfc_tensor() if hasattr(v, "_dfc_tensor") and not isinstance(v, Tensor) else v
        t = convert(t, d) if isinstance(t, Tensor) else _const_in(b, outer, t, d)
        inits.append(capture(t, outer, b, call.loc))
    limit = None
    if call.max_iters is not None:
        inits.append(_const_in(b, outer, 0, "int64"))
        limit = convert(call.max_iters, "int64") if isinstance(call.max_iters, Tensor) else \
            _const_in(b, outer, int(call.max_iters), "int64")
    if types.token:
        prev = b.last_effect.get(outer) or (outer.effect_entry() if outer is not None else None)
        inits.append(b.make1("Const", (), {"value": const_array(0, "int32")}, ctx=outer,
                             control=[prev] if prev else [], name=b.unique(f"{ctx.frame_name}_token")))
    return inits, limit


def _condition(b, call, ctx, limit):
    """cond_fn on the Merges, as a bool scalar, and'ed with `counter < limit` if there is one."""
    from dfc.compiler import ops_api
    n_user = len(call.flat)
    pred = call.cond_fn(*nest.pack_sequence_as(call.lv, list(ctx.merges[:n_user]), True))
    if not isinstance(pred, Tensor):
        if not hasattr(pred, "_dfc_tensor"):
            raise DfcTypeError(f"the condition of {ctx.frame_name} returned a Python "
                               f"{type(pred).__name__}, not a tensor; use a Python while loop instead",
                               loc=call.loc)
        pred = pred._dfc_tensor()
    if pred.dtype != "bool":
        pred = ops_api.cast(pred, "bool")
    if pred.shape not in (None, ()):
        raise DfcTypeError(f"loop condition must be a scalar, got shape {dt.format_shape(pred.shape)}",
                           loc=call.loc)
    if limit is not None:
        pred = ops_api.logical_and(ops_api.less(ctx.merges[n_user], limit), pred)
    return pred


def _start_iteration(call, ctx, types):
    """A Switch on the LoopCond and an Identity for every variable: what the body sees."""
    ctx.loop.iterate(ctx.loop_cond)
    for m, ident in zip(ctx.merges, ctx.identities):
        ident.weak = m.weak
    ctx.pivot = ctx.identities[0]
    if types.token:
        ctx.token = ctx.identities[-1]


def _next_values(b, call, ctx, types):
    """body_fn on the Identities: the next iteration's values (counter and token included),
    which must keep `types`."""
    from dfc.compiler import ops_api
    n_user = len(call.flat)
    out = call.body_fn(*nest.pack_sequence_as(call.lv, list(ctx.identities[:n_user]), True))
    if len(call.lv) == 1 and not isinstance(out, (tuple, list)):
        out = (out,)
    if isinstance(out, list):
        out = tuple(out)
    if not nest.same_structure(call.lv, out, expand_composites=True):
        raise DfcTypeError(f"the body of {ctx.frame_name} returns {_desc(out)} but the loop variables are "
                           f"{_desc(call.lv)}", loc=call.loc)
    outs = _body_outputs(b, call, ctx, types, nest.flatten(out, True))
    if call.max_iters is not None:
        outs.append(ops_api.add(ctx.identities[n_user], 1))
    if types.token:
        outs.append(b.make1("Identity", (ctx.token,), control=[b.last_effect[ctx]],
                            name=b.unique(f"{ctx.frame_name}_effects")))
    return outs


def _body_outputs(b, call, ctx, types, oflat):
    """The body's results as tensors in the loop; raises _Retrace with the types a new trace
    needs if they do not match `types`."""
    settled = _LoopTypes(types.dtypes, types.shapes, types.token)
    outs = []
    for k, v in enumerate(oflat):
        if v is None:
            raise DfcTypeError(f"{call.labels[k]} became None in the loop body", loc=call.loc)
        if isinstance(v, Tensor) or hasattr(v, "_dfc_tensor"):
            t = capture(convert(v), ctx, b, call.loc)
        else:
            t = _const_in(b, ctx, v, types.dtypes[k] if is_weak(v) else None)
        if not iterates(b, ctx.identities, t.node):
            t = _in_iteration(b, ctx, t)
        if t.dtype != types.dtypes[k]:
            if not (call.weak[k] and _widens(types.dtypes[k], t.dtype)):
                raise DfcTypeError(f"{call.labels[k]} changes dtype from {types.dtypes[k]} to {t.dtype} in "
                                   f"the loop body; cast it so every iteration has one dtype", loc=call.loc)
            settled.dtypes[k] = t.dtype
        shape = types.shapes[k]
        joined = dt.join_shapes(shape, t.shape)
        if joined != (None if shape is None else tuple(shape)):
            settled.shapes[k] = joined
        outs.append(t)
    if not types.token and b.last_effect.get(ctx):
        settled.token = True
    if settled.key() != types.key():
        raise _Retrace(settled)
    return outs


def iterates(b, identities, name):
    """Whether node `name` of a loop body runs once per iteration: it depends (by data or control, through
    the body's nodes) on `identities`, the Identities of the loop variables. A value computed only from
    constant Enters (the loop's inputs from outside) does not: passed to NextIteration as it is, it would
    also be live after the loop's last iteration."""
    idents = {t.node for t in identities}
    stack, seen = [name], {name}
    while stack:
        n = stack.pop()
        if n in idents:
            return True
        node = b.graph.nodes[n]
        if node.op == "Enter":
            continue
        for r in node.inputs:
            src = parse_input(r)[0]
            if src not in seen:
                seen.add(src)
                stack.append(src)
    return False


def _in_iteration(b, ctx, t):
    """t (a loop-invariant value of the body) as an Identity run once per iteration (under the pivot)."""
    out = b.make1("Identity", (t,), ctx=ctx, control=[ctx.pivot.node],
                  name=b.unique(f"{ctx.frame_name}_invariant"))
    out.ttype, out.weak = t.ttype, getattr(t, "weak", False)
    return out


def _exit(b, call, ctx, types, weak):
    """An Exit for every variable (weakly typed where `weak` says); the loop's results."""
    exits = ctx.loop.exit_all()
    for ex, w in zip(exits, weak):
        ex.weak = w
    if types.token:
        b.last_effect[ctx.outer] = exits[-1].node
    b.loops[ctx.frame_name] = ctx
    return tuple(nest.pack_sequence_as(call.lv, list(exits[:len(call.flat)]), True))


def _widens(old, new):
    return old in dt.INTS + ("bool",) and new in dt.NUMERIC or (old == "float32" and new == "float64")


__all__ = ["cond", "while_loop", "Context", "CondBranch", "WhileContext", "DfcError"]
