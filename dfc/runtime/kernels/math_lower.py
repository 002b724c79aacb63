"""Lowerings of the elementwise math, reduction and matmul ops (kernels: math_kernels.py).

Exact where numba is exact (integer and IEEE +, -, *, /, sqrt, comparisons: the same bits as numpy, also
when numba computes a float32 scalar op in float64, since double rounding of these is harmless); through
numpy's own loops (e.loop) for everything numpy computes with its own SIMD code or summation order
(transcendentals, power, floor division, reductions, matmul). Maximum and minimum are compared in compiled
code when numpy's loops on this machine give what the comparison gives (probed once: signed zeros and NaNs
depend on numpy's SIMD code), else they too call numpy's loops.
"""
import functools

import numpy as np

from dfc.runtime import emit as E
from dfc.runtime.kernels.lowering import Unsupported, lowering, scalar_type as st

# op -> the template of its expression (emit.fmt: a, b)
_NATIVE_BINARY = {"Add": "{} + {}", "Sub": "{} - {}", "Mul": "{} * {}", "Div": "{} / {}", "Less": "{} < {}",
                  "LessEqual": "{} <= {}", "Greater": "{} > {}", "GreaterEqual": "{} >= {}", "Equal": "{} == {}",
                  "NotEqual": "{} != {}", "LogicalAnd": "{} & {}", "LogicalOr": "{} | {}"}
_LOOP_BINARY = {"Pow": np.power, "FloorDiv": np.floor_divide, "Mod": np.remainder, "Maximum": np.maximum,
                "Minimum": np.minimum}
_LOOP_UNARY = {"Exp": np.exp, "Log": np.log, "Log1p": np.log1p, "Sin": np.sin, "Cos": np.cos, "Tanh": np.tanh,
               "Round": np.rint}


def _arr(e, k):
    """Input k as an array expression (a scalar becomes a 1-element array)."""
    return e.args[k] if e.ins[k].ndim else E.fmt("np.full(1, {})", e.args[k])


def _proto(e, dtype):
    """An empty 1-D array of dtype, which tells a helper its result's dtype (made once per compiled function)."""
    t = e.outs[0].with_shape((0,))
    t.dtype = dtype
    return e.gen.dead_value(t)


# Integer +, -, * that may overflow: numpy wraps them; numba's signed arithmetic tells LLVM they never
# overflow (compiled/helpers.py), so scalars are computed in uint64 and arrays by numpy's own loops.
_WRAPPING = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}
_INTS = ("int32", "int64")


def wrapping(op, dtype, a, b):
    """a op b (op "Add", "Sub" or "Mul") of signed integer scalars of dtype, wrapped as numpy wraps it."""
    return E.fmt("{}({})", st(dtype), E.fmt(_NATIVE_BINARY[op], E.fmt("np.uint64({})", a), E.fmt("np.uint64({})", b)))


@lowering(*_NATIVE_BINARY)
def _native_binary(e):
    a, b = e.args
    op = e.node.op
    out = e.outs[0]
    if op in _WRAPPING and out.dtype in _INTS:
        if out.ndim == 0:
            return [wrapping(op, out.dtype, a, b)]
        return [loop_binary(e, _WRAPPING[op], a, b)]
    expr = E.fmt(_NATIVE_BINARY[op], a, b)
    if out.ndim == 0 and out.dtype not in ("bool", "int64", "float64"):
        return [E.fmt("{}({})", st(out.dtype), expr)]   # numba widens int32 arithmetic (and may widen float32)
    return [E.fmt("({})", expr)]


def _minmax_probe():
    """Whether numpy's maximum/minimum on this machine give, bit for bit, `a if a > b or a != a else b` (and
    `<`) element by element (ties and signed zeros: b; a NaN: the NaN operand) for scalars and arrays of the
    sizes its SIMD loops split into, and whether max/min reductions of NaN-free arrays give that comparison
    folded from the first element. numpy's x86 loops do; another build may pick a zero's sign otherwise."""
    vals = [0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan, -np.nan,
            np.array(0x7ff8000000000123, np.int64).view(np.float64)]
    rng = np.random.default_rng(0)
    with np.errstate(all="ignore"):
        for dt in (np.float32, np.float64):
            v = np.array(vals, dt)
            for n in (1, 2, 3, 7, 8, 9, 16, 17, 33, 64, 67):
                a, b = rng.choice(v, n), rng.choice(v, n)
                for uf, cmp in ((np.maximum, np.greater), (np.minimum, np.less)):
                    if uf(a, b).tobytes() != np.where(cmp(a, b) | (a != a), a, b).tobytes():
                        return False
                    if uf(a[0], b[0]).tobytes() != (a[0] if cmp(a[0], b[0]) or a[0] != a[0] else b[0]).tobytes():
                        return False
                    x = rng.choice(v[:7], n)
                    r = x[0]
                    for y in x[1:]:
                        r = r if cmp(r, y) else y
                    red = np.max(x) if uf is np.maximum else np.min(x)
                    if np.asarray(red).tobytes() != np.asarray(r).tobytes():
                        return False
    return True


@functools.cache
def minmax_native():
    """_minmax_probe(), once per process (when a frame is first compiled)."""
    return _minmax_probe()


# op -> (template for floats, for ints) of numpy's maximum / minimum of scalars {0}, {1} (emit.subst)
_MINMAX = {"Maximum": ("({0} if ({0} > {1} or {0} != {0}) else {1})", "({0} if {0} > {1} else {1})"),
           "Minimum": ("({0} if ({0} < {1} or {0} != {0}) else {1})", "({0} if {0} < {1} else {1})")}
_MINMAX_DTYPES = ("float32", "float64", "int32", "int64")


def minmax_expr(op, dtype, a, b):
    """numpy's maximum (op "Maximum") or minimum ("Minimum") of scalars a, b (names) of dtype, as compiled
    comparisons."""
    return E.subst(_MINMAX[op][0 if dtype in ("float32", "float64") else 1], a, b)


def loop_binary(e, ufunc, a, b):
    """numpy's loop of `ufunc` on inputs a, b (expressions of the node's input types) -> output expression."""
    out = e.outs[0]
    d = e.ins[0].dtype
    k = E.lit(e.loop(ufunc, (d, d, out.dtype)))
    if out.ndim == 0 and out.dtype == d:
        return E.fmt("H.binary_s(LP, {}, {}, {})", k, a, b)
    call = E.fmt("H.binary(LP, {}, {}, {}, {})", k, a if e.ins[0].ndim else E.fmt("np.full(1, {})", a),
                 b if e.ins[1].ndim else E.fmt("np.full(1, {})", b), _proto(e, out.dtype))
    return E.fmt("{}[0]", call) if out.ndim == 0 else call


# op -> (scalar, array) checks of integer division by zero, and its function of int64 scalars
_BY_ZERO = {"FloorDiv": ("if {} == 0: raise ZeroDivisionError('integer division by zero')",
                         "if np.any(np.asarray({}) == 0): raise ZeroDivisionError('integer division by zero')"),
            "Mod": ("if {} == 0: raise ZeroDivisionError('integer modulo by zero')",
                    "if np.any(np.asarray({}) == 0): raise ZeroDivisionError('integer modulo by zero')")}
_INT_DIV = {"FloorDiv": "H.int_floordiv({}, {})", "Mod": "H.int_mod({}, {})"}


@lowering(*_LOOP_BINARY)
def _loop_binary(e):
    op, d = e.node.op, e.ins[0].dtype
    a, b = e.args
    if d in ("int32", "int64") and op in ("FloorDiv", "Mod"):
        if e.outs[0].ndim == 0:
            e.stmt(_BY_ZERO[op][0], b)
            if d == "int64":
                return [E.fmt(_INT_DIV[op], a, b)]
            return [E.fmt("{}({})", st(d), E.fmt(_INT_DIV[op], E.fmt("np.int64({})", a), E.fmt("np.int64({})", b)))]
        e.stmt(_BY_ZERO[op][1], b)
    if d in ("int32", "int64") and op == "Pow":
        e.stmt("if np.any(np.asarray({}) < 0): raise ValueError('integers to negative integer powers')"
               if e.ins[1].ndim else "if {} < 0: raise ValueError('integers to negative integer powers')", b)
    if op in _MINMAX and minmax_native() and e.outs[0].ndim == 0 and d in _MINMAX_DTYPES:
        return [minmax_expr(op, d, a, b)]
    return [loop_binary(e, _LOOP_BINARY[op], a, b)]


def loop_unary(e, ufunc, x, ndim, dtype):
    k = E.lit(e.loop(ufunc, (dtype, dtype)))
    if ndim == 0:
        return E.fmt("H.unary_s(LP, {}, {})", k, x)
    return E.fmt("H.unary(LP, {}, {}, {})", k, x, _proto(e, dtype))


@lowering(*_LOOP_UNARY)
def _loop_unary(e):
    return [loop_unary(e, _LOOP_UNARY[e.node.op], e.args[0], e.ins[0].ndim, e.ins[0].dtype)]


_WRAPPING_UNARY = {"Neg": np.negative, "Abs": np.absolute, "Square": np.square}
# op -> the template of its expression (emit.subst: {0} the operand, {1} one of its dtype)
_WRAPPED_SCALAR = {"Neg": "H.wrap_neg({0})", "Abs": "H.wrap_abs({0})", "Square": "np.uint64({0}) * np.uint64({0})"}
_UNARY = {"Neg": "-{0}", "Abs": "np.abs({0})", "Square": "{0} * {0}", "Sqrt": "np.sqrt({0})", "Floor": "np.floor({0})",
          "Ceil": "np.ceil({0})", "IsFinite": "np.isfinite({0})", "Reciprocal": "{1} / {0}",
          "Rsqrt": "{1} / np.sqrt({0})", "LogicalNot": "np.logical_not({0})", "Sign": "np.sign({0})",
          "IsNan": "np.isnan({0})", "IsInf": "np.isinf({0})"}


@lowering("Neg", "Abs", "Square", "Sqrt", "Floor", "Ceil", "IsFinite", "Reciprocal", "Rsqrt", "LogicalNot",
          "Sign", "IsNan", "IsInf")
def _native_unary(e):
    x, t, out = e.args[0], e.ins[0], e.outs[0]
    op = e.node.op
    if op == "Sign" and t.dtype in ("float32", "float64"):
        return [loop_unary(e, np.sign, x, t.ndim, t.dtype)]     # sign(nan) is nan, sign(-0.0) is -0.0
    if op in _WRAPPING_UNARY and t.dtype in _INTS:
        if t.ndim:
            return [loop_unary(e, _WRAPPING_UNARY[op], x, t.ndim, t.dtype)]
        return [E.fmt("{}({})", st(t.dtype), E.subst(_WRAPPED_SCALAR[op], x))]
    expr = E.subst(_UNARY[op], x, E.fmt("{}(1)", st(t.dtype)))
    return [E.fmt("{}({})", st(out.dtype), expr) if out.ndim == 0 else E.fmt("({})", expr)]


@lowering("Sigmoid")
def _sigmoid(e):
    # the kernel: h + h * tanh(h * x), h = 0.5 in x's dtype (the same operations for scalars and arrays)
    x, t = e.args[0], e.ins[0]
    s = st(t.dtype)
    h = E.fmt("{}(0.5)", s)
    u = e.tmp()
    if t.ndim == 0:
        e.stmt("{} = {}({} * {})", u, s, h, x)
    else:
        e.stmt("{} = {} * {}", u, x, h)
    th = loop_unary(e, np.tanh, u, t.ndim, t.dtype)
    return [E.fmt("{}({} + {} * {})", s, h, h, th) if t.ndim == 0 else E.fmt("({} * {} + {})", th, h, h)]


class Loop:
    """An elementwise op computed by numpy's loop of `ufunc` (for `dtypes`) over a whole array: `pre(xs)` gives
    the loop's input element expressions from the op's input elements, `post(y)` the op's element from the
    loop's output element (dfc/runtime/compiled/fusion.py)."""

    def __init__(self, ufunc, dtypes, pre=None, post=None):
        self.ufunc, self.dtypes = ufunc, dtypes
        self.pre = pre or (lambda xs: list(xs))
        self.post = post

    def __repr__(self):
        return f"Loop({self.ufunc.__name__}, {self.dtypes})"


NATIVE = "native"
_NATIVE_UNARY = ("Neg", "Abs", "Square", "Sqrt", "Floor", "Ceil", "IsFinite", "Reciprocal", "Rsqrt", "LogicalNot",
                 "IsNan", "IsInf")


def elementwise(op, ins, out):
    """How a fused elementwise loop (dfc/runtime/compiled/fusion.py) computes one element of op with input
    types `ins` and output type `out`: NATIVE (the op's own lowering on rank-0 types gives it, the same bits as
    the array op), a Loop (numpy's loop over the whole array, as the op's array lowering calls it), or None
    (not fused: the op's own lowering runs)."""
    d = ins[0].dtype if ins else out.dtype
    floats = d in ("float32", "float64")
    if op in _NATIVE_BINARY or op in _NATIVE_UNARY or op == "Where" or (op == "Sign" and not floats):
        return NATIVE
    if op == "Cast":
        return None if floats and out.dtype in _INT_RANGE else NATIVE     # (float -> int arrays: not lowered)
    if op in ("FloorDiv", "Mod") and not floats:
        return NATIVE           # the rank-0 lowering: checked integer division, element by element
    if op in _MINMAX or op == "Relu":
        if minmax_native() and d in _MINMAX_DTYPES:
            return NATIVE       # the rank-0 lowering: compared, as numpy's loop does (_minmax_probe)
    if op in _LOOP_BINARY and op != "Pow" or op == "Pow" and floats:
        return Loop(_LOOP_BINARY[op], (d, d, out.dtype))
    if op in _LOOP_UNARY or op == "Sign":
        return Loop(np.sign if op == "Sign" else _LOOP_UNARY[op], (d, d))
    if op == "Sigmoid":     # the kernel: t = x * h; tanh(t); t *= h; t += h (h = 0.5 in x's dtype)
        s = st(d)
        h = E.fmt("{}(0.5)", s)
        return Loop(np.tanh, (d, d), lambda xs: [E.fmt("{}({} * {})", s, xs[0], h)],
                    lambda y: E.fmt("{}({}({} * {}) + {})", s, s, y, h, h))
    if op == "Relu":        # the kernel: maximum(x, 0)
        return Loop(np.maximum, (d, d, d), lambda xs: [xs[0], E.fmt("{}(0)", st(d))])
    return None


@lowering("Relu")
def _relu(e):
    t = e.ins[0]
    if t.ndim == 0 and minmax_native() and t.dtype in _MINMAX_DTYPES:
        z = e.tmp()
        e.stmt("{} = {}(0)", z, st(t.dtype))
        return [minmax_expr("Maximum", t.dtype, e.args[0], z)]
    k = E.lit(e.loop(np.maximum, (t.dtype, t.dtype, t.dtype)))
    call = E.fmt("H.binary(LP, {}, {}, np.zeros(1, {}), {})", k, _arr(e, 0), st(t.dtype), _proto(e, t.dtype))
    return [E.fmt("{}[0]", call) if t.ndim == 0 else call]


@lowering("Where")
def _where(e):
    c, a, b = e.args
    out = e.outs[0]
    if out.ndim == 0:
        return [E.fmt("({} if {} else {})", a, c, b)]
    return [E.fmt("np.where({}, {}, {})", _arr(e, 0), _arr(e, 1), _arr(e, 2))]


@lowering("ZerosLike", "OnesLike")
def _like(e):
    t = e.ins[0]
    v = 0 if e.node.op == "ZerosLike" else 1
    if t.ndim == 0:
        return [E.fmt("{}({})", st(t.dtype), E.lit(v))]
    return [E.fmt("np.zeros({}.shape, {})" if v == 0 else "np.ones({}.shape, {})", e.args[0], st(t.dtype))]


_INT_RANGE = {"int32": (-2.0 ** 31, 2.0 ** 31), "int64": (-2.0 ** 63, 2.0 ** 63)}


@functools.cache
def cast_native():
    """Whether numpy's float -> int array casts on this machine give, for values of every kind (in range,
    out of range, infinite, NaN; arrays of the sizes its SIMD loops split into), truncation in range and the
    lowest integer otherwise, as the scalar cast's lowering (H.float_to_int) computes. Probed once."""
    v = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.5, -2.5, 1e19, -1e19, 2.0 ** 31 - 0.5, -2.0 ** 31 - 0.5,
                  2.0 ** 63, -2.0 ** 63, 7.9, -0.0, 1e-300])
    rng = np.random.default_rng(0)
    with np.errstate(all="ignore"):
        for f in (np.float32, np.float64):
            for i in ("int32", "int64"):
                lo, hi = _INT_RANGE[i]
                for n in (1, 3, 7, 8, 9, 16, 17, 33, 67):
                    x = rng.choice(v, n).astype(f)
                    want = np.where((x >= lo) & (x < hi), np.trunc(np.where(np.isfinite(x), x, 0)), lo)
                    if x.astype(i).tobytes() != want.astype(np.float64).astype(i).tobytes():
                        return False
    return True


@lowering("Cast")
def _cast(e):
    x, t, out = e.args[0], e.ins[0], e.outs[0]
    src, dst = t.dtype, out.dtype
    if src == dst:
        return [x]
    if dst == "bool":
        expr = E.fmt("({} != 0)", x)
        return [expr if t.ndim else E.fmt("np.bool_({})", expr)]
    if src in ("float32", "float64") and dst in _INT_RANGE:
        lo, hi = _INT_RANGE[dst]
        bad = E.fmt("np.int64({})", E.lit(-(2 ** 31) if dst == "int32" else -(2 ** 63)))
        if t.ndim:
            if not cast_native():
                raise Unsupported("array casts from float to int: numpy's loops here give out-of-range values "
                                  "otherwise than its scalar cast")
            return [E.fmt("H.float_to_int_array({}, {}, {}, {}, np.zeros(0, {}))", x, E.lit(lo), E.lit(hi), bad,
                          st(dst))]
        return [E.fmt("{}(H.float_to_int({}, {}, {}, {}))", st(dst), x, E.lit(lo), E.lit(hi), bad)]
    if t.ndim == 0:
        return [E.fmt("{}({})", st(dst), x)]
    return [E.fmt("{}.astype({})", x, st(dst))]


def _axis(e):
    """(pre, n, post) expressions and the output shape expression of a reduction over one axis or all."""
    t = e.ins[0]
    axis = e.node.attrs.get("axis")
    keep = e.node.attrs.get("keepdims", False)
    if isinstance(axis, list):
        axes = sorted({a % max(t.ndim, 1) for a in axis})
        if len(axes) == 1:
            axis = axes[0]
        elif axes == list(range(t.ndim)):
            axis = None
        elif axes == list(range(axes[0], axes[-1] + 1)):
            axis = (axes[0], axes[-1])      # adjacent axes: numpy reduces them as one (measured: the same bits)
        else:
            raise Unsupported("a reduction over several axes that are not adjacent is not lowered")
    return axis, keep


@lowering("Sum", "Prod", "Max", "Min", "All", "Any", "Mean")
def _reduce(e):
    t, out = e.ins[0], e.outs[0]
    op = e.node.op
    ufunc = {"Sum": np.add, "Mean": np.add, "Prod": np.multiply, "Max": np.maximum, "Min": np.minimum,
             "All": np.logical_and, "Any": np.logical_or}[op]
    d = t.dtype
    kr = E.lit(e.loop(ufunc, (None, d, None), reduction=True))
    kb = E.lit(e.loop(ufunc, (d, d, d)))
    first = E.lit(op in ("Max", "Min"))
    ident = E.fmt("{}({})", st(d), E.lit({"Sum": 0, "Mean": 0, "Prod": 1, "All": True, "Any": False}.get(op, 0)))
    x = e.tmp()
    e.stmt("{} = {}", x, _arr(e, 0))
    axis, keep = _axis(e)
    nd = max(t.ndim, 1)
    one = E.lit(1)
    if axis is None or t.ndim == 0:
        pre, n, post = one, E.fmt("{}.size", x), one
        shape = E.fmt("({})", E.items([one] * t.ndim)) if keep else None
        count = E.fmt("{}.size", x)
    else:
        lo, hi = axis if isinstance(axis, tuple) else (axis % nd, axis % nd)
        dims = [E.fmt("{}.shape[{}]", x, E.lit(j)) for j in range(nd)]
        pre = E.join(" * ", [one] + dims[:lo])
        n = E.fmt("({})", E.join(" * ", dims[lo:hi + 1]))
        post = E.join(" * ", [one] + dims[hi + 1:])
        kept = [(one if lo <= j <= hi else dims[j]) for j in range(nd)] if keep else dims[:lo] + dims[hi + 1:]
        shape = E.fmt("({})", E.items(kept)) if kept else None
        count = n
    r = e.tmp()
    if out.ndim == 0 and op in ("Max", "Min") and minmax_native() and d in _MINMAX_DTYPES:
        # compared in compiled code; numpy's loop gives a NaN result its bits (which NaN it keeps)
        e.stmt("{} = H.extreme_all(LP, {}, {}, {})", r, kr, x if max(t.ndim, 1) == 1 else
               E.fmt("H.reshape({}, {}.size)", x, x), E.lit(op == "Max"))
        return [r]
    if out.ndim == 0 and op != "Mean":      # one value: reduced into a scalar, nothing allocated
        e.stmt("{} = P.reduce_all(LP, {}, {}, {}, {})", r, kr, x, first, ident)
        return [r]
    e.stmt("{} = H.reduce3(LP, {}, {}, {}, {}, {}, {}, {}, {})", r, kr, kb, x, pre, n, post, first, ident)
    if op == "Mean":
        if d not in ("float32", "float64"):
            raise Unsupported("Mean of integers is not lowered")
        # numpy: the sum divided by np.intp(count) -> computed in float64, cast back
        e.stmt("{} = ({}.astype(np.float64) / np.float64({})).astype({})", r, r, count, st(d))
    if out.ndim == 0:
        return [E.fmt("{}[0]", r)]
    if shape is None:
        raise Unsupported("reduction output shape")
    return [E.fmt("H.reshape({}, {})", r, shape)]


@lowering("ArgMax", "ArgMin")
def _argmax(e):
    """The first largest (smallest) element's index along the axis, or the first NaN's, as int64."""
    t, x = e.ins[0], e.args[0]
    ax = e.node.attrs.get("axis", -1)
    if t.ndim == 0:
        raise Unsupported("ArgMax of a scalar")
    one = E.lit(1)
    if ax is None:
        x3 = E.fmt("H.reshape({}, (1, {}.size, 1))", x, x)
    else:
        if not isinstance(ax, int) or not -t.ndim <= ax < t.ndim:
            raise Unsupported(f"axis {ax!r} of a rank-{t.ndim} tensor")
        ax %= t.ndim
        d = [E.fmt("{}.shape[{}]", x, E.lit(j)) for j in range(t.ndim)]
        x3 = E.fmt("H.reshape({}, ({}, {}, {}))", x, E.join(" * ", [one] + d[:ax]), d[ax],
                   E.join(" * ", [one] + d[ax + 1:]))
    r = e.tmp_of(E.fmt("H.arg_extreme({}, {})", x3, E.lit(e.node.op == "ArgMax")))
    if e.outs[0].ndim == 0:
        return [E.fmt("{}[0, 0]", r)]
    return [E.fmt("H.reshape({}, ({}))", r, E.items([d[j] for j in range(t.ndim) if j != ax]))]


@lowering("MatMul")
def _matmul(e):
    a, b = e.ins
    ta, tb = e.node.attrs.get("transpose_a", False), e.node.attrs.get("transpose_b", False)
    if a.ndim >= 3 and (b.ndim == 2 or b.ndim == a.ndim):
        return [_batched_matmul(e, bool(ta), bool(tb))]
    if a.ndim not in (1, 2) or b.ndim not in (1, 2) or ((ta or tb) and (a.ndim, b.ndim) != (2, 2)):
        raise Unsupported("MatMul other than 2-D @ 2-D (transposed or not), 2-D @ 1-D, 1-D @ 2-D or 1-D @ 1-D")
    k = E.lit(e.loop(np.matmul, (a.dtype, a.dtype, a.dtype)))
    x, y = e.args
    flags = E.fmt("{}, {}", E.lit(bool(ta)), E.lit(bool(tb)))
    flat = E.fmt("P.matmul(LP, {}, {}, {}, {})", k, x, y, flags)
    buf = e.buffer(shaped=True) if e.outs[0].ndim else None
    if buf is not None:         # into a loop's buffer of the result's shape (dfc/runtime/compiled/buffers.py)
        if not buf.isidentifier():
            out = e.tmp()
            e.stmt("{} = {}", out, buf)
            buf = out
        e.stmt("P.matmul_into(LP, {}, {}, {}, {}, {})", k, x, y, flags, buf)
        return [buf]
    if (a.ndim, b.ndim) == (2, 2):
        return [E.fmt("H.reshape({}, ({}.shape[{}], {}.shape[{}]))", flat, x, E.lit(int(bool(ta))), y,
                      E.lit(int(not tb)))]
    return [E.fmt("{}[0]", flat) if e.outs[0].ndim == 0 else flat]      # (n,) or (m,): flat already


def _batched_matmul(e, ta, tb):
    """a stack of matrices times a stack of the same batch shape, or times one matrix (numpy's broadcast), by
    numpy's loop with the batch as its outer dimension (npcall.matmul_batched); other batch shapes raise and
    the fused path computes them."""
    (a, b), (x, y) = e.ins, e.args
    k = E.lit(e.loop(np.matmul, (a.dtype, a.dtype, a.dtype)))
    nd = a.ndim
    xd = [E.fmt("{}.shape[{}]", x, E.lit(j)) for j in range(nd)]
    batch = xd[:-2]
    if b.ndim == nd:
        e.stmt("if {}: raise ValueError('matmul: batch dimensions differ')",
               E.join(" or ", [E.fmt("{}.shape[{}] != {}", y, E.lit(j), xd[j]) for j in range(nd - 2)]))
    one = [E.lit(1)]
    x3 = E.fmt("H.reshape({}, ({}, {}, {}))", x, E.join(" * ", one + batch), xd[-2], xd[-1])
    yb = E.join(" * ", one + (batch if b.ndim == nd else []))
    y3 = E.fmt("H.reshape({}, ({}, {}.shape[{}], {}.shape[{}]))", y, yb, y, E.lit(b.ndim - 2), y, E.lit(b.ndim - 1))
    flat = E.fmt("P.matmul_batched(LP, {}, {}, {}, {}, {})", k, x3, y3, E.lit(ta), E.lit(tb))
    rows = xd[-1] if ta else xd[-2]
    cols = E.fmt("{}.shape[{}]", y, E.lit(b.ndim - 2 if tb else b.ndim - 1))
    return E.fmt("H.reshape({}, ({}))", flat, E.items(batch + [rows, cols]))


def step(e, op, args, ins, out, **attrs):
    """Lower `op` on (args, ins) into a fresh local of Type `out`: one step of a composite lowering."""
    from dfc.ir.graph import Node
    from dfc.runtime.kernels.lowering import LOWERINGS
    sub = type(e)(e.gen, Node(e.node.name, op, [], attrs), args, ins, [out], e.ind)
    v = e.tmp()
    e.stmt("{} = {}", v, LOWERINGS[op](sub)[0])
    return v


@lowering("Softmax", "LogSoftmax")
def _softmax(e):
    # the kernel's steps: z = x - max(x, axis, keepdims); exp(z) / sum(exp(z)) or z - log(sum(exp(z)))
    t, x = e.ins[0], e.args[0]
    if t.ndim == 0:
        raise Unsupported("softmax of a scalar")
    axis = e.node.attrs.get("axis", -1) % t.ndim
    k = t.with_shape([1 if j == axis else s for j, s in enumerate(t.shape)])
    m = step(e, "Max", [x], [t], k, axis=axis, keepdims=True)
    z = step(e, "Sub", [x, m], [t, k], t)
    ez = step(e, "Exp", [z], [t], t)
    s = step(e, "Sum", [ez], [t], k, axis=axis, keepdims=True)
    if e.node.op == "LogSoftmax":
        return [step(e, "Sub", [z, step(e, "Log", [s], [k], k)], [t, k], t)]
    return [step(e, "Div", [ez, s], [t, k], t)]
