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
    return [e.const(v)]


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


@lowering("Reshape")
def _reshape(e):
    x, s = e.args
    t, out = e.ins[0], e.outs[0]
    if e.ins[1].ndim != 1:
        raise Unsupported("Reshape to a shape that is not a 1-D tensor")
    src = f"np.full(1, {x})" if t.ndim == 0 else x
    if out.ndim == 0:
        e.stmt(f"if {s}.size != 0 or {src}.size != 1: raise ValueError('cannot reshape')")
        return [f"{src}[0]"]
    e.stmt(f"if {s}.size != {out.ndim}: raise ValueError('cannot reshape')")
    dims = "".join(f"{s}[{j}], " for j in range(out.ndim))
    return [f"{src}.reshape(({dims}))"]


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
    return [f"{x}.reshape(({''.join(d + ', ' for d in dims)}))"]


@lowering("GetItem")
def _getitem(e):
    """x[i], x[a:b:c] with indices known in the graph (no tensors): bounds checked as numpy does."""
    spec = e.node.attrs["spec"]
    t = e.ins[0]
    if len(e.args) != 1 or any(item[0] not in ("int", "slice") for item in spec) or len(spec) > t.ndim:
        raise Unsupported("indexing with tensors, newaxis or ellipsis is not lowered")
    x = e.args[0]
    parts = []
    for axis, item in enumerate(spec):
        if item[0] == "int":
            if not isinstance(item[1], int):
                raise Unsupported("a tensor index")
            parts.append(f"H.check_index({item[1]}, {x}.shape[{axis}])")
        else:
            if any(not (p is None or isinstance(p, int)) for p in item[1:]):
                raise Unsupported("a tensor in a slice")
            parts.append(":".join("" if p is None else str(p) for p in item[1:]))
    r = f"{x}[{', '.join(parts)}{',' if len(parts) == 1 else ''}]"
    if e.outs[0].ndim == 0:
        return [r]
    return [f"np.ascontiguousarray({r})"]


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
        return [f"{x}.reshape({x}.size)[0]"]
    return [f"{x}.reshape(({''.join(k + ', ' for k in keep)}))"]
