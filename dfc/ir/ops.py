"""The one op registry: every op's inputs, outputs, attrs and dtype/shape rule.

The runtime's kernel table (dfc/runtime/kernels) and the compiler's gradient
table (dfc/compiler/autodiff) are keyed by the same names; tests check that
every op here has a kernel and a gradient rule (or is declared not
differentiable).
"""
import math

import numpy as np

from dfc.errors import DfcTypeError, DfcGraphError, DfcIndexError
from dfc.ir import dtypes as dt
from dfc.ir.dtypes import TType

REQUIRED = object()
MAX_OUTPUTS = 1 << 16      # outputs of one Unstack/Split: type inference makes one entry per output


class OpDef:
    """An op's contract.

    inputs: input names; a last name starting with "*" takes any number.
    outputs: number of outputs, or fn(attrs, n_inputs) -> int.
    attrs: name -> (kind, default); default REQUIRED means it must be given.
    infer: fn(attrs, in_types) -> list of TType.
    kind: "normal" or the control-flow primitive it is ("switch", "merge", ...).
    stateful: has side effects or reads state (never pruned by CSE, ordered).
    heavy: its kernel may be worth running on the thread pool.
    in_executor: the executor implements it (the five primitives move values between frames,
        Send/Recv talk to the rendezvous); it has no kernel.
    cost: fn(attrs, in_types, out_types) -> elements of work, for placement (default: the
        elements of the outputs).
    async_kernel: its kernel may have to wait (a queue's dequeue): it returns at once an object with
        `start(done, fail)` and `cancel()`, and calls done(outputs) / fail(error) later, from any thread;
        the executors run other work meanwhile (see dfc/runtime/kernels/queue_kernels.py).
    """

    __slots__ = ("name", "inputs", "outputs", "attrs", "infer", "kind", "stateful", "heavy", "in_executor",
                 "cost", "async_kernel")

    def __init__(self, name, inputs, outputs, attrs, infer, kind="normal", stateful=False, heavy=False,
                 in_executor=False, cost=None, async_kernel=False):
        self.name, self.inputs, self.outputs, self.attrs = name, tuple(inputs), outputs, attrs
        self.infer, self.kind, self.stateful, self.heavy = infer, kind, stateful, heavy
        self.in_executor = in_executor or kind != "normal"
        self.cost = cost
        self.async_kernel = async_kernel

    @property
    def variadic(self):
        return bool(self.inputs) and self.inputs[-1].startswith("*")

    def num_outputs(self, attrs, n_inputs):
        return self.outputs(attrs, n_inputs) if callable(self.outputs) else self.outputs

    def check_arity(self, n):
        fixed = len(self.inputs) - (1 if self.variadic else 0)
        if n < fixed or (not self.variadic and n != fixed):
            want = f"at least {fixed}" if self.variadic else str(fixed)
            raise DfcGraphError(f"{self.name} takes {want} inputs, got {n}")


REGISTRY = {}


def register(name, inputs, outputs, attrs, infer, **kw):
    REGISTRY[name] = OpDef(name, inputs, outputs, attrs or {}, infer, **kw)


def get(name):
    try:
        return REGISTRY[name]
    except KeyError:
        raise DfcGraphError(f"unknown op {name!r}") from None


# ---------------------------------------------------------------- shape helpers

def broadcast_shapes(*shapes):
    if any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) > 1:
            raise DfcTypeError(f"shapes {' and '.join(dt.format_shape(s) for s in shapes)} do not broadcast")
        if known:
            out.append(known.pop())
        elif any(d is None for d in dims):
            out.append(None)
        else:
            out.append(1)
    return tuple(out)


def _norm_axes(axis, rank):
    if axis is None:
        return None if rank is None else tuple(range(rank))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if rank is None:
        return axes
    out = []
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise DfcTypeError(f"axis {a} out of range for rank {rank}")
        out.append(a % rank if rank else 0)
    return tuple(out)


def reduce_shape(shape, axis, keepdims):
    if shape is None:
        return None
    axes = _norm_axes(axis, len(shape))
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _same_dtype(op, ins):
    dts = {t.dtype for t in ins}
    if len(dts) > 1:
        raise DfcTypeError(f"{op} needs inputs of one dtype, got {', '.join(t.dtype for t in ins)}")
    return ins[0].dtype


def _require(op, t, allowed, what="input"):
    if t.dtype not in allowed:
        raise DfcTypeError(f"{op} {what} must be {'/'.join(allowed)}, got {t.dtype}")


def _shape_value(t):
    """Static value of a shape-like tensor input (list of ints, -1 allowed) or None."""
    if t.value is None:
        return None
    return [int(v) for v in np.asarray(t.value).reshape(-1)]


# ---------------------------------------------------------------- elementwise

def _binary(name, result=None, allowed=dt.ALL):
    def infer(attrs, ins):
        d = _same_dtype(name, ins)
        if d not in allowed:
            raise DfcTypeError(f"{name} does not take {d}")
        return [TType(result or d, broadcast_shapes(ins[0].shape, ins[1].shape))]
    register(name, ("x", "y"), 1, {}, infer, heavy=True)


for _n in ("Add", "Sub", "Mul", "Maximum", "Minimum"):
    _binary(_n, allowed=dt.NUMERIC)
_binary("Div", allowed=dt.FLOATS)
for _n in ("FloorDiv", "Mod", "Pow"):
    _binary(_n, allowed=dt.NUMERIC)
for _n in ("Less", "LessEqual", "Greater", "GreaterEqual"):
    _binary(_n, "bool", allowed=dt.NUMERIC)
for _n in ("Equal", "NotEqual"):
    _binary(_n, "bool")
for _n in ("LogicalAnd", "LogicalOr"):
    _binary(_n, allowed=("bool",))


def _unary(name, allowed=dt.NUMERIC, result=None):
    def infer(attrs, ins):
        _require(name, ins[0], allowed)
        return [TType(result or ins[0].dtype, ins[0].shape)]
    register(name, ("x",), 1, {}, infer, heavy=True)


for _n in ("Neg", "Abs", "Sign", "Square", "Relu"):
    _unary(_n)
for _n in ("Sqrt", "Rsqrt", "Exp", "Log", "Log1p", "Sin", "Cos", "Tanh", "Sigmoid", "Floor", "Ceil", "Round",
           "Reciprocal"):
    _unary(_n, allowed=dt.FLOATS)
_unary("LogicalNot", allowed=("bool",))
_unary("IsFinite", allowed=dt.FLOATS, result="bool")


def _identity_infer(attrs, ins):
    return [TType(ins[0].dtype, ins[0].shape, ins[0].value)]


register("Identity", ("x",), 1, {}, _identity_infer)
register("StopGradient", ("x",), 1, {}, _identity_infer)


def _custom_gradient_infer(attrs, ins):
    n = attrs["num_values"]
    if not 1 <= n <= len(ins):
        raise DfcTypeError(f"CustomGradient num_values must be between 1 and its {len(ins)} inputs, got {n}")
    if any(t.dtype == dt.HANDLE for t in ins):
        raise DfcTypeError("CustomGradient takes tensors, not resource handles")
    return [TType(t.dtype, t.shape) for t in ins[:n]]      # no static value: the marker must stay in the graph


# Forwards its first num_values inputs (a custom_gradient function's values); the other inputs are the
# function's tensor arguments, there so the reverse sweep reaches them from the marker, whose gradient rule
# (dfc/compiler/autodiff/custom_gradient.py) calls the user's gradient function instead of differentiating
# the values' computation.
register("CustomGradient", ("*inputs",), lambda a, n: a["num_values"], {"num_values": ("int", REQUIRED)},
         _custom_gradient_infer)
register("Cast", ("x",), 1, {"dtype": ("dtype", REQUIRED)},
         lambda a, ins: _require("Cast", ins[0], dt.ALL) or [TType(a["dtype"], ins[0].shape)], heavy=True)


def _where_infer(attrs, ins):
    _require("Where", ins[0], ("bool",), "condition")
    d = _same_dtype("Where", ins[1:])
    return [TType(d, broadcast_shapes(*(t.shape for t in ins)))]


register("Where", ("cond", "x", "y"), 1, {}, _where_infer, heavy=True)

# ---------------------------------------------------------------- sources


def _const_infer(attrs, ins):
    v = attrs["value"]
    return [TType(dt.as_dtype(v.dtype), v.shape, v)]


register("Const", (), 1, {"value": ("tensor", REQUIRED)}, _const_infer)
register("Placeholder", (), 1, {"dtype": ("dtype", REQUIRED), "shape": ("shape", None)},
         lambda a, ins: [TType(a["dtype"], a["shape"])])


def _fill_shape(t):
    v = _shape_value(t)
    if v is not None:
        if any(d < 0 for d in v):
            raise DfcTypeError(f"shape {v} has a negative dimension")
        return tuple(v)
    if t.shape is not None and len(t.shape) == 1 and t.shape[0] is not None:
        return (None,) * t.shape[0]
    return None


def _fill_infer(attrs, ins):
    _require("Fill", ins[0], dt.INTS, "shape")
    if ins[1].shape not in (None, ()):
        raise DfcTypeError(f"Fill value must be a scalar, got shape {dt.format_shape(ins[1].shape)}")
    return [TType(ins[1].dtype, _fill_shape(ins[0]))]


register("Fill", ("shape", "value"), 1, {}, _fill_infer, heavy=True)
register("ZerosLike", ("x",), 1, {}, lambda a, ins: [TType(ins[0].dtype, ins[0].shape)])
register("OnesLike", ("x",), 1, {}, lambda a, ins: [TType(ins[0].dtype, ins[0].shape)])


def range_length(start, limit, delta):
    """The length of numpy.arange(start, limit, delta) for numpy scalars, computed as numpy does
    (ceil((limit - start) / delta)) without making the array."""
    if delta == 0:
        raise DfcTypeError("Range delta must not be zero")
    with np.errstate(all="ignore"):
        n = np.true_divide(limit - start, delta)
    if not np.isfinite(n):
        raise DfcTypeError(f"Range({start}, {limit}, {delta}) has no finite length")
    return max(0, math.ceil(n))


def _range_infer(attrs, ins):
    d = _same_dtype("Range", ins)
    _require("Range", ins[0], dt.NUMERIC)
    for t in ins:
        if t.shape not in (None, ()):
            raise DfcTypeError(f"Range takes scalars, got shape {dt.format_shape(t.shape)}")
    vals = [t.value for t in ins]
    n = None
    if all(v is not None for v in vals):
        n = range_length(*[np.asarray(v).reshape(())[()] for v in vals])
    return [TType(d, (n,))]


register("Range", ("start", "limit", "delta"), 1, {}, _range_infer)


def _random_infer(attrs, ins):
    _require("random", ins[0], dt.INTS, "shape")
    return [TType(attrs["dtype"], _fill_shape(ins[0]))]


_RANDOM_ATTRS = {"dtype": ("dtype", "float32"), "seed": ("int", 0), "a": ("float", 0.0), "b": ("float", 1.0)}
register("RandomUniform", ("shape",), 1, dict(_RANDOM_ATTRS), _random_infer, stateful=True)
register("RandomNormal", ("shape",), 1, dict(_RANDOM_ATTRS), _random_infer, stateful=True)

# ---------------------------------------------------------------- shapes


register("Shape", ("x",), 1, {}, lambda a, ins: [TType(
    "int64", (ins[0].rank,),
    np.array(ins[0].shape, np.int64) if ins[0].shape is not None and None not in ins[0].shape else None)])
register("Size", ("x",), 1, {}, lambda a, ins: [TType("int64", ())])
register("Rank", ("x",), 1, {}, lambda a, ins: [TType(
    "int64", (), None if ins[0].rank is None else np.array(ins[0].rank, np.int64))])


def _reshape_infer(attrs, ins):
    _require("Reshape", ins[1], dt.INTS, "shape")
    target = _shape_value(ins[1])
    if target is None:
        return [TType(ins[0].dtype, _fill_shape(ins[1]))]
    if target.count(-1) > 1:
        raise DfcTypeError("Reshape: at most one -1 in the new shape")
    src = ins[0].shape
    if any(d < -1 for d in target):
        raise DfcTypeError(f"Reshape: negative dimension in the new shape {target}")
    known = src is not None and None not in src
    total = math.prod(src) if known else None     # Python ints: no int64 overflow
    if -1 in target:
        rest = math.prod([d for d in target if d != -1])
        if total is not None:
            if rest == 0 or total % rest:
                raise DfcTypeError(f"cannot reshape {dt.format_shape(src)} to {target}")
            target = [total // rest if d == -1 else d for d in target]
        else:
            target = [None if d == -1 else d for d in target]
    elif total is not None and math.prod(target) != total:
        raise DfcTypeError(f"cannot reshape {dt.format_shape(src)} to {target}")
    return [TType(ins[0].dtype, target)]


register("Reshape", ("x", "shape"), 1, {}, _reshape_infer)


def _transpose_infer(attrs, ins):
    s, perm = ins[0].shape, attrs["perm"]
    if s is None:
        return [TType(ins[0].dtype, None)]
    if perm is None:
        perm = list(reversed(range(len(s))))
    if sorted(perm) != list(range(len(s))):
        raise DfcTypeError(f"Transpose perm {perm} does not fit rank {len(s)}")
    return [TType(ins[0].dtype, tuple(s[p] for p in perm))]


register("Transpose", ("x",), 1, {"perm": ("ints", None)}, _transpose_infer, heavy=True)


def _expand_infer(attrs, ins):
    s = ins[0].shape
    if s is None:
        return [TType(ins[0].dtype, None)]
    ax = attrs["axis"]
    ax = ax % (len(s) + 1) if -len(s) - 1 <= ax <= len(s) else None
    if ax is None:
        raise DfcTypeError(f"ExpandDims axis {attrs['axis']} out of range for rank {len(s)}")
    return [TType(ins[0].dtype, s[:ax] + (1,) + s[ax:])]


register("ExpandDims", ("x",), 1, {"axis": ("int", REQUIRED)}, _expand_infer)


def _squeeze_infer(attrs, ins):
    s = ins[0].shape
    if s is None:
        return [TType(ins[0].dtype, None)]
    axes = _norm_axes(attrs["axis"], len(s)) if attrs["axis"] is not None else \
        tuple(i for i, d in enumerate(s) if d == 1)
    for a in axes:
        if s[a] not in (1, None):
            raise DfcTypeError(f"Squeeze: dimension {a} has size {s[a]}, not 1")
    return [TType(ins[0].dtype, tuple(d for i, d in enumerate(s) if i not in axes))]


register("Squeeze", ("x",), 1, {"axis": ("axis", None)}, _squeeze_infer)


def _concat_infer(attrs, ins):
    d = _same_dtype("Concat", ins)
    shapes = [t.shape for t in ins]
    if any(s is None for s in shapes):
        return [TType(d, None)]
    r = len(shapes[0])
    if any(len(s) != r for s in shapes) or r == 0:
        raise DfcTypeError(f"Concat needs inputs of one rank >= 1, got {[dt.format_shape(s) for s in shapes]}")
    ax = _norm_axes(attrs["axis"], r)[0]
    out = []
    for i in range(r):
        dims = [s[i] for s in shapes]
        if i == ax:
            out.append(None if None in dims else sum(dims))
        else:
            known = {x for x in dims if x is not None}
            if len(known) > 1:
                raise DfcTypeError(f"Concat: dimension {i} differs: {dims}")
            out.append(known.pop() if known else None)
    return [TType(d, out)]


register("Concat", ("*values",), 1, {"axis": ("int", 0)}, _concat_infer, heavy=True)


def _stack_infer(attrs, ins):
    d = _same_dtype("Stack", ins)
    shape = ins[0].shape
    for t in ins[1:]:
        if not dt.shapes_compatible(shape, t.shape):
            raise DfcTypeError(f"Stack needs inputs of one shape, got {[repr(t) for t in ins]}")
        shape = shape if t.shape is None else t.shape if shape is None else \
            tuple(a if a is not None else b for a, b in zip(shape, t.shape))
    if shape is None:
        return [TType(d, None)]
    ax = _norm_axes(attrs["axis"], len(shape) + 1)[0]
    return [TType(d, shape[:ax] + (len(ins),) + shape[ax:])]


register("Stack", ("*values",), 1, {"axis": ("int", 0)}, _stack_infer, heavy=True)


def _check_num(op, num, least):
    if not least <= num <= MAX_OUTPUTS:
        raise DfcTypeError(f"{op} num must be between {least} and {MAX_OUTPUTS}, got {num}")


def _unstack_infer(attrs, ins):
    _check_num("Unstack", attrs["num"], 0)
    s = ins[0].shape
    if s is None:
        return [TType(ins[0].dtype, None)] * attrs["num"]
    if not s:
        raise DfcTypeError("Unstack needs a tensor of rank >= 1")
    ax = _norm_axes(attrs["axis"], len(s))[0]
    if s[ax] is not None and s[ax] != attrs["num"]:
        raise DfcTypeError(f"Unstack of {attrs['num']} along a dimension of size {s[ax]}")
    return [TType(ins[0].dtype, s[:ax] + s[ax + 1:])] * attrs["num"]


register("Unstack", ("x",), lambda a, n: a["num"], {"num": ("int", REQUIRED), "axis": ("int", 0)}, _unstack_infer)


def _split_infer(attrs, ins):
    s, num = ins[0].shape, attrs["num"]
    _check_num("Split", num, 1)
    if s is None:
        return [TType(ins[0].dtype, None)] * num
    if not s:
        raise DfcTypeError("Split needs a tensor of rank >= 1")
    ax = _norm_axes(attrs["axis"], len(s))[0]
    if s[ax] is not None and s[ax] % num:
        raise DfcTypeError(f"Split: dimension {ax} of size {s[ax]} does not split into {num} equal parts")
    part = None if s[ax] is None else s[ax] // num
    return [TType(ins[0].dtype, s[:ax] + (part,) + s[ax + 1:])] * num


register("Split", ("x",), lambda a, n: a["num"], {"num": ("int", REQUIRED), "axis": ("int", 0)}, _split_infer)


def _broadcast_to_infer(attrs, ins):
    return [TType(ins[0].dtype, _fill_shape(ins[1]))]


register("BroadcastTo", ("x", "shape"), 1, {}, _broadcast_to_infer, heavy=True)
# Sum a broadcast result back down to `shape` (the adjoint of broadcasting).
register("SumToShape", ("x", "shape"), 1, {}, _broadcast_to_infer, heavy=True)

# ---------------------------------------------------------------- indexing


def getitem_shape(shape, spec, dyn):
    """Static result shape of numpy basic/advanced indexing described by `spec` (`dyn`: the TTypes of
    the index inputs). numpy's rule: index arrays, and ints when any index array is present, are
    broadcast together; their broadcast shape replaces them where they stand when they are adjacent
    in the index, else it comes first. None when the rank is unknown."""
    if shape is None:
        return None
    arrays = [dyn[item[1]].shape for item in spec if item[0] == "tensor"]
    if any(a is None for a in arrays):
        return None
    used = sum(item[0] not in ("newaxis", "ellipsis") for item in spec)
    if used > len(shape):
        raise DfcTypeError(f"too many indices for a tensor of rank {len(shape)}")
    items = []
    for item in spec:       # the ellipsis stands for the dimensions no other index takes (and, even
        # when there are none, keeps the index arrays on either side of it apart, as in numpy)
        items += ([["slice", None, None, None]] * (len(shape) - used) or [item]) if item[0] == "ellipsis" \
            else [item]
    advanced = [k for k, item in enumerate(items) if item[0] == "tensor" or (arrays and item[0] == "int")]
    out, i, where = [], 0, None
    for k, item in enumerate(items):
        kind = item[0]
        if kind in ("newaxis", "ellipsis"):
            out += [1] if kind == "newaxis" else []
            continue
        n = shape[i]
        if kind == "int":
            v = item[1]
            if isinstance(v, int) and n is not None and not -n <= v < n:
                raise DfcIndexError(f"index {v} is out of range for dimension {i} of size {n}")
        if k in advanced:
            where = len(out) if where is None else where
        elif kind == "slice":
            parts = item[1:]
            if n is not None and all(isinstance(p, int) or p is None for p in parts):
                out.append(len(range(*slice(*parts).indices(n))))
            else:
                out.append(None)
        i += 1
    out += shape[i:]
    if not advanced:
        return tuple(out)
    adjacent = advanced == list(range(advanced[0], advanced[-1] + 1))
    return tuple(out[:where] + _broadcast_all(arrays) + out[where:]) if adjacent else \
        tuple(_broadcast_all(arrays) + out)


def _broadcast_all(shapes):
    """numpy's broadcast of index array shapes (None: a size known only when the graph runs)."""
    rank = max(len(s) for s in shapes)
    out = []
    for j in range(rank):
        sizes = {s[j - rank + len(s)] for s in shapes if j - rank + len(s) >= 0}
        known = {d for d in sizes if d is not None and d != 1}
        if len(known) > 1:
            raise DfcTypeError(f"index arrays of shapes {', '.join(str(list(s)) for s in shapes)} do not "
                               f"broadcast together")
        out.append(known.pop() if known else None if None in sizes else 1)
    return out


def check_index_spec(spec, n_index):
    """A GetItem/GetItemGrad spec must follow the grammar below; kernels index with it unchecked."""
    def bad(why):
        return DfcGraphError(f"bad index spec {spec!r}"[:200] + f": {why}")

    def part(p, none_ok):
        if p is None and none_ok:
            return
        if _is_int(p):
            if not INT_MIN <= p <= INT_MAX:
                raise bad(f"index {p} is out of the int64 range")
            return
        if isinstance(p, dict) and list(p) == ["t"] and _is_int(p["t"]) and 0 <= p["t"] < n_index:
            return
        allowed = "an int, None" if none_ok else "an int"
        raise bad(f"{p!r} is not {allowed} or {{'t': k}} with 0 <= k < {n_index}")

    if not isinstance(spec, list):
        raise bad("it must be a list")
    ellipses = 0
    for item in spec:
        if not isinstance(item, list) or not item or item[0] not in _SPEC_ARITY:
            raise bad(f"each item is [kind, ...] with kind one of {', '.join(_SPEC_ARITY)}")
        kind = item[0]
        if len(item) != _SPEC_ARITY[kind] + 1:
            raise bad(f"{kind!r} takes {_SPEC_ARITY[kind]} values")
        if kind == "int":
            part(item[1], False)
        elif kind == "slice":
            for p in item[1:]:
                part(p, True)
            if item[3] == 0:
                raise bad("slice step cannot be zero")
        elif kind == "tensor":
            if not (_is_int(item[1]) and 0 <= item[1] < n_index):
                raise bad(f"tensor index {item[1]!r} names no index input (there are {n_index})")
        ellipses += kind == "ellipsis"
    if ellipses > 1:
        raise bad("at most one ellipsis")


_SPEC_ARITY = {"int": 1, "slice": 3, "newaxis": 0, "ellipsis": 0, "tensor": 1}


def _getitem_infer(attrs, ins):
    check_index_spec(attrs["spec"], len(ins) - 1)
    for t in ins[1:]:
        _require("GetItem", t, dt.INTS, "index")
    return [TType(ins[0].dtype, getitem_shape(ins[0].shape, attrs["spec"], ins[1:]))]


def _getitem_grad_infer(attrs, ins):
    check_index_spec(attrs["spec"], len(ins) - 2)
    for t in ins[2:]:
        _require("GetItemGrad", t, dt.INTS, "index")
    _require("GetItemGrad", ins[1], dt.INTS, "shape")
    return [TType(ins[0].dtype, _fill_shape(ins[1]))]


# spec: list of ["int", k|{"t": i}], ["slice", a, b, c] (each int, None or {"t": i}),
# ["newaxis"], ["ellipsis"], ["tensor", i]; {"t": i} / i name dynamic input i (0-based after x).
register("GetItem", ("x", "*index"), 1, {"spec": ("json", REQUIRED)}, _getitem_infer)
# The adjoint of GetItem: zeros of `shape` with `grad` added at the indexed positions.
register("GetItemGrad", ("grad", "shape", "*index"), 1, {"spec": ("json", REQUIRED)}, _getitem_grad_infer,
         heavy=True)


def _gather_infer(attrs, ins):
    _require("Gather", ins[1], dt.INTS, "indices")
    s, idx = ins[0].shape, ins[1].shape
    if s is None or idx is None:
        return [TType(ins[0].dtype, None)]
    ax = _norm_axes(attrs["axis"], len(s))[0]
    return [TType(ins[0].dtype, s[:ax] + idx + s[ax + 1:])]


register("Gather", ("params", "indices"), 1, {"axis": ("int", 0)}, _gather_infer, heavy=True)
# The adjoint of Gather: zeros of `shape` with updates added at `indices` along axis.
register("ScatterAdd", ("shape", "indices", "updates"), 1, {"axis": ("int", 0)},
         lambda a, ins: [TType(ins[2].dtype, _fill_shape(ins[0]))], heavy=True)


def _onehot_infer(attrs, ins):
    _require("OneHot", ins[0], dt.INTS, "indices")
    if attrs["depth"] < 0:
        raise DfcTypeError(f"OneHot depth must be >= 0, got {attrs['depth']}")
    s = ins[0].shape
    return [TType(attrs["dtype"], None if s is None else s + (attrs["depth"],))]


register("OneHot", ("indices",), 1, {"depth": ("int", REQUIRED), "dtype": ("dtype", "float32"),
                                     "on": ("float", 1.0), "off": ("float", 0.0)}, _onehot_infer)

# ---------------------------------------------------------------- reductions and nn


def _reduce(name, allowed=dt.NUMERIC):
    def infer(attrs, ins):
        _require(name, ins[0], allowed)
        return [TType(ins[0].dtype, reduce_shape(ins[0].shape, attrs["axis"], attrs["keepdims"]))]
    register(name, ("x",), 1, {"axis": ("axis", None), "keepdims": ("bool", False)}, infer, heavy=True)


for _n in ("Sum", "Max", "Min", "Prod"):
    _reduce(_n)
_reduce("Mean", dt.FLOATS)
_reduce("All", ("bool",))
_reduce("Any", ("bool",))


def _arg_infer(attrs, ins):
    _require("ArgMax", ins[0], dt.NUMERIC)
    return [TType("int64", reduce_shape(ins[0].shape, attrs["axis"], False))]


register("ArgMax", ("x",), 1, {"axis": ("int", -1)}, _arg_infer, heavy=True)
register("ArgMin", ("x",), 1, {"axis": ("int", -1)}, _arg_infer, heavy=True)


def _softmax_infer(attrs, ins):
    _require("Softmax", ins[0], dt.FLOATS)
    return [TType(ins[0].dtype, ins[0].shape)]


register("Softmax", ("x",), 1, {"axis": ("int", -1)}, _softmax_infer, heavy=True)
register("LogSoftmax", ("x",), 1, {"axis": ("int", -1)}, _softmax_infer, heavy=True)


def _matmul_infer(attrs, ins):
    d = _same_dtype("MatMul", ins)
    _require("MatMul", ins[0], dt.NUMERIC)
    a, b = ins[0].shape, ins[1].shape
    if a is None or b is None:
        return [TType(d, None)]
    if len(a) < 2 or len(b) < 2:
        raise DfcTypeError(f"MatMul needs rank >= 2, got {dt.format_shape(a)} and {dt.format_shape(b)}")
    if attrs["transpose_a"]:
        a = a[:-2] + (a[-1], a[-2])
    if attrs["transpose_b"]:
        b = b[:-2] + (b[-1], b[-2])
    if a[-1] is not None and b[-2] is not None and a[-1] != b[-2]:
        raise DfcTypeError(f"MatMul shapes {dt.format_shape(a)} and {dt.format_shape(b)} do not fit "
                           f"({a[-1]} != {b[-2]})")
    batch = broadcast_shapes(a[:-2], b[:-2])
    return [TType(d, batch + (a[-2], b[-1]))]


def _matmul_cost(attrs, ins, outs):
    """m x n outputs, k multiply-adds each."""
    a = ins[0].shape if ins and ins[0] is not None else None
    k = (a[-2] if attrs.get("transpose_a") else a[-1]) if a and len(a) >= 2 else (a[-1] if a else 1)
    n = 1
    for d in (outs[0].shape or ()) if outs and outs[0] is not None else ():
        n *= d or 1
    return n * (k or 1)


register("MatMul", ("a", "b"), 1, {"transpose_a": ("bool", False), "transpose_b": ("bool", False)},
         _matmul_infer, heavy=True, cost=_matmul_cost)

# ---------------------------------------------------------------- control flow (§4.1)


def _switch_infer(attrs, ins):
    _require("Switch", ins[1], ("bool",), "predicate")
    if ins[1].shape not in (None, ()):
        raise DfcTypeError(f"Switch predicate must be a scalar, got shape {dt.format_shape(ins[1].shape)}")
    return [TType(ins[0].dtype, ins[0].shape)] * 2


def _merge_infer(attrs, ins):
    d = _same_dtype("Merge", ins)
    shape = ins[0].shape
    for t in ins[1:]:
        shape = dt.join_shapes(shape, t.shape)
    return [TType(d, shape), TType("int32", ())]


def _loopcond_infer(attrs, ins):
    _require("LoopCond", ins[0], ("bool",), "predicate")
    if ins[0].shape not in (None, ()):
        raise DfcTypeError(f"LoopCond predicate must be a scalar, got shape {dt.format_shape(ins[0].shape)}")
    return [TType("bool", ())]


register("Switch", ("data", "pred"), 2, {}, _switch_infer, kind="switch")
register("Merge", ("*inputs",), 2, {}, _merge_infer, kind="merge")
def _enter_infer(attrs, ins):
    if attrs["parallel_iterations"] < 1:
        raise DfcTypeError(f"Enter parallel_iterations must be >= 1, got {attrs['parallel_iterations']}")
    return _identity_infer(attrs, ins)


register("Enter", ("x",), 1, {"frame_name": ("str", REQUIRED), "is_constant": ("bool", False),
                               "parallel_iterations": ("int", 32)}, _enter_infer, kind="enter")
register("Exit", ("x",), 1, {}, _identity_infer, kind="exit")
register("NextIteration", ("x",), 1, {}, _identity_infer, kind="next_iteration")
register("LoopCond", ("pred",), 1, {}, _loopcond_infer)
register("NoOp", (), 0, {}, lambda a, ins: [])

# ---------------------------------------------------------------- side effects and state


def _print_infer(attrs, ins):
    if len(attrs["template"]) != len(ins) + 1:
        raise DfcTypeError(f"Print template has {len(attrs['template'])} pieces; {len(ins)} values need "
                           f"{len(ins) + 1} (the text before, between and after them)")
    return []


# template: the strings printed between the inputs (len(inputs) + 1 pieces).
register("Print", ("*values",), 0, {"template": ("strs", REQUIRED)}, _print_infer, stateful=True)
# Seconds since the epoch (float64) when the op runs, like tf.timestamp: schedules inside the graph
# (a ps task's "checkpoint every t seconds"); stateful, so it runs in program order and is never folded.
register("Timestamp", (), 1, {}, lambda a, ins: [TType("float64", ())], stateful=True)
register("Assert", ("cond", "*data"), 0, {"message": ("str", "")},
         lambda a, ins: _require("Assert", ins[0], ("bool",), "condition") or [], stateful=True)

_H = TType(dt.HANDLE, ())
# A Variable's resource, found by shared name in a container ("": the session's default container),
# made from `init` on first use (whitepaper §4.7).
register("VarHandle", ("init",), 1, {"shared_name": ("str", REQUIRED), "container": ("str", "")},
         lambda a, ins: [_H], stateful=True)


def _read_infer(attrs, ins):
    return [TType(attrs["dtype"], attrs["shape"])]


register("ReadVariable", ("handle",), 1, {"dtype": ("dtype", REQUIRED), "shape": ("shape", None)},
         _read_infer, stateful=True)
for _n in ("Assign", "AssignAdd", "AssignSub"):
    register(_n, ("handle", "value"), 1, {}, lambda a, ins: [TType(ins[1].dtype, ins[1].shape)], stateful=True)


def _apply_once_infer(attrs, ins):
    ops, n = attrs["ops"], len(attrs["ops"])
    if any(o not in _APPLY_ONCE_OPS for o in ops):
        raise DfcTypeError(f"ApplyOnce: ops must be some of {', '.join(_APPLY_ONCE_OPS)}, got {ops!r}")
    scatters = sum(o.startswith("ResourceScatter") for o in ops)
    rest = ins[2:]
    if len(rest) != 2 * n + len(attrs["dtypes"]) + scatters:
        raise DfcTypeError(f"ApplyOnce takes a record, a step, {n} handles, {n} values, one handle per "
                           f"snapshot dtype ({len(attrs['dtypes'])}) and the indices of each of its {scatters} "
                           f"scatters, got {len(ins)} inputs")
    for t in rest[2 * n + len(attrs["dtypes"]):]:
        _require("ApplyOnce", t, dt.INTS, "scatter indices")
    rest = rest[:2 * n + len(attrs["dtypes"])]
    if any(d not in dt.ALL for d in attrs["dtypes"]):
        raise DfcTypeError(f"ApplyOnce: dtypes must be some of {', '.join(dt.ALL)}, got {attrs['dtypes']!r}")
    for t in [ins[0]] + rest[:n] + rest[2 * n:]:
        _require("ApplyOnce", t, (dt.HANDLE,), "record/variable")
    _require("ApplyOnce", ins[1], dt.INTS, "step")
    return [TType("bool", ())] + [TType(d, None) for d in attrs["dtypes"]]


_APPLY_ONCE_OPS = ("Assign", "AssignAdd", "AssignSub", "ResourceScatterAdd", "ResourceScatterSub")
# Exactly-once updates (data-parallel training): ApplyOnce(record, step, *handles, *values, *snapshot,
# *scatter_indices) (values[k] of a ResourceScatter op are rows, at the next of scatter_indices)
# applies every `ops[k]` of values[k] to handles[k] and sets the int64 record to step + 1, all in one
# kernel, only when record <= step; outputs whether it applied and the snapshot Variables' values, read
# under the same lock (a checkpoint of them is never torn by another ApplyOnce).
register("ApplyOnce", ("record", "step", "*args"), lambda a, n: 1 + len(a["dtypes"]),
         {"ops": ("strs", REQUIRED), "dtypes": ("strs", [])}, _apply_once_infer, stateful=True)

def _scatter_var_infer(attrs, ins):
    _require("ResourceScatterAdd", ins[0], (dt.HANDLE,), "handle")
    _require("ResourceScatterAdd", ins[1], dt.INTS, "indices")
    return [TType(ins[2].dtype, ins[2].shape)]


# Sparse row updates of a Variable (a gather's gradient applied by an optimizer):
# ResourceScatterAdd(handle, indices, updates) does `value[indices[i]] += updates[i]` for each i in order
# (duplicate indices add up; Sub subtracts), atomically, and outputs the updated rows `value[indices]`.
for _n in ("ResourceScatterAdd", "ResourceScatterSub"):
    register(_n, ("handle", "indices", "updates"), 1, {}, _scatter_var_infer, stateful=True)


def _sum_duplicates_infer(attrs, ins):
    _require("SumDuplicates", ins[0], dt.INTS, "indices")
    if ins[0].shape is not None and len(ins[0].shape) != 1:
        raise DfcTypeError(f"SumDuplicates indices must be 1-D, got shape {dt.format_shape(ins[0].shape)}")
    v = ins[1].shape
    return [TType(ins[0].dtype, (None,)), TType(ins[1].dtype, None if v is None else (None,) + tuple(v[1:]))]


# SumDuplicates(indices, values) -> (unique, sums): the sorted distinct indices and, for each, the sum
# of the rows of `values` at its positions, added in position order (as ScatterAdd adds them).
register("SumDuplicates", ("indices", "values"), 2, {}, _sum_duplicates_infer)

def _partition_infer(attrs, ins):
    _require("DynamicPartition", ins[1], dt.INTS, "partitions")
    if attrs["num_partitions"] < 1:
        raise DfcTypeError(f"DynamicPartition num_partitions must be >= 1, got {attrs['num_partitions']}")
    d, p = ins[0].shape, ins[1].shape
    shape = None if d is None or p is None else (None,) + tuple(d[len(p):])
    return [TType(ins[0].dtype, shape)] * attrs["num_partitions"]


def _stitch_infer(attrs, ins):
    n = len(ins) // 2
    if n < 1 or len(ins) != 2 * n:
        raise DfcTypeError(f"DynamicStitch takes as many data tensors as index tensors, got {len(ins)} inputs")
    for t in ins[:n]:
        _require("DynamicStitch", t, dt.INTS, "indices")
    if len({t.dtype for t in ins[n:]}) != 1:
        raise DfcTypeError(f"DynamicStitch data must have one dtype, got {', '.join(t.dtype for t in ins[n:])}")
    i, d = ins[0].shape, ins[n].shape
    return [TType(ins[n].dtype, None if i is None or d is None else (None,) + tuple(d[len(i):]))]


# Routing rows to shards (embedding lookups over a sharded Variable), as TensorFlow's ops:
# DynamicPartition(data, partitions) -> [data[partitions == k] for k in range(num_partitions)];
# DynamicStitch(*indices, *data): out[indices[k][...]] = data[k][...] for k in order (later wins),
# out having max(index) + 1 rows.
register("DynamicPartition", ("data", "partitions"), lambda a, n: a["num_partitions"],
         {"num_partitions": ("int", REQUIRED)}, _partition_infer)
register("DynamicStitch", ("*args",), 1, {}, _stitch_infer)

# Stacks hold the forward values a gradient loop needs (§5.1).
# elem_dtype may be "resource": gradients of nested loops save TensorArray handles on stacks.
register("StackV2", (), 1, {"elem_dtype": ("elem_dtype", REQUIRED), "swap_memory": ("bool", False)},
         lambda a, ins: [_H], stateful=True)
register("StackPush", ("handle", "elem"), 1, {}, lambda a, ins: [TType(ins[1].dtype, ins[1].shape)], stateful=True)
register("StackPop", ("handle",), 1, {"elem_dtype": ("elem_dtype", REQUIRED), "shape": ("shape", None)},
         lambda a, ins: [TType(a["elem_dtype"], a["shape"])], stateful=True)

# TensorArrays (functional: every write returns a new flow value that orders later ops).
_FLOW = TType("float32", ())
_TA_ATTRS = {"dtype": ("dtype", REQUIRED), "element_shape": ("shape", None)}
register("TensorArray", ("size",), 2, {"dtype": ("dtype", REQUIRED), "dynamic_size": ("bool", True),
                                       "element_shape": ("shape", None), "accumulate": ("bool", False)},
         lambda a, ins: [_H, _FLOW], stateful=True)
register("TensorArrayWrite", ("handle", "index", "value", "flow"), 1, {}, lambda a, ins: [_FLOW], stateful=True)
register("TensorArrayRead", ("handle", "index", "flow"), 1, dict(_TA_ATTRS),
         lambda a, ins: [TType(a["dtype"], a["element_shape"])], stateful=True)
register("TensorArraySize", ("handle", "flow"), 1, {}, lambda a, ins: [TType("int64", ())], stateful=True)


def _ta_stacked(a, ins):
    es = a["element_shape"]
    return [TType(a["dtype"], None if es is None else (None,) + tuple(es))]


register("TensorArrayStack", ("handle", "flow"), 1, dict(_TA_ATTRS), _ta_stacked, stateful=True)
register("TensorArrayGather", ("handle", "indices", "flow"), 1, dict(_TA_ATTRS), _ta_stacked, stateful=True)
register("TensorArrayConcat", ("handle", "flow"), 1, dict(_TA_ATTRS),
         lambda a, ins: [TType(a["dtype"], None if a["element_shape"] is None else
                               (None,) + tuple(a["element_shape"])[1:])], stateful=True)
register("TensorArrayUnstack", ("handle", "value", "flow"), 1, {}, lambda a, ins: [_FLOW], stateful=True)
register("TensorArrayScatter", ("handle", "indices", "value", "flow"), 1, {}, lambda a, ins: [_FLOW],
         stateful=True)

# Checkpoints (course note: Save ops read variables and write a file).
register("Save", ("*values",), 0, {"path": ("str", REQUIRED), "names": ("strs", REQUIRED)},
         lambda a, ins: [], stateful=True)
# One Restore reads every variable of a checkpoint (one snapshot, all checked before any output exists).
def _restore_infer(attrs, ins):
    names, dts, shapes = attrs["names"], attrs["dtypes"], attrs["shapes"]
    if len(set(names)) != len(names) or len(names) > MAX_OUTPUTS:
        raise DfcTypeError(f"Restore: names must be unique (at most {MAX_OUTPUTS}), got {names!r}")
    if len(dts) != len(names) or any(d not in dt.ALL for d in dts):
        raise DfcTypeError(f"Restore: dtypes must be one of {', '.join(dt.ALL)} per name, got {dts!r}")
    if shapes is not None and (not isinstance(shapes, list) or len(shapes) != len(names) or not all(
            s is None or (isinstance(s, list) and all(d is None or (_is_int(d) and 0 <= d <= INT_MAX) for d in s))
            for s in shapes)):
        raise DfcTypeError(f"Restore: shapes must be one shape (a list of dims, or null) per name, got {shapes!r}")
    return [TType(d, None if s is None else tuple(s)) for d, s in zip(dts, shapes or [None] * len(dts))]


register("Restore", (), lambda a, n: len(a["names"]),
         {"path": ("str", REQUIRED), "names": ("strs", REQUIRED), "dtypes": ("strs", REQUIRED),
          "shapes": ("json", None)}, _restore_infer, stateful=True)


def canonical_attrs(op, attrs, node=None):
    """Check attrs against the op's declaration and fill defaults (sorted keys)."""
    opdef = get(op)
    out = {}
    for k in attrs:
        if k not in opdef.attrs:
            raise DfcGraphError(f"{op} has no attr {k!r}", node=node)
    for k, (kind, default) in opdef.attrs.items():
        if k in attrs:
            out[k] = check_attr(kind, attrs[k], f"{op} attr {k!r}", node)
        elif default is REQUIRED:
            raise DfcGraphError(f"{op} needs attr {k!r}", node=node)
        else:
            out[k] = default
    return dict(sorted(out.items()))


INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1     # every int attr fits an int64, as in the JSON of TF


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_attr(kind, v, what, node):
    def bad(why=""):
        return DfcGraphError(f"{what}: bad {kind} value {v!r}"[:300] + why, node=node)
    if kind == "int":
        if not _is_int(v):
            raise bad()
        if not INT_MIN <= v <= INT_MAX:
            raise bad(" (out of the int64 range)")
        return int(v)
    if kind == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
            raise bad()
        try:
            return float(v)
        except OverflowError:
            raise bad(" (too large for a float)") from None
    if kind == "bool":
        if not isinstance(v, (bool, np.bool_)):
            raise bad()
        return bool(v)
    if kind == "str":
        if not isinstance(v, str):
            raise bad()
        return v
    if kind == "strs":
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            raise bad()
        return list(v)
    if kind in ("dtype", "elem_dtype"):
        # "resource" is the type of handles that ops make; only a stack's elements may be handles.
        allowed = dt.ALL if kind == "dtype" else dt.DTYPES
        if not isinstance(v, str) or v not in allowed:
            raise bad(f" (use one of {', '.join(allowed)})")
        return v
    if kind in ("shape", "ints", "axis"):
        if v is None:
            return None
        if kind == "axis" and _is_int(v):
            if not INT_MIN <= v <= INT_MAX:
                raise bad(" (out of the int64 range)")
            return int(v)
        if not isinstance(v, (list, tuple)):
            raise bad()
        for x in v:
            if kind == "shape" and x is None:
                continue
            if not _is_int(x):
                raise bad()
            lo = 0 if kind == "shape" else INT_MIN
            if not lo <= x <= INT_MAX:
                raise bad(" (a dimension must be between 0 and 2**63-1)" if kind == "shape" else
                          " (out of the int64 range)")
        return [None if x is None else int(x) for x in v]
    if kind == "tensor":
        if not isinstance(v, np.ndarray) or v.dtype.name not in dt.ALL:
            raise bad()
        return v
    return v  # json

# ---------------------------------------------------------------- gradients (autodiff additions)

# The gradient TensorArray of a forward TensorArray (§5.2): writes accumulate,
# and an element never written reads as zeros shaped like the forward element.
register("TensorArrayGrad", ("handle",), 2, {"dtype": ("dtype", REQUIRED), "element_shape": ("shape", None)},
         lambda a, ins: [_H, _FLOW], stateful=True)


# ---------------------------------------------------------------- devices (partitioning, §3, §4.4)
# A cross-device edge becomes Send (on the producer's device) -> Recv (on the consumer's device).
# The rendezvous key is tensor_name plus the frame tag of the iteration, so a loop's many instances never
# collide. A Send with no data input carries only a control edge (its value is a token). Both always run:
# a dead input crosses as a dead signal, so a Recv on an untaken branch finishes (§4.4).
_XFER_ATTRS = {"tensor_name": ("str", REQUIRED), "send_device": ("str", REQUIRED),
               "recv_device": ("str", REQUIRED), "dtype": ("dtype", "bool"), "shape": ("shape", None)}


def _send_infer(attrs, ins):
    if len(ins) > 1:
        raise DfcTypeError("Send takes at most one data input")
    return []


register("Send", ("*x",), 0, dict(_XFER_ATTRS), _send_infer, stateful=True, in_executor=True)
register("Recv", (), 1, dict(_XFER_ATTRS), lambda a, ins: [TType(a["dtype"], a["shape"])], stateful=True,
         in_executor=True)


# ---------------------------------------------------------------- the numpy surface (issue 15 item 2)
# sort/argsort/top_k, take_along_axis, cumsum/cumprod, einsum, pad, isnan/isinf and dfc.linalg.
# Compositions of other ops (repeat, tile, flip, roll, outer, linspace, sort, norm) have no op here.


def _along_axis_infer(op, allowed):
    """An op along attrs["axis"] of a tensor of rank >= 1 whose result has the input's dtype and shape."""
    def infer(attrs, ins):
        _require(op, ins[0], allowed)
        s = ins[0].shape
        if s is not None:
            if not s:
                raise DfcTypeError(f"{op} needs a tensor of rank >= 1")
            _norm_axes(attrs["axis"], len(s))
        return [TType(ins[0].dtype, s)]
    return infer


def _cumprod_grad_infer(attrs, ins):
    _same_dtype("CumprodGrad", ins)
    return _along_axis_infer("CumprodGrad", dt.FLOATS)(attrs, ins)


_unary("IsNan", allowed=dt.FLOATS, result="bool")
_unary("IsInf", allowed=dt.FLOATS, result="bool")
_SCAN_ATTRS = {"axis": ("int", 0), "reverse": ("bool", False)}
register("Cumsum", ("x",), 1, dict(_SCAN_ATTRS), _along_axis_infer("Cumsum", dt.NUMERIC), heavy=True)
register("Cumprod", ("x",), 1, dict(_SCAN_ATTRS), _along_axis_infer("Cumprod", dt.NUMERIC), heavy=True)
# The gradient of Cumprod (x, grad of its output) -> grad of x, without dividing by x (zeros are fine).
register("CumprodGrad", ("x", "grad"), 1, dict(_SCAN_ATTRS), _cumprod_grad_infer, heavy=True)


def _argsort_infer(attrs, ins):
    _along_axis_infer("ArgSort", dt.NUMERIC)(attrs, ins)
    return [TType("int64", ins[0].shape)]


def _searchsorted_infer(attrs, ins):
    a, v = ins
    _require("SearchSorted", a, dt.NUMERIC, "sorted array")
    _same_dtype("SearchSorted", ins)
    if a.shape is not None and len(a.shape) != 1:
        raise DfcTypeError(f"SearchSorted needs a 1-D sorted array, got shape {dt.format_shape(a.shape)}")
    if attrs["side"] not in ("left", "right"):
        raise DfcTypeError(f"SearchSorted side must be 'left' or 'right', not {attrs['side']!r}")
    return [TType("int64", v.shape)]


# numpy.searchsorted: where each value would go in the sorted 1-D array (side "left": before equal ones).
register("SearchSorted", ("sorted", "values"), 1, {"side": ("str", "left")}, _searchsorted_infer, heavy=True)


# Stable: equal elements keep their order (descending too: the lower index first), NaN sorts last
# (first when descending).
register("ArgSort", ("x",), 1, {"axis": ("int", -1), "descending": ("bool", False)}, _argsort_infer, heavy=True)


def _topk_infer(attrs, ins):
    _require("TopK", ins[0], dt.NUMERIC)
    k, s = attrs["k"], ins[0].shape
    if k < 0:
        raise DfcTypeError(f"TopK k must be >= 0, got {k}")
    if s is None:
        return [TType(ins[0].dtype, None), TType("int64", None)]
    if not s:
        raise DfcTypeError("TopK needs a tensor of rank >= 1")
    if s[-1] is not None and k > s[-1]:
        raise DfcTypeError(f"TopK k={k} is larger than the last dimension ({s[-1]})")
    return [TType(ins[0].dtype, s[:-1] + (k,)), TType("int64", s[:-1] + (k,))]


# The k largest entries along the last axis in descending order, and their indices (ties: lower index first).
register("TopK", ("x",), 2, {"k": ("int", REQUIRED)}, _topk_infer, heavy=True)


def take_along_axis_shape(arr, idx, axis):
    """numpy.take_along_axis: same rank; idx's size on `axis`, the broadcast of both elsewhere."""
    if arr is None or idx is None:
        return None
    if len(arr) != len(idx) or not arr:
        raise DfcTypeError(f"take_along_axis needs arr and indices of one rank >= 1, got "
                           f"{dt.format_shape(arr)} and {dt.format_shape(idx)}")
    ax = _norm_axes(axis, len(arr))[0]
    out = []
    for i, (a, b) in enumerate(zip(arr, idx)):
        out.append(b if i == ax else broadcast_shapes((a,), (b,))[0])
    return tuple(out)


def _take_along_infer(attrs, ins):
    _require("TakeAlongAxis", ins[1], dt.INTS, "indices")
    return [TType(ins[0].dtype, take_along_axis_shape(ins[0].shape, ins[1].shape, attrs["axis"]))]


def _take_along_grad_infer(attrs, ins):
    _require("TakeAlongAxisGrad", ins[1], dt.INTS, "shape")
    _require("TakeAlongAxisGrad", ins[2], dt.INTS, "indices")
    shape = _fill_shape(ins[1])
    if shape is not None and ins[2].shape is not None and len(shape) != len(ins[2].shape):
        raise DfcTypeError("TakeAlongAxisGrad: shape and indices differ in rank")
    if shape is not None:
        _norm_axes(attrs["axis"], max(len(shape), 1))
    return [TType(ins[0].dtype, shape)]


register("TakeAlongAxis", ("arr", "indices"), 1, {"axis": ("int", REQUIRED)}, _take_along_infer, heavy=True)
# The adjoint of TakeAlongAxis: zeros of `shape` with `grad` added at the indices along axis.
register("TakeAlongAxisGrad", ("grad", "shape", "indices"), 1, {"axis": ("int", REQUIRED)},
         _take_along_grad_infer, heavy=True)


def _pad_infer(attrs, ins):
    d = _same_dtype("Pad", ins)
    if ins[1].shape not in (None, ()):
        raise DfcTypeError(f"Pad value must be a scalar, got shape {dt.format_shape(ins[1].shape)}")
    p, s = attrs["paddings"], ins[0].shape
    if any(w < 0 for w in p):
        raise DfcTypeError(f"Pad widths must be >= 0, got {p}")
    if s is None:
        return [TType(d, None)]
    if len(p) != 2 * len(s):
        raise DfcTypeError(f"Pad of a rank-{len(s)} tensor takes {2 * len(s)} widths, got {len(p)}")
    return [TType(d, [None if n is None else n + p[2 * i] + p[2 * i + 1] for i, n in enumerate(s)])]


# Constant padding: paddings = [before_0, after_0, before_1, after_1, ...], one pair per dimension.
register("Pad", ("x", "value"), 1, {"paddings": ("ints", REQUIRED)}, _pad_infer, heavy=True)


def parse_einsum(equation, n_operands):
    """(input subscripts, output subscripts) of an explicit einsum equation 'ab,bc->ac' ('...' allowed)."""
    if not isinstance(equation, str) or equation.count("->") != 1:
        raise DfcTypeError(f"einsum equation {equation!r} must be explicit ('ij,jk->ik')")
    lhs, out = equation.split("->")
    ins = lhs.split(",")
    if len(ins) != n_operands:
        raise DfcTypeError(f"einsum equation {equation!r} names {len(ins)} operands, got {n_operands}")
    for s in ins + [out]:
        body = s.replace("...", "", 1)
        if not all(c.isalpha() and c.isascii() for c in body):
            raise DfcTypeError(f"einsum equation {equation!r}: subscripts are letters and one '...'")
    if len(set(out.replace("...", ""))) != len(out.replace("...", "")):
        raise DfcTypeError(f"einsum equation {equation!r}: an output letter repeats")
    letters = set("".join(ins))
    if any(c not in letters for c in out.replace("...", "")):
        raise DfcTypeError(f"einsum equation {equation!r}: an output letter is in no input")
    if "..." in out and not any("..." in s for s in ins):
        raise DfcTypeError(f"einsum equation {equation!r}: '...' in the output but in no input")
    return ins, out


def einsum_shape(equation, shapes):
    """The static result shape of numpy.einsum(equation, ...) (size-1 dimensions broadcast)."""
    ins, out = parse_einsum(equation, len(shapes))
    if any(s is None for s in shapes):
        return None
    sizes, ell = {}, []
    for sub, s in zip(ins, shapes):
        named = sub.replace("...", "")
        if len(s) < len(named) or ("..." not in sub and len(s) != len(named)):
            raise DfcTypeError(f"einsum operand {sub!r} does not fit shape {dt.format_shape(s)}")
        k = sub.find("...")
        if k >= 0:
            n_ell = len(s) - len(named)
            ell.append(s[k:k + n_ell])
            s = s[:k] + s[k + n_ell:]
        for c, n in zip(named, s):
            sizes[c] = broadcast_shapes((sizes.get(c, 1),), (n,))[0] if c in sizes else n
    batch = broadcast_shapes(*ell) if ell else ()
    k = out.find("...")
    if k < 0 and batch:
        raise DfcTypeError(f"einsum {equation!r}: the '...' dimensions {dt.format_shape(batch)} must be in the output "
                           f"(numpy does not sum them away)")
    dims = [sizes[c] for c in out.replace("...", "")]
    return tuple(dims if k < 0 else dims[:k] + list(batch) + dims[k:])


def _einsum_infer(attrs, ins):
    if not ins:
        raise DfcTypeError("Einsum needs at least one operand")
    d = _same_dtype("Einsum", ins)
    _require("Einsum", ins[0], dt.NUMERIC)
    return [TType(d, einsum_shape(attrs["equation"], [t.shape for t in ins]))]


register("Einsum", ("*operands",), 1, {"equation": ("str", REQUIRED)}, _einsum_infer, heavy=True,
         cost=lambda a, ins, outs: max(1, math.prod(d or 1 for t in ins for d in (t.shape or ()))))


def _square(op, t, what="input"):
    _require(op, t, dt.FLOATS, what)
    s = t.shape
    if s is None:
        return None
    if len(s) < 2:
        raise DfcTypeError(f"{op} needs a matrix (rank >= 2), got shape {dt.format_shape(s)}")
    if s[-1] is not None and s[-2] is not None and s[-1] != s[-2]:
        raise DfcTypeError(f"{op} needs square matrices, got shape {dt.format_shape(s)}")
    return s


def _solve_infer(attrs, ins):
    d = _same_dtype("MatrixSolve", ins)
    a, b = _square("MatrixSolve", ins[0]), ins[1].shape
    if a is None or b is None:
        return [TType(d, None)]
    if len(b) < 2 or (a[-1] is not None and b[-2] is not None and a[-1] != b[-2]):
        raise DfcTypeError(f"MatrixSolve of {dt.format_shape(a)} and {dt.format_shape(b)}: b must be "
                           f"(..., {a[-1]}, K)")
    return [TType(d, broadcast_shapes(a[:-2], b[:-2]) + b[-2:])]


def _square_infer(op):
    return lambda attrs, ins: [TType(ins[0].dtype, _square(op, ins[0]))]


def _det_infer(op):
    def infer(attrs, ins):
        s = _square(op, ins[0])
        return [TType(ins[0].dtype, None if s is None else s[:-2])] * (2 if op == "LogMatrixDeterminant" else 1)
    return infer


def _qr_infer(attrs, ins):
    _require("Qr", ins[0], dt.FLOATS)
    s = ins[0].shape
    if s is None:
        return [TType(ins[0].dtype, None)] * 2
    if len(s) < 2:
        raise DfcTypeError(f"Qr needs a matrix (rank >= 2), got shape {dt.format_shape(s)}")
    m, n = s[-2:]
    k = m if attrs["full_matrices"] else None if m is None or n is None else min(m, n)
    return [TType(ins[0].dtype, s[:-2] + (m, k)), TType(ins[0].dtype, s[:-2] + (k, n))]


def _eigh_infer(attrs, ins):
    s = _square("SelfAdjointEig", ins[0])
    return [TType(ins[0].dtype, None if s is None else s[:-1]), TType(ins[0].dtype, s)]


register("MatrixSolve", ("a", "b"), 1, {}, _solve_infer, heavy=True)
register("MatrixInverse", ("x",), 1, {}, _square_infer("MatrixInverse"), heavy=True)
register("Cholesky", ("x",), 1, {}, _square_infer("Cholesky"), heavy=True)      # reads the lower triangle
register("MatrixDeterminant", ("x",), 1, {}, _det_infer("MatrixDeterminant"), heavy=True)
register("LogMatrixDeterminant", ("x",), 2, {}, _det_infer("LogMatrixDeterminant"), heavy=True)  # sign, log|det|
register("Qr", ("x",), 2, {"full_matrices": ("bool", False)}, _qr_infer, heavy=True)
# Eigenvalues (ascending) and eigenvectors (columns) of a symmetric matrix given by its lower triangle.
register("SelfAdjointEig", ("x",), 2, {}, _eigh_infer, heavy=True)


# ---------------------------------------------------------------- progress bars and summaries (issue 15 item 6)
# Side effects in program order, like Print. Progress(step, total, *metrics) updates the progress bar
# `name` (metrics: the names of the metric inputs) and has no outputs. SummaryScalar(step, value) and
# SummaryHistogram(step, values) write TensorBoard events under `tag` to the run's summary writer and
# output True when a writer took the value (False when no writer is set, as tf.summary returns).


def _scalar_input(op, t, what, allowed=dt.NUMERIC + ("bool",)):
    _require(op, t, allowed, what)
    if t.shape not in (None, ()):
        raise DfcTypeError(f"{op} {what} must be a scalar, got shape {dt.format_shape(t.shape)}")


def _progress_infer(attrs, ins):
    names = attrs["metrics"]
    if len(names) != len(ins) - 2:
        raise DfcTypeError(f"Progress names {len(names)} metrics but has {len(ins) - 2} metric inputs")
    _scalar_input("Progress", ins[0], "step", dt.NUMERIC)
    _scalar_input("Progress", ins[1], "total", dt.NUMERIC)
    for n, t in zip(names, ins[2:]):
        _scalar_input("Progress", t, f"metric {n!r}")
    return []


def _summary_infer(op, scalar):
    def infer(attrs, ins):
        _scalar_input(op, ins[0], "step", dt.INTS)
        if scalar:
            _scalar_input(op, ins[1], "value")
        else:
            _require(op, ins[1], dt.NUMERIC + ("bool",), "values")
        return [TType("bool", ())]
    return infer


register("Progress", ("step", "total", "*metrics"), 0, {"name": ("str", "progress"), "metrics": ("strs", [])},
         _progress_infer, stateful=True)
register("SummaryScalar", ("step", "value"), 1, {"tag": ("str", REQUIRED)}, _summary_infer("SummaryScalar", True),
         stateful=True)
register("SummaryHistogram", ("step", "values"), 1, {"tag": ("str", REQUIRED)},
         _summary_infer("SummaryHistogram", False), stateful=True)


# ---------------------------------------------------------------- queues and accumulators (issue 12 item 1)
# Whitepaper §4.6. QueueHandle / AccumulatorHandle find their resource by shared name in a container, like
# VarHandle, so every graph, Session and cluster task naming it shares it; the ops on a handle are colocated
# with it. Ops that may wait are asynchronous kernels (OpDef.async_kernel): a dequeue on an empty queue, an
# enqueue on a full one and take_grad before enough gradients never block the executor's other work.
# timeout: seconds an op may wait before DfcQueueTimeout (-1: wait as long as it takes, as TF does).
# Queue ops have no outputs besides what they dequeue; program order (dfc/compiler/tracing.py) orders them.

def _queue_attrs_check(op, attrs):
    dts = attrs["dtypes"]
    if not dts or any(d not in dt.ALL for d in dts):
        raise DfcTypeError(f"{op}: dtypes must be a non-empty list of {', '.join(dt.ALL)}, got {dts!r}")
    shapes = attrs["shapes"]
    if shapes is not None:
        if not isinstance(shapes, list) or len(shapes) != len(dts) or not all(
                isinstance(s, list) and all(d is None or (_is_int(d) and d >= 0) for d in s) for s in shapes):
            raise DfcTypeError(f"{op}: shapes must be one shape (a list of dims) per dtype, got {shapes!r}")
    return dts, shapes


def _queue_handle_infer(attrs, ins):
    _queue_attrs_check("QueueHandle", attrs)
    if attrs["capacity"] < 1:
        raise DfcTypeError(f"QueueHandle: capacity must be >= 1, got {attrs['capacity']}")
    return [_H]


def _queue_handle_in(op, ins):
    if ins[0].dtype != dt.HANDLE:
        raise DfcTypeError(f"{op} input 0 must be a queue handle, got {ins[0]!r}")


def _dequeue_infer(many):
    def infer(attrs, ins):
        op = "QueueDequeueMany" if many else "QueueDequeue"
        _queue_handle_in(op, ins)
        dts, shapes = _queue_attrs_check(op, attrs)
        lead = ()
        if many:
            _require(op, ins[1], dt.INTS, "n")
            n = None if ins[1].value is None else int(np.asarray(ins[1].value).reshape(-1)[0])
            lead = (n,)
        return [TType(d, None if shapes is None else lead + tuple(s)) for d, s in zip(dts, shapes or [None] * len(dts))]
    return infer


def _enqueue_infer(op):
    def infer(attrs, ins):
        _queue_handle_in(op, ins)
        if len(ins) < 2:
            raise DfcTypeError(f"{op} needs at least one component to enqueue")
        return []
    return infer


_QATTRS = {"dtypes": ("strs", REQUIRED), "shapes": ("json", None), "timeout": ("float", -1.0)}
register("QueueHandle", (), 1, {"shared_name": ("str", REQUIRED), "container": ("str", ""),
                                "capacity": ("int", REQUIRED), "dtypes": ("strs", REQUIRED), "shapes": ("json", None)},
         _queue_handle_infer, stateful=True)
register("QueueEnqueue", ("handle", "*components"), 0, {"timeout": ("float", -1.0)}, _enqueue_infer("QueueEnqueue"),
         stateful=True, async_kernel=True)
register("QueueEnqueueMany", ("handle", "*components"), 0, {"timeout": ("float", -1.0)},
         _enqueue_infer("QueueEnqueueMany"), stateful=True, async_kernel=True)
register("QueueDequeue", ("handle",), lambda a, n: len(a["dtypes"]), dict(_QATTRS), _dequeue_infer(False),
         stateful=True, async_kernel=True)
register("QueueDequeueMany", ("handle", "n"), lambda a, n: len(a["dtypes"]), dict(_QATTRS), _dequeue_infer(True),
         stateful=True, async_kernel=True)
register("QueueSize", ("handle",), 1, {}, lambda a, ins: _queue_handle_in("QueueSize", ins) or
         [TType("int64", ())], stateful=True)
register("QueueClose", ("handle",), 0, {"cancel_pending_enqueues": ("bool", False)},
         lambda a, ins: _queue_handle_in("QueueClose", ins) or [], stateful=True)


def _acc_handle_infer(attrs, ins):
    _require("AccumulatorHandle", TType(attrs["dtype"], ()), dt.FLOATS, "dtype")
    return [_H]


def _acc_in(op, ins, scalars=()):
    _queue_handle_in(op, ins)
    for k, what in scalars:
        _require(op, ins[k], dt.INTS, what)
        if ins[k].shape not in (None, ()):
            raise DfcTypeError(f"{op} {what} must be a scalar, got shape {dt.format_shape(ins[k].shape)}")


def _apply_grad_infer(attrs, ins):
    _acc_in("AccumulatorApplyGradient", ins, [(1, "local_step")])
    _require("AccumulatorApplyGradient", ins[2], dt.FLOATS, "gradient")
    return []


register("AccumulatorHandle", (), 1, {"shared_name": ("str", REQUIRED), "container": ("str", ""),
                                      "dtype": ("dtype", REQUIRED), "shape": ("shape", None)},
         _acc_handle_infer, stateful=True)
# worker: who computed the gradient; the accumulator takes at most one per worker per update ("": anonymous,
# every gradient counts, as in graph files from before the attribute).
register("AccumulatorApplyGradient", ("handle", "local_step", "gradient"), 0, {"worker": ("str", "")},
         _apply_grad_infer, stateful=True)
register("AccumulatorTakeGradient", ("handle", "num_required"), 1,
         {"dtype": ("dtype", REQUIRED), "shape": ("shape", None), "timeout": ("float", -1.0)},
         lambda a, ins: _acc_in("AccumulatorTakeGradient", ins, [(1, "num_required")]) or
         [TType(a["dtype"], a["shape"])], stateful=True, async_kernel=True)
register("AccumulatorNumAccumulated", ("handle",), 1, {},
         lambda a, ins: _acc_in("AccumulatorNumAccumulated", ins) or [TType("int64", ())], stateful=True)
register("AccumulatorSetGlobalStep", ("handle", "new_global_step"), 0, {},
         lambda a, ins: _acc_in("AccumulatorSetGlobalStep", ins, [(1, "new_global_step")]) or [], stateful=True)
