"""Lowerings of the numpy-surface ops (kernels: numpy_kernels.py, linalg_kernels.py): cumulative sums and
products and the cumprod gradient, sorting and top_k, take_along_axis and its adjoint, constant padding,
einsum and dfc.linalg.

The scans, sorts and scatters run in compiled helpers (dfc/runtime/compiled/arrays.py) that add and
multiply in the kernels' order. Einsum calls its kernel (numba's object mode): numpy's einsum sums with its
own SIMD kernels in an order numba cannot reproduce. So do the linalg ops: numba's np.linalg calls
scipy's LAPACK, which need not give numpy's bits, and numpy's LinAlgError (a singular matrix) must reach
the user naming the node (an error in the kernel makes the compiled frame fail, and the fused path replays
it and raises it). (IsNan and IsInf: math_lower.py.)
"""
from dfc.runtime import emit as E
from dfc.runtime.kernels.array_lower import axis_attr, permuted, three
from dfc.runtime.kernels.lowering import Unsupported, lowering, scalar_type as st

_FLOATS = ("float32", "float64")


@lowering("Cumsum", "Cumprod")
def _cumulative(e):
    t, x = e.ins[0], e.args[0]
    if t.ndim == 0:
        raise Unsupported("a cumulative sum of a scalar")
    ax = axis_attr(e, t.ndim)
    mul, rev = E.lit(e.node.op == "Cumprod"), E.lit(bool(e.node.attrs["reverse"]))
    return [E.fmt("H.reshape(H.cumulate({}, {}, {}), {}.shape)", three(e, x, t.ndim, ax), mul, rev, x)]


@lowering("CumprodGrad")
def _cumprod_grad(e):
    t, (x, g) = e.ins[0], e.args
    if t.ndim == 0 or t.dtype not in _FLOATS or e.ins[1].ndim != t.ndim:
        raise Unsupported("CumprodGrad other than of float arrays")
    ax = axis_attr(e, t.ndim)
    e.stmt("if {}.shape != {}.shape: raise ValueError('CumprodGrad: gradient of another shape')", g, x)
    return [E.fmt("H.reshape(H.cumprod_grad({}, {}, {}), {}.shape)", three(e, x, t.ndim, ax),
                  three(e, g, t.ndim, ax), E.lit(bool(e.node.attrs["reverse"])), x)]


def _last(e, x, t, ax):
    """x with axis ax moved last (a C-contiguous copy if it is not last already), the permutation or None."""
    if ax == t.ndim - 1:
        return x, None
    perm = [j for j in range(t.ndim) if j != ax] + [ax]
    return e.tmp_of(permuted(e, x, perm)), perm


def _rows(x, ndim):
    """x (rank ndim >= 1) seen as rows of its last axis."""
    lead = E.join(" * ", [E.lit(1)] + [E.fmt("{}.shape[{}]", x, E.lit(j)) for j in range(ndim - 1)])
    return E.fmt("H.reshape({}, ({}, {}.shape[{}]))", x, lead, x, E.lit(ndim - 1))


@lowering("ArgSort")
def _argsort(e):
    t, x = e.ins[0], e.args[0]
    if t.ndim == 0:
        raise Unsupported("ArgSort of a scalar")
    ax = axis_attr(e, t.ndim)
    xl, perm = _last(e, x, t, ax)
    r = e.tmp_of(E.fmt("H.reshape(H.argsort_rows({}, {}), {}.shape)", _rows(xl, t.ndim),
                       E.lit(bool(e.node.attrs["descending"])), xl))
    if perm is None:
        return [r]
    inv = [perm.index(j) for j in range(t.ndim)]
    return [permuted(e, r, inv)]


@lowering("SearchSorted")
def _searchsorted(e):
    (a, v), (ta, tv) = e.args, e.ins
    if ta.ndim != 1:
        raise Unsupported("SearchSorted of an array that is not 1-D")
    vv = E.fmt("np.full(1, {})", v) if tv.ndim == 0 else E.fmt("H.reshape({}, {}.size)", v, v)
    if e.node.attrs["side"] == "left":
        r = e.tmp_of(E.fmt("np.searchsorted({}, {}).astype(np.int64)", a, vv))
    else:
        r = e.tmp_of(E.fmt("np.searchsorted({}, {}, side='right').astype(np.int64)", a, vv))
    if e.outs[0].ndim == 0:
        return [E.fmt("{}[0]", r)]
    return [E.fmt("H.reshape({}, {}.shape)", r, v)]


@lowering("TopK")
def _top_k(e):
    """The k largest along the last axis, NaNs first, equal ones in index order (the kernel's stable sort)."""
    t, x = e.ins[0], e.args[0]
    k = e.node.attrs["k"]
    if t.ndim == 0 or not isinstance(k, int) or k < 0:
        raise Unsupported("TopK of a scalar")
    last = E.lit(t.ndim - 1)
    e.stmt("if {} > {}.shape[{}]: raise ValueError('top_k: k larger than the last dimension')", E.lit(k), x, last)
    rows = e.tmp_of(_rows(x, t.ndim))
    idx = e.tmp_of(E.fmt("np.ascontiguousarray(H.argsort_rows({}, True)[:, :{}])", rows, E.lit(k)))
    dims = E.items([E.fmt("{}.shape[{}]", x, E.lit(j)) for j in range(t.ndim - 1)] + [E.lit(k)])
    return [E.fmt("H.reshape(H.take_rows({}, {}), ({}))", rows, idx, dims), E.fmt("H.reshape({}, ({}))", idx, dims)]


def _along(e, shape, idx, nd, ax):
    """Statements broadcasting the non-axis dimensions of `idx` (rank nd) with `shape` (expressions) as
    take_along_axis's index does; the broadcast dimensions (the axis's: idx's own)."""
    dims = []
    for j in range(nd):
        di = E.fmt("{}.shape[{}]", idx, E.lit(j))
        if j == ax:
            dims.append(di)
            continue
        d = e.tmp_of(E.fmt("{} if {} == 1 else {}", shape[j], di, di))
        e.stmt("if {} != 1 and {} != {}: raise ValueError('take_along_axis: shapes that do not broadcast')",
               shape[j], shape[j], d)
        dims.append(d)
    return dims


@lowering("TakeAlongAxis")
def _take_along_axis(e):
    (x, idx), (t, it) = e.args, e.ins
    if t.ndim == 0 or it.ndim != t.ndim:
        raise Unsupported("TakeAlongAxis with indices of another rank")
    ax = axis_attr(e, t.ndim)
    xshape = [E.fmt("{}.shape[{}]", x, E.lit(j)) for j in range(t.ndim)]
    dims = _along(e, xshape, idx, t.ndim, ax)
    xd = [xshape[j] if j == ax else dims[j] for j in range(t.ndim)]
    xb = e.tmp_of(E.fmt("H.broadcast({}, ({}))", x, E.items(xd)))
    ib = e.tmp_of(E.fmt("H.broadcast({}, ({}))", idx, E.items(dims)))
    return [E.fmt("H.reshape(H.take_along3({}, {}), ({}))", three(e, xb, t.ndim, ax), three(e, ib, t.ndim, ax),
                  E.items(dims))]


@lowering("TakeAlongAxisGrad")
def _take_along_axis_grad(e):
    """zeros of `shape` with g added at the indices, in the order of the index positions (np.add.at). Where
    the indices broadcast a dimension of size 1 of the input, several positions add to one element in an
    order this does not follow: compiled code raises and the fused path computes it."""
    (g, s, idx), (gt, st_, it) = e.args, e.ins
    out = e.outs[0]
    if out.ndim == 0 or st_.ndim != 1 or it.ndim != out.ndim or gt.ndim != out.ndim:
        raise Unsupported("TakeAlongAxisGrad of ranks other than the input's")
    ax = axis_attr(e, out.ndim)
    e.stmt("if {}.size != {}: raise ValueError('TakeAlongAxisGrad: shape of another rank')", s, E.lit(out.ndim))
    shape = [E.fmt("{}[{}]", s, E.lit(j)) for j in range(out.ndim)]
    dims = _along(e, shape, idx, out.ndim, ax)
    for j in range(out.ndim):
        if j != ax:
            e.stmt("if {} != {}: raise ValueError('TakeAlongAxisGrad: a broadcast input dimension')", shape[j], dims[j])
    ib = e.tmp_of(E.fmt("H.broadcast({}, ({}))", idx, E.items(dims)))
    gb = e.tmp_of(E.fmt("H.broadcast({}, ({}))", g, E.items(dims)))
    z = e.tmp_of(E.fmt("np.zeros(({}), {})", E.items(shape), st(out.dtype)))
    e.stmt("H.scatter_along3({}, {}, {})", three(e, z, out.ndim, ax), three(e, ib, out.ndim, ax),
           three(e, gb, out.ndim, ax))
    return [z]


@lowering("Pad")
def _pad(e):
    (x, v), t = e.args, e.ins[0]
    p = e.node.attrs["paddings"]
    if t.ndim == 0 or e.ins[1].ndim != 0 or len(p) != 2 * t.ndim or any(
            not isinstance(w, int) or w < 0 for w in p):
        raise Unsupported("Pad other than of an array by its rank's widths")
    dims = [E.fmt("{}.shape[{}] + {}", x, E.lit(j), E.lit(p[2 * j] + p[2 * j + 1])) for j in range(t.ndim)]
    r = e.tmp_of(E.fmt("np.full(({}), {}, {})", E.items(dims), v, st(t.dtype)))
    e.stmt("{}[{}] = {}", r, E.join(", ", [E.fmt("{}:{} + {}.shape[{}]", E.lit(p[2 * j]), E.lit(p[2 * j]), x, E.lit(j))
                                          for j in range(t.ndim)]), x)
    return [r]


@lowering("Einsum")
def _einsum(e):
    out = e.tmp()
    e.kernel_call([out], e.args)
    return [out]


@lowering("MatrixSolve", "MatrixInverse", "Cholesky", "MatrixDeterminant", "LogMatrixDeterminant", "Qr",
          "SelfAdjointEig")
def _linalg(e):
    outs = [e.tmp() for _ in e.outs]
    e.kernel_call(outs, e.args)
    return outs
