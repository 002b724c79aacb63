"""Sources, shapes, indexing, gather/scatter, random and structural kernels."""
import math

import numpy as np

from dfc.errors import DfcInputError
from dfc.runtime.kernels import philox
from dfc.runtime.kernels.registry import direct, host, kernel, simple


@kernel("Const")
def _const(node, xp):
    v = xp.asarray(node.attrs["value"])
    if isinstance(v, np.ndarray):
        v = v.copy()
        v.flags.writeable = False     # shared by every run: nothing may write it
    return lambda ctx, a: (v,)


@kernel("Placeholder")
def _placeholder(node, xp):
    def f(ctx, a):
        raise DfcInputError(f"no value fed for input {node.name!r}", node=node.name)
    return f


@kernel("Identity", "StopGradient", "LoopCond")
def _identity(node, xp):
    return lambda ctx, a: (a[0],)


@kernel("CustomGradient")
def _custom_gradient(node, xp):
    n = node.attrs["num_values"]
    return lambda ctx, a: tuple(a[:n])


@kernel("NoOp")
def _noop(node, xp):
    return lambda ctx, a: ()


@kernel("Shape")
def _shape(node, xp):
    return lambda ctx, a: (xp.asarray(np.array(a[0].shape, dtype=np.int64)),)


@kernel("Size")
def _size(node, xp):
    return lambda ctx, a: (xp.asarray(np.array(a[0].size, dtype=np.int64)),)


@kernel("Rank")
def _rank(node, xp):
    return lambda ctx, a: (xp.asarray(np.array(a[0].ndim, dtype=np.int64)),)


def _as_shape(v):
    shape = tuple(int(d) for d in host(v).reshape(-1))
    n = 1
    for d in shape:
        n *= max(d, 0)
    if n >= 2 ** 63:        # numpy refuses; cupy's int64 element count would wrap (2**120 elements -> 0)
        raise ValueError(f"array is too big: shape {list(shape)}")
    return shape


@kernel("Reshape")
def _reshape(node, xp):
    return lambda ctx, a: (xp.reshape(a[0], _as_shape(a[1])),)


@kernel("Fill")
def _fill(node, xp):
    return lambda ctx, a: (xp.full(_as_shape(a[0]), a[1], dtype=a[1].dtype),)


@kernel("BroadcastTo")
def _broadcast_to(node, xp):
    # A read-only view: kernels never write into their inputs.
    return lambda ctx, a: (xp.broadcast_to(a[0], _as_shape(a[1])),)


def sum_to_shape(xp, x, shape):
    shape = tuple(shape)
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    if lead:
        x = xp.sum(x, axis=tuple(range(lead)), dtype=x.dtype)
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and x.shape[i] != 1)
    if axes:
        x = xp.sum(x, axis=axes, keepdims=True, dtype=x.dtype)
    return xp.reshape(x, shape)


@kernel("SumToShape")
def _sum_to_shape(node, xp):
    return lambda ctx, a: (sum_to_shape(xp, a[0], _as_shape(a[1])),)


@kernel("Transpose")
def _transpose(node, xp):
    perm = node.attrs.get("perm")
    return lambda ctx, a: (xp.transpose(a[0], perm),)


@kernel("ExpandDims")
def _expand(node, xp):
    ax = node.attrs["axis"]

    def f(x):
        k = ax if ax >= 0 else x.ndim + 1 + ax
        return x.reshape(x.shape[:k] + (1,) + x.shape[k:])
    return direct(f)


@kernel("Squeeze")
def _squeeze(node, xp):
    ax = node.attrs.get("axis")
    ax = tuple(ax) if isinstance(ax, list) else ax
    return lambda ctx, a: (xp.squeeze(a[0], axis=ax),)


@kernel("Concat")
def _concat(node, xp):
    ax = node.attrs.get("axis", 0)
    return lambda ctx, a: (xp.concatenate(a, axis=ax),)


@kernel("Stack")
def _stack(node, xp):
    ax = node.attrs.get("axis", 0)
    return lambda ctx, a: (xp.stack(a, axis=ax),)


@kernel("Unstack")
def _unstack(node, xp):
    ax, num = node.attrs.get("axis", 0), node.attrs["num"]

    def f(ctx, a):
        x = a[0]
        if x.shape[ax] != num:
            raise ValueError(f"Unstack of {num} along a dimension of size {x.shape[ax]}")
        return tuple(xp.moveaxis(x, ax, 0))
    return f


@kernel("Split")
def _split(node, xp):
    ax, num = node.attrs.get("axis", 0), node.attrs["num"]

    def f(ctx, a):
        x = a[0]
        k = ax % x.ndim
        n, rem = divmod(x.shape[k], num)
        if rem:
            raise ValueError(f"dimension {k} of size {x.shape[k]} does not split into {num} equal parts")
        lead = (slice(None),) * k
        return tuple(x[lead + (slice(j * n, (j + 1) * n),)] for j in range(num))
    return f


def build_index(spec, dyn):
    idx = []
    for item in spec:
        kind = item[0]
        if kind == "int":
            idx.append(_dyn(item[1], dyn))
        elif kind == "slice":
            idx.append(slice(*[_dyn(p, dyn) for p in item[1:]]))
        elif kind == "newaxis":
            idx.append(None)
        elif kind == "ellipsis":
            idx.append(Ellipsis)
        else:
            idx.append(dyn[item[1]])
    return tuple(idx)


def _dyn(p, dyn):
    if isinstance(p, dict):
        return int(dyn[p["t"]])
    return p


@kernel("GetItem")
def _getitem(node, xp):
    spec = node.attrs["spec"]
    if all(i.startswith("^") for i in node.inputs[1:]):
        static = build_index(spec, ())      # no tensor in the index: build it once

        def f(ctx, a):
            r = a[0][static]
            return (r if r.ndim else xp.asarray(r),)
        return f

    def f(ctx, a):
        r = a[0][build_index(spec, a[1:])]
        return (r if r.ndim else xp.asarray(r),)
    return f


@kernel("GetItemGrad")
def _getitem_grad(node, xp):
    spec = node.attrs["spec"]

    advanced = any(item[0] == "tensor" for item in spec)

    def f(ctx, a):
        g, shape = a[0], _as_shape(a[1])
        out = xp.zeros(shape, dtype=g.dtype)
        if advanced:    # an index array may repeat positions: accumulate
            xp.add.at(out, build_index(spec, a[2:]), g)
        else:           # basic indexing selects each position at most once
            out[build_index(spec, a[2:])] = g
        return (out,)
    return f


def check_indices(xp, idx, n, what):
    """numpy raises on an index out of range, cupy wraps it around: on a device, check (one sync)."""
    if xp is not np and idx.size and bool(xp.any((idx < -n) | (idx >= n))):
        raise IndexError(f"{what} index out of range for a dimension of size {n}")


@kernel("Gather")
def _gather(node, xp):
    ax = node.attrs.get("axis", 0)

    def f(ctx, a):
        check_indices(xp, a[1], a[0].shape[ax] if a[0].ndim else 0, "Gather")
        return (xp.take(a[0], a[1], axis=ax),)
    return f


@kernel("ScatterAdd")
def _scatter_add(node, xp):
    ax = node.attrs.get("axis", 0)

    def f(ctx, a):
        shape, idx, upd = _as_shape(a[0]), a[1], a[2]
        out = xp.zeros(shape, dtype=upd.dtype)
        view = xp.moveaxis(out, ax, 0)
        upd = xp.moveaxis(upd, list(range(ax, ax + idx.ndim)), list(range(idx.ndim)))
        check_indices(xp, idx, view.shape[0], "ScatterAdd")
        xp.add.at(view, idx, upd)
        return (out,)
    return f


@kernel("OneHot")
def _one_hot(node, xp):
    at = node.attrs
    depth, dtype = at["depth"], at["dtype"]
    on, off = at.get("on", 1.0), at.get("off", 0.0)

    def f(ctx, a):
        hot = a[0][..., None] == xp.arange(depth)
        return (xp.where(hot, on, off).astype(dtype),)
    return f


@kernel("Range")
def _range(node, xp):
    return lambda ctx, a: (xp.arange(*(host(x)[()] for x in a), dtype=a[0].dtype),)


@kernel("RandomUniform", "RandomNormal")
def _random(node, xp):
    at = node.attrs
    key = philox.key_of(at.get("seed", 0), node.name)
    uniform = node.op == "RandomUniform"
    a, b, dtype = float(at.get("a", 0.0)), float(at.get("b", 1.0)), at["dtype"]

    def f(ctx, args):
        # Counter-based (philox.py): the same seed, node, run and iteration give the same numbers on every
        # path, whatever order the executor happens to run nodes in.
        shape = _as_shape(args[0])
        if any(d < 0 for d in shape):
            raise ValueError(f"random shape {list(shape)} has a negative dimension")
        v = philox.draw(xp, uniform, math.prod(shape), dtype, a, b, key, philox.tag_words(ctx.run_count, ctx.tag))
        return (xp.reshape(v, shape),)
    return f


simple({})
