"""The numpy surface beyond the core ops: constructors, sorting, scans, einsum, padding, rolling.

Each function follows the numpy function of the same name (JAX's `jax.numpy` where numpy has no
equivalent, e.g. `top_k`); its docstring says where dfc differs. Several are exact compositions of
other ops (their gradients follow from those ops'); the rest are ops of the registry
(dfc/ir/ops.py, "the numpy surface") with kernels in dfc/runtime/kernels/numpy_kernels.py.
"""
import builtins
import math

import numpy as np

from dfc import config
from dfc.errors import DfcTypeError
from dfc.ir import dtypes as dt
from dfc.ir import ops as opreg
from dfc.compiler import ops_api as K
from dfc.compiler.tracing import Tensor, convert, current_builder, is_weak, user_location

inf = math.inf
nan = math.nan
pi = math.pi
e = math.e
newaxis = None


def _b():
    return current_builder()


def _fail(message):
    raise DfcTypeError(message, loc=user_location())


def _static_int(v, what):
    if isinstance(v, Tensor) or hasattr(v, "_dfc_tensor"):
        _fail(f"{what} must be a Python int (it fixes a shape while tracing), got a tensor")
    if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)):
        _fail(f"{what} must be an int, got {v!r}")
    return int(v)


def _rank(x, what):
    if x.ndim is None:
        _fail(f"{what} needs a tensor of known rank")
    return x.ndim


def _axis(axis, rank, what):
    axis = _static_int(axis, f"{what} axis")
    if not -max(rank, 1) <= axis < max(rank, 1):
        _fail(f"{what}: axis {axis} is out of range for a tensor of rank {rank}")
    return axis % max(rank, 1)


def dims(x):
    """x's dimensions: Python ints where known while tracing, else int64 scalar tensors."""
    shape, out = None, []
    for i, d in enumerate(x.shape):
        if d is None:
            shape = K.shape(x) if shape is None else shape
            d = shape[i]
        out.append(d)
    return out


def _flat(x):
    return K.reshape(x, [-1])


# ------------------------------------------------------------------ constructors


def full(shape, fill_value, dtype=None):
    """numpy.full: a tensor of `shape` filled with `fill_value` (a scalar, or a value that broadcasts
    to `shape`). Without `dtype` a Python float gives the default float (float32 unless
    dfc.config.set_default_float("float64")), a Python int int64, a tensor its own dtype."""
    v = K.constant(fill_value, dtype) if not isinstance(fill_value, Tensor) else convert(fill_value, dtype)
    if v.shape == ():
        return K.fill(shape, v)
    return K.broadcast_to(v, shape)


def arange(start, stop=None, step=1, dtype=None):
    """numpy.arange: start, start + step, ... up to but not including stop (start=0 when only one
    bound is given). Bounds may be tensors. Python int bounds give int64, Python floats the default
    float (float32 unless set_default_float("float64")); float steps accumulate rounding as in numpy."""
    return K.range(start, stop, step, dtype)


def linspace(start, stop, num=50, endpoint=True, dtype=None):
    """numpy.linspace: `num` evenly spaced values from start to stop (included if endpoint).

    Computed as numpy does: ``start + arange(num) * ((stop - start) / div)`` with div = num - 1
    (or num without endpoint), the last value set to exactly stop. `num` must be a Python int;
    start and stop are scalars (tensors or numbers). The dtype is that of float tensor bounds,
    float64 for integer tensors (as numpy), the default float for Python numbers.
    """
    num = _static_int(num, "linspace num")
    if num < 0:
        _fail(f"linspace num must be >= 0, got {num}")
    if dtype is None:      # numpy: the float type of the strongly typed bounds; Python numbers are weak
        ts = [convert(v) for v in (start, stop) if isinstance(v, Tensor) or not is_weak(v)]
        strong = dt.promote(ts[0].dtype, ts[-1].dtype) if ts else None
        dtype = config.default_float() if not ts else strong if strong in dt.FLOATS else "float64"
    d = dt.as_dtype(dtype)
    work = d if d in dt.FLOATS else "float64"
    start, stop = K.cast(start, work), K.cast(stop, work)
    for v in (start, stop):
        if v.shape not in (None, ()):
            _fail("dfc.linspace takes scalar start and stop")
    if num == 0:
        return K.cast(K.zeros([0], work), d)
    div = num - 1 if endpoint else num
    if div == 0:
        return K.cast(K.reshape(start, [1]), d)
    i = K.range(0, num, 1, "int64")
    y = K.cast(i, work) * ((stop - start) / float(div)) + start
    if endpoint:
        y = K.where(K.equal(i, num - 1), stop, y)
    return K.cast(y, d)


def eye(N, M=None, k=0, dtype=None):
    """numpy.eye: an N x M matrix (M = N by default) of zeros with ones on diagonal k (0: the main one,
    > 0 above it). N and M may be scalar tensors; the dtype defaults to the default float."""
    M = N if M is None else M
    rows = K.expand_dims(K.range(0, N, 1, "int64"), -1)
    cols = K.expand_dims(K.range(0, M, 1, "int64"), 0)
    return K.cast(K.equal(rows + _static_int(k, "eye k"), cols), dtype or config.default_float())


def _triangle(x, k, lower):
    x = convert(x)
    if x.ndim is not None and x.ndim < 2:
        _fail(f"{'tril' if lower else 'triu'} needs a matrix (rank >= 2), got shape {x.shape}")
    n, m = dims(x)[-2:] if x.ndim is not None else (K.shape(x)[-2], K.shape(x)[-1])
    rows = K.expand_dims(K.range(0, n, 1, "int64"), -1) + _static_int(k, "diagonal offset")
    cols = K.expand_dims(K.range(0, m, 1, "int64"), 0)
    keep = K.greater_equal(rows, cols) if lower else K.less_equal(rows, cols)
    return K.where(keep, x, K.zeros_like(x))


def tril(x, k=0):
    """numpy.tril: x with the entries above diagonal k of its last two axes set to zero."""
    return _triangle(x, k, True)


def triu(x, k=0):
    """numpy.triu: x with the entries below diagonal k of its last two axes set to zero."""
    return _triangle(x, k, False)


def diagonal(x):
    """numpy.diagonal of the last two axes of square matrices: out[..., i] = x[..., i, i]."""
    x = convert(x)
    n = dims(x)[-1] if x.ndim is not None and x.ndim >= 2 else _fail("diagonal needs a matrix of known rank")
    return K.reduce_sum(x * eye(n, dtype=x.dtype), -1)


# ------------------------------------------------------------------ repeating and rearranging


def repeat(x, repeats, axis=None):
    """numpy.repeat: each element (along `axis`; of the flattened tensor when axis is None) repeated
    `repeats` times, or repeats[i] times for element i. repeats must be Python ints.
    A composition: a gather with the repeated indices (its gradient sums the copies)."""
    x = convert(x)
    if axis is None:
        x, axis = _flat(x), 0
    axis = _axis(axis, _rank(x, "repeat"), "repeat")
    reps = list(repeats) if isinstance(repeats, (list, tuple, np.ndarray)) else [repeats]
    reps = [_static_int(r, "repeat count") for r in reps]
    if any(r < 0 for r in reps):
        _fail(f"repeat counts must be >= 0, got {reps}")
    n = x.shape[axis]
    if len(reps) == 1:
        r = reps[0]
        size = dims(x)[axis] * r
        idx = K.floordiv(K.range(0, size, 1, "int64"), r) if r else K.constant(np.zeros([0], np.int64))
        return K.gather(x, idx, axis)
    if n is not None and n != len(reps):
        _fail(f"repeat: {len(reps)} counts for a dimension of size {n}")
    idx = K.constant(np.repeat(np.arange(len(reps), dtype=np.int64), reps))
    if n is None:
        ok = K.equal(dims(x)[axis], len(reps))
        idx = K.checked_when_used(idx, ok, f"repeat: {len(reps)} counts do not match the dimension's size")
    return K.gather(x, idx, axis)


def tile(x, reps):
    """numpy.tile: x repeated reps[i] times along dimension i (reps and x's shape padded with leading
    ones to the same length). reps must be Python ints. A composition of reshape and broadcast_to."""
    x = convert(x)
    reps = list(reps) if isinstance(reps, (list, tuple, np.ndarray)) else [reps]
    reps = [_static_int(r, "tile count") for r in reps]
    if any(r < 0 for r in reps):
        _fail(f"tile counts must be >= 0, got {reps}")
    rank = _rank(x, "tile")
    d = builtins.max(len(reps), rank)
    reps = [1] * (d - len(reps)) + reps
    ds = [1] * (d - rank) + dims(x)
    if d != rank:
        x = K.reshape(x, ds)
    if all(r == 1 for r in reps):
        return x
    inter, wide = [], []
    for r, n in zip(reps, ds):
        inter += [1, n]
        wide += [r, n]
    y = K.broadcast_to(K.reshape(x, inter), wide)
    return K.reshape(y, [r * n for r, n in zip(reps, ds)])


def flip(x, axis=None):
    """numpy.flip: x with the order of elements along `axis` (an int, a tuple, or None for every
    axis) reversed. A composition: indexing with ::-1 (a view)."""
    x = convert(x)
    rank = _rank(x, "flip")
    axes = range(rank) if axis is None else axis if isinstance(axis, (list, tuple)) else [axis]
    axes = {_axis(a, rank, "flip") for a in axes}
    if not axes:
        return x
    return x[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(builtins.max(axes) + 1))]


def roll(x, shift, axis=None):
    """numpy.roll: elements shifted by `shift` positions along `axis` (those that fall off the end come
    back at the start); with axis=None the flattened tensor is rolled and the shape restored.
    shift may be a tensor; shift and axis may be tuples (one roll per pair). A composition of
    slicing and concat."""
    x = convert(x)
    if axis is None:
        return K.reshape(roll(_flat(x), shift, 0), dims(x) if x.ndim is not None else K.shape(x))
    shifts = list(shift) if isinstance(shift, (list, tuple)) else [shift]
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) == 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        _fail(f"roll: {len(shifts)} shifts for {len(axes)} axes")
    rank = _rank(x, "roll")
    for s, a in zip(shifts, axes):
        a = _axis(a, rank, "roll")
        n = dims(x)[a]
        if isinstance(s, Tensor) or isinstance(n, Tensor):
            k = n - K.mod(K.cast(s, "int64"), K.maximum(n, 1))
        else:
            s = _static_int(s, "roll shift")
            if n == 0 or s % n == 0:
                continue
            k = n - s % n
        lead = (slice(None),) * a
        x = K.concat([x[lead + (slice(k, None),)], x[lead + (slice(None, k),)]], axis=a)
    return x


def outer(a, b):
    """numpy.outer: out[i, j] = a.flatten()[i] * b.flatten()[j] (numpy's promotion of the dtypes)."""
    return K.multiply(K.reshape(a, [-1, 1]), K.reshape(b, [1, -1]))


# ------------------------------------------------------------------ sorting


def searchsorted(a, v, side="left"):
    """numpy.searchsorted: the int64 indices where the values v would be inserted into the sorted 1-D array
    a to keep it sorted ("left": before equal elements, "right": after them). Not differentiable (its
    results are integers)."""
    a, v = convert(a), convert(v)
    d = dt.promote(a.dtype, v.dtype)      # compared as numpy compares them: in the common type
    a, v = K.cast(a, d), K.cast(v, d)
    return _b().make1("SearchSorted", (a, v), {"side": str(side)})


def argsort(x, axis=-1, descending=False):
    """numpy.argsort (stable, int64 indices): the indices that sort x along `axis` (axis=None: the
    flattened x). NaN sorts last, as in numpy. descending=True (as in jax.numpy) sorts from largest
    to smallest keeping equal elements in index order."""
    x = convert(x)
    if axis is None:
        x, axis = _flat(x), 0
    return _b().make1("ArgSort", (x,), {"axis": _static_int(axis, "argsort axis"),
                                        "descending": bool(descending)})


def sort(x, axis=-1, descending=False):
    """numpy.sort: x sorted along `axis` (axis=None: the flattened x); NaN last. A composition,
    take_along_axis(x, argsort(x)), so the gradient sends each output's gradient to its source."""
    x = convert(x)
    if axis is None:
        x, axis = _flat(x), 0
    return take_along_axis(x, argsort(x, axis, descending), axis)


def top_k(x, k):
    """jax.lax.top_k / tf.math.top_k: (values, indices) of the k largest entries along the last axis,
    largest first; equal values keep index order (the lower index first). Indices are int64 (JAX and
    TF give int32). k must be a Python int no larger than the last dimension."""
    k = _static_int(k, "top_k k")
    v, i = _b().make("TopK", (convert(x),), {"k": k})
    return v, i


def take_along_axis(arr, indices, axis):
    """numpy.take_along_axis: out[..., j, ...] = arr[..., indices[..., j, ...], ...] along `axis`
    (axis=None: arr flattened, indices 1-D). arr and indices have one rank and broadcast on the other
    axes. Negative indices count from the end; an index out of range is a DfcError when the graph runs."""
    arr, ind = convert(arr), convert(indices)
    if ind.dtype not in dt.INTS:
        _fail(f"take_along_axis indices must be integers, got {ind.dtype}")
    if axis is None:
        arr, axis = _flat(arr), 0
    return _b().make1("TakeAlongAxis", (arr, ind), {"axis": _static_int(axis, "take_along_axis axis")})


# ------------------------------------------------------------------ scans


def _scan(op, x, axis, dtype, reverse):
    x = convert(x)
    if dtype is not None:
        x = K.cast(x, dtype)
    elif x.dtype == "bool":
        x = K.cast(x, "int64")
    if axis is None:
        x, axis = _flat(x), 0
    return _b().make1(op, (x,), {"axis": _static_int(axis, f"{op.lower()} axis"), "reverse": bool(reverse)})


def cumsum(x, axis=None, dtype=None, reverse=False):
    """numpy.cumsum: out[i] = x[0] + ... + x[i] along `axis` (axis=None: the flattened x).
    reverse=True sums from the end (out[i] = x[i] + ... + x[n-1]), as TF's reverse=True.
    Unlike numpy, int32 stays int32 (as in dfc.reduce_sum); bool counts as int64."""
    return _scan("Cumsum", x, axis, dtype, reverse)


def cumprod(x, axis=None, dtype=None, reverse=False):
    """numpy.cumprod: out[i] = x[0] * ... * x[i] along `axis` (axis=None: the flattened x);
    reverse=True multiplies from the end. The gradient is exact when x has zeros (no division)."""
    return _scan("Cumprod", x, axis, dtype, reverse)


# ------------------------------------------------------------------ einsum, padding, predicates


def _explicit(subscripts):
    eq = subscripts.replace(" ", "")
    if "->" in eq:
        return eq
    letters = eq.replace("...", "").replace(",", "")
    once = sorted(c for c in set(letters) if letters.count(c) == 1)
    return eq + "->" + ("..." if "..." in eq else "") + "".join(once)


def einsum(subscripts, *operands):
    """numpy.einsum(subscripts, *operands): the sum over repeated subscript letters of the products of
    the operands' elements ('ij,jk->ik' is matmul, 'ii->i' the diagonal, '...ij->...ji' a batched
    transpose). Implicit mode (no '->') sorts the letters that appear once, as numpy does. Operands are
    promoted to one dtype. The gradient is an einsum too; it does not support ellipsis dimensions
    that are summed away ('...i->i')."""
    if not isinstance(subscripts, str):
        _fail("dfc.einsum takes the subscripts string first (the interleaved form is not supported)")
    if not operands:
        _fail("dfc.einsum needs at least one operand")
    ops = K._same_dtype(list(operands))
    eq = _explicit(subscripts)
    try:
        opreg.parse_einsum(eq, len(ops))
    except DfcTypeError as err:
        _fail(err.message)
    return _b().make1("Einsum", ops, {"equation": eq})


def pad_widths(pad_width, rank):
    """numpy.pad's pad_width (an int, one (before, after) pair, or one pair per axis) as a flat list."""
    try:
        pairs = np.broadcast_to(np.asarray(pad_width, np.int64), (rank, 2))
    except (ValueError, TypeError):
        _fail(f"pad_width {pad_width!r} does not fit a tensor of rank {rank} (give an int, a (before, after) "
              f"pair, or one pair per axis)")
    return [int(w) for w in pairs.reshape(-1)]


def pad(x, pad_width, mode="constant", constant_values=0):
    """numpy.pad with mode="constant": x surrounded by pad_width[i] = (before, after) entries equal
    to constant_values on each axis i (pad_width may be one int or one pair for every axis). Other
    modes are not supported. The widths are Python ints; constant_values may be a scalar tensor."""
    if mode != "constant":
        _fail(f"dfc.pad supports mode='constant' only, got {mode!r}")
    x = convert(x)
    widths = pad_widths(pad_width, _rank(x, "pad"))
    if any(w < 0 for w in widths):
        _fail(f"pad widths must be >= 0, got {pad_width!r}")
    v = K.cast(constant_values, x.dtype)
    return _b().make1("Pad", (x, v), {"paddings": widths})


def _predicate(op):
    def fn(x):
        x = convert(x)
        if x.dtype not in dt.FLOATS:        # integers and bools are never NaN or infinite
            return K.cast(K.zeros_like(x), "bool")
        return _b().make1(op, (x,))
    return fn


isnan = _predicate("IsNan")
isnan.__name__, isnan.__doc__ = "isnan", "numpy.isnan: True where x is NaN (always False for integers)."
isinf = _predicate("IsInf")
isinf.__name__, isinf.__doc__ = "isinf", "numpy.isinf: True where x is +inf or -inf (always False for integers)."
