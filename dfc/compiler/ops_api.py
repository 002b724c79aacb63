"""The op functions users call (numpy-like names) and Tensor's Python operators."""
import builtins

import numpy as np

from dfc import config
from dfc.errors import DfcTypeError
from dfc.ir import dtypes as dt
from dfc.compiler.tracing import Tensor, convert, current_builder, is_weak, const_array, user_location
from dfc.compiler import eager


def _b():
    return current_builder()


def constant(value, dtype=None, name=None):
    """A tensor holding `value` (a number, nested list or numpy array). Python ints become int64 and
    Python floats the default float (float32 unless dfc.config.set_default_float); numpy values keep
    their dtype; `dtype` converts (float data to an integer dtype is a DfcTypeError)."""
    return eager.value_of(convert(value, dtype, name=name))    # outside a graph: the numpy value


def _weak_to(x, d):
    """A Python scalar meeting a tensor of dtype d."""
    if isinstance(x, float) and d not in dt.FLOATS:
        return "float64"
    if isinstance(x, int) and not isinstance(x, bool) and d == "bool":
        return "int64"
    return d


def _is_weak(v):
    return is_weak(v) or (isinstance(v, Tensor) and v.weak)


def _weak_value(v):
    """A stand-in Python scalar for a weak value (only its kind matters)."""
    if isinstance(v, Tensor):
        return 0.0 if v.dtype in dt.FLOATS else False if v.dtype == "bool" else 0
    return v


def operands(x, y):
    """Both operands as tensors of one dtype (numpy promotion; Python scalars and weak tensors take
    the dtype of the strongly typed side, as in JAX)."""
    if not isinstance(x, Tensor) and hasattr(x, "_dfc_tensor"):    # a Variable reads its value
        x = x._dfc_tensor()
    if not isinstance(y, Tensor) and hasattr(y, "_dfc_tensor"):
        y = y._dfc_tensor()
    x, y = eager.lift(x), eager.lift(y)       # outside a graph numpy values are tensors
    xt, yt = isinstance(x, Tensor), isinstance(y, Tensor)
    xw, yw = _is_weak(x), _is_weak(y)
    if xt and yt and xw != yw:
        d = _weak_to(_weak_value(x), y.dtype) if xw else _weak_to(_weak_value(y), x.dtype)
    elif xt and yt:
        d = dt.promote(x.dtype, y.dtype)
    elif xt:
        d = _meet(x, y)
    elif yt:
        d = _meet(y, x)
    else:
        x, y = convert(x), convert(y)
        d = dt.promote(x.dtype, y.dtype)
    return _as(x, d), _as(y, d)


def _meet(t, v):
    """The dtype when tensor `t` meets the non-tensor `v`: the weakly typed side takes the other's."""
    if is_weak(v):
        return _weak_pair(t, v) if t.weak else _weak_to(v, t.dtype)
    strong = const_array(v).dtype.name          # a numpy scalar or array is strongly typed
    return _weak_to(_weak_value(t), strong) if t.weak else dt.promote(t.dtype, strong)


def _weak_pair(t, v):
    """A weak tensor meets a Python scalar: stays weak. A float scalar makes an integer one float64,
    as numpy makes an integer array times a Python float (and as `t / 2` and `cos(t)` already are):
    the default float would round a float64 program's values to float32 here, before they meet
    its float64 tensors. The result stays weak, so a float32 tensor it meets keeps float32."""
    if isinstance(v, float) and t.dtype not in dt.FLOATS:
        return "float64"
    return t.dtype


def _result_weak(t, x, y):
    if isinstance(t, Tensor):     # (an eager op's result is a numpy value)
        t.weak = _is_weak(x) and _is_weak(y)
    return t


def _as(x, d):
    if isinstance(x, Tensor):
        return x if x.dtype == d else cast(x, d)
    return convert(x, d)


def _binary(op):
    def fn(x, y, name=None):
        xx, yy = operands(x, y)
        t = _b().make1(op, (xx, yy))
        return _result_weak(t, x, y) if t.dtype != "bool" else t
    fn.__name__ = op.lower()
    return fn


add, subtract, multiply = _binary("Add"), _binary("Sub"), _binary("Mul")
maximum, minimum = _binary("Maximum"), _binary("Minimum")
floordiv, mod, pow = _binary("FloorDiv"), _binary("Mod"), _binary("Pow")
less, less_equal, greater, greater_equal = _binary("Less"), _binary("LessEqual"), _binary("Greater"), \
    _binary("GreaterEqual")
equal, not_equal = _binary("Equal"), _binary("NotEqual")
logical_and, logical_or = _binary("LogicalAnd"), _binary("LogicalOr")


def divide(x, y):
    """numpy.true_divide: x / y elementwise with broadcasting; integers are divided as float64 (as numpy)."""
    xx, yy = operands(x, y)
    if xx.dtype not in dt.FLOATS:     # numpy true division of integers gives float64
        xx, yy = cast(xx, "float64"), cast(yy, "float64")
    return _result_weak(_b().make1("Div", (xx, yy)), x, y)


def _unary(op, float_only=False, keeps_weak=True):
    def fn(x, name=None):
        weak = isinstance(x, Tensor) and x.weak
        x = convert(x)
        if float_only and x.dtype not in dt.FLOATS:
            x = cast(x, "float64" if x.dtype in dt.INTS else config.default_float())
        out = _b().make1(op, (x,))
        if weak and keeps_weak and isinstance(out, Tensor):
            out.weak = True     # cos(t) of a weak value is weak too (as in JAX): float32 tensors keep float32
        return out
    fn.__name__ = op.lower()
    return fn


negative, abs, sign, square, relu = (_unary(o) for o in ("Neg", "Abs", "Sign", "Square", "Relu"))
sqrt, rsqrt, exp, log, log1p = (_unary(o, True) for o in ("Sqrt", "Rsqrt", "Exp", "Log", "Log1p"))
sin, cos, tanh, sigmoid = (_unary(o, True) for o in ("Sin", "Cos", "Tanh", "Sigmoid"))
floor, ceil, round, reciprocal = (_unary(o, True) for o in ("Floor", "Ceil", "Round", "Reciprocal"))
logical_not, isfinite = _unary("LogicalNot", keeps_weak=False), _unary("IsFinite", True, keeps_weak=False)
identity, stop_gradient = _unary("Identity"), _unary("StopGradient")


def cast(x, dtype):
    """x converted to `dtype` (numpy's astype: floats to integers truncate toward zero)."""
    x = convert(x)
    d = dt.as_dtype(dtype)
    return eager.value_of(x) if x.dtype == d else _b().make1("Cast", (x,), {"dtype": d})


def matmul(a, b, transpose_a=False, transpose_b=False):
    """numpy.matmul: a 1-D operand is a row (left) or column (right) vector that the result drops."""
    a, b = operands(a, b)
    va, vb = a.ndim == 1, b.ndim == 1
    if va:
        a = expand_dims(a, 0)
    if vb:
        b = expand_dims(b, -1)
    out = _b().make1("MatMul", (a, b), {"transpose_a": transpose_a and not va,
                                        "transpose_b": transpose_b and not vb})
    if vb:
        out = squeeze(out, -1)
    if va:
        out = squeeze(out, -1 if vb else -2)
    return out


def _reducer(op):
    def fn(x, axis=None, keepdims=False):
        x = convert(x)
        if op == "Mean" and x.dtype not in dt.FLOATS:
            x = cast(x, "float64")
        if op in ("All", "Any") and x.dtype != "bool":
            x = cast(x, "bool")
        ax = list(axis) if isinstance(axis, (list, tuple)) else axis
        return _b().make1(op, (x,), {"axis": ax, "keepdims": bool(keepdims)})
    fn.__name__ = "reduce_" + op.lower()
    return fn


reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod = (
    _reducer(o) for o in ("Sum", "Mean", "Max", "Min", "Prod"))
reduce_all, reduce_any = _reducer("All"), _reducer("Any")


def argmax(x, axis=-1):
    """The int64 index of the largest element along `axis` (the first among ties). The default axis is
    the last one (TF's convention); numpy's argmax flattens instead, and so does t.argmax()."""
    return _b().make1("ArgMax", (convert(x),), {"axis": axis})


def argmin(x, axis=-1):
    """The int64 index of the smallest element along `axis` (the first among ties; default the last axis)."""
    return _b().make1("ArgMin", (convert(x),), {"axis": axis})


def _shape_arg(shape):
    if isinstance(shape, Tensor):
        return cast(shape, "int64")
    if isinstance(shape, (list, tuple)) and builtins.any(isinstance(d, Tensor) for d in shape):
        return stack([cast(reshape(convert(d), []), "int64") if isinstance(d, Tensor) else
                      convert(d, "int64") for d in shape])
    return convert(np.asarray(list(shape) if isinstance(shape, (list, tuple)) else shape, np.int64).reshape(-1))


def reshape(x, shape):
    """numpy.reshape: x's elements in row-major order with `shape` (ints and scalar tensors, or an int64
    vector tensor; one -1 is inferred)."""
    return _b().make1("Reshape", (convert(x), _shape_arg(shape)))


def transpose(x, perm=None):
    """numpy.transpose: x's axes permuted by `perm` (reversed when None)."""
    return _b().make1("Transpose", (convert(x),), {"perm": None if perm is None else list(perm)})


def expand_dims(x, axis):
    """numpy.expand_dims: x with a new axis of size 1 at position `axis`."""
    return _b().make1("ExpandDims", (convert(x),), {"axis": axis})


def squeeze(x, axis=None):
    """numpy.squeeze: x without its axes of size 1 (only those named by `axis`; naming an axis of another
    size is an error)."""
    ax = list(axis) if isinstance(axis, (list, tuple)) else axis
    return _b().make1("Squeeze", (convert(x),), {"axis": ax})


def _same_dtype(values):
    values = [eager.lift(v) for v in values]
    ts = [v for v in values if isinstance(v, Tensor)]
    d = ts[0].dtype if ts else None
    for t in ts[1:]:
        d = dt.promote(d, t.dtype)
    return [_as(v, d) if d else convert(v) for v in values]


def concat(values, axis=0):
    """numpy.concatenate: the tensors joined along the existing axis `axis` (dtypes promoted to one)."""
    return _b().make1("Concat", _same_dtype(list(values)), {"axis": axis})


def stack(values, axis=0):
    """numpy.stack: a tensor, TensorArray or list built in a tensor loop stacks its first axis."""
    if isinstance(values, Tensor):
        return stacked_axis(values, axis)
    if hasattr(values, "_dfc_stack"):
        return values._dfc_stack(axis)
    values = list(values)
    if not values:
        raise DfcTypeError("dfc.stack of an empty list", loc=user_location())
    return _b().make1("Stack", _same_dtype(values), {"axis": axis})


def stacked_axis(t, axis):
    """`t` (elements stacked on axis 0) laid out as numpy.stack(elements, axis=axis)."""
    if axis == 0:
        return t
    rank = t.ndim
    if rank is None:
        raise DfcTypeError(f"dfc.stack(..., axis={axis}) needs elements of known rank; stack with "
                           f"axis=0 and dfc.transpose the result", loc=user_location())
    if not -rank <= axis < rank:
        raise DfcTypeError(f"dfc.stack: axis {axis} is out of bounds for elements of rank "
                           f"{rank - 1}", loc=user_location())
    axis %= rank
    return transpose(t, list(builtins.range(1, axis + 1)) + [0] + list(builtins.range(axis + 1, rank)))


def unstack(x, num=None, axis=0):
    """The list of x's slices along `axis` (the inverse of stack); `num` is needed when that size is not
    known while tracing."""
    x = convert(x)
    if num is None:
        if x.shape is None or x.shape[axis] is None:
            raise DfcTypeError("unstack needs num= when the dimension is not known", loc=user_location())
        num = x.shape[axis]
    return _b().make(("Unstack"), (x,), {"num": num, "axis": axis})


def split(x, num, axis=0):
    """numpy.split into `num` equal parts along `axis` (a list of tensors)."""
    return _b().make("Split", (convert(x),), {"num": int(num), "axis": axis})


def gather(params, indices, axis=0):
    """numpy.take(params, indices, axis): the slices of params at the integer `indices` (any shape) along
    `axis`; an index out of range is a DfcError when the graph runs (never clamped)."""
    ind = convert(indices)
    if ind.dtype not in dt.INTS:
        raise DfcTypeError(f"gather indices must be integers, got {ind.dtype}", loc=user_location())
    return _b().make1("Gather", (convert(params), ind), {"axis": axis})


def where(cond, x, y):
    """numpy.where(cond, x, y): x where cond is true, else y, elementwise with broadcasting (cond is
    converted to bool; x and y promoted to one dtype)."""
    c = convert(cond)
    if c.dtype != "bool":
        c = cast(c, "bool")
    x, y = operands(x, y)
    return _b().make1("Where", (c, x, y))


def shape(x):
    """The run-time shape of x as an int64 vector (`x.shape` is the static shape known while tracing)."""
    return _b().make1("Shape", (convert(x),))


def size(x):
    """The number of elements of x, an int64 scalar computed when the graph runs."""
    return _b().make1("Size", (convert(x),))


def rank(x):
    """The number of dimensions of x, an int64 scalar."""
    return _b().make1("Rank", (convert(x),))


def fill(dims, value, dtype=None):
    """A tensor of shape `dims` with every element equal to the scalar `value` (tf.fill; numpy's name is
    dfc.full)."""
    v = convert(value, dtype)
    return _b().make1("Fill", (_shape_arg(dims), v))


def zeros(shape, dtype=None):
    """numpy.zeros; without dtype the default float (float32 unless dfc.config.set_default_float)."""
    return fill(shape, np.zeros((), dt.as_dtype(dtype or config.default_float())))


def ones(shape, dtype=None):
    """numpy.ones; without dtype the default float (float32 unless dfc.config.set_default_float)."""
    return fill(shape, np.ones((), dt.as_dtype(dtype or config.default_float())))


def zeros_like(x, dtype=None):
    """numpy.zeros_like: zeros with x's shape and dtype (or `dtype`)."""
    z = _b().make1("ZerosLike", (convert(x),))
    return z if dtype is None else cast(z, dtype)


def ones_like(x, dtype=None):
    """numpy.ones_like: ones with x's shape and dtype (or `dtype`)."""
    o = _b().make1("OnesLike", (convert(x),))
    return o if dtype is None else cast(o, dtype)


def broadcast_to(x, shape):
    """numpy.broadcast_to: x broadcast to `shape` by numpy's rules."""
    return _b().make1("BroadcastTo", (convert(x), _shape_arg(shape)))


def range(start, limit=None, delta=1, dtype=None):
    """Python's range / numpy.arange as a tensor: start, start + delta, ... while < limit (> limit for a
    negative delta); start is 0 when only one bound is given. Bounds may be tensors; the dtype
    follows them (Python ints int64, Python floats the default float) unless `dtype` is given."""
    if limit is None:
        start, limit = 0, start
    vals = [eager.lift(start), eager.lift(limit), eager.lift(delta)]
    ts = [v for v in vals if isinstance(v, Tensor)]
    d = dt.as_dtype(dtype) if dtype else (ts[0].dtype if ts else const_array(
        np.result_type(*[np.asarray(v) for v in vals]).type(0)).dtype.name)
    for t in ts[1:]:
        d = d if dtype else dt.promote(d, t.dtype)
    if d == "float64" and not builtins.any(isinstance(v, Tensor) and v.dtype == "float64" for v in vals) \
            and not dtype and builtins.all(is_weak(v) or isinstance(v, Tensor) for v in vals):
        d = config.default_float()
    return _b().make1("Range", tuple(_as(v, d) for v in vals))


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x), axis), computed stably (x minus its maximum first); integers become the
    default float."""
    return _b().make1("Softmax", (_unary_float(x),), {"axis": axis})


def log_softmax(x, axis=-1):
    """x - log(sum(exp(x), axis)), computed stably; integers become the default float."""
    return _b().make1("LogSoftmax", (_unary_float(x),), {"axis": axis})


def _unary_float(x):
    x = convert(x)
    return x if x.dtype in dt.FLOATS else cast(x, config.default_float())


def one_hot(indices, depth, on_value=1.0, off_value=0.0, dtype=None):
    """A new last axis of size `depth`: on_value where the position equals the index, off_value elsewhere
    (an index outside [0, depth) gives a row of off_value, as in TF). `dtype` defaults to the
    default float."""
    dtype = dtype or config.default_float()
    return _b().make1("OneHot", (convert(indices),), {"depth": int(depth), "dtype": dt.as_dtype(dtype),
                                                       "on": float(on_value), "off": float(off_value)})


def random_uniform(shape, minval=0.0, maxval=1.0, dtype=None, seed=0):
    """Samples uniform in [minval, maxval) of `shape`. Counter-based: the same seed, run and loop
    iteration give the same numbers on every execution path; each run of the graph draws anew."""
    dtype = dtype or config.default_float()
    return _b().make1("RandomUniform", (_shape_arg(shape),), {"dtype": dt.as_dtype(dtype), "seed": int(seed),
                                                              "a": float(minval), "b": float(maxval)})


def random_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=0):
    """Samples from a normal distribution (mean, stddev) of `shape`; seeded like random_uniform."""
    dtype = dtype or config.default_float()
    return _b().make1("RandomNormal", (_shape_arg(shape),), {"dtype": dt.as_dtype(dtype), "seed": int(seed),
                                                             "a": float(mean), "b": float(stddev)})


def print(*values, sep=" ", end="\n"):
    """In-graph print: like Python's print, run when the graph runs (in program order).
    Tensors print as str(numpy value); an f-string of tensors (in dfc.function) prints too."""
    pieces, tensors, text = [], [], ""
    for k, v in enumerate(values):
        if k:
            text += sep
        parts = v._dfc_print_parts() if hasattr(v, "_dfc_print_parts") else [v]
        for part in parts:
            if isinstance(part, Tensor):
                pieces.append(text)
                tensors.append(part)
                text = ""
            else:
                text += str(part)
    pieces.append(text + end)
    _b().make("Print", tensors, {"template": pieces})


def timestamp():
    """Seconds since the epoch (a float64 scalar) when the op runs, in program order (tf.timestamp):
    for schedules inside the graph, e.g. doing something every t seconds."""
    return _b().make1("Timestamp", (), {})


def Assert(cond, data=None, message=""):
    """An in-graph assertion: when the graph runs (in program order, like TF's Assert in tf.function),
    a DfcAssertionError carrying `message` and the values of `data` unless every element of cond
    is true."""
    c = convert(cond)
    if c.dtype != "bool":
        c = cast(c, "bool")
    _b().make("Assert", [c] + [convert(d) for d in (data or [])], {"message": str(message)})


def checked_when_used(value, ok, message):
    """`value`, checked when it is used at run time: DfcAssertionError(message) if `ok` is false.

    Unlike Assert this is not a side effect in program order: the check runs only if
    something that runs needs `value`.
    """
    b = _b()
    name = b.unique("check")
    b.make("Assert", [convert(ok)], {"message": str(message)}, name=name, ordered=False)
    out = b.make1("Identity", (value,), control=[name])
    if isinstance(out, Tensor):
        out.weak = value.weak
    return out


def clip(x, a_min=None, a_max=None):
    """numpy.clip: minimum(maximum(x, a_min), a_max), either bound None for no bound (so a_max wins
    when a_min > a_max, as in numpy). The gradient goes to x where it lies within the bounds (ties
    included) and to a bound where it is the result."""
    x = convert(x) if a_min is None and a_max is None else x
    if a_min is not None:
        x = maximum(x, a_min)
    if a_max is not None:
        x = minimum(x, a_max)
    return x



# Docstrings of the functions made by the factories above (one line of semantics each).
_DOCS = {
    "add": "numpy.add: x + y elementwise with broadcasting (numpy's promotion; Python scalars are weak).",
    "subtract": "numpy.subtract: x - y elementwise with broadcasting.",
    "multiply": "numpy.multiply: x * y elementwise with broadcasting.",
    "maximum": "numpy.maximum: the larger of x and y elementwise (NaN if either is NaN); the gradient goes to x on"
               " ties.",
    "minimum": "numpy.minimum: the smaller of x and y elementwise (NaN if either is NaN); the gradient goes to x on"
               " ties.",
    "floordiv": "numpy.floor_divide: floor(x / y) (-7 // 2 == -4); integer division by zero is a DfcError.",
    "mod": "numpy.mod: x - floor(x / y) * y, with the sign of y (-7 % 2 == 1); integer modulo by zero is a DfcError.",
    "pow": "numpy.power: x ** y elementwise; integers to negative integer powers are a DfcError (as numpy).",
    "less": "numpy.less: x < y elementwise (bool).",
    "less_equal": "numpy.less_equal: x <= y elementwise (bool).",
    "greater": "numpy.greater: x > y elementwise (bool).",
    "greater_equal": "numpy.greater_equal: x >= y elementwise (bool).",
    "equal": "numpy.equal: x == y elementwise (bool).",
    "not_equal": "numpy.not_equal: x != y elementwise (bool).",
    "logical_and": "numpy.logical_and of two bool tensors (both sides are evaluated; `and` in a dfc.function"
                   " short-circuits).",
    "logical_or": "numpy.logical_or of two bool tensors (both sides are evaluated).",
    "logical_not": "numpy.logical_not of a bool tensor.",
    "negative": "numpy.negative: -x elementwise.",
    "abs": "numpy.absolute: |x| (the gradient at 0 is 0).",
    "sign": "numpy.sign: -1, 0 or 1 with x's dtype (no gradient).",
    "square": "numpy.square: x * x.",
    "relu": "max(x, 0) elementwise (the gradient at 0 is 0).",
    "sqrt": "numpy.sqrt (integers become float64, as numpy).",
    "rsqrt": "1 / sqrt(x) elementwise (integers become float64).",
    "exp": "numpy.exp: e ** x elementwise (integers become float64).",
    "log": "numpy.log: the natural logarithm (integers become float64).",
    "log1p": "numpy.log1p: log(1 + x), exact for small x.",
    "sin": "numpy.sin, in radians (integers become float64).",
    "cos": "numpy.cos, in radians (integers become float64).",
    "tanh": "numpy.tanh elementwise (integers become float64).",
    "sigmoid": "1 / (1 + exp(-x)), computed stably.",
    "floor": "numpy.floor (no gradient).",
    "ceil": "numpy.ceil (no gradient).",
    "round": "numpy.round: to the nearest integer, halves to even (no gradient).",
    "reciprocal": "numpy.reciprocal: 1 / x.",
    "isfinite": "numpy.isfinite: True where x is neither NaN nor infinite (always True for integers).",
    "identity": "x itself (a node of its own; the gradient passes through).",
    "stop_gradient": "x itself, but gradients do not flow through it (jax.lax.stop_gradient).",
    "reduce_sum": "numpy.sum over axis (an int, a tuple, or None for every axis); integers keep their dtype.",
    "reduce_mean": "numpy.mean over axis; integers become float64.",
    "reduce_max": "numpy.max over axis (NaN propagates; the gradient is split among ties).",
    "reduce_min": "numpy.min over axis (NaN propagates; the gradient is split among ties).",
    "reduce_prod": "numpy.prod over axis; integers keep their dtype.",
    "reduce_all": "numpy.all over axis: True where every element is true (non-bool input is converted).",
    "reduce_any": "numpy.any over axis: True where some element is true (non-bool input is converted).",
}
for _name, _doc in _DOCS.items():
    globals()[_name].__doc__ = _doc

# ------------------------------------------------------------------ indexing


def getitem(x, key):
    x = convert(x)
    if not isinstance(key, tuple):
        key = (key,)
    spec, dyn = [], []

    def dyn_ref(t):
        t = convert(t)
        if t.dtype not in dt.INTS:
            raise DfcTypeError(f"tensor index must be an integer, got {t.dtype}", loc=user_location())
        dyn.append(t)
        return {"t": len(dyn) - 1}

    for k in key:
        if k is None:
            spec.append(["newaxis"])
        elif k is Ellipsis:
            spec.append(["ellipsis"])
        elif isinstance(k, slice):
            parts = [dyn_ref(p) if isinstance(p, Tensor) else (None if p is None else int(p))
                     for p in (k.start, k.stop, k.step)]
            if parts[2] == 0:
                raise DfcTypeError("slice step cannot be zero", loc=user_location())
            spec.append(["slice"] + parts)
        elif isinstance(k, Tensor) and k.shape == ():
            spec.append(["int", dyn_ref(k)])
        elif isinstance(k, (Tensor, list, np.ndarray)):
            t = convert(k)
            if t.dtype == "bool":
                raise DfcTypeError("boolean mask indexing is not supported: use dfc.where", loc=user_location())
            spec.append(["tensor", dyn_ref(t)["t"]])
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            spec.append(["int", int(k)])
        else:
            raise DfcTypeError(f"unsupported index {k!r}", loc=user_location())
    return _b().make1("GetItem", [x] + dyn, {"spec": spec})


def _r(fn):
    return lambda self, other: fn(other, self)


Tensor.__add__, Tensor.__radd__ = add, _r(add)
Tensor.__sub__, Tensor.__rsub__ = subtract, _r(subtract)
def _rmul(self, other):
    """other * self. A Python list or tuple times an integer scalar tensor means repetition in Python
    ([0.0] * n is n zeros), which a graph cannot build from a run-time count: an error, not a
    one-element elementwise product."""
    if isinstance(other, (list, tuple)) and self.shape == () and self.dtype is not None and \
            np.dtype(self.dtype).kind in "iu":
        raise DfcTypeError(f"{type(other).__name__} * tensor repeats the {type(other).__name__} a tensor number of "
                           f"times, which a graph cannot do: use dfc.zeros([n]) / dfc.fill([n], value) for an array, "
                           f"or a dfc.TensorArray", loc=user_location())
    return multiply(other, self)


Tensor.__mul__, Tensor.__rmul__ = multiply, _rmul
Tensor.__truediv__, Tensor.__rtruediv__ = divide, _r(divide)
Tensor.__floordiv__, Tensor.__rfloordiv__ = floordiv, _r(floordiv)
Tensor.__mod__, Tensor.__rmod__ = mod, _r(mod)
Tensor.__pow__, Tensor.__rpow__ = pow, _r(pow)
Tensor.__matmul__, Tensor.__rmatmul__ = matmul, _r(matmul)
Tensor.__lt__, Tensor.__le__, Tensor.__gt__, Tensor.__ge__ = less, less_equal, greater, greater_equal
Tensor.__eq__, Tensor.__ne__ = equal, not_equal
Tensor.__and__, Tensor.__rand__ = logical_and, _r(logical_and)
Tensor.__or__, Tensor.__ror__ = logical_or, _r(logical_or)
Tensor.__invert__ = logical_not
Tensor.__neg__ = negative
Tensor.__pos__ = identity
Tensor.__abs__ = abs
Tensor.__getitem__ = getitem
Tensor.__hash__ = object.__hash__
# ndarray's methods (t.sum(), t.T, t.astype ...) are attached by dfc.compiler.tensor_methods (end of file).

# numpy functions on symbolic tensors. A ufunc that is one of Tensor's operators (numpy calls
# np.add for `array + t`) is that operator; any other numpy function would run while tracing
# on a value that does not exist yet: a DfcTypeError naming the dfc function to use.
_UFUNC_OPERATORS = {
    "add": add, "subtract": subtract, "multiply": multiply, "true_divide": divide,
    "divide": divide, "floor_divide": floordiv, "remainder": mod, "mod": mod, "power": pow,
    "matmul": matmul, "less": less, "less_equal": less_equal, "greater": greater,
    "greater_equal": greater_equal, "equal": equal, "not_equal": not_equal,
    "bitwise_and": logical_and, "bitwise_or": logical_or, "invert": logical_not,
    "negative": negative, "positive": identity, "absolute": abs,
}
_NUMPY_TO_DFC = {"absolute": "abs", "true_divide": "divide", "floor_divide": "floordiv",
                 "remainder": "mod", "power": "pow", "concatenate": "concat", "amax": "reduce_max",
                 "amin": "reduce_min", "max": "reduce_max", "min": "reduce_min", "sum": "reduce_sum",
                 "mean": "reduce_mean", "prod": "reduce_prod", "all": "reduce_all",
                 "any": "reduce_any", "clip": "clip", "bitwise_and": "logical_and",
                 "bitwise_or": "logical_or", "invert": "logical_not"}


def _numpy_on_tensor(name):
    import dfc
    target = _NUMPY_TO_DFC.get(name, name)
    hint = f"use dfc.{target}(...)" if target in dir(dfc) else "use the dfc functions (dfc.*)"
    raise DfcTypeError(f"numpy.{name}() was called on a symbolic tensor: numpy runs while tracing, "
                       f"before the tensor has a value; {hint}, which runs in the graph",
                       loc=user_location())


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    op = _UFUNC_OPERATORS.get(ufunc.__name__)
    if op is not None and method == "__call__" and not kwargs:
        return op(*inputs)
    _numpy_on_tensor(ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}")


def _array_function(self, func, types, args, kwargs):
    _numpy_on_tensor(func.__name__)


def _array(self, dtype=None, copy=None):
    """numpy converting a symbolic tensor to an array (np.asarray(t), np_array[t], ...) fails at
    once instead of building an object array that breaks later."""
    raise DfcTypeError(
        f"numpy needs the value of symbolic tensor {self.ref} (np.asarray(t), indexing a numpy "
        f"array with a tensor, a numpy function): numpy runs while tracing, before the tensor has "
        f"a value. To index a numpy array with a tensor use dfc.gather(arr, t); otherwise use the "
        f"dfc functions (dfc.*), which run in the graph", loc=user_location())


Tensor.__array_ufunc__ = _array_ufunc
Tensor.__array_function__ = _array_function
Tensor.__array__ = _array

from dfc.compiler import tensor_methods as _tensor_methods  # noqa: E402,F401  (attaches ndarray methods)
