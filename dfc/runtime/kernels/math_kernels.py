"""Elementwise math, reductions, matmul and nn kernels."""
from dfc.runtime.kernels.registry import direct, kernel, simple


def _sigmoid(xp):
    def f(x):
        # sigmoid(x) = (1 + tanh(x / 2)) / 2: one transcendental, and stable for large |x|.
        h = x.dtype.type(0.5)
        if x.ndim == 0:
            return h + h * xp.tanh(h * x)
        t = xp.multiply(x, h)       # one new buffer, updated in place
        xp.tanh(t, out=t)
        t *= h
        t += h
        return t
    return f


def _floordiv(xp):
    def f(a, b):
        if a.dtype.kind == "i" and not xp.all(b):
            raise ZeroDivisionError("integer division by zero")
        return xp.floor_divide(a, b)
    return f


def _mod(xp):
    def f(a, b):
        if a.dtype.kind == "i" and not xp.all(b):
            raise ZeroDivisionError("integer modulo by zero")
        return xp.mod(a, b)
    return f


def _pow(xp):
    def f(a, b):
        if a.dtype.kind == "i" and xp.any(b < 0):
            raise ValueError("integers to negative integer powers are not allowed")
        return xp.power(a, b)
    return f


simple({
    "Add": lambda xp: xp.add, "Sub": lambda xp: xp.subtract, "Mul": lambda xp: xp.multiply,
    "Div": lambda xp: xp.true_divide, "FloorDiv": _floordiv, "Mod": _mod, "Pow": _pow,
    "Maximum": lambda xp: xp.maximum, "Minimum": lambda xp: xp.minimum,
    "Less": lambda xp: xp.less, "LessEqual": lambda xp: xp.less_equal, "Greater": lambda xp: xp.greater,
    "GreaterEqual": lambda xp: xp.greater_equal, "Equal": lambda xp: xp.equal,
    "NotEqual": lambda xp: xp.not_equal, "LogicalAnd": lambda xp: xp.logical_and,
    "LogicalOr": lambda xp: xp.logical_or, "LogicalNot": lambda xp: xp.logical_not,
    "Neg": lambda xp: xp.negative, "Abs": lambda xp: xp.abs, "Sign": lambda xp: xp.sign,
    "Square": lambda xp: xp.square, "Sqrt": lambda xp: xp.sqrt,
    "Rsqrt": lambda xp: lambda x: 1 / xp.sqrt(x), "Reciprocal": lambda xp: lambda x: 1 / x,
    "Exp": lambda xp: xp.exp, "Log": lambda xp: xp.log, "Log1p": lambda xp: xp.log1p,
    "Sin": lambda xp: xp.sin, "Cos": lambda xp: xp.cos, "Tanh": lambda xp: xp.tanh,
    "Sigmoid": _sigmoid, "Relu": lambda xp: lambda x: xp.maximum(x, x.dtype.type(0)),
    "Floor": lambda xp: xp.floor, "Ceil": lambda xp: xp.ceil, "Round": lambda xp: xp.round,
    "IsFinite": lambda xp: xp.isfinite,
    "Where": lambda xp: xp.where,
    "ZerosLike": lambda xp: xp.zeros_like, "OnesLike": lambda xp: xp.ones_like,
})


def _reducer(fn_name, keep_dtype):
    def factory(node, xp):
        axis = node.attrs.get("axis")
        axis = tuple(axis) if isinstance(axis, list) else axis
        keep = node.attrs.get("keepdims", False)
        fn = getattr(xp, fn_name)
        if keep_dtype:
            return direct(lambda x: xp.asarray(fn(x, axis=axis, keepdims=keep, dtype=x.dtype)))
        return direct(lambda x: xp.asarray(fn(x, axis=axis, keepdims=keep)))
    return factory


kernel("Sum")(_reducer("sum", True))
kernel("Prod")(_reducer("prod", True))
kernel("Mean")(_reducer("mean", True))
kernel("Max")(_reducer("max", False))
kernel("Min")(_reducer("min", False))
kernel("All")(_reducer("all", False))
kernel("Any")(_reducer("any", False))


@kernel("ArgMax", "ArgMin")
def _argmax(node, xp):
    fn = xp.argmax if node.op == "ArgMax" else xp.argmin
    axis = node.attrs.get("axis", -1)
    return lambda ctx, a: (xp.asarray(fn(a[0], axis=axis)).astype("int64"),)


@kernel("MatMul")
def _matmul(node, xp):
    ta, tb = node.attrs.get("transpose_a", False), node.attrs.get("transpose_b", False)
    mm = xp.matmul
    if ta and tb:
        return direct(lambda x, y: mm(x.swapaxes(-1, -2), y.swapaxes(-1, -2)))
    if ta:
        return direct(lambda x, y: mm(x.swapaxes(-1, -2), y))
    if tb:
        return direct(lambda x, y: mm(x, y.swapaxes(-1, -2)))
    return direct(mm)


@kernel("Softmax", "LogSoftmax")
def _softmax(node, xp):
    axis = node.attrs.get("axis", -1)
    log = node.op == "LogSoftmax"

    def f(ctx, a):
        x = a[0]
        z = x - xp.max(x, axis=axis, keepdims=True)
        if log:
            return (z - xp.log(xp.sum(xp.exp(z), axis=axis, keepdims=True)),)
        e = xp.exp(z)
        return (e / xp.sum(e, axis=axis, keepdims=True),)
    return f


@kernel("Cast")
def _cast(node, xp):
    d = node.attrs["dtype"]
    return lambda ctx, a: (xp.asarray(a[0]).astype(d),)
