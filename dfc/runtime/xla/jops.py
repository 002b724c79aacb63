"""dfc's pure kernels written with jax.numpy, for the XLA prototype (lower.py).

Each lowering (the elementwise and reduction tables, and `_OPS`: fn(node, args) -> list of outputs) follows
the numpy kernel of the same op in dfc/runtime/kernels/: the same formula where XLA's rounding would
otherwise differ (Sigmoid through tanh, CumprodGrad's reverse recurrence), numpy's answer where XLA's
operation gives another (float -> int casts, negative indices, stable sorts with ties in index order).
NOT_LOWERED names every other op of the registry with the reason it has no lowering here
(tests/runtime/test_xla_ops.py checks both against the numpy kernels and the registry).
Inputs that must be static for XLA (shapes, slice bounds) arrive as numpy arrays: lower.py folds every op
whose inputs are all concrete with dfc's own numpy kernel, so shape arithmetic never reaches these.
Imported only by lower.py, after jax is.
"""
import numpy as np

import jax.numpy as jnp
from jax import lax

from dfc.errors import DfcGraphError
from dfc.runtime.kernels.math_lower import cast_native

_BINARY = {
    "Add": jnp.add, "Sub": jnp.subtract, "Mul": jnp.multiply, "Div": jnp.true_divide,
    "FloorDiv": jnp.floor_divide, "Mod": jnp.mod, "Pow": jnp.power, "Maximum": jnp.maximum,
    "Minimum": jnp.minimum, "Less": jnp.less, "LessEqual": jnp.less_equal, "Greater": jnp.greater,
    "GreaterEqual": jnp.greater_equal, "Equal": jnp.equal, "NotEqual": jnp.not_equal,
    "LogicalAnd": jnp.logical_and, "LogicalOr": jnp.logical_or,
}
_UNARY = {
    "Neg": jnp.negative, "Abs": jnp.abs, "Sign": jnp.sign, "Square": jnp.square, "Sqrt": jnp.sqrt,
    "Rsqrt": lambda x: 1 / jnp.sqrt(x), "Reciprocal": lambda x: 1 / x, "Exp": jnp.exp, "Log": jnp.log,
    "Log1p": jnp.log1p, "Sin": jnp.sin, "Cos": jnp.cos, "Tanh": jnp.tanh, "Floor": jnp.floor,
    "Ceil": jnp.ceil, "Round": jnp.round, "IsFinite": jnp.isfinite, "IsNan": jnp.isnan, "IsInf": jnp.isinf,
    "LogicalNot": jnp.logical_not,
    "ZerosLike": jnp.zeros_like, "OnesLike": jnp.ones_like,
    "Identity": lambda x: x, "StopGradient": lambda x: x, "LoopCond": lambda x: x,
    "Sigmoid": lambda x: _sigmoid(x),
    "Relu": lambda x: jnp.maximum(x, jnp.zeros((), x.dtype)),
}
_REDUCE = {"Sum": (jnp.sum, True), "Prod": (jnp.prod, True), "Mean": (jnp.mean, True),
           "Max": (jnp.max, False), "Min": (jnp.min, False), "All": (jnp.all, False), "Any": (jnp.any, False)}


def _sigmoid(x):
    h = jnp.asarray(0.5, x.dtype)       # the numpy kernel's formula: one transcendental, stable for large |x|
    return h + h * jnp.tanh(h * x)


class NotLowerable(DfcGraphError):
    """A node the XLA prototype has no lowering for (or a structure it cannot express)."""


class NotStatic(NotLowerable):
    """A value XLA needs when compiling (a shape, a length) is computed from values known only at run time.
    program.py then tries again with the integer scalar inputs as constants (one executable per value)."""


def static(x, node, what):
    """x as a numpy array, which XLA needs (a shape, a slice bound); an error naming the node if x is traced."""
    if isinstance(x, (np.ndarray, np.generic, int, float)):
        return np.asarray(x)
    raise NotStatic(f"{node.op}: the {what} must be known when compiling, but it is computed in the graph",
                    node=node.name)


def _shape(x, node):
    return tuple(int(d) for d in static(x, node, "shape").reshape(-1))


def sum_to_shape(x, shape):
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    if lead:
        x = jnp.sum(x, axis=tuple(range(lead)), dtype=x.dtype)
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and x.shape[i] != 1)
    if axes:
        x = jnp.sum(x, axis=axes, keepdims=True, dtype=x.dtype)
    return jnp.reshape(x, shape)


def build_index(node, spec, dyn):
    idx = []

    def part(p):
        if isinstance(p, dict):
            v = dyn[p["t"]]
            return int(v) if isinstance(v, (np.ndarray, np.generic)) else v
        return p
    for item in spec:
        kind = item[0]
        if kind == "int":
            idx.append(part(item[1]))
        elif kind == "slice":
            bounds = [part(p) for p in item[1:]]
            if any(not isinstance(b, (int, type(None))) for b in bounds):
                raise NotLowerable("a slice with a bound computed in the graph (its size must be static)",
                                   node=node.name)
            idx.append(slice(*bounds))
        elif kind == "newaxis":
            idx.append(None)
        elif kind == "ellipsis":
            idx.append(Ellipsis)
        else:
            idx.append(dyn[item[1]])
    return tuple(idx)


_OPS = {}        # op -> fn(node, args) -> list of outputs, for the ops outside the tables above


def _op(*names):
    def deco(fn):
        for n in names:
            _OPS[n] = fn
        return fn
    return deco


def lower(node, args):
    """The outputs of `node` on jax (or numpy) arrays `args`."""
    op, at = node.op, node.attrs
    if op in _BINARY:
        return [_BINARY[op](args[0], args[1])]
    if op in _UNARY:
        return [_UNARY[op](jnp.asarray(args[0]))]
    if op in _REDUCE:
        fn, keep_dtype = _REDUCE[op]
        axis = at.get("axis")
        axis = tuple(axis) if isinstance(axis, list) else axis
        x = jnp.asarray(args[0])
        kw = {"dtype": x.dtype} if keep_dtype else {}
        return [fn(x, axis=axis, keepdims=at.get("keepdims", False), **kw)]
    fn = _OPS.get(op)
    if fn is None:
        why = NOT_LOWERED.get(op, "no lowering yet")
        raise NotLowerable(f"no XLA lowering for op {op}: {why}", node=node.name)
    return fn(node, [jnp.asarray(a) if isinstance(a, (int, float, bool)) else a for a in args])


def lowered_ops():
    """The names of the ops this module lowers (lower.py and state.py handle the rest)."""
    return set(_BINARY) | set(_UNARY) | set(_REDUCE) | set(_OPS)


# ---------------------------------------------------------------------------- structure and shapes
@_op("Where")
def _where(node, a):
    return [jnp.where(a[0], a[1], a[2])]


@_op("CustomGradient")
def _custom_gradient(node, a):     # forwards its values (its other inputs only mark the gradient's target)
    return list(a[:node.attrs["num_values"]])


@_op("NoOp")
def _noop(node, a):
    return []


@_op("Shape")
def _shape_op(node, a):     # XLA shapes are static: a numpy constant, so shape arithmetic folds
    return [np.array(jnp.shape(a[0]), dtype=np.int64)]


@_op("Size")
def _size(node, a):
    return [np.array(jnp.size(a[0]), dtype=np.int64)]


@_op("Rank")
def _rank(node, a):
    return [np.array(jnp.ndim(a[0]), dtype=np.int64)]


@_op("Reshape")
def _reshape(node, a):
    return [jnp.reshape(a[0], _shape(a[1], node))]


@_op("Fill")
def _fill(node, a):
    v = jnp.asarray(a[1])
    return [jnp.full(_shape(a[0], node), v, dtype=v.dtype)]


@_op("BroadcastTo")
def _broadcast_to(node, a):
    return [jnp.broadcast_to(a[0], _shape(a[1], node))]


@_op("SumToShape")
def _sum_to_shape(node, a):
    return [sum_to_shape(jnp.asarray(a[0]), _shape(a[1], node))]


@_op("Transpose")
def _transpose(node, a):
    return [jnp.transpose(a[0], node.attrs.get("perm"))]


@_op("ExpandDims")
def _expand_dims(node, a):
    return [jnp.expand_dims(a[0], node.attrs["axis"])]


@_op("Squeeze")
def _squeeze(node, a):
    ax = node.attrs.get("axis")
    return [jnp.squeeze(a[0], axis=tuple(ax) if isinstance(ax, list) else ax)]


@_op("Concat")
def _concat(node, a):
    return [jnp.concatenate(a, axis=node.attrs.get("axis", 0))]


@_op("Stack")
def _stack(node, a):
    return [jnp.stack(a, axis=node.attrs.get("axis", 0))]


@_op("Unstack")
def _unstack(node, a):
    ax, num = node.attrs.get("axis", 0), node.attrs["num"]
    x = jnp.asarray(a[0])
    if x.shape[ax] != num:
        raise NotLowerable(f"Unstack of {num} along a dimension of size {x.shape[ax]}", node=node.name)
    return list(jnp.moveaxis(x, ax, 0))


@_op("Split")
def _split(node, a):
    ax, num = node.attrs.get("axis", 0), node.attrs["num"]
    x = jnp.asarray(a[0])
    if x.ndim == 0:
        raise NotLowerable("Split of a scalar", node=node.name)
    k = ax % x.ndim
    n, rem = divmod(x.shape[k], num)
    if rem:
        raise NotLowerable(f"dimension {k} of size {x.shape[k]} does not split into {num} equal parts",
                           node=node.name)
    return [lax.slice_in_dim(x, j * n, (j + 1) * n, axis=k) for j in range(num)]


@_op("Range")
def _range(node, a):
    bounds = [static(v, node, "range (its length)")[()] for v in a]
    return [np.arange(*bounds, dtype=np.asarray(a[0]).dtype)]


@_op("Pad")
def _pad(node, a):
    p = node.attrs["paddings"]
    x = jnp.asarray(a[0])
    if len(p) != 2 * x.ndim:
        raise NotLowerable(f"Pad of a rank-{x.ndim} tensor takes {2 * x.ndim} widths, got {len(p)}",
                           node=node.name)
    value = jnp.asarray(a[1]).astype(x.dtype).reshape(())
    return [lax.pad(x, value, [(p[2 * i], p[2 * i + 1], 0) for i in range(x.ndim)])]


# ---------------------------------------------------------------------------- indexing
@_op("GetItem")
def _getitem(node, a):
    return [jnp.asarray(a[0])[build_index(node, node.attrs["spec"], a[1:])]]


@_op("GetItemGrad")
def _getitem_grad(node, a):
    g = jnp.asarray(a[0])
    out = jnp.zeros(_shape(a[1], node), g.dtype)
    spec = node.attrs["spec"]
    idx = build_index(node, spec, a[2:])
    if any(item[0] == "tensor" for item in spec):
        return [out.at[idx].add(g)]      # an index array may repeat positions: accumulate
    return [out.at[idx].set(g)]


def _wrapped(idx, n):
    """numpy's negative indices count from the end (in-range checks are checks.py's)."""
    idx = jnp.asarray(idx)
    return jnp.where(idx < 0, idx + n, idx)


@_op("Gather")
def _gather(node, a):
    x, ax = jnp.asarray(a[0]), node.attrs.get("axis", 0)
    n = x.shape[ax] if x.ndim else 0
    return [jnp.take(x, _wrapped(a[1], n), axis=ax, mode="clip")]


@_op("ScatterAdd")
def _scatter_add(node, a):
    ax = node.attrs.get("axis", 0)
    shape, idx, upd = _shape(a[0], node), jnp.asarray(a[1]), jnp.asarray(a[2])
    view = jnp.moveaxis(jnp.zeros(shape, upd.dtype), ax, 0)
    upd = jnp.moveaxis(upd, list(range(ax, ax + idx.ndim)), list(range(idx.ndim)))
    view = view.at[_wrapped(idx, view.shape[0])].add(upd, mode="drop")
    return [jnp.moveaxis(view, 0, ax)]


@_op("OneHot")
def _one_hot(node, a):
    at = node.attrs
    hot = jnp.asarray(a[0])[..., None] == jnp.arange(at["depth"])
    return [jnp.where(hot, at.get("on", 1.0), at.get("off", 0.0)).astype(at["dtype"])]


def _along_axis_index(node, shape, indices, axis):
    """The fancy index numpy.take_along_axis uses (numpy_kernels.along_axis_index)."""
    if len(shape) != indices.ndim:
        raise NotLowerable(f"take_along_axis: indices of rank {indices.ndim} for an array of rank {len(shape)}",
                           node=node.name)
    idx = []
    for i, d in enumerate(shape):
        if i == axis:
            idx.append(_wrapped(indices, d))
        else:
            idx.append(jnp.arange(d).reshape((1,) * i + (d,) + (1,) * (len(shape) - i - 1)))
    return tuple(idx)


@_op("TakeAlongAxis")
def _take_along_axis(node, a):
    x, indices = jnp.asarray(a[0]), jnp.asarray(a[1])
    axis = node.attrs["axis"] % max(x.ndim, 1)
    return [x[_along_axis_index(node, x.shape, indices, axis)]]


@_op("TakeAlongAxisGrad")
def _take_along_axis_grad(node, a):
    g, shape, indices = jnp.asarray(a[0]), _shape(a[1], node), jnp.asarray(a[2])
    axis = node.attrs["axis"] % max(len(shape), 1)
    index = _along_axis_index(node, shape, indices, axis)
    full = jnp.broadcast_shapes(*(i.shape for i in index))
    return [jnp.zeros(shape, g.dtype).at[index].add(jnp.broadcast_to(g, full))]   # repeated indices add up


# ---------------------------------------------------------------------------- math
@_op("MatMul")
def _matmul(node, a):
    x, y = jnp.asarray(a[0]), jnp.asarray(a[1])
    if node.attrs.get("transpose_a", False):
        x = jnp.swapaxes(x, -1, -2)
    if node.attrs.get("transpose_b", False):
        y = jnp.swapaxes(y, -1, -2)
    return [jnp.matmul(x, y)]


@_op("Einsum")
def _einsum(node, a):
    return [jnp.einsum(node.attrs["equation"], *a)]


@_op("Softmax", "LogSoftmax")
def _softmax(node, a):
    axis = node.attrs.get("axis", -1)
    z = a[0] - jnp.max(a[0], axis=axis, keepdims=True)
    if node.op == "LogSoftmax":
        return [z - jnp.log(jnp.sum(jnp.exp(z), axis=axis, keepdims=True))]
    e = jnp.exp(z)
    return [e / jnp.sum(e, axis=axis, keepdims=True)]


@_op("Cast")
def _cast(node, a):
    x, to = jnp.asarray(a[0]), np.dtype(node.attrs["dtype"])
    if x.dtype.kind == "f" and to.kind in "iu" and not cast_native():
        raise NotLowerable("a float -> integer cast: numpy's loops on this machine give values out of range "
                           "otherwise than the lowest integer", node=node.name)
    return [cast(x, to)]


def cast(x, to):
    """x.astype(to) as numpy does it where cast_native() holds (x86): a float that is NaN or out of an
    integer's range becomes the smallest integer of 32 or 64 bits (the processor's 'integer indefinite';
    XLA would saturate, and NaN would give 0), which a narrower integer type then wraps; in range, floats
    truncate toward zero."""
    if x.dtype.kind != "f" or to.kind not in "iu":
        return x.astype(to)
    via = np.dtype(np.int64) if to.kind == "u" or to.itemsize == 8 else np.dtype(np.int32)
    lim = float(2 ** (8 * via.itemsize - 1))
    bad = jnp.isnan(x) | (x >= lim) | (x < -lim)
    wide = jnp.where(bad, np.iinfo(via).min, jnp.where(bad, 0, x).astype(via))
    return wide.astype(to)


@_op("ArgMax", "ArgMin")
def _argmax(node, a):
    fn = jnp.argmax if node.op == "ArgMax" else jnp.argmin
    return [fn(a[0], axis=node.attrs.get("axis", -1)).astype(jnp.int64)]


def _scan(fn, x, axis, reverse):
    if reverse:
        return jnp.flip(fn(jnp.flip(x, axis), axis=axis, dtype=x.dtype), axis)
    return fn(x, axis=axis, dtype=x.dtype)


@_op("Cumsum", "Cumprod")
def _cumulative(node, a):
    fn = jnp.cumsum if node.op == "Cumsum" else jnp.cumprod
    return [_scan(fn, jnp.asarray(a[0]), node.attrs["axis"], node.attrs["reverse"])]


@_op("CumprodGrad")
def _cumprod_grad(node, a):
    """numpy_kernels' formula: E_i * s_i, E_i = prod_{k<i} x_k, s_i = g_i + x_{i+1} s_{i+1} (a reverse
    scan: no division, so zeros in x are fine)."""
    axis, reverse = node.attrs["axis"], node.attrs["reverse"]
    x, g = jnp.asarray(a[0]), jnp.asarray(a[1])
    if x.shape != g.shape:
        raise NotLowerable(f"CumprodGrad: gradient of shape {g.shape} for an input of shape {x.shape}",
                           node=node.name)
    if reverse:
        x, g = jnp.flip(x, axis), jnp.flip(g, axis)
    xm, gm = jnp.moveaxis(x, axis, 0), jnp.moveaxis(g, axis, 0)
    n = xm.shape[0]
    if n == 0:
        return [jnp.zeros_like(g)]
    nxt = jnp.concatenate([xm[1:], jnp.zeros_like(xm[:1])])      # x_{i+1} (unused for the last i)

    def step(s_next, xg):
        xi1, gi = xg
        s = gi + xi1 * s_next
        return s, s
    _, s = lax.scan(step, gm[-1], (nxt[:-1], gm[:-1]), reverse=True)
    s = jnp.concatenate([s, gm[-1:]])
    excl = jnp.concatenate([jnp.ones_like(xm[:1]), jnp.cumprod(xm[:-1], axis=0, dtype=x.dtype)])
    out = jnp.moveaxis(excl * s, 0, axis)
    return [jnp.flip(out, axis) if reverse else out]


def _argsort(x, axis, descending):
    """numpy_kernels.argsort: stable; descending keeps equal elements in index order."""
    if not descending:
        return jnp.argsort(x, axis=axis, stable=True).astype(jnp.int64)
    n = x.shape[axis]
    rev = jnp.argsort(jnp.flip(x, axis), axis=axis, stable=True)
    return (n - 1 - jnp.flip(rev, axis)).astype(jnp.int64)


@_op("SearchSorted")
def _searchsorted(node, a):
    # jnp.searchsorted with numpy's order, NaN last (jnp compares NaN as unordered otherwise)
    return [jnp.searchsorted(a[0], a[1], side=node.attrs["side"], method="compare_all").astype(jnp.int64)]


@_op("ArgSort")
def _argsort_op(node, a):
    return [_argsort(jnp.asarray(a[0]), node.attrs["axis"], node.attrs["descending"])]


@_op("TopK")
def _top_k(node, a):
    k, x = node.attrs["k"], jnp.asarray(a[0])
    if x.ndim == 0 or k > x.shape[-1]:
        raise NotLowerable(f"top_k with k={k} of a tensor of shape {x.shape}: k must be at most the last "
                           f"dimension", node=node.name)
    idx = _argsort(x, -1, True)[..., :k]
    return [jnp.take_along_axis(x, idx, -1), idx]


# ---------------------------------------------------------------------------- linear algebra
def _sym_lower(x):
    """The symmetric matrix whose lower triangle is x's (linalg_kernels._lower)."""
    return jnp.tril(x) + jnp.swapaxes(jnp.tril(x, -1), -1, -2)


# Solves, inverses and Cholesky factors of matrices numpy refuses (singular, not positive definite) come out
# non-finite here; checks.after turns that into numpy's LinAlgError.
@_op("MatrixSolve")
def _solve(node, a):
    x, b = a
    batch = np.broadcast_shapes(x.shape[:-2], b.shape[:-2])
    return [jnp.linalg.solve(jnp.broadcast_to(x, batch + x.shape[-2:]), jnp.broadcast_to(b, batch + b.shape[-2:]))]


@_op("MatrixInverse")
def _inv(node, a):
    return [jnp.linalg.inv(a[0])]


@_op("Cholesky")
def _cholesky(node, a):
    return [jnp.linalg.cholesky(_sym_lower(a[0]))]


@_op("MatrixDeterminant")
def _det(node, a):
    return [jnp.linalg.det(a[0])]


@_op("LogMatrixDeterminant")
def _slogdet(node, a):
    sign, logdet = jnp.linalg.slogdet(a[0])
    return [sign, logdet]


@_op("Qr")
def _qr(node, a):
    q, r = jnp.linalg.qr(a[0], mode="complete" if node.attrs["full_matrices"] else "reduced")
    k = min(r.shape[-2], r.shape[-1])      # linalg_kernels._positive_diagonal: R's diagonal is >= 0
    s = jnp.where(jnp.diagonal(r, axis1=-2, axis2=-1)[..., :k] < 0, -1, 1).astype(r.dtype)
    q = jnp.concatenate([q[..., :, :k] * s[..., None, :], q[..., :, k:]], axis=-1)
    r = jnp.concatenate([r[..., :k, :] * s[..., :, None], r[..., k:, :]], axis=-2)
    return [q, r]


@_op("SelfAdjointEig")
def _eigh(node, a):
    w, v = jnp.linalg.eigh(_sym_lower(jnp.asarray(a[0])), symmetrize_input=False)
    idx = jnp.argmax(jnp.abs(v), axis=-2)     # linalg_kernels._positive_largest
    big = jnp.take_along_axis(v, idx[..., None, :], axis=-2)
    return [w, v * jnp.where(big < 0, -1, 1).astype(v.dtype)]


# The ops with no lowering here, and why (state.py lowers stacks, TensorArrays and Variables; lower.py the
# frame structure, Const and the feeds). tests/runtime/test_xla_ops.py checks that every other op has one.
_ASYNC = "asynchronous: it waits on other threads or workers, which one XLA program cannot do"
_HOST = "it writes to the host (files, the summary log, the terminal), which a compiled run cannot do"
NOT_LOWERED = {
    "Send": "a cross-device transfer between partitions (a partitioned graph does not compile to one program)",
    "Recv": "a cross-device transfer between partitions (a partitioned graph does not compile to one program)",
    **{op: _ASYNC for op in ("QueueHandle", "QueueEnqueue", "QueueEnqueueMany", "QueueDequeue",
                             "QueueDequeueMany", "QueueSize", "QueueClose", "AccumulatorHandle",
                             "AccumulatorApplyGradient", "AccumulatorTakeGradient",
                             "AccumulatorNumAccumulated", "AccumulatorSetGlobalStep")},
    "ApplyOnce": "a synchronous-training update under the locks of Variables that other workers share",
    "Progress": "it drives the terminal's progress bars, throttled by the wall clock",
    "Timestamp": "it reads the wall clock on the host",
    "Save": _HOST, "Restore": "it reads a checkpoint file", "SummaryScalar": _HOST, "SummaryHistogram": _HOST,
    "Print": _HOST,
    "Placeholder": "a graph input: lower.py takes it as a feed of the compiled program",
    **{op: "its output's size depends on the values (XLA shapes are static)"
       for op in ("DynamicPartition", "DynamicStitch", "SumDuplicates")},
    **{op: "a sparse update of a Variable's rows: state.py does not carry it yet"
       for op in ("ResourceScatterAdd", "ResourceScatterSub")},
    **{op: "a TensorArray op state.py does not lower yet (write, read, stack and unstack it does)"
       for op in ("TensorArrayGather", "TensorArrayScatter", "TensorArrayConcat")},
}
