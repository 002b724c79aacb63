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

from dfc.runtime.kernels.lowering import Unsupported, lowering, scalar_type as st

_NATIVE_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Less": "<", "LessEqual": "<=",
                  "Greater": ">", "GreaterEqual": ">=", "Equal": "==", "NotEqual": "!=",
                  "LogicalAnd": "&", "LogicalOr": "|"}
_LOOP_BINARY = {"Pow": np.power, "FloorDiv": np.floor_divide, "Mod": np.remainder, "Maximum": np.maximum,
                "Minimum": np.minimum}
_LOOP_UNARY = {"Exp": np.exp, "Log": np.log, "Log1p": np.log1p, "Sin": np.sin, "Cos": np.cos, "Tanh": np.tanh,
               "Round": np.rint}


def _arr(e, k):
    """Input k as an array expression (a scalar becomes a 1-element array)."""
    return e.args[k] if e.ins[k].ndim else f"np.full(1, {e.args[k]})"


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
    """a op b (op "+", "-" or "*") of signed integer scalars of dtype, wrapped as numpy wraps it."""
    return f"{st(dtype)}(np.uint64({a}) {op} np.uint64({b}))"


@lowering(*_NATIVE_BINARY)
def _native_binary(e):
    a, b = e.args
    op = _NATIVE_BINARY[e.node.op]
    out = e.outs[0]
    if e.node.op in _WRAPPING and out.dtype in _INTS:
        if out.ndim == 0:
            return [wrapping(op, out.dtype, a, b)]
        return [loop_binary(e, _WRAPPING[e.node.op], a, b)]
    if out.ndim == 0:       # numba widens int32 arithmetic (and may widen float32): cast back
        return [f"({a} {op} {b})" if out.dtype in ("bool", "int64", "float64") else f"{st(out.dtype)}({a} {op} {b})"]
    return [f"({a} {op} {b})"]


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


_MINMAX = {"Maximum": ">", "Minimum": "<"}
_MINMAX_DTYPES = ("float32", "float64", "int32", "int64")


def minmax_expr(op, dtype, a, b):
    """numpy's maximum (op ">") or minimum ("<") of scalars a, b (names) of dtype, as compiled comparisons."""
    if dtype in ("float32", "float64"):
        return f"({a} if ({a} {op} {b} or {a} != {a}) else {b})"
    return f"({a} if {a} {op} {b} else {b})"


def loop_binary(e, ufunc, a, b):
    """numpy's loop of `ufunc` on inputs a, b (expressions of the node's input types) -> output expression."""
    out = e.outs[0]
    d = e.ins[0].dtype
    k = e.loop(ufunc, (d, d, out.dtype))
    if out.ndim == 0 and out.dtype == d:
        return f"H.binary_s(LP, {k}, {a}, {b})"
    call = f"H.binary(LP, {k}, {a if e.ins[0].ndim else f'np.full(1, {a})'}, " \
           f"{b if e.ins[1].ndim else f'np.full(1, {b})'}, {_proto(e, out.dtype)})"
    return f"{call}[0]" if out.ndim == 0 else call


@lowering(*_LOOP_BINARY)
def _loop_binary(e):
    op, d = e.node.op, e.ins[0].dtype
    a, b = e.args
    if d in ("int32", "int64") and op in ("FloorDiv", "Mod"):
        what = "division" if op == "FloorDiv" else "modulo"
        if e.outs[0].ndim == 0:
            e.stmt(f"if {b} == 0: raise ZeroDivisionError('integer {what} by zero')")
            fn = "H.int_floordiv" if op == "FloorDiv" else "H.int_mod"
            return [f"{fn}({a}, {b})" if d == "int64" else f"{st(d)}({fn}(np.int64({a}), np.int64({b})))"]
        e.stmt(f"if np.any(np.asarray({b}) == 0): raise ZeroDivisionError('integer {what} by zero')")
    if d in ("int32", "int64") and op == "Pow":
        e.stmt(f"if np.any(np.asarray({b}) < 0): raise ValueError('integers to negative integer powers')"
               if e.ins[1].ndim else f"if {b} < 0: raise ValueError('integers to negative integer powers')")
    if op in _MINMAX and minmax_native() and e.outs[0].ndim == 0 and d in _MINMAX_DTYPES:
        return [minmax_expr(_MINMAX[op], d, a, b)]
    return [loop_binary(e, _LOOP_BINARY[op], a, b)]


def loop_unary(e, ufunc, x, ndim, dtype):
    k = e.loop(ufunc, (dtype, dtype))
    if ndim == 0:
        return f"H.unary_s(LP, {k}, {x})"
    return f"H.unary(LP, {k}, {x}, {_proto(e, dtype)})"


@lowering(*_LOOP_UNARY)
def _loop_unary(e):
    return [loop_unary(e, _LOOP_UNARY[e.node.op], e.args[0], e.ins[0].ndim, e.ins[0].dtype)]


_WRAPPING_UNARY = {"Neg": np.negative, "Abs": np.absolute, "Square": np.square}


@lowering("Neg", "Abs", "Square", "Sqrt", "Floor", "Ceil", "IsFinite", "Reciprocal", "Rsqrt", "LogicalNot",
          "Sign")
def _native_unary(e):
    x, t, out = e.args[0], e.ins[0], e.outs[0]
    op = e.node.op
    if op == "Sign" and t.dtype in ("float32", "float64"):
        return [loop_unary(e, np.sign, x, t.ndim, t.dtype)]     # sign(nan) is nan, sign(-0.0) is -0.0
    if op in _WRAPPING_UNARY and t.dtype in _INTS:
        if t.ndim:
            return [loop_unary(e, _WRAPPING_UNARY[op], x, t.ndim, t.dtype)]
        expr = {"Neg": f"H.wrap_neg({x})", "Abs": f"H.wrap_abs({x})",
                "Square": f"np.uint64({x}) * np.uint64({x})"}[op]
        return [f"{st(t.dtype)}({expr})"]
    one = f"{st(t.dtype)}(1)"
    expr = {"Neg": f"-{x}", "Abs": f"np.abs({x})", "Square": f"{x} * {x}", "Sqrt": f"np.sqrt({x})",
            "Floor": f"np.floor({x})", "Ceil": f"np.ceil({x})", "IsFinite": f"np.isfinite({x})",
            "Reciprocal": f"{one} / {x}", "Rsqrt": f"{one} / np.sqrt({x})", "LogicalNot": f"np.logical_not({x})",
            "Sign": f"np.sign({x})"}[op]
    return [f"{st(out.dtype)}({expr})" if out.ndim == 0 else f"({expr})"]


@lowering("Sigmoid")
def _sigmoid(e):
    # the kernel: h + h * tanh(h * x), h = 0.5 in x's dtype (the same operations for scalars and arrays)
    x, t = e.args[0], e.ins[0]
    h = f"{st(t.dtype)}(0.5)"
    u = e.tmp()
    e.stmt(f"{u} = {st(t.dtype)}({h} * {x})" if t.ndim == 0 else f"{u} = {x} * {h}")
    th = loop_unary(e, np.tanh, u, t.ndim, t.dtype)
    return [f"{st(t.dtype)}({h} + {h} * {th})" if t.ndim == 0 else f"({th} * {h} + {h})"]


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
_NATIVE_UNARY = ("Neg", "Abs", "Square", "Sqrt", "Floor", "Ceil", "IsFinite", "Reciprocal", "Rsqrt", "LogicalNot")


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
        h = f"{st(d)}(0.5)"
        return Loop(np.tanh, (d, d), lambda xs: [f"{st(d)}({xs[0]} * {h})"],
                    lambda y: f"{st(d)}({st(d)}({y} * {h}) + {h})")
    if op == "Relu":        # the kernel: maximum(x, 0)
        return Loop(np.maximum, (d, d, d), lambda xs: [xs[0], f"{st(d)}(0)"])
    return None


@lowering("Relu")
def _relu(e):
    t = e.ins[0]
    if t.ndim == 0 and minmax_native() and t.dtype in _MINMAX_DTYPES:
        z = e.tmp()
        e.stmt(f"{z} = {st(t.dtype)}(0)")
        return [minmax_expr(">", t.dtype, e.args[0], z)]
    k = e.loop(np.maximum, (t.dtype, t.dtype, t.dtype))
    call = f"H.binary(LP, {k}, {_arr(e, 0)}, np.zeros(1, {st(t.dtype)}), {_proto(e, t.dtype)})"
    return [f"{call}[0]" if t.ndim == 0 else call]


@lowering("Where")
def _where(e):
    c, a, b = e.args
    out = e.outs[0]
    if out.ndim == 0:
        return [f"({a} if {c} else {b})"]
    return [f"np.where({_arr(e, 0)}, {_arr(e, 1)}, {_arr(e, 2)})"]


@lowering("ZerosLike", "OnesLike")
def _like(e):
    t = e.ins[0]
    v = 0 if e.node.op == "ZerosLike" else 1
    if t.ndim == 0:
        return [f"{st(t.dtype)}({v})"]
    return [f"np.{'zeros' if v == 0 else 'ones'}({e.args[0]}.shape, {st(t.dtype)})"]


_INT_RANGE = {"int32": (-2.0 ** 31, 2.0 ** 31), "int64": (-2.0 ** 63, 2.0 ** 63)}


@lowering("Cast")
def _cast(e):
    x, t, out = e.args[0], e.ins[0], e.outs[0]
    src, dst = t.dtype, out.dtype
    if src == dst:
        return [x]
    if dst == "bool":
        expr = f"({x} != 0)"
        return [expr if t.ndim else f"np.bool_({expr})"]
    if src in ("float32", "float64") and dst in _INT_RANGE:
        lo, hi = _INT_RANGE[dst]
        bad = f"np.int64({-(2 ** 31) if dst == 'int32' else -(2 ** 63)})"
        if t.ndim:
            raise Unsupported("array casts from float to int are not lowered (numpy's out-of-range values)")
        return [f"{st(dst)}(H.float_to_int({x}, {lo!r}, {hi!r}, {bad}))"]
    if t.ndim == 0:
        return [f"{st(dst)}({x})"]
    return [f"{x}.astype({st(dst)})"]


def _axis(e):
    """(pre, n, post) expressions and the output shape expression of a reduction over one axis or all."""
    t = e.ins[0]
    axis = e.node.attrs.get("axis")
    keep = e.node.attrs.get("keepdims", False)
    if isinstance(axis, list):
        if len(axis) == 1:
            axis = axis[0]
        elif sorted(a % max(t.ndim, 1) for a in axis) == list(range(t.ndim)):
            axis = None
        else:
            raise Unsupported("a reduction over several (not all) axes is not lowered")
    return axis, keep


@lowering("Sum", "Prod", "Max", "Min", "All", "Any", "Mean")
def _reduce(e):
    t, out = e.ins[0], e.outs[0]
    op = e.node.op
    ufunc = {"Sum": np.add, "Mean": np.add, "Prod": np.multiply, "Max": np.maximum, "Min": np.minimum,
             "All": np.logical_and, "Any": np.logical_or}[op]
    d = t.dtype
    kr = e.loop(ufunc, (None, d, None), reduction=True)
    kb = e.loop(ufunc, (d, d, d))
    first = op in ("Max", "Min")
    ident = {"Sum": 0, "Mean": 0, "Prod": 1, "All": True, "Any": False}.get(op, 0)
    x = e.tmp()
    e.stmt(f"{x} = {_arr(e, 0)}")
    axis, keep = _axis(e)
    nd = max(t.ndim, 1)
    if axis is None or t.ndim == 0:
        pre, n, post = "1", f"{x}.size", "1"
        shape = "(" + "1, " * t.ndim + ")" if keep else None
        count = f"{x}.size"
    else:
        ax = axis % nd
        dims = [f"{x}.shape[{j}]" for j in range(nd)]
        pre = " * ".join(["1"] + dims[:ax])
        n = dims[ax]
        post = " * ".join(["1"] + dims[ax + 1:])
        kept = [("1" if j == ax else dims[j]) for j in range(nd)] if keep else dims[:ax] + dims[ax + 1:]
        shape = "(" + "".join(f"{s}, " for s in kept) + ")" if kept else None
        count = n
    r = e.tmp()
    if out.ndim == 0 and first and minmax_native() and d in _MINMAX_DTYPES:
        # compared in compiled code; numpy's loop gives a NaN result its bits (which NaN it keeps)
        e.stmt(f"{r} = H.extreme_all(LP, {kr}, {x if max(t.ndim, 1) == 1 else f'H.reshape({x}, {x}.size)'}, "
               f"{op == 'Max'})")
        return [r]
    if out.ndim == 0 and op != "Mean":      # one value: reduced into a scalar, nothing allocated
        e.stmt(f"{r} = P.reduce_all(LP, {kr}, {x}, {first}, {st(d)}({ident}))")
        return [r]
    e.stmt(f"{r} = H.reduce3(LP, {kr}, {kb}, {x}, {pre}, {n}, {post}, {first}, {st(d)}({ident}))")
    if op == "Mean":
        if d not in ("float32", "float64"):
            raise Unsupported("Mean of integers is not lowered")
        # numpy: the sum divided by np.intp(count) -> computed in float64, cast back
        e.stmt(f"{r} = ({r}.astype(np.float64) / np.float64({count})).astype({st(d)})")
    if out.ndim == 0:
        return [f"{r}[0]"]
    if shape is None:
        raise Unsupported("reduction output shape")
    return [f"H.reshape({r}, {shape})"]


@lowering("MatMul")
def _matmul(e):
    a, b = e.ins
    ta, tb = e.node.attrs.get("transpose_a", False), e.node.attrs.get("transpose_b", False)
    if a.ndim not in (1, 2) or b.ndim not in (1, 2) or ((ta or tb) and (a.ndim, b.ndim) != (2, 2)):
        raise Unsupported("MatMul other than 2-D @ 2-D (transposed or not), 2-D @ 1-D, 1-D @ 2-D or 1-D @ 1-D")
    k = e.loop(np.matmul, (a.dtype, a.dtype, a.dtype))
    x, y = e.args
    flat = f"P.matmul(LP, {k}, {x}, {y}, {bool(ta)}, {bool(tb)})"
    buf = e.buffer(shaped=True) if e.outs[0].ndim else None
    if buf is not None:         # into a loop's buffer of the result's shape (dfc/runtime/compiled/buffers.py)
        if not buf.isidentifier():
            out = e.tmp()
            e.stmt(f"{out} = {buf}")
            buf = out
        e.stmt(f"P.matmul_into(LP, {k}, {x}, {y}, {bool(ta)}, {bool(tb)}, {buf})")
        return [buf]
    if (a.ndim, b.ndim) == (2, 2):
        return [f"H.reshape({flat}, ({x}.shape[{int(bool(ta))}], {y}.shape[{int(not tb)}]))"]
    return [f"{flat}[0]" if e.outs[0].ndim == 0 else flat]      # (n,) or (m,): flat already


def step(e, op, args, ins, out, **attrs):
    """Lower `op` on (args, ins) into a fresh local of Type `out`: one step of a composite lowering."""
    from dfc.ir.graph import Node
    from dfc.runtime.kernels.lowering import LOWERINGS
    sub = type(e)(e.gen, Node(e.node.name, op, [], attrs), args, ins, [out], e.ind)
    v = e.tmp()
    e.stmt(f"{v} = {LOWERINGS[op](sub)[0]}")
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
