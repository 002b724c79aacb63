"""Lowerings of constants, pass-through, shape and indexing ops (kernels: array_kernels.py)."""
import math

import numpy as np

from dfc.runtime.kernels.lowering import Unsupported, lowering, scalar_type as st


def literal(v, dtype):
    """Python source for the scalar v of dtype, exact (floats by repr of their float64 value)."""
    if dtype == "bool":
        return "True" if bool(v) else "False"
    if dtype in ("int32", "int64"):
        return f"{st(dtype)}({int(v)})"
    f = float(v)
    if math.isnan(f):
        return f"{st(dtype)}(np.nan)"
    if math.isinf(f):
        return f"{st(dtype)}({'-' if f < 0 else ''}np.inf)"
    return f"{st(dtype)}({f!r})"


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
        return ["np.zeros(0, np.int64)"]
    return [f"np.array({e.args[0]}.shape, np.int64)"]


@lowering("Size")
def _size(e):
    return ["np.int64(1)" if e.ins[0].ndim == 0 else f"np.int64({e.args[0]}.size)"]


@lowering("Rank")
def _rank(e):
    return [f"np.int64({e.ins[0].ndim})"]


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
    src = f"np.full(1, {x})" if t.ndim == 0 else x
    if out.ndim == 0:
        e.stmt(f"if {s}.size != 0 or {src}.size != 1: raise ValueError('cannot reshape')")
        return [f"{src}[0]"]
    e.stmt(f"if {s}.size != {out.ndim}: raise ValueError('cannot reshape')")
    return [f"H.reshape({src}, {_dims(s, out.ndim)})"]


@lowering("ExpandDims")
def _expand(e):
    t = e.ins[0]
    ax = e.node.attrs["axis"]
    k = ax if ax >= 0 else t.ndim + 1 + ax
    if not 0 <= k <= t.ndim:
        raise Unsupported("ExpandDims axis out of range")
    x = f"np.full(1, {e.args[0]})" if t.ndim == 0 else e.args[0]
    dims = [f"{e.args[0]}.shape[{j}]" for j in range(t.ndim)]
    dims.insert(k, "1")
    return [f"H.reshape({x}, ({''.join(d + ', ' for d in dims)}))"]


def _index(e, spec, x, ndim, dyn):
    """numba index expressions for a GetItem/GetItemGrad spec on x (rank ndim): ints (static or a tensor,
    bounds-checked and wrapped as numpy does) and slices (static or tensor bounds)."""
    if any(item[0] not in ("int", "slice") for item in spec) or len(spec) > ndim:
        raise Unsupported("indexing with index arrays, newaxis or ellipsis is not lowered")

    def part(p):
        if p is None:
            return ""
        if isinstance(p, dict):
            if e.ins[dyn + p["t"]].ndim != 0:
                raise Unsupported("a slice bound that is not one integer")
            return f"np.int64({e.args[dyn + p['t']]})"
        return str(p)
    parts = []
    for axis, item in enumerate(spec):
        if item[0] == "int":
            parts.append(f"H.check_index({part(item[1])}, {x}.shape[{axis}])")
        else:
            parts.append(":".join(part(p) for p in item[1:]))
    return f"{', '.join(parts)}{',' if len(parts) == 1 else ''}"


@lowering("GetItem")
def _getitem(e):
    """x[i], x[a:b:c] with ints and slice bounds known in the graph or scalar integer tensors."""
    x = e.args[0]
    r = f"{x}[{_index(e, e.node.attrs['spec'], x, e.ins[0].ndim, 1)}]"
    if e.outs[0].ndim == 0:
        return [r]
    return [f"np.ascontiguousarray({r})"]


def _dims(s, ndim):
    """A shape tuple expression of static length ndim from the 1-D int64 tensor expression s."""
    return "(" + "".join(f"{s}[{j}], " for j in range(ndim)) + ")"


def _check_shape(e, s, ndim, what):
    e.stmt(f"if {s}.size != {ndim}: raise ValueError('{what}: shape of another rank')")


@lowering("GetItemGrad")
def _getitem_grad(e):
    """zeros of `shape` with the gradient set at the (basic) indexed positions, each selected at most once."""
    g, s = e.args[0], e.args[1]
    out = e.outs[0]
    if out.ndim == 0 or e.ins[1].ndim != 1:
        raise Unsupported("GetItemGrad of a scalar")
    _check_shape(e, s, out.ndim, "GetItemGrad")
    z = e.tmp()
    e.stmt(f"{z} = np.zeros({_dims(s, out.ndim)}, {st(out.dtype)})")
    e.stmt(f"{z}[{_index(e, e.node.attrs['spec'], z, out.ndim, 2)}] = {g}")
    return [z]


@lowering("Fill")
def _fill(e):
    s, v = e.args
    out = e.outs[0]
    if e.ins[1].ndim != 0 or e.ins[0].ndim != 1:
        raise Unsupported("Fill with a value that is not a scalar")
    if out.ndim == 0:
        e.stmt(f"if {s}.size != 0: raise ValueError('Fill: shape of another rank')")
        return [v]
    _check_shape(e, s, out.ndim, "Fill")
    return [f"np.full({_dims(s, out.ndim)}, {v}, {st(out.dtype)})"]


@lowering("BroadcastTo")
def _broadcast_to(e):
    x, s, t, out = _to_shape(e, "BroadcastTo")
    if out.ndim == 0:
        return [x]
    if t.ndim == 0:
        return [f"np.full({_dims(s, out.ndim)}, {x}, {st(out.dtype)})"]
    return [f"H.broadcast({x}, {_dims(s, out.ndim)})"]


@lowering("SumToShape")
def _sum_to_shape(e):
    """numpy's sums over the leading axes, then over the axes the shape keeps as 1 (one contiguous run of
    axes; other cases raise, and the fused path computes them)."""
    x, s, t, out = _to_shape(e, "SumToShape")
    if t.ndim == 0:
        return [x]
    d = t.dtype
    kr = e.loop(np.add, (None, d, None), reduction=True)
    kb = e.loop(np.add, (d, d, d))
    r = f"H.sum_to_shape(LP, {kr}, {kb}, {x}, {s}, {st(d)}(0))"
    if out.ndim == 0:
        return [f"{r}[0]"]
    return [f"H.reshape({r}, {_dims(s, out.ndim)})"]


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
    return [f"np.ascontiguousarray(np.transpose({e.args[0]}, ({''.join(f'{p}, ' for p in perm)})))"]


@lowering("Stack")
def _stack(e):
    t, out = e.ins[0], e.outs[0]
    if any((i.dtype, i.ndim) != (out.dtype, t.ndim) for i in e.ins):
        raise Unsupported("Stack of values of different types")
    n = len(e.args)
    if t.ndim == 0:
        r = e.tmp()
        e.stmt(f"{r} = np.empty({n}, {st(out.dtype)})")
        for k, a in enumerate(e.args):
            e.stmt(f"{r}[{k}] = {a}")
        return [r]
    ax = _axis_of(e, out.ndim)
    return [f"np.ascontiguousarray(np.stack(({''.join(a + ', ' for a in e.args)}), axis={ax}))"]


@lowering("Concat")
def _concat(e):
    out = e.outs[0]
    if out.ndim == 0 or any((i.dtype, i.ndim) != (out.dtype, out.ndim) for i in e.ins):
        raise Unsupported("Concat of values of different types")
    ax = _axis_of(e, out.ndim)
    return [f"np.ascontiguousarray(np.concatenate(({''.join(a + ', ' for a in e.args)}), axis={ax}))"]


@lowering("Unstack")
def _unstack(e):
    x, t = e.args[0], e.ins[0]
    if t.ndim == 0:
        raise Unsupported("Unstack of a scalar")
    ax, num = _axis_of(e, t.ndim), e.node.attrs["num"]
    e.stmt(f"if {x}.shape[{ax}] != {num}: raise ValueError('Unstack: the dimension has another size')")
    lead = ":, " * ax
    if t.ndim == 1:
        return [f"{x}[{k}]" for k in range(num)]
    return [f"np.ascontiguousarray({x}[{lead}{k}])" for k in range(num)]


@lowering("Split")
def _split(e):
    x, t = e.args[0], e.ins[0]
    if t.ndim == 0:
        raise Unsupported("Split of a scalar")
    ax, num = _axis_of(e, t.ndim), e.node.attrs["num"]
    n = e.tmp()
    e.stmt(f"if {x}.shape[{ax}] % {num}: raise ValueError('Split: the dimension does not split evenly')")
    e.stmt(f"{n} = {x}.shape[{ax}] // {num}")
    lead = ":, " * ax
    return [f"np.ascontiguousarray({x}[{lead}{j} * {n}:{j + 1} * {n}])" for j in range(num)]


@lowering("Squeeze")
def _squeeze(e):
    t = e.ins[0]
    ax = e.node.attrs.get("axis")
    if ax is None or t.ndim == 0:
        raise Unsupported("Squeeze without axes (which dimensions go depends on run-time sizes)")
    axes = sorted({a % t.ndim for a in (ax if isinstance(ax, list) else [ax])})
    x = e.args[0]
    e.stmt(f"if {' or '.join(f'{x}.shape[{a}] != 1' for a in axes)}: "
           f"raise ValueError('cannot squeeze an axis whose size is not 1')")
    keep = [f"{x}.shape[{j}]" for j in range(t.ndim) if j not in axes]
    if not keep:
        return [f"H.reshape({x}, {x}.size)[0]"]
    return [f"H.reshape({x}, ({''.join(k + ', ' for k in keep)}))"]


@lowering("RandomUniform", "RandomNormal")
def _random(e):
    """The kernel itself, called from compiled code (object mode): numba's generators cannot reproduce
    numpy's default_rng seeded by (seed, node, run, iteration), so the numbers are the fused path's."""
    if e.ins[0].ndim != 1:
        raise Unsupported("a random shape that is not a 1-D tensor")
    out = e.tmp()
    e.kernel_call(out, e.args)
    return [out]


@lowering("OneHot")
def _one_hot(e):
    at, t, out = e.node.attrs, e.ins[0], e.outs[0]
    depth = int(at["depth"])
    on, off = (literal(np.float64(at.get(k, d)).astype(out.dtype), out.dtype) for k, d in (("on", 1.0), ("off", 0.0)))
    x, flat, r, k = e.args[0], e.tmp(), e.tmp(), e.tmp()
    e.stmt(f"{flat} = np.array([{x}])" if t.ndim == 0 else f"{flat} = {x}.ravel()")
    e.stmt(f"{r} = np.full({flat}.size * {depth}, {off})")
    e.stmt(f"for {k} in range({flat}.size):")
    e.stmt(f"    if 0 <= {flat}[{k}] < {depth}:")
    e.stmt(f"        {r}[{k} * {depth} + {flat}[{k}]] = {on}")
    dims = "".join(f"{x}.shape[{d}], " for d in range(t.ndim))
    return [f"H.reshape({r}, ({dims}{depth}, ))"]
