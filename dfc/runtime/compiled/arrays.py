"""numba helpers of the indexing, scan, sort and scatter lowerings (array_lower.py, numpy_lower.py, math_lower.py);
generated code calls them as H.<name> (helpers.py imports them).

Each works on C-contiguous arrays viewed as (pre, n, post) around the op's axis and gives the kernel's bits:
scans and scatters add in numpy's order (ufunc.accumulate: one element after the other; ufunc.at: the
index positions in C order), integers wrap as numpy's loops wrap them (`wadd`, `wmul`: numba's signed
arithmetic tells LLVM it never overflows), sorts are stable as the kernels' (numpy's "stable" sort and
numba's mergesort order NaNs last, alike). An index out of range raises IndexError: the fused path then
replays the frame and raises the kernel's error naming the node.
"""
import numpy as np
from numba import njit, types
from numba.extending import overload


def wadd(a, b):
    """a + b as numpy's add loop gives it for a's dtype: integers wrap (computed in uint64; the caller
    stores the result into an array of the dtype, which truncates), bools give `or`."""
    return a + b


def wmul(a, b):
    """a * b as numpy's multiply loop gives it (see wadd)."""
    return a * b


@overload(wadd)
def _wadd(a, b):
    if isinstance(a, types.Integer):
        return lambda a, b: np.uint64(a) + np.uint64(b)
    if isinstance(a, types.Boolean):
        return lambda a, b: a or b
    return lambda a, b: a + b


@overload(wmul)
def _wmul(a, b):
    if isinstance(a, types.Integer):
        return lambda a, b: np.uint64(a) * np.uint64(b)
    if isinstance(a, types.Boolean):
        return lambda a, b: a and b
    return lambda a, b: a * b


@njit(cache=True, nogil=True)
def wrap(i, n):
    """Index i of a dimension of size n, negative ones counted from the end; out of range raises."""
    if i < -n or i >= n:
        raise IndexError("index out of range")
    return np.int64(i + n if i < 0 else i)


@njit(cache=True, nogil=True)
def permute(x, out, perm):
    """x's axes permuted (np.transpose(x, perm)) copied into out, a C-contiguous array of the permuted shape.
    (numba's np.transpose with axes takes tens of seconds to compile; this, a fraction of one.)"""
    nd = out.ndim
    if out.size == 0:
        return out
    xf, of = x.reshape(x.size), out.reshape(out.size)
    xs = np.empty(nd, np.int64)
    s = 1
    for j in range(nd - 1, -1, -1):
        xs[j] = s
        s *= x.shape[j]
    st = np.empty(nd, np.int64)
    for k in range(nd):
        st[k] = xs[perm[k]]
    at = np.zeros(nd, np.int64)
    off = 0
    for q in range(out.size):
        of[q] = xf[off]
        k = nd - 1
        while k >= 0:           # the next position, as an odometer
            at[k] += 1
            off += st[k]
            if at[k] < out.shape[k]:
                break
            off -= st[k] * at[k]
            at[k] = 0
            k -= 1
    return out


@njit(cache=True, nogil=True)
def index_step(f, a, n):
    """f * n + a (a wrapped into a dimension of size n) element by element: one more axis of a flat index."""
    out = np.empty(f.size, np.int64)
    for q in range(f.size):
        out[q] = f[q] * n + wrap(a[q], n)
    return out


@njit(cache=True, nogil=True)
def cumulate(x, mul, reverse):
    """np.cumsum (mul False) or np.cumprod of x (pre, n, post) along n in x's dtype; reverse: from the end
    (the kernel's flip, scan, flip: each step is `running op element`, as numpy's accumulate computes it)."""
    pre, n, post = x.shape
    out = np.empty_like(x)
    for p in range(pre):
        for j in range(post):
            for s in range(n):
                k = n - 1 - s if reverse else s
                if s == 0:
                    out[p, k, j] = x[p, k, j]
                else:
                    prev = out[p, k + 1, j] if reverse else out[p, k - 1, j]
                    out[p, k, j] = wmul(prev, x[p, k, j]) if mul else wadd(prev, x[p, k, j])
    return out


@njit(cache=True, nogil=True)
def cumprod_grad(x, g, reverse):
    """The CumprodGrad kernel on x, g (pre, n, post): E * s with s_i = g_i + x_{i+1} s_{i+1} and
    E_i = prod_{k<i} x_k (reverse: the same on the flipped axis). Every product and sum is rounded to the
    dtype (stored) before the next, as the kernel's array operations round them."""
    pre, n, post = x.shape
    if g.shape != x.shape:
        raise ValueError("CumprodGrad: gradient of another shape")
    s = np.empty_like(x)
    e = np.empty_like(x)
    out = np.empty_like(x)
    for p in range(pre):
        for j in range(post):
            for t in range(n):       # t: the position on the (flipped) axis the kernel's loop sees
                i = n - 1 - t
                k = n - 1 - i if reverse else i
                if t == 0:
                    s[p, k, j] = g[p, k, j]
                else:
                    nxt = k - 1 if reverse else k + 1
                    s[p, k, j] = x[p, nxt, j] * s[p, nxt, j]
                    s[p, k, j] = g[p, k, j] + s[p, k, j]
            for i in range(n):
                k = n - 1 - i if reverse else i
                prv = k + 1 if reverse else k - 1
                if i == 0:
                    e[p, k, j] = 1
                elif i == 1:
                    e[p, k, j] = x[p, prv, j]
                else:
                    e[p, k, j] = e[p, prv, j] * x[p, prv, j]
                out[p, k, j] = e[p, k, j] * s[p, k, j]
    return out


@njit(cache=True, nogil=True)
def arg_extreme(x, largest):
    """np.argmax (largest) or np.argmin of x (pre, n, post) along n, as int64 (pre, post): the first
    extreme, or the first NaN."""
    pre, n, post = x.shape
    if n == 0:
        raise ValueError("attempt to get argmax of an empty sequence")
    out = np.empty((pre, post), np.int64)
    for p in range(pre):
        for j in range(post):
            best, at = x[p, 0, j], 0
            for k in range(1, n):
                if best != best:
                    break
                v = x[p, k, j]
                if (v > best if largest else v < best) or v != v:
                    best, at = v, k
            out[p, j] = at
    return out


@njit(cache=True, nogil=True)
def argsort_rows(x, descending):
    """The ArgSort kernel on each row of x (rows, n): a stable sort; descending keeps equal elements in
    index order (the kernel sorts the flipped row ascending and flips the result back)."""
    rows, n = x.shape
    out = np.empty((rows, n), np.int64)
    for r in range(rows):
        if descending:
            rev = np.argsort(x[r, ::-1], kind="mergesort")
            for k in range(n):
                out[r, k] = n - 1 - rev[n - 1 - k]
        else:
            out[r] = np.argsort(x[r], kind="mergesort")
    return out


@njit(cache=True, nogil=True)
def take_rows(x, idx):
    """x (rows, n) at idx (rows, k) along n: (rows, k)."""
    rows, k = idx.shape
    out = np.empty((rows, k), x.dtype)
    for r in range(rows):
        for q in range(k):
            out[r, q] = x[r, idx[r, q]]
    return out


@njit(cache=True, nogil=True)
def gather3(x, idx):
    """np.take(x, idx, axis=1) of x (pre, n, post) with idx flat: (pre, idx.size, post)."""
    pre, n, post = x.shape
    m = idx.size
    at = np.empty(m, np.int64)
    for q in range(m):
        at[q] = wrap(idx[q], n)
    out = np.empty((pre, m, post), x.dtype)
    for p in range(pre):
        for q in range(m):
            out[p, q, :] = x[p, at[q], :]
    return out


@njit(cache=True, nogil=True)
def scatter3(out, idx, upd):
    """np.add.at(out (pre, n, post) seen with n first, idx flat, upd (pre, idx.size, post) seen alike):
    each index position in order adds its slice."""
    pre, n, post = out.shape
    m = idx.size
    if upd.shape != (pre, m, post):
        raise ValueError("ScatterAdd: updates of another shape")
    for q in range(m):
        i = wrap(idx[q], n)
        for p in range(pre):
            for j in range(post):
                out[p, i, j] = wadd(out[p, i, j], upd[p, q, j])
    return out


@njit(cache=True, nogil=True)
def take_along3(x, idx):
    """x (pre, n, post) at idx (pre, m, post) along n (TakeAlongAxis with x and idx broadcast already)."""
    pre, n, post = x.shape
    m = idx.shape[1]
    out = np.empty((pre, m, post), x.dtype)
    for p in range(pre):
        for q in range(m):
            for j in range(post):
                out[p, q, j] = x[p, wrap(idx[p, q, j], n), j]
    return out


@njit(cache=True, nogil=True)
def scatter_along3(out, idx, g):
    """TakeAlongAxisGrad: out (pre, n, post) += g (pre, m, post) at idx (pre, m, post) along n, in the C
    order of the index positions (np.add.at's)."""
    pre, n, post = out.shape
    m = idx.shape[1]
    for p in range(pre):
        for q in range(m):
            for j in range(post):
                i = wrap(idx[p, q, j], n)
                out[p, i, j] = wadd(out[p, i, j], g[p, q, j])
    return out


@njit(cache=True, nogil=True)
def add_rows(out, at, g):
    """np.add.at on out (P, R) at rows `at` (flat int64, in range) of g (at.size, R), in order."""
    for q in range(at.size):
        i = at[q]
        for j in range(out.shape[1]):
            out[i, j] = wadd(out[i, j], g[q, j])
    return out


@njit(cache=True, nogil=True)
def int_range(start, limit, delta, proto):
    """np.arange(start, limit, delta) of integers, in proto's dtype (numpy's fill: start + i * delta,
    wrapped to the dtype)."""
    if delta == 0:
        raise ZeroDivisionError("Range with a zero step")
    n = -((np.int64(start) - np.int64(limit)) // np.int64(delta))
    out = np.empty(max(n, 0), proto.dtype)
    for i in range(out.size):
        out[i] = np.int64(start) + i * np.int64(delta)
    return out


@njit(cache=True, nogil=True)
def ta_gather(items, ok, idx):
    """The TensorArray elements at idx (each readable, all of one shape) stacked; none raises (the kernel's
    zeros of the element shape come from the fused path)."""
    if idx.size == 0:
        raise ValueError("an empty TensorArrayGather")
    n = len(items)
    for k in range(idx.size):
        i = idx[k]
        if i < 0 or i >= n or not ok[i]:
            raise IndexError("TensorArray element the compiled frame does not hold")
    first = items[idx[0]]
    out = np.empty((idx.size,) + np.shape(first), np.asarray(first).dtype)
    for k in range(idx.size):
        v = items[idx[k]]
        if np.shape(v) != np.shape(first):
            raise ValueError("TensorArray elements of different shapes")
        out[k] = v
    return out


@njit(cache=True, nogil=True)
def float_to_int_array(x, lo, hi, bad, proto):
    """x (floats) cast to proto's integer dtype element by element as numpy's loops cast on this machine
    (math_lower.cast_native checks): truncation, `bad` (INT_MIN) when out of range or NaN."""
    out = np.empty(x.shape, proto.dtype)
    xf, of = x.reshape(x.size), out.reshape(out.size)
    for q in range(x.size):
        v = xf[q]
        of[q] = np.int64(v) if (v >= lo and v < hi) else bad
    return out
