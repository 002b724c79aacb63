"""Forward-mode (JVP) rules: op name -> rule(op, *input_tangents) -> one tangent per output.

`op` is a JvpView (below): `op.x(k)` / `op.y(p)` are the forward input / output usable in the
context the tangent is built in (the forward node's own). A tangent is None where it is zero.
Common ops have a rule here; any other op with a reverse rule in op_grads.GRADS gets its JVP by
transposing its VJP (`transpose_vjp`), so every differentiable op has one. TensorArrays get a
parallel tangent TensorArray; stacks (the saved values of a gradient through a loop) a parallel
tangent stack, pushed and popped in the same order as the forward one.
"""
from dfc.compiler import ops_api as K
from dfc.compiler.tracing import current_builder
from dfc.errors import DfcError
from dfc.ir import dtypes as dt


class JvpView:
    """What a JVP rule sees of a forward node."""

    def __init__(self, fs, node):
        self.fs, self.node, self.attrs, self.type = fs, node, node.attrs, node.op
        from dfc.compiler.autodiff.gradients import norm_ref
        self.refs = [norm_ref(r) for r in node.data_inputs]

    @property
    def n_inputs(self):
        return len(self.refs)

    def x(self, k):
        return self.fs.fwd(self.refs[k])

    def y(self, p=0):
        return self.fs.fwd(f"{self.node.name}:{p}")

    def remake(self, subs, port=None):
        """The same op with input k replaced by subs[k] (a linear op applied to tangents)."""
        ins = [subs[k] if k in subs else self.x(k) for k in range(self.n_inputs)]
        outs = current_builder().make(self.type, ins, dict(self.attrs))
        return list(outs) if port is None else outs[port]


def _make(op, inputs, attrs=None, **kw):
    return current_builder().make1(op, inputs, attrs, **kw)


def zeros(t):
    """Zeros shaped like forward tensor t, built in the current context."""
    if t.shape is not None and None not in t.shape:
        return K.zeros(list(t.shape), t.dtype)
    return K.zeros_like(t)


def fit(op, t, p=0):
    """Tangent t broadcast to the shape of output p (an input broadcast by the op has a smaller tangent)."""
    y = op.y(p)
    if t is None:
        return None
    if t.dtype != y.dtype:
        t = K.cast(t, y.dtype)
    if y.shape is not None and None not in y.shape and t.shape is not None and tuple(t.shape) == tuple(y.shape):
        return t
    return _make("BroadcastTo", (t, K.shape(y)))


def _linear(*ks):
    """An op linear in inputs ks (the others are not differentiated): the op applied to the tangents."""
    def rule(op, *ts):
        if all(ts[k] is None for k in ks):
            return [None] * len(op.fs.b.tensors[op.node.name])
        return op.remake({k: ts[k] if ts[k] is not None else zeros(op.x(k)) for k in ks})
    return rule


def linear_all(op, *ts):
    """Concat, Stack: linear in all inputs together (zeros for an input without a tangent)."""
    return _linear(*range(op.n_inputs))(op, *ts)


def multilinear(op, *ts):
    """Einsum: linear in each input separately, so the sum over inputs of the op with that one's tangent."""
    total = None
    for k, t in enumerate(ts):
        if t is not None:
            term = op.remake({k: t}, port=0)
            total = term if total is None else total + term
    return [total]


def _add(op, ta, tb):
    t = ta if tb is None else tb if ta is None else K.add(ta, tb)
    return [fit(op, t)]


def _sub(op, ta, tb):
    t = ta if tb is None else -tb if ta is None else K.subtract(ta, tb)
    return [fit(op, t)]


def _mul(op, ta, tb):
    parts = [] if ta is None else [ta * op.x(1)]
    parts += [] if tb is None else [op.x(0) * tb]
    return [fit(op, parts[0] if len(parts) == 1 else parts[0] + parts[1])]


def _div(op, ta, tb):
    b = op.x(1)
    if tb is None:
        return [fit(op, ta / b)]
    t = -(op.y(0) * tb) if ta is None else ta - op.y(0) * tb
    return [fit(op, t / b)]


def _select(cmp):
    def rule(op, ta, tb):
        a, b = op.x(0), op.x(1)
        ta = ta if ta is not None else zeros(a)
        tb = tb if tb is not None else zeros(b)
        return [fit(op, K.where(cmp(a, b), ta, tb))]
    return rule


def _where(op, _tc, ta, tb):
    ta = ta if ta is not None else zeros(op.x(1))
    tb = tb if tb is not None else zeros(op.x(2))
    return [fit(op, K.where(op.x(0), ta, tb))]


def _matmul(op, ta, tb):
    ta_, tb_ = op.attrs["transpose_a"], op.attrs["transpose_b"]
    parts = [] if ta is None else [K.matmul(ta, op.x(1), ta_, tb_)]
    parts += [] if tb is None else [K.matmul(op.x(0), tb, ta_, tb_)]
    return [fit(op, parts[0] if len(parts) == 1 else parts[0] + parts[1])]


def _softmax(op, t):
    y = op.y(0)
    return [y * (t - K.reduce_sum(t * y, op.attrs["axis"], keepdims=True))]


def _log_softmax(op, t):
    return [t - K.reduce_sum(K.exp(op.y(0)) * t, op.attrs["axis"], keepdims=True)]


def _cast(op, t):
    out = op.y(0).dtype
    return [K.cast(t, out) if out in dt.FLOATS else None]


def _unary(f):
    return lambda op, t: [f(op, t)]


JVPS = {
    "Add": _add, "Sub": _sub, "Mul": _mul, "Div": _div,
    "Maximum": _select(K.greater_equal), "Minimum": _select(K.less_equal), "Where": _where,
    "Neg": _unary(lambda op, t: -t),
    "Abs": _unary(lambda op, t: t * K.sign(op.x(0))),
    "Square": _unary(lambda op, t: t * 2 * op.x(0)),
    "Sqrt": _unary(lambda op, t: t * 0.5 / op.y(0)),
    "Exp": _unary(lambda op, t: t * op.y(0)),
    "Log": _unary(lambda op, t: t / op.x(0)),
    "Log1p": _unary(lambda op, t: t / (1 + op.x(0))),
    "Sin": _unary(lambda op, t: t * K.cos(op.x(0))),
    "Cos": _unary(lambda op, t: -t * K.sin(op.x(0))),
    "Tanh": _unary(lambda op, t: t * (1 - K.square(op.y(0)))),
    "Sigmoid": _unary(lambda op, t: t * op.y(0) * (1 - op.y(0))),
    "Reciprocal": _unary(lambda op, t: -t * K.square(op.y(0))),
    "Relu": _unary(lambda op, t: K.where(K.greater(op.y(0), 0), t, K.zeros_like(t))),
    "Cast": _cast,
    "MatMul": _matmul,
    "Softmax": _softmax,
    "LogSoftmax": _log_softmax,
}
for _name in ("Identity Reshape Transpose ExpandDims Squeeze GetItem Gather BroadcastTo SumToShape Sum Mean "
              "Cumsum Unstack Split TakeAlongAxis").split():
    JVPS[_name] = _linear(0)
JVPS["ScatterAdd"] = _linear(2)
JVPS["GetItemGrad"] = _linear(0)
JVPS["TakeAlongAxisGrad"] = _linear(0)
JVPS.update({"Concat": linear_all, "Stack": linear_all, "Einsum": multilinear})


# ------------------------------------------------------------------ any op with a reverse rule


def transpose_vjp(op, *ts):
    """J t from the op's VJP u -> J^T u: the VJP is linear in u, so d/du <J^T u, t> = J t. Built with the
    loop-free reverse mode in the forward node's context; u's value is never read."""
    from dfc.compiler.autodiff.gradients import GradState, OpView, gradients
    from dfc.compiler.autodiff.op_grads import GRADS
    b = current_builder()
    outs = b.tensors[op.node.name]
    us = [zeros(op.y(p)) if t.dtype in dt.FLOATS else None for p, t in enumerate(outs)]
    in_grads = GRADS[op.type](OpView(GradState(b, b.ctx), op.node), *us)
    total = None
    for g, t in zip(in_grads, ts):
        if g is None or t is None:
            continue
        term = K.reduce_sum(K.multiply(g, K.cast(t, g.dtype) if t.dtype != g.dtype else t))
        total = term if total is None else total + term
    live = [u for u in us if u is not None]
    if total is None or not live:
        return [None] * len(outs)
    got = iter(gradients(total, live))
    return [None if u is None else next(got) for u in us]


# ------------------------------------------------------------------ TensorArrays


def tensor_array(op, *ts):
    """TensorArray ops act on the parallel tangent TensorArray: writes write tangents, reads read them."""
    fs, kind = op.fs, op.type
    if kind == "TensorArraySize":
        return [None]
    th, base_flow = fs.tangent_ta(op.refs[0])
    tflow = ts[-1] if ts[-1] is not None else base_flow
    attrs = dict(op.attrs)
    if kind in ("TensorArrayRead", "TensorArrayStack", "TensorArrayGather", "TensorArrayConcat"):
        if ts[-1] is None:
            return [None]
        middle = [op.x(k) for k in range(1, op.n_inputs - 1)]
        return [_make(kind, [th] + middle + [tflow], attrs)]
    # TensorArrayWrite / Unstack / Scatter: the value is the input before the flow
    v = op.n_inputs - 2
    tv = ts[v] if ts[v] is not None else zeros(op.x(v))
    if tv.dtype != op.x(v).dtype:
        tv = K.cast(tv, op.x(v).dtype)
    middle = [op.x(k) for k in range(1, v)]
    return [_make(kind, [th] + middle + [tv, tflow], attrs)]


TA_OPS = frozenset("TensorArrayRead TensorArrayWrite TensorArrayStack TensorArrayGather TensorArrayConcat "
                   "TensorArrayUnstack TensorArrayScatter TensorArraySize".split())


# ------------------------------------------------------------------ stacks (a gradient's saved values)


def stack_push(op, _th, te):
    """A push of a forward value: push its tangent on a parallel stack, in the same order (the same control
    inputs, and whatever waits for the forward push waits for this one too)."""
    if te is None:
        return [None]
    fs, b = op.fs, current_builder()
    ts = fs.tangent_stack(op.refs[0], create=True)
    push = _make("StackPush", (ts, te), control=op.node.control_inputs,
                 name=b.unique(f"{op.node.name}_tangent"))
    _mirror_waiters(fs, op.node.name, push.node)
    return [push]


def stack_pop(op, _th):
    fs, b = op.fs, current_builder()
    ts = fs.tangent_stack(op.refs[0], create=False)
    if ts is None:
        if fs.pushed_between(op.refs[0]):     # its pushes were not swept first: never a silent zero
            raise DfcError("internal: forward mode reached a stack pop before its pushes", node=op.node.name)
        return [None]
    pop = _make("StackPop", (ts,), dict(op.attrs), control=op.node.control_inputs,
                name=b.unique(f"{op.node.name}_tangent"))
    _mirror_waiters(fs, op.node.name, pop.node)
    return [pop]


def _mirror_waiters(fs, original, new):
    for name in fs.waiters.get(original, ()):
        fs.graph.add_control_input(name, new)


STACK_OPS = {"StackPush": stack_push, "StackPop": stack_pop}


def not_supported(op):
    return DfcError(f"forward mode (dfc.jvp) has no rule for op {op.type}", node=op.node.name, loc=op.node.loc)


__all__ = ["JVPS", "JvpView", "transpose_vjp", "tensor_array", "TA_OPS", "STACK_OPS", "linear_all", "multilinear",
           "zeros", "fit", "not_supported"]
