"""Kernels of the numpy surface: isnan/isinf, cumulative sums and products, sorting, top_k,
take_along_axis and its adjoint, einsum and constant padding. Written against `xp` (numpy or cupy)."""
from dfc.errors import DfcIndexError
from dfc.runtime.kernels.registry import direct, host, kernel, simple

simple({"IsNan": lambda xp: xp.isnan, "IsInf": lambda xp: xp.isinf})


def _scan(xp, fn, x, axis, reverse):
    if reverse:
        return xp.flip(fn(xp.flip(x, axis), axis=axis, dtype=x.dtype), axis)
    return fn(x, axis=axis, dtype=x.dtype)


@kernel("Cumsum", "Cumprod")
def _cumulative(node, xp):
    fn = xp.cumsum if node.op == "Cumsum" else xp.cumprod
    axis, reverse = node.attrs["axis"], node.attrs["reverse"]
    return direct(lambda x: _scan(xp, fn, x, axis, reverse))


@kernel("CumprodGrad")
def _cumprod_grad(node, xp):
    """d/dx_i sum_j g_j y_j with y = cumprod(x): E_i * s_i, where E_i = prod_{k<i} x_k and
    s_i = g_i + x_{i+1} s_{i+1} (a reverse recurrence: no division, so zeros in x are fine)."""
    axis, reverse = node.attrs["axis"], node.attrs["reverse"]

    def f(x, g):
        if reverse:
            return xp.flip(forward(xp.flip(x, axis), xp.flip(g, axis)), axis)
        return forward(x, g)

    def forward(x, g):
        xm, gm = xp.moveaxis(x, axis, 0), xp.moveaxis(g, axis, 0)
        if xm.shape != gm.shape:
            raise ValueError(f"CumprodGrad: gradient of shape {g.shape} for an input of shape {x.shape}")
        n = xm.shape[0]
        s = xp.empty_like(gm)
        for i in range(n - 1, -1, -1):
            s[i] = gm[i] if i == n - 1 else gm[i] + xm[i + 1] * s[i + 1]
        excl = xp.ones_like(xm)
        if n > 1:
            excl[1:] = xp.cumprod(xm[:-1], axis=0, dtype=x.dtype)
        return xp.moveaxis(excl * s, 0, axis)
    return direct(f)


def argsort(xp, x, axis, descending):
    """Stable argsort; descending keeps equal elements in index order (as jax.lax.top_k)."""
    if not descending:
        return xp.argsort(x, axis=axis, kind="stable").astype("int64")
    n = x.shape[axis]
    rev = xp.argsort(xp.flip(x, axis), axis=axis, kind="stable")
    return (n - 1 - xp.flip(rev, axis)).astype("int64")


@kernel("ArgSort")
def _argsort(node, xp):
    axis, desc = node.attrs["axis"], node.attrs["descending"]
    return direct(lambda x: argsort(xp, x, axis, desc))


@kernel("SearchSorted")
def _searchsorted(node, xp):
    side = node.attrs["side"]
    return direct(lambda a, v: xp.asarray(xp.searchsorted(a, v, side=side)).astype("int64"))


@kernel("TopK")
def _top_k(node, xp):
    k = node.attrs["k"]

    def f(ctx, a):
        x = a[0]
        if x.ndim == 0 or k > x.shape[-1]:
            raise ValueError(f"top_k with k={k} of a tensor of shape {x.shape}: k must be at most the last "
                             f"dimension")
        idx = argsort(xp, x, -1, True)[..., :k]
        return xp.take_along_axis(x, idx, -1), idx
    return f


def along_axis_index(xp, shape, indices, axis):
    """The fancy index that numpy.take_along_axis(arr of `shape`, indices, axis) uses, after
    checking the indices are in range (cupy would wrap them; dfc refuses out-of-range indexing)."""
    n = shape[axis]
    if indices.size and bool(host(xp.any((indices < -n) | (indices >= n)))):
        lo, hi = int(host(indices.min())), int(host(indices.max()))
        raise DfcIndexError(f"take_along_axis index out of range: indices span [{lo}, {hi}] for a dimension "
                            f"of size {n}")
    if len(shape) != indices.ndim:
        raise ValueError(f"take_along_axis: indices of rank {indices.ndim} for an array of rank {len(shape)}")
    idx = []
    for i, d in enumerate(shape):
        if i == axis:
            idx.append(indices)
        else:
            idx.append(xp.arange(d).reshape((1,) * i + (d,) + (1,) * (len(shape) - i - 1)))
    return tuple(idx)


@kernel("TakeAlongAxis")
def _take_along_axis(node, xp):
    ax = node.attrs["axis"]

    def f(arr, indices):
        axis = ax % max(arr.ndim, 1)
        return arr[along_axis_index(xp, arr.shape, indices, axis)]
    return direct(f)


@kernel("TakeAlongAxisGrad")
def _take_along_axis_grad(node, xp):
    ax = node.attrs["axis"]

    def f(ctx, a):
        g, shape, indices = a[0], tuple(int(d) for d in host(a[1]).reshape(-1)), a[2]
        axis = ax % max(len(shape), 1)
        out = xp.zeros(shape, dtype=g.dtype)
        index = along_axis_index(xp, shape, indices, axis)
        xp.add.at(out, index, xp.broadcast_to(g, xp.broadcast(*index).shape))   # repeated indices add up
        return (out,)
    return f


@kernel("Einsum")
def _einsum(node, xp):
    eq = node.attrs["equation"]
    return lambda ctx, a: (xp.asarray(xp.einsum(eq, *a)),)


@kernel("Pad")
def _pad(node, xp):
    p = node.attrs["paddings"]

    def f(x, value):
        if len(p) != 2 * x.ndim:
            raise ValueError(f"Pad of a rank-{x.ndim} tensor takes {2 * x.ndim} widths, got {len(p)}")
        shape = tuple(n + p[2 * i] + p[2 * i + 1] for i, n in enumerate(x.shape))
        out = xp.full(shape, value, dtype=x.dtype)
        out[tuple(slice(p[2 * i], p[2 * i] + n) for i, n in enumerate(x.shape))] = x
        return out
    return direct(f)
