"""The gradient table: op name -> rule(op, *output_grads) -> one gradient per data input.

`op` is an OpView (gradients.py): `op.x(k)` / `op.y(p)` are the forward input /
output usable in the gradient context (saved on a stack inside loops, so a rule
only saves what it uses), `op.input(k)` the forward tensor itself (for static
types), `op.shape_in(k)` its shape as a tensor. None means "no gradient".
Every op of the registry is in GRADS, NOT_DIFFERENTIABLE or STRUCTURAL (a test
checks it): unsupported is a rule, not a missing key.
"""
import string

import numpy as np

from dfc.compiler import ops_api as K
from dfc.compiler.tracing import current_builder
from dfc.compiler.autodiff import tensor_array_grad as ta_grad
from dfc.compiler.autodiff import linalg_grads
from dfc.compiler.autodiff import custom_gradient
from dfc.errors import DfcError


def _make(op, inputs, attrs=None):
    return current_builder().make1(op, inputs, attrs)


def _known(shape):
    return shape is not None and None not in shape


def unbroadcast(op, k, g):
    """g (shaped like the op's output) summed down to the shape of input k."""
    s = op.input(k).shape
    if _known(s) and tuple(s) == tuple(g.shape or ()) and _known(g.shape):
        return g
    return _make("SumToShape", (g, op.shape_in(k)))


def _binary(fx, fy):
    return lambda op, g: [unbroadcast(op, 0, fx(op, g)), unbroadcast(op, 1, fy(op, g))]


def _axes(op):
    rank = op.input(0).ndim
    axis = op.attrs["axis"]
    if axis is None:
        return None if rank is None else list(range(rank))
    axis = [axis] if isinstance(axis, int) else list(axis)
    if rank is None:
        if any(a < 0 for a in axis):
            raise DfcError(f"gradient of {op.type} over negative axes needs a known rank: use non-negative "
                           f"axes, or give the input a known rank (a TensorSpec with a shape, or "
                           f"dfc.reshape with a shape list)", node=op.node.name)
        return sorted(axis)
    return sorted(a % max(rank, 1) for a in axis)


def _keep_dims(op, t):
    """A reduction result t reshaped as with keepdims=True."""
    if op.attrs["keepdims"]:
        return t
    axes = _axes(op)
    if axes is None:        # full reduction of unknown rank: t is a scalar, broadcasting is enough
        return t
    for a in axes:
        t = K.expand_dims(t, a)
    return t


def _sum_grad(op, g):
    return [_make("BroadcastTo", (_keep_dims(op, g), op.shape_in(0)))]


def _count(op):
    """Number of elements reduced into each output element, as the input dtype."""
    x, z = op.input(0), op.output(0)
    if _known(x.shape) and _known(z.shape):
        return float(np.prod(x.shape) / max(np.prod(z.shape), 1))
    return K.cast(K.reduce_prod(op.shape_in(0)) // K.maximum(K.reduce_prod(op.shape_out(0)), 1), x.dtype)


def _mean_grad(op, g):
    return [K.divide(_sum_grad(op, g)[0], _count(op))]


def _extremum_grad(op, g):
    x, z = op.x(0), op.y(0)
    mask = K.cast(K.equal(x, _keep_dims(op, z)), x.dtype)
    ties = K.reduce_sum(mask, op.attrs["axis"], keepdims=True)
    return [K.divide(mask * _keep_dims(op, g), ties)]


def _prod_grad(op, g):
    return [K.divide(_make("BroadcastTo", (_keep_dims(op, g * op.y(0)), op.shape_in(0))), op.x(0))]


def _matmul_grad(op, g, need=(True, True)):
    """[d a, d b] of a @ b (transposes as the op says); need[k] False leaves input k's gradient None (its
    factors are summed elsewhere: autodiff/loop_matmul.py)."""
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    mm = K.matmul
    ga = gb = None
    sizes = None if ta or tb else _concat_sizes(op)
    if need[0] and sizes is not None:
        # a = concat([p_1, ..., p_n], axis=1) (an RNN cell's [x_t, h]): d p_k = g @ b[rows of p_k]^T, each a
        # product of its own, so a piece whose gradient nobody needs (x_t's) is pruned with its product
        # instead of being computed and sliced off (a third of an LSTM step's GEMM work). The rows of b are a
        # contiguous block of it.
        b, parts, start = op.x(1), [], 0
        for size in sizes:
            parts.append(mm(g, K.getitem(b, (slice(start, start + size), slice(None))), transpose_b=True))
            start += size
        ga = K.concat(parts, 1)
        op.gs.concat_parts[ga.ref] = (sizes, parts)
    elif need[0]:
        b = op.x(1)
        ga = (mm(g, b, transpose_b=not tb) if not ta else
              mm(b, g, transpose_b=True) if not tb else mm(b, g, transpose_a=True, transpose_b=True))
    if need[1]:
        a = op.x(0)
        gb = (mm(a, g, transpose_a=not ta) if not tb else
              mm(g, a, transpose_a=True) if not ta else mm(g, a, transpose_a=True, transpose_b=True))
    if op.input(0).ndim == 2 and op.input(1).ndim == 2:
        return [ga, gb]
    return [None if ga is None else unbroadcast(op, 0, ga), None if gb is None else unbroadcast(op, 1, gb)]


def _concat_sizes(op):
    """The static sizes of the pieces when a 2-D matmul's input 0 is a Concat of two or more 2-D pieces along
    axis 1 (their static column counts), else None."""
    t = op.input(0)
    node = op.gs.graph.nodes.get(t.node)
    if node is None or node.op != "Concat" or t.port != 0 or t.ndim != 2 or op.input(1).ndim != 2 or \
            node.attrs.get("axis") not in (1, -1):
        return None
    from dfc.compiler.autodiff.gradients import norm_ref
    pieces = [op.gs.tensor(norm_ref(r)) for r in node.data_inputs]
    sizes = [None if x.ndim != 2 else x.shape[1] for x in pieces]
    return sizes if len(sizes) > 1 and None not in sizes else None


def _cast_grad(op, g):
    src = op.input(0).dtype
    return [K.cast(g, src) if src in ("float32", "float64") else None]


def _transpose_grad(op, g):
    perm = op.attrs["perm"]
    return [K.transpose(g, None if perm is None else list(np.argsort(perm)))]


def _dynamic_partition_grad(op, *gs):
    """Stitch the partitions' gradients back to where their rows came from (TensorFlow's rule)."""
    parts = op.x(1)
    where = K.reshape(K.range(K.size(parts)), K.shape(parts))
    positions = current_builder().make("DynamicPartition", (where, parts), dict(op.attrs))
    gs = [g if g is not None else op.gs.zeros_for(op.output(p)) for p, g in enumerate(gs)]
    flat = _make("DynamicStitch", tuple(positions) + tuple(gs))
    return [K.reshape(flat, K.shape(op.x(0))), None]


def _concat_grad(op, g):
    rank = op.input(0).ndim
    if rank is None:
        raise DfcError("gradient of concat needs inputs of known rank: give them one (a TensorSpec with a "
                       "shape, or dfc.reshape with a shape list)", node=op.node.name)
    ax = op.attrs["axis"] % rank
    parts = op.gs.concat_parts.get(getattr(g, "ref", None))
    if parts is not None and ax == 1 and parts[0] == [op.input(k).shape[ax] for k in range(op.n_inputs)]:
        return list(parts[1])       # g is the concat of these pieces' gradients (_matmul_grad)
    out, start = [], 0
    for k in range(op.n_inputs):
        d = op.input(k).shape[ax]
        size = d if d is not None else op.shape_in(k)[ax]
        stop = start + size
        out.append(K.getitem(g, (slice(None),) * ax + (slice(start, stop),)))
        start = stop
    return out


def _unstack_grad(op, *gs):
    gs = [g if g is not None else op.gs.zeros_for(op.output(p)) for p, g in enumerate(gs)]
    return [K.stack(gs, axis=op.attrs["axis"])]


def _getitem_grad(op, g):
    idx = [op.x(k) for k in range(1, op.n_inputs)]
    return [_make("GetItemGrad", [g, op.shape_in(0)] + idx, {"spec": op.attrs["spec"]})] + [None] * len(idx)


def _getitem_grad_grad(op, g):
    idx = [op.x(k) for k in range(2, op.n_inputs)]
    return [_make("GetItem", [g] + idx, {"spec": op.attrs["spec"]}), None] + [None] * len(idx)


def _where_grad(op, g):
    c = op.x(0)
    zero = K.zeros_like(g)
    return [None, unbroadcast(op, 1, K.where(c, g, zero)), unbroadcast(op, 2, K.where(c, zero, g))]


def _int_exponent(op):
    """The exponent of Pow `op` if it is a constant small whole number (1 to 4), else None."""
    from dfc.compiler.autodiff.gradients import _source
    node = op.gs.graph.nodes[_source(op.gs.graph, op.refs[1])]
    if node.op != "Const":
        return None
    v = np.asarray(node.attrs["value"])
    if v.ndim or v.dtype.kind != "f" or not np.isfinite(v) or v != np.round(v) or not 1 <= v <= 4:
        return None
    return int(v)


def _pow_grad(op, g):
    x, y = op.x(0), op.x(1)
    n = _int_exponent(op)
    if n is None:
        gx = g * y * K.pow(x, y - 1)
    else:   # x ** 3 as x * x * x, as JAX's integer_pow: a general pow is ~100x slower on a negative base
        power = K.ones_like(x) if n == 1 else x
        for _ in range(n - 2):
            power = power * x
        gx = g * y * power
    pos = K.greater(x, 0)
    gy = g * op.y(0) * K.where(pos, K.log(K.where(pos, x, K.ones_like(x))), K.zeros_like(x))
    return [unbroadcast(op, 0, gx), unbroadcast(op, 1, gy)]


def _select(cond_fn):
    def rule(op, g):
        mask = cond_fn(op.x(0), op.x(1))
        zero = K.zeros_like(g)
        return [unbroadcast(op, 0, K.where(mask, g, zero)), unbroadcast(op, 1, K.where(mask, zero, g))]
    return rule


def _softmax_grad(op, g):
    z = op.y(0)
    return [z * (g - K.reduce_sum(g * z, op.attrs["axis"], keepdims=True))]


def _log_softmax_grad(op, g):
    return [g - K.exp(op.y(0)) * K.reduce_sum(g, op.attrs["axis"], keepdims=True)]


GRADS = {
    # elementwise binary (broadcasting summed back by unbroadcast)
    "Add": _binary(lambda op, g: g, lambda op, g: g),
    "Sub": _binary(lambda op, g: g, lambda op, g: -g),
    "Mul": _binary(lambda op, g: g * op.x(1), lambda op, g: g * op.x(0)),
    "Div": _binary(lambda op, g: g / op.x(1), lambda op, g: -g * op.x(0) / K.square(op.x(1))),
    "Mod": _binary(lambda op, g: g, lambda op, g: -g * K.floordiv(op.x(0), op.x(1))),
    "Pow": _pow_grad,
    "Maximum": _select(K.greater_equal),
    "Minimum": _select(K.less_equal),
    "Where": _where_grad,
    # elementwise unary
    "Neg": lambda op, g: [-g],
    "Abs": lambda op, g: [g * K.sign(op.x(0))],
    "Square": lambda op, g: [g * 2 * op.x(0)],
    "Sqrt": lambda op, g: [g * 0.5 / op.y(0)],
    "Rsqrt": lambda op, g: [g * -0.5 * K.pow(op.y(0), 3)],
    "Exp": lambda op, g: [g * op.y(0)],
    "Log": lambda op, g: [g / op.x(0)],
    "Log1p": lambda op, g: [g / (1 + op.x(0))],
    "Sin": lambda op, g: [g * K.cos(op.x(0))],
    "Cos": lambda op, g: [-g * K.sin(op.x(0))],
    "Tanh": lambda op, g: [g * (1 - K.square(op.y(0)))],
    "Sigmoid": lambda op, g: [g * op.y(0) * (1 - op.y(0))],
    "Reciprocal": lambda op, g: [-g * K.square(op.y(0))],
    "Relu": lambda op, g: [K.where(K.greater(op.y(0), 0), g, K.zeros_like(g))],
    "Identity": lambda op, g: [g],
    "Cast": _cast_grad,
    # shapes and indexing
    "Fill": lambda op, g: [None, _make("SumToShape", (g, op.shape_in(1)))],
    "Reshape": lambda op, g: [K.reshape(g, list(op.input(0).shape) if _known(op.input(0).shape)
                                         else op.shape_in(0)), None],
    "Transpose": _transpose_grad,
    "ExpandDims": lambda op, g: [K.reshape(g, op.shape_in(0))],
    "Squeeze": lambda op, g: [K.reshape(g, op.shape_in(0))],
    "Concat": _concat_grad,
    "Stack": lambda op, g: list(K.unstack(g, op.n_inputs, op.attrs["axis"])),
    "Unstack": _unstack_grad,
    "Split": lambda op, *gs: [K.concat([g if g is not None else op.gs.zeros_for(op.output(p))
                                        for p, g in enumerate(gs)], axis=op.attrs["axis"])],
    "BroadcastTo": lambda op, g: [_make("SumToShape", (g, op.shape_in(0))), None],
    "SumToShape": lambda op, g: [_make("BroadcastTo", (g, op.shape_in(0))), None],
    "GetItem": _getitem_grad,
    "GetItemGrad": _getitem_grad_grad,
    "Gather": lambda op, g: [_make("ScatterAdd", (op.shape_in(0), op.x(1), g), {"axis": op.attrs["axis"]}),
                             None],
    "ScatterAdd": lambda op, g: [None, None, K.gather(g, op.x(1), op.attrs["axis"])],
    "DynamicPartition": _dynamic_partition_grad,
    # each data tensor gets the rows of the gradient it was stitched to (indices are distinct in routing)
    "DynamicStitch": lambda op, g: [None] * (op.n_inputs // 2) +
    [K.gather(g, op.x(k)) for k in range(op.n_inputs // 2)],
    # reductions and nn
    "Sum": _sum_grad,
    "Mean": _mean_grad,
    "Max": _extremum_grad,
    "Min": _extremum_grad,
    "Prod": _prod_grad,
    "Softmax": _softmax_grad,
    "LogSoftmax": _log_softmax_grad,
    "MatMul": _matmul_grad,
    # state
    "ReadVariable": lambda op, g: [g],
    # TensorArrays (§5.2): read <-> write, stack <-> unstack, gather <-> scatter
    "TensorArrayRead": ta_grad.read_grad,
    "TensorArrayWrite": ta_grad.write_grad,
    "TensorArrayStack": ta_grad.stack_grad,
    "TensorArrayUnstack": ta_grad.unstack_grad,
    "TensorArrayGather": ta_grad.gather_grad,
    "TensorArrayScatter": ta_grad.scatter_grad,
    "TensorArrayConcat": ta_grad.concat_grad,
}

# ------------------------------------------------------------------ the numpy surface (issue 15)


def _cumsum_grad(op, g):
    return [_make("Cumsum", (g,), {"axis": op.attrs["axis"], "reverse": not op.attrs["reverse"]})]


def _cumprod_grad(op, g):
    return [_make("CumprodGrad", (op.x(0), g), dict(op.attrs))]


def _cumprod_grad_grad(op, g):
    raise DfcError("the second derivative of cumprod is not supported: for positive x write it as "
                   "dfc.exp(dfc.cumsum(dfc.log(x))), or dfc.stop_gradient the first gradient",
                   node=op.node.name)


def _take_along_axis_grad(op, g):
    return [_make("TakeAlongAxisGrad", (g, op.shape_in(0), op.x(1)), {"axis": op.attrs["axis"]}), None]


def _top_k_grad(op, g_values, g_indices):
    if g_values is None:
        return [None]
    return [_make("TakeAlongAxisGrad", (g_values, op.shape_in(0), op.y(1)), {"axis": -1})]


def _pad_grad(op, g):
    p = op.attrs["paddings"]
    inner = g[tuple(slice(p[2 * i], -p[2 * i + 1] or None) for i in range(len(p) // 2))]
    return [inner, K.reduce_sum(g) - K.reduce_sum(inner)]


def _einsum_grad(op, g):
    """Operand k's gradient is itself an einsum: of g and the other operands, to operand k's subscripts.
    A letter only operand k has (summed there) comes back through a vector of ones; a letter repeated in
    operand k ('ii->i') gets a fresh letter tied to the first by an identity matrix."""
    from dfc.compiler.numpy_api import eye
    from dfc.ir.ops import parse_einsum
    eq = op.attrs["equation"]
    ins, out = parse_einsum(eq, op.n_inputs)
    fresh = iter([c for c in string.ascii_letters if c not in eq])
    grads = []
    for k, sub in enumerate(ins):
        others = [out] + [s for j, s in enumerate(ins) if j != k]
        if "..." in sub and not any("..." in s for s in others):
            raise DfcError(f"gradient of einsum {eq!r}: operand {k}'s '...' dimensions are summed away: "
                           f"name them with letters instead of '...'", node=op.node.name)
        present = set("".join(others).replace("...", ""))
        extra, extra_subs, seen = [], [], set()
        shape = op.input(k).shape

        def size(axis):
            return shape[axis] if shape is not None and shape[axis] is not None else op.shape_in(k)[axis]

        def letter(c, axis):
            if c in seen:
                f = next(fresh)
                extra.append(eye(size(axis), dtype=g.dtype))
                extra_subs.append(c + f)
                return f
            seen.add(c)
            if c not in present:
                extra.append(K.ones([size(axis)], g.dtype))
                extra_subs.append(c)
            return c

        head, dots, tail = sub.partition("...")
        target = "".join(letter(c, i) for i, c in enumerate(head)) + dots + \
            "".join(letter(c, i - len(tail)) for i, c in enumerate(tail))
        if not dots and any("..." in s for s in others):
            target = "..." + target      # numpy sums no '...' dimensions away: unbroadcast does
        vals = [g] + [op.x(j) for j in range(op.n_inputs) if j != k] + extra
        gk = _make("Einsum", vals, {"equation": ",".join(others + extra_subs) + "->" + target})
        grads.append(unbroadcast(op, k, gk))
    return grads


GRADS.update({
    "Cumsum": _cumsum_grad,
    "Cumprod": _cumprod_grad,
    "CumprodGrad": _cumprod_grad_grad,
    "TakeAlongAxis": _take_along_axis_grad,
    "TakeAlongAxisGrad": lambda op, g: [_make("TakeAlongAxis", (g, op.x(2)), {"axis": op.attrs["axis"]}),
                                        None, None],
    "TopK": _top_k_grad,
    "Pad": _pad_grad,
    "Einsum": _einsum_grad,
    "CustomGradient": custom_gradient.backprop,     # calls the user's grad_fn
})
GRADS.update(linalg_grads.GRADS)

# Zero or undefined derivative, integer/bool results, sources, state and side effects.
NOT_DIFFERENTIABLE = frozenset("""
    Less LessEqual Greater GreaterEqual Equal NotEqual LogicalAnd LogicalOr LogicalNot IsFinite
    IsNan IsInf ArgSort SearchSorted
    Sign Floor Ceil Round FloorDiv StopGradient ZerosLike OnesLike OneHot All Any ArgMax ArgMin
    Const Placeholder Range RandomUniform RandomNormal Shape Size Rank LoopCond NoOp Print Assert
    VarHandle Assign AssignAdd AssignSub ApplyOnce StackV2 StackPush StackPop
    TensorArray TensorArraySize TensorArrayGrad Save Restore Send Recv
    Progress SummaryScalar SummaryHistogram Timestamp
    QueueHandle QueueEnqueue QueueEnqueueMany QueueDequeue QueueDequeueMany QueueSize QueueClose
    AccumulatorHandle AccumulatorApplyGradient AccumulatorTakeGradient AccumulatorNumAccumulated
    AccumulatorSetGlobalStep ResourceScatterAdd ResourceScatterSub SumDuplicates
""".split())

# Control-flow primitives: their gradients are the dual constructs built by control_flow_grad
# (Switch <-> Merge for cond; Enter <-> Exit, accumulators and a reversed loop for while_loop).
STRUCTURAL = frozenset("Switch Merge Enter Exit NextIteration".split())
