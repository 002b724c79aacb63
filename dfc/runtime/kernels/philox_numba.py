"""The nopython implementation of philox.py's stream, for compiled loop frames (random_lower.py).

A scalar loop over Philox blocks, giving the bits philox.draw gives with numpy: the same words, the same
exact integer and float steps, and philox.py's own polynomial functions compiled as they are (numba adds
no fused multiply-adds without fastmath). Kept apart from philox.py so that the kernels do not import
numba.
"""
import math

import numpy as np
from numba import njit

from dfc.runtime.kernels import philox as X

_M0, _M1, _W0, _W1 = np.uint64(X.M0), np.uint64(X.M1), np.uint64(X.W0), np.uint64(X.W1)
_MASK, _S32, _S8, _S5, _S6, _S26 = (np.uint64(v) for v in (X.MASK, 32, 8, 5, 6, 26))
_TK0, _TK1 = np.uint64(X.TAG_KEY[0]), np.uint64(X.TAG_KEY[1])
_ONE, _THREE, _S51, _Q_HALF = np.uint64(1), np.uint64(3), np.uint64(51), np.uint64(1 << 50)
_F24, _F53, _F51 = X.F24, X.F53, X.F51


@njit(cache=True, nogil=True, inline="always")
def _round(c0, c1, c2, c3, k0, k1):
    p0, p1 = c0 * _M0, c2 * _M1
    return (p1 >> _S32) ^ c1 ^ k0, p1 & _MASK, (p0 >> _S32) ^ c3 ^ k1, p0 & _MASK


@njit(cache=True, nogil=True, inline="always")
def _bump(k0, k1):
    return (k0 + _W0) & _MASK, (k1 + _W1) & _MASK


@njit(cache=True, nogil=True, inline="always")
def block(c0, c1, c2, c3, k0, k1):
    """philox.philox on uint64 words holding 32 bits each. The ten rounds are written out: measured, a loop
    over them made a draw's block loop ~10x slower."""
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0, k1 = _bump(k0, k1)
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0, k1 = _bump(k0, k1)
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0, k1 = _bump(k0, k1)
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0, k1 = _bump(k0, k1)
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0, k1 = _bump(k0, k1)
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0, k1 = _bump(k0, k1)
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0, k1 = _bump(k0, k1)
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0, k1 = _bump(k0, k1)
    c0, c1, c2, c3 = _round(c0, c1, c2, c3, k0, k1)
    k0, k1 = _bump(k0, k1)
    return _round(c0, c1, c2, c3, k0, k1)      # the tenth (philox.ROUNDS)


@njit(cache=True, nogil=True)
def tag_words(R, chain):
    """philox.tag_words(R[0], (*R[1:], *chain)): R = [run count, *tag of the compiled frame's call], chain:
    (frame, iteration) pairs from that frame to the node's (int64 arrays)."""
    h0 = h1 = np.uint64(0)
    for i in range(R.size + chain.size):
        w = np.uint64(R[i] if i < R.size else chain[i - R.size])
        h0, h1, _, _ = block(w & _MASK, w >> _S32, h0, h1, _TK0, _TK1)
    return h0, h1


@njit(cache=True, nogil=True)
def size_of(shape):
    """The element count of a draw of `shape` (a 1-D int array); a negative dimension raises."""
    n = 1
    for d in shape:
        if d < 0:
            raise ValueError("a random shape with a negative dimension")
        n *= d
    return n


@njit(cache=True, nogil=True)
def _bits53(hi, lo):
    return ((hi >> _S5) << _S26) | (lo >> _S6)


@njit(cache=True, nogil=True)
def uniform_into(out, k0, k1, h0, h1, a, b, top, clamp):
    """Fill the flat array `out` (float32 or float64) with philox.draw's uniform draws in [a, b); `top`: the
    clamp of values that round up to b (philox.top_below, as a float64), applied when `clamp`. (Whole blocks
    first, each element written out: branches or words indexed by a loop variable kept LLVM from
    vectorizing.)"""
    n = out.size
    span = b - a
    if out.itemsize == 4:        # float32: 24-bit uniforms, four a block
        for j in range(n // 4):
            ju = np.uint64(j)
            x0, x1, x2, x3 = block(ju & _MASK, ju >> _S32, h0, h1, k0, k1)
            out[4 * j] = _f32(a, span, x0, top, clamp)
            out[4 * j + 1] = _f32(a, span, x1, top, clamp)
            out[4 * j + 2] = _f32(a, span, x2, top, clamp)
            out[4 * j + 3] = _f32(a, span, x3, top, clamp)
        j = n // 4
        ju = np.uint64(j)
        x = block(ju & _MASK, ju >> _S32, h0, h1, k0, k1)
        for m in range(n - 4 * j):
            out[4 * j + m] = _f32(a, span, x[m], top, clamp)
    else:
        for j in range(n // 2):
            ju = np.uint64(j)
            x0, x1, x2, x3 = block(ju & _MASK, ju >> _S32, h0, h1, k0, k1)
            out[2 * j] = _f64(a, span, _bits53(x0, x1), top, clamp)
            out[2 * j + 1] = _f64(a, span, _bits53(x2, x3), top, clamp)
        if n % 2:
            ju = np.uint64(n // 2)
            x0, x1, x2, x3 = block(ju & _MASK, ju >> _S32, h0, h1, k0, k1)
            out[n - 1] = _f64(a, span, _bits53(x0, x1), top, clamp)


@njit(cache=True, nogil=True, inline="always")
def _f32(a, span, x, top, clamp):
    r = np.float32(a + span * (np.float64(x >> _S8) * _F24))      # rounded once
    return np.float32(top) if clamp and r > top else r


@njit(cache=True, nogil=True, inline="always")
def _f64(a, span, k, top, clamp):
    r = a + span * (np.float64(k) * _F53)
    return top if clamp and r > top else r


_log_reduced = njit(cache=True, nogil=True, inline="always")(X.log_reduced)
_sin_kernel = njit(cache=True, nogil=True, inline="always")(X.sin_kernel)
_cos_kernel = njit(cache=True, nogil=True, inline="always")(X.cos_kernel)


@njit(cache=True, nogil=True, inline="always")
def _normal_pair(x0, x1, x2, x3):
    """The two standard normals of one block (philox.py's formulas, in its order)."""
    m, e = math.frexp(np.float64(_bits53(x0, x1) + _ONE) * _F53)
    if m < X.SQRT_HALF:
        m, e = m + m, e - 1
    r = np.sqrt(-2.0 * _log_reduced(m - 1.0, np.float64(e)))
    k2 = _bits53(x2, x3)
    q = (k2 + _Q_HALF) >> _S51
    th = (np.float64(k2) * _F51 - np.float64(q)) * X.PIO2
    sn, cs = _sin_kernel(th), _cos_kernel(th)
    q = q & _THREE
    if q == 0:
        return r * cs, r * sn
    if q == 1:
        return r * -sn, r * cs
    if q == 2:
        return r * -cs, r * -sn
    return r * sn, r * -cs


@njit(cache=True, nogil=True)
def normal_into(out, k0, k1, h0, h1, a, b):
    """Fill the flat array `out` (float32 or float64) with philox.draw's normal draws (mean a, stddev b)."""
    n = out.size
    for j in range(n // 2):
        ju = np.uint64(j)
        x0, x1, x2, x3 = block(ju & _MASK, ju >> _S32, h0, h1, k0, k1)
        z0, z1 = _normal_pair(x0, x1, x2, x3)
        out[2 * j] = a + b * z0                 # rounded once to out's dtype
        out[2 * j + 1] = a + b * z1
    if n % 2:
        ju = np.uint64(n // 2)
        x0, x1, x2, x3 = block(ju & _MASK, ju >> _S32, h0, h1, k0, k1)
        z0, _ = _normal_pair(x0, x1, x2, x3)
        out[n - 1] = a + b * z0
