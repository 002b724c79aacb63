"""The nopython implementation of philox.py's stream, for compiled loop frames (random_lower.py).

A scalar loop over Philox blocks, giving the bits philox.draw gives with numpy: the same words, the same
exact integer-to-float steps, the same rounding order of the float64 arithmetic, and numpy's own log, cos
and sin loops (npcall: numba's libm calls may differ from numpy's SIMD loops in the last bit). Kept apart
from philox.py so that the kernels do not import numba.
"""
import numpy as np
from numba import njit

from dfc.runtime.compiled import npcall as P
from dfc.runtime.kernels import philox as X

_M0, _M1, _W0, _W1 = np.uint64(X.M0), np.uint64(X.M1), np.uint64(X.W0), np.uint64(X.W1)
_MASK, _S32, _S8, _S5, _S6, _S26 = (np.uint64(v) for v in (X.MASK, 32, 8, 5, 6, 26))
_TK0, _TK1 = np.uint64(X.TAG_KEY[0]), np.uint64(X.TAG_KEY[1])
_ONE = np.uint64(1)
_F24, _F53, _TWO_PI = X.F24, X.F53, X.TWO_PI


@njit(cache=True, nogil=True)
def block(c0, c1, c2, c3, k0, k1):
    """philox.philox on uint64 words holding 32 bits each."""
    for _ in range(X.ROUNDS):
        p0, p1 = c0 * _M0, c2 * _M1
        c0, c1, c2, c3 = (p1 >> _S32) ^ c1 ^ k0, p1 & _MASK, (p0 >> _S32) ^ c3 ^ k1, p0 & _MASK
        k0, k1 = (k0 + _W0) & _MASK, (k1 + _W1) & _MASK
    return c0, c1, c2, c3


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
    clamp of values that round up to b (philox.top_below, as a float64), applied when `clamp`."""
    n = out.size
    span = b - a
    if out.itemsize == 4:        # float32: 24-bit uniforms, four a block
        for j in range((n + 3) // 4):
            ju = np.uint64(j)
            x = block(ju & _MASK, ju >> _S32, h0, h1, k0, k1)
            for m in range(min(4, n - 4 * j)):
                _put(out, 4 * j + m, a + span * (np.float64(x[m] >> _S8) * _F24), top, clamp)
    else:
        for j in range((n + 1) // 2):
            ju = np.uint64(j)
            x0, x1, x2, x3 = block(ju & _MASK, ju >> _S32, h0, h1, k0, k1)
            _put(out, 2 * j, a + span * (np.float64(_bits53(x0, x1)) * _F53), top, clamp)
            if 2 * j + 1 < n:
                _put(out, 2 * j + 1, a + span * (np.float64(_bits53(x2, x3)) * _F53), top, clamp)


@njit(cache=True, nogil=True)
def _put(out, i, v, top, clamp):
    out[i] = v                  # rounded once to out's dtype
    if clamp and out[i] > top:
        out[i] = top


@njit(cache=True, nogil=True)
def _unary(LP, k, x):
    y = np.empty_like(x)
    P.run(LP, k, (x.size,), (P.address(x), P.address(y)), (8, 8))
    return y


@njit(cache=True, nogil=True)
def normal_into(out, k0, k1, h0, h1, a, b, LP, klog, kcos, ksin):
    """Fill the flat array `out` (float32 or float64) with philox.draw's normal draws (mean a, stddev b);
    klog, kcos, ksin: LP's numpy float64 loops of log, cos and sin."""
    n = out.size
    nb = (n + 1) // 2
    if nb == 0:
        return
    u1, t = np.empty(nb), np.empty(nb)
    for j in range(nb):
        ju = np.uint64(j)
        x0, x1, x2, x3 = block(ju & _MASK, ju >> _S32, h0, h1, k0, k1)
        u1[j] = np.float64(_bits53(x0, x1) + _ONE) * _F53
        t[j] = np.float64(_bits53(x2, x3)) * _F53 * _TWO_PI
    lg, c, s = _unary(LP, klog, u1), _unary(LP, kcos, t), _unary(LP, ksin, t)
    for j in range(nb):
        r = np.sqrt(-2.0 * lg[j])
        out[2 * j] = a + b * (r * c[j])
        if 2 * j + 1 < n:
            out[2 * j + 1] = a + b * (r * s[j])
