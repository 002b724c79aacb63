"""Lowerings of constants, pass-through, shape and indexing ops (kernels: array_kernels.py)."""
import math

import numpy as np

from dfc.runtime import emit as E
from dfc.runtime.kernels.lowering import Unsupported, lowering, scalar_type as st


def literal(v, dtype):
    """Python source for the scalar v of dtype, exact (floats by repr of their float64 value)."""
    if dtype == "bool":
        return E.lit(bool(v))
    if dtype in ("int32", "int64"):
        return E.fmt("{}({})", st(dtype), E.lit(int(v)))
    f = float(v)
    if math.isnan(f):
        return E.fmt("{}(np.nan)", st(dtype))
    if math.isinf(f):
        return E.fmt("{}(-np.inf)" if f < 0 else "{}(np.inf)", st(dtype))
    return E.fmt("{}({})", st(dtype), E.lit(f))


@lowering("Const")
def _const(e):
    v = np.asarray(e.node.attrs["value"])
    if v.ndim == 0:
        return [literal(v[()], e.outs[0].dtype)]
    return [e.const(v, node_value=True)]


@lowering("Identity", "StopGradient", "LoopCond")
def _identity(e):
    return [e.args[0]]


@lowering("NoOp")
def _noop(e):
    return []


@lowering("Shape")
def _shape(e):
    t = e.ins[0]
    if t.ndim == 0:
        return [E.fmt("np.zeros(0, np.int64)")]
    return [E.fmt("np.array({}.shape, np.int64)", e.args[0])]


@lowering("Size")
def _size(e):
    return [E.fmt("np.int64(1)") if e.ins[0].ndim == 0 else E.fmt("np.int64({}.size)", e.args[0])]


@lowering("Rank")
def _rank(e):
    return [E.fmt("np.int64({})", E.lit(e.ins[0].ndim))]


def _to_shape(e, check=None):
    """(x, s, x's Type, the output Type) of an op taking a value x and a target shape s (a 1-D integer tensor,
    checked to have the output's rank at run time when `check` names the op for the error)."""
    if e.ins[1].ndim != 1:
        raise Unsupported(f"{e.node.op} to a shape that is not a 1-D tensor")
    if check:
        _check_shape(e, e.args[1], e.outs[0].ndim, check)
    return e.args[0], e.args[1], e.ins[0], e.outs[0]


@lowering("Reshape")
def _reshape(e):
    x, s, t, out = _to_shape(e)
    src = E.fmt("np.full(1, {})", x) if t.ndim == 0 else x
    if out.ndim == 0:
        e.stmt("if {}.size != 0 or {}.size != 1: raise ValueError('cannot reshape')", s, src)
        return [E.fmt("{}[0]", src)]
    e.stmt("if {}.size != {}: raise ValueError('cannot reshape')", s, E.lit(out.ndim))
    return [E.fmt("H.reshape({}, {})", src, _dims(s, out.ndim))]


@lowering("ExpandDims")
def _expand(e):
    t = e.ins[0]
    ax = e.node.attrs["axis"]
    k = ax if ax >= 0 else t.ndim + 1 + ax
    if not 0 <= k <= t.ndim:
        raise Unsupported("ExpandDims axis out of range")
    x = E.fmt("np.full(1, {})", e.args[0]) if t.ndim == 0 else e.args[0]
    dims = [E.fmt("{}.shape[{}]", e.args[0], E.lit(j)) for j in range(t.ndim)]
    dims.insert(k, E.lit(1))
    return [E.fmt("H.reshape({}, ({}))", x, E.items(dims))]


def _index(e, spec, x, ndim, dyn):
    """numba index expressions for a GetItem/GetItemGrad spec on x (rank ndim): ints (static or a tensor,
    bounds-checked and wrapped as numpy does) and slices (static or tensor bounds)."""
    if any(item[0] not in ("int", "slice") for item in spec) or len(spec) > ndim:
        raise Unsupported("indexing with index arrays, newaxis or ellipsis is not lowered")

    def part(p):
        if p is None:
            return E.fmt("")
        if isinstance(p, dict):
            if e.ins[dyn + p["t"]].ndim != 0:
                raise Unsupported("a slice bound that is not one integer")
            return E.fmt("np.int64({})", e.args[dyn + p["t"]])
        if not isinstance(p, (int, np.integer)) or isinstance(p, (bool, np.bool_)):
            raise Unsupported("an index that is not an integer")
        return E.lit(p)
    parts = []
    for axis, item in enumerate(spec):
        if item[0] == "int":
            parts.append(E.fmt("H.check_index({}, {}.shape[{}])", part(item[1]), x, E.lit(axis)))
        else:
            parts.append(E.join(":", [part(p) for p in item[1:]]))
    return E.fmt("{},", parts[0]) if len(parts) == 1 else E.join(", ", parts)


@lowering("GetItem")
def _getitem(e):
    """x[i], x[a:b:c] with ints and slice bounds known in the graph or scalar integer tensors."""
    x = e.args[0]
    r = E.fmt("{}[{}]", x, _index(e, e.node.attrs["spec"], x, e.ins[0].ndim, 1))
    if e.outs[0].ndim == 0:
        return [r]
    return [E.fmt("np.ascontiguousarray({})", r)]


def _dims(s, ndim):
    """A shape tuple expression of static length ndim from the 1-D int64 tensor expression s."""
    return E.fmt("({})", E.items([E.fmt("{}[{}]", s, E.lit(j)) for j in range(ndim)]))


_RANK_CHECKS = {"GetItemGrad": "if {}.size != {}: raise ValueError('GetItemGrad: shape of another rank')",
                "Fill": "if {}.size != {}: raise ValueError('Fill: shape of another rank')",
                "BroadcastTo": "if {}.size != {}: raise ValueError('BroadcastTo: shape of another rank')",
                "SumToShape": "if {}.size != {}: raise ValueError('SumToShape: shape of another rank')"}


def _check_shape(e, s, ndim, op):
    e.stmt(_RANK_CHECKS[op], s, E.lit(ndim))


@lowering("GetItemGrad")
def _getitem_grad(e):
    """zeros of `shape` with the gradient set at the (basic) indexed positions, each selected at most once."""
    g, s = e.args[0], e.args[1]
    out = e.outs[0]
    if out.ndim == 0 or e.ins[1].ndim != 1:
        raise Unsupported("GetItemGrad of a scalar")
    _check_shape(e, s, out.ndim, "GetItemGrad")
    z = e.tmp()
    e.stmt("{} = np.zeros({}, {})", z, _dims(s, out.ndim), st(out.dtype))
    e.stmt("{}[{}] = {}", z, _index(e, e.node.attrs["spec"], z, out.ndim, 2), g)
    return [z]


@lowering("Fill")
def _fill(e):
    s, v = e.args
    out = e.outs[0]
    if e.ins[1].ndim != 0 or e.ins[0].ndim != 1:
        raise Unsupported("Fill with a value that is not a scalar")
    if out.ndim == 0:
        e.stmt("if {}.size != 0: raise ValueError('Fill: shape of another rank')", s)
        return [v]
    _check_shape(e, s, out.ndim, "Fill")
    return [E.fmt("np.full({}, {}, {})", _dims(s, out.ndim), v, st(out.dtype))]


@lowering("BroadcastTo")
def _broadcast_to(e):
    x, s, t, out = _to_shape(e, "BroadcastTo")
    if out.ndim == 0:
        return [x]
    if t.ndim == 0:
        return [E.fmt("np.full({}, {}, {})", _dims(s, out.ndim), x, st(out.dtype))]
    return [E.fmt("H.broadcast({}, {})", x, _dims(s, out.ndim))]


@lowering("SumToShape")
def _sum_to_shape(e):
    """numpy's sums over the leading axes, then over the axes the shape keeps as 1 (one contiguous run of
    axes; other cases raise, and the fused path computes them)."""
    x, s, t, out = _to_shape(e, "SumToShape")
    if t.ndim == 0:
        return [x]
    d = t.dtype
    kr = E.lit(e.loop(np.add, (None, d, None), reduction=True))
    kb = E.lit(e.loop(np.add, (d, d, d)))
    r = E.fmt("H.sum_to_shape(LP, {}, {}, {}, {}, {}(0))", kr, kb, x, s, st(d))
    if out.ndim == 0:
        return [E.fmt("{}[0]", r)]
    return [E.fmt("H.reshape({}, {})", r, _dims(s, out.ndim))]


def _axis_of(e, ndim):
    ax = e.node.attrs.get("axis", 0)
    if not -ndim <= ax < ndim:
        raise Unsupported(f"axis {ax} out of range")
    return ax % ndim


@lowering("Transpose")
def _transpose(e):
    t = e.ins[0]
    perm = e.node.attrs.get("perm")
    perm = list(range(t.ndim))[::-1] if perm is None else [p % max(t.ndim, 1) for p in perm]
    if sorted(perm) != list(range(t.ndim)):
        raise Unsupported("Transpose with a permutation of another rank")
    if t.ndim < 2:
        return [e.args[0]]
    return [E.fmt("np.ascontiguousarray(np.transpose({}, ({})))", e.args[0], E.items([E.lit(p) for p in perm]))]


@lowering("Stack")
def _stack(e):
    t, out = e.ins[0], e.outs[0]
    if any((i.dtype, i.ndim) != (out.dtype, t.ndim) for i in e.ins):
        raise Unsupported("Stack of values of different types")
    n = len(e.args)
    if t.ndim == 0:
        r = e.tmp()
        e.stmt("{} = np.empty({}, {})", r, E.lit(n), st(out.dtype))
        for k, a in enumerate(e.args):
            e.stmt("{}[{}] = {}", r, E.lit(k), a)
        return [r]
    ax = _axis_of(e, out.ndim)
    return [E.fmt("np.ascontiguousarray(np.stack(({}), axis={}))", E.items(e.args), E.lit(ax))]


@lowering("Concat")
def _concat(e):
    out = e.outs[0]
    if out.ndim == 0 or any((i.dtype, i.ndim) != (out.dtype, out.ndim) for i in e.ins):
        raise Unsupported("Concat of values of different types")
    ax = _axis_of(e, out.ndim)
    return [E.fmt("np.ascontiguousarray(np.concatenate(({}), axis={}))", E.items(e.args), E.lit(ax))]


@lowering("Unstack")
def _unstack(e):
    x, t = e.args[0], e.ins[0]
    if t.ndim == 0:
        raise Unsupported("Unstack of a scalar")
    ax, num = _axis_of(e, t.ndim), e.node.attrs["num"]
    e.stmt("if {}.shape[{}] != {}: raise ValueError('Unstack: the dimension has another size')", x, E.lit(ax),
           E.lit(num))
    lead = E.join("", [E.fmt(":, ")] * ax)
    if t.ndim == 1:
        return [E.fmt("{}[{}]", x, E.lit(k)) for k in range(num)]
    return [E.fmt("np.ascontiguousarray({}[{}{}])", x, lead, E.lit(k)) for k in range(num)]


@lowering("Split")
def _split(e):
    x, t = e.args[0], e.ins[0]
    if t.ndim == 0:
        raise Unsupported("Split of a scalar")
    ax, num = _axis_of(e, t.ndim), e.node.attrs["num"]
    n = e.tmp()
    ax_, num_ = E.lit(ax), E.lit(num)
    e.stmt("if {}.shape[{}] % {}: raise ValueError('Split: the dimension does not split evenly')", x, ax_, num_)
    e.stmt("{} = {}.shape[{}] // {}", n, x, ax_, num_)
    lead = E.join("", [E.fmt(":, ")] * ax)
    return [E.fmt("np.ascontiguousarray({}[{}{} * {}:{} * {}])", x, lead, E.lit(j), n, E.lit(j + 1), n)
            for j in range(num)]


@lowering("Squeeze")
def _squeeze(e):
    t = e.ins[0]
    ax = e.node.attrs.get("axis")
    if ax is None or t.ndim == 0:
        raise Unsupported("Squeeze without axes (which dimensions go depends on run-time sizes)")
    axes = sorted({a % t.ndim for a in (ax if isinstance(ax, list) else [ax])})
    x = e.args[0]
    e.stmt("if {}: raise ValueError('cannot squeeze an axis whose size is not 1')",
           E.join(" or ", [E.fmt("{}.shape[{}] != 1", x, E.lit(a)) for a in axes]))
    keep = [E.fmt("{}.shape[{}]", x, E.lit(j)) for j in range(t.ndim) if j not in axes]
    if not keep:
        return [E.fmt("H.reshape({}, {}.size)[0]", x, x)]
    return [E.fmt("H.reshape({}, ({}))", x, E.items(keep))]


@lowering("OneHot")
def _one_hot(e):
    at, t, out = e.node.attrs, e.ins[0], e.outs[0]
    depth = E.lit(int(at["depth"]))
    on, off = (literal(np.float64(at.get(k, d)).astype(out.dtype), out.dtype) for k, d in (("on", 1.0), ("off", 0.0)))
    x, flat, r, k = e.args[0], e.tmp(), e.tmp(), e.tmp()
    e.stmt("{} = np.array([{}])" if t.ndim == 0 else "{} = {}.ravel()", flat, x)
    e.stmt("{} = np.full({}.size * {}, {})", r, flat, depth, off)
    e.stmt("for {} in range({}.size):", k, flat)
    e.stmt("    if 0 <= {}[{}] < {}:", flat, k, depth)
    e.stmt("        {}[{} * {} + {}[{}]] = {}", r, k, depth, flat, k, on)
    dims = E.items([E.fmt("{}.shape[{}]", x, E.lit(d)) for d in range(t.ndim)])
    return [E.fmt("H.reshape({}, ({}{}, ))", r, dims, depth)]
