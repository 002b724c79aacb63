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


@lowering("CustomGradient")
def _custom_gradient(e):
    return list(e.args[:e.node.attrs["num_values"]])


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


def permuted(e, x, perm):
    """x's axes permuted by perm, as a new C-contiguous array (H.permute: numba's np.transpose with axes
    compiles for tens of seconds)."""
    if not x.isidentifier():
        x = e.tmp_of(x)
    dims = E.items([E.fmt("{}.shape[{}]", x, E.lit(p)) for p in perm])
    return E.fmt("H.permute({}, np.empty(({}), {}.dtype), ({}))", x, dims, x, E.items([E.lit(p) for p in perm]))


def _normalized(spec, ndim):
    """The spec with its ellipsis (or the axes it leaves out at the end) as full slices: one item per axis of x,
    plus its newaxis items."""
    used = sum(item[0] not in ("newaxis", "ellipsis") for item in spec)
    if used > ndim:
        raise Unsupported("more indices than axes")
    full = [["slice", None, None, None]] * (ndim - used)
    out = []
    for item in spec:
        out += full if item[0] == "ellipsis" else [item]
    return out if any(item[0] == "ellipsis" for item in spec) else out + full


def _part(e, p, dyn):
    if p is None:
        return E.fmt("")
    if isinstance(p, dict):
        if e.ins[dyn + p["t"]].ndim != 0:
            raise Unsupported("a slice bound that is not one integer")
        return E.fmt("np.int64({})", e.args[dyn + p["t"]])
    if not isinstance(p, (int, np.integer)) or isinstance(p, (bool, np.bool_)):
        raise Unsupported("an index that is not an integer")
    return E.lit(p)


def _index(e, items, x, dyn):
    """numba index expressions for items (ints, static or a tensor, bounds-checked and wrapped as numpy does,
    and slices with static or tensor bounds) on x."""
    parts = []
    for axis, item in enumerate(items):
        if item[0] == "int":
            parts.append(E.fmt("H.check_index({}, {}.shape[{}])", _part(e, item[1], dyn), x, E.lit(axis)))
        elif item[0] == "slice":
            parts.append(E.join(":", [_part(e, p, dyn) for p in item[1:]]))
        else:
            raise Unsupported(f"a {item[0]} index here")
    if not parts:
        return E.fmt(":")
    return E.fmt("{},", parts[0]) if len(parts) == 1 else E.join(", ", parts)


def _basic_shape(items, r):
    """The shape (expressions) of a basic index's result from r, the result without its newaxis items."""
    dims, j = [], 0
    for item in items:
        if item[0] == "slice":
            dims.append(E.fmt("{}.shape[{}]", r, E.lit(j)))
            j += 1
        elif item[0] == "newaxis":
            dims.append(E.lit(1))
    return dims


@lowering("GetItem")
def _getitem(e):
    """x[...] with ints, slices (static bounds or scalar integer tensors), newaxis, an ellipsis, and integer
    index arrays (numpy's advanced indexing: _advanced)."""
    x, t = e.args[0], e.ins[0]
    items = _normalized(e.node.attrs["spec"], t.ndim)
    if any(item[0] == "tensor" for item in items):
        return [_advanced(e, items, x, t)]
    axes = [item for item in items if item[0] != "newaxis"]
    r = E.fmt("{}[{}]", x, _index(e, axes, x, 1)) if axes else x
    n_slices = sum(item[0] == "slice" for item in axes)
    if len(axes) == len(items):
        return [r if e.outs[0].ndim == 0 else E.fmt("np.ascontiguousarray({})", r)]
    if n_slices == 0:       # ints and newaxis: one element in an array of ones
        return [E.fmt("np.full(({}), {})", E.items([E.lit(1)] * e.outs[0].ndim), r)]
    b = e.tmp()
    e.stmt("{} = np.ascontiguousarray({})", b, r)
    return [E.fmt("H.reshape({}, ({}))", b, E.items(_basic_shape(items, b)))]


class _Adv:
    """How numpy indexes x with index arrays (all advanced: ints beside them count as 0-d arrays): the
    indexed axes `adv` and the sliced ones `rest`; the broadcast index shape B goes where the first indexed
    axis was when they are adjacent, else first. Computed as: x transposed to (adv, rest), rest sliced,
    seen as (P, R) rows; the rows at the flat index of each broadcast position."""

    def __init__(self, e, items, x, t, dyn):
        if any(item[0] == "newaxis" for item in items):
            raise Unsupported("newaxis beside index arrays")
        self.e, self.items, self.dyn = e, items, dyn
        self.adv = [k for k, item in enumerate(items) if item[0] != "slice"]
        self.rest = [k for k, item in enumerate(items) if item[0] == "slice"]
        a = self.adv
        self.front = a == list(range(a[0], a[-1] + 1)) and a[0] > 0     # B goes after the leading slices
        self.perm = a + self.rest
        self.ranks = [e.ins[dyn + item[1]].ndim if item[0] == "tensor" else 0 for item in (items[k] for k in a)]
        self.rb = max(self.ranks)

    def transposed(self, x, ndim):
        if self.perm == list(range(ndim)):
            return x
        return self.e.tmp_of(permuted(self.e, x, self.perm))

    def bshape(self):
        """Statements computing B (numpy's broadcast of the index arrays); its dims' names."""
        e, dims = self.e, []
        for j in range(self.rb):
            b = e.tmp()
            e.stmt("{} = 1", b)
            for k, item in zip(self.adv, (self.items[k] for k in self.adv)):
                r = self.ranks[self.adv.index(k)]
                if item[0] != "tensor" or j < self.rb - r:
                    continue
                d = E.fmt("{}.shape[{}]", e.args[self.dyn + item[1]], E.lit(j - (self.rb - r)))
                e.stmt("if {} != 1:", d)
                e.stmt("    if {} != 1 and {} != {}: raise IndexError('index arrays of shapes that do not broadcast')",
                       b, b, d)
                e.stmt("    {} = {}", b, d)
            dims.append(b)
        return dims

    def flat_index(self, xs, bdims):
        """Statements computing the flat int64 index (into the adv axes of xs, transposed) of each position
        of B; its name."""
        e = self.e
        f = e.tmp()
        e.stmt("{} = np.zeros({}, np.int64)", f, E.join(" * ", [E.lit(1)] + bdims))
        for pos, k in enumerate(self.adv):
            item = self.items[k]
            n = E.fmt("{}.shape[{}]", xs, E.lit(pos))
            if item[0] == "int":
                e.stmt("{} = {} * {} + H.wrap({}, {})", f, f, n, _part(e, item[1], self.dyn), n)
                continue
            a, r = e.args[self.dyn + item[1]], self.ranks[pos]
            if r == 0:
                e.stmt("{} = {} * {} + H.wrap({}, {})", f, f, n, a, n)
                continue
            lead = [E.lit(1)] * (self.rb - r) + [E.fmt("{}.shape[{}]", a, E.lit(j)) for j in range(r)]
            e.stmt("{} = H.index_step({}, H.reshape(H.broadcast(H.reshape({}, ({})), ({})), {}.size), {})", f, f, a,
                   E.items(lead), E.items(bdims), f, n)
        return f

    def order(self, nb, nr):
        """The permutation from (B, rest) to numpy's result order, or None if they are in it already."""
        if not self.front:
            return None
        p = self.adv[0]
        return list(range(nb, nb + p)) + list(range(nb)) + list(range(nb + p, nb + nr))


def _advanced(e, items, x, t):
    adv = _Adv(e, items, x, t, 1)
    xt = adv.transposed(x, t.ndim)
    na = len(adv.adv)
    xs = e.tmp_of(E.fmt("np.ascontiguousarray({}[{}])", xt, E.join(", ", [E.fmt(":")] * na + [
        E.join(":", [_part(e, p, 1) for p in items[k][1:]]) for k in adv.rest])))
    bdims = adv.bshape()
    f = adv.flat_index(xs, bdims)
    rdims = [E.fmt("{}.shape[{}]", xs, E.lit(na + j)) for j in range(len(adv.rest))]
    rows = E.fmt("H.reshape({}, (1, {}, {}))", xs, E.join(" * ", [E.lit(1)] + [E.fmt("{}.shape[{}]", xs, E.lit(j))
                                                                             for j in range(na)]),
                 E.join(" * ", [E.lit(1)] + rdims))
    r = e.tmp_of(E.fmt("H.gather3({}, {})", rows, f))
    if e.outs[0].ndim == 0:
        return E.fmt("{}[0, 0, 0]", r)
    out = E.fmt("H.reshape({}, ({}))", r, E.items(bdims + rdims))
    order = adv.order(len(bdims), len(rdims))
    if order is None:
        return out
    return permuted(e, out, order)


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
    """zeros of `shape` with the gradient set at the (basic) indexed positions, each selected at most once;
    with index arrays, added at them in the order of their positions (np.add.at, as the kernel)."""
    g, s = e.args[0], e.args[1]
    out = e.outs[0]
    if out.ndim == 0 or e.ins[1].ndim != 1:
        raise Unsupported("GetItemGrad of a scalar")
    _check_shape(e, s, out.ndim, "GetItemGrad")
    items = _normalized(e.node.attrs["spec"], out.ndim)
    z = e.tmp()
    e.stmt("{} = np.zeros({}, {})", z, _dims(s, out.ndim), st(out.dtype))
    if any(item[0] == "tensor" for item in items):
        return [_advanced_grad(e, items, g, z, out)]
    axes = [item for item in items if item[0] != "newaxis"]
    if len(axes) != len(items):      # the gradient without the newaxis dimensions (of size 1)
        dims, j = [], 0
        for item in items:
            if item[0] != "int":
                if item[0] == "slice":
                    dims.append(E.fmt("{}.shape[{}]", g, E.lit(j)))
                j += 1
        g = E.fmt("H.reshape({}, ({}))", g, E.items(dims)) if dims else E.fmt("H.reshape({}, 1)[0]", g)
    e.stmt("{}[{}] = {}", z, _index(e, axes, z, 2), g)
    return [z]


def _advanced_grad(e, items, g, z, out):
    if out.dtype not in ("float32", "float64"):
        raise Unsupported("the gradient of integer advanced indexing")
    adv = _Adv(e, items, z, out, 2)
    zt = adv.transposed(z, out.ndim)
    na = len(adv.adv)
    bdims = adv.bshape()
    f = adv.flat_index(zt, bdims)
    sliced = [E.join(":", [_part(e, p, 2) for p in items[k][1:]]) for k in adv.rest]
    view = E.fmt("{}[{}]", zt, E.join(", ", [E.fmt(":")] * na + sliced)) if sliced else zt
    rdims = [E.fmt("{}.shape[{}]", view, E.lit(na + j)) for j in range(len(adv.rest))]
    order = adv.order(len(bdims), len(rdims))
    if order is not None:       # g in (B, rest) order
        inv = [order.index(k) for k in range(len(order))]
        g = e.tmp_of(permuted(e, g, inv))
    want = bdims + rdims
    if want:
        e.stmt("if {}.shape != ({}): raise ValueError('GetItemGrad: gradient of another shape')", g, E.items(want))
    size = E.join(" * ", [E.lit(1)] + rdims)
    p = E.join(" * ", [E.lit(1)] + [E.fmt("{}.shape[{}]", zt, E.lit(j)) for j in range(na)])
    acc = e.tmp_of(E.fmt("H.add_rows(np.zeros(({}, {}), {}), {}, H.reshape({}, ({}.size, {})))", p, size,
                         st(out.dtype), f, g, f, size))
    e.stmt("{}[{}] = H.reshape({}, ({}))", zt, E.join(", ", [E.fmt(":")] * na + sliced) if sliced else E.fmt(":"),
           acc, E.items([E.fmt("{}.shape[{}]", zt, E.lit(j)) for j in range(na)] + rdims))
    if adv.perm == list(range(out.ndim)):
        return zt
    inv = [adv.perm.index(k) for k in range(out.ndim)]
    return permuted(e, zt, inv)


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
    if t.ndim < out.ndim:       # leading 1s first: H.broadcast returns x itself when no copy is needed
        x = e.tmp_of(x)
        x = E.fmt("H.reshape({}, ({}))", x, E.items([E.lit(1)] * (out.ndim - t.ndim)
                                                   + [E.fmt("{}.shape[{}]", x, E.lit(j)) for j in range(t.ndim)]))
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
    return [permuted(e, e.args[0], perm)]


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
    """Without axes, the dimensions the graph's types know to be 1 go; one that is 1 only at run time would go
    too (numpy's squeeze), which compiled code leaves to the fused path (it raises)."""
    t = e.ins[0]
    ax = e.node.attrs.get("axis")
    if t.ndim == 0:
        raise Unsupported("Squeeze of a scalar")
    x = e.args[0]
    if ax is None:
        axes = [j for j, d in enumerate(t.shape) if d == 1]
        if len(axes) != t.ndim - e.outs[0].ndim:
            raise Unsupported("Squeeze without axes of dimensions of unknown size")
        unknown = [j for j, d in enumerate(t.shape) if d is None]
        if unknown:
            e.stmt("if {}: raise ValueError('Squeeze: a dimension of size 1 the graph did not know')",
                   E.join(" or ", [E.fmt("{}.shape[{}] == 1", x, E.lit(j)) for j in unknown]))
    else:
        axes = sorted({a % t.ndim for a in (ax if isinstance(ax, list) else [ax])})
    if axes:
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


def three(e, x, ndim, ax):
    """x (C-contiguous, rank ndim) seen as (pre, n, post) around axis ax: the expression."""
    d = [E.fmt("{}.shape[{}]", x, E.lit(j)) for j in range(ndim)]
    one = [E.lit(1)]
    return E.fmt("H.reshape({}, ({}, {}, {}))", x, E.join(" * ", one + d[:ax]), d[ax], E.join(" * ", one + d[ax + 1:]))


def axis_attr(e, ndim, name="axis", default=0):
    ax = e.node.attrs.get(name, default)
    if not isinstance(ax, int) or not -ndim <= ax < ndim:
        raise Unsupported(f"axis {ax!r} of a rank-{ndim} tensor")
    return ax % ndim


@lowering("Gather")
def _gather(e):
    """np.take(params, indices, axis) (negative indices count from the end; out of range raises)."""
    x, t, it = e.args[0], e.ins[0], e.ins[1]
    if t.ndim == 0:
        raise Unsupported("Gather from a scalar")
    ax = axis_attr(e, t.ndim)
    idx = E.fmt("np.full(1, {})", e.args[1]) if it.ndim == 0 else E.fmt("H.reshape({}, {}.size)", e.args[1], e.args[1])
    r = e.tmp_of(E.fmt("H.gather3({}, {})", three(e, x, t.ndim, ax), idx))
    if e.outs[0].ndim == 0:
        return [E.fmt("{}[0, 0, 0]", r)]
    dims = [E.fmt("{}.shape[{}]", x, E.lit(j)) for j in range(ax)] + \
        [E.fmt("{}.shape[{}]", e.args[1], E.lit(j)) for j in range(it.ndim)] + \
        [E.fmt("{}.shape[{}]", x, E.lit(j)) for j in range(ax + 1, t.ndim)]
    return [E.fmt("H.reshape({}, ({}))", r, E.items(dims))]


@lowering("ScatterAdd")
def _scatter_add(e):
    """zeros of `shape` with the updates added at indices along axis, in the order of the index positions
    (np.add.at, as the kernel)."""
    s, idx, upd = e.args
    out, it, ut = e.outs[0], e.ins[1], e.ins[2]
    if out.ndim == 0 or e.ins[0].ndim != 1:
        raise Unsupported("ScatterAdd into a scalar")
    ax = axis_attr(e, out.ndim)
    if ut.ndim != out.ndim - 1 + it.ndim:
        raise Unsupported("ScatterAdd of updates of another rank")
    e.stmt("if {}.size != {}: raise ValueError('ScatterAdd: shape of another rank')", s, E.lit(out.ndim))
    want = [E.fmt("{}[{}]", s, E.lit(j)) for j in range(ax)] + \
        [E.fmt("{}.shape[{}]", idx, E.lit(j)) for j in range(it.ndim)] + \
        [E.fmt("{}[{}]", s, E.lit(j)) for j in range(ax + 1, out.ndim)]
    if want:
        e.stmt("if {}.shape != ({}): raise ValueError('ScatterAdd: updates of another shape')", upd, E.items(want))
    z = e.tmp_of(E.fmt("np.zeros({}, {})", _dims(s, out.ndim), st(out.dtype)))
    pre = E.join(" * ", [E.lit(1)] + [E.fmt("{}[{}]", s, E.lit(j)) for j in range(ax)])
    post = E.join(" * ", [E.lit(1)] + [E.fmt("{}[{}]", s, E.lit(j)) for j in range(ax + 1, out.ndim)])
    flat = E.fmt("np.full(1, {})", idx) if it.ndim == 0 else E.fmt("H.reshape({}, {}.size)", idx, idx)
    u = E.fmt("np.full(1, {})", upd) if ut.ndim == 0 else upd
    e.stmt("H.scatter3({}, {}, H.reshape({}, ({}, {}.size, {})))", three(e, z, out.ndim, ax), flat, u, pre, flat,
           post)
    return [z]


@lowering("Range")
def _range(e):
    """np.arange(start, limit, delta) in start's dtype: integers here, floats by the kernel (numpy's fill
    of float ranges)."""
    if any(t.ndim for t in e.ins):
        raise Unsupported("Range of bounds that are not scalars")
    d = e.ins[0].dtype
    if d in ("int32", "int64"):
        return [E.fmt("H.int_range({}, {}, {}, np.zeros(0, {}))", *e.args, st(d))]
    out = e.tmp()
    e.kernel_call([out], e.args)
    return [out]
