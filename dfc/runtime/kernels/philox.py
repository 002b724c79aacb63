"""Random draws: one counter-based stream (Philox4x32-10) shared by every execution path.

Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the generator of
TensorFlow's stateless random ops, a sibling of numpy.random.Philox's 4x64) maps a 128-bit counter and a
64-bit key to 128 random bits. Every draw of a RandomUniform / RandomNormal node is a pure function of

    key     = (k0, k1) = (seed mod 2**32, crc32(node name) ^ (seed >> 32 mod 2**32))
              (the seed taken mod 2**64: a seed in [0, 2**32) is its own word)
    counter = (c0, c1, c2, c3) = (block mod 2**32, block >> 32, h0, h1)
              (h0, h1) = tag_words(run count, ctx.tag): Philox4x32-10 folded over the words
              run count, *ctx.tag (each an int mod 2**64, low word first): starting from (h0, h1) = (0, 0),
              (h0, h1) = the first two outputs of counter (w mod 2**32, w >> 32, h0, h1) under TAG_KEY.
              ctx.tag is the flat (frame id, iteration, ...) tuple every path sets the same way.

and block j gives the four 32-bit words x0..x3 of Philox(counter with block j, key). Element i of a draw:

    uniform float32:  word i % 4 of block i // 4; u = (x >> 8) / 2**24 (24 bits, as numpy and JAX)
    uniform, others:  block i // 2, words (x0, x1) for even i, (x2, x3) for odd i;
                      u = ((x_hi >> 5) * 2**26 + (x_lo >> 6)) / 2**53 (53 bits, numpy's double)
    uniform value:    a + (b - a) * u in float64, rounded once to the dtype; where a < b, values that round
                      up to b become the largest one below b, so every value lies in [a, b)
    normal (any dtype): block i // 2: k1 = k(x0, x1) + 1 in [1, 2**53] and k2 = k(x2, x3) with k the 53-bit
                      integer above; Box-Muller r = sqrt(-2 log(k1 / 2**53)), angle t = 2 pi k2 / 2**53;
                      element 2j is r cos t and element 2j + 1 is r sin t; value = a + b * z in float64,
                      rounded once. log, cos and sin are this module's own (fdlibm's polynomials, within
                      ~1 ulp): log after an exact frexp, cos and sin of t after an exact reduction by quarter
                      turns (t = (q + d) pi / 2, q = round(4 k2 / 2**53), |d| <= 1/2, kernel argument d * pi/2)

`draw(xp, ...)` computes that with `xp`'s array arithmetic (numpy, cupy, dfc's strict double), the
nopython implementation (philox_numba.py) with a scalar loop over the same formulas (the polynomial
functions below are compiled there as they are). Every step is exact integer arithmetic, an exact
float operation (frexp, scaling by powers of two, a difference of nearby values) or one correctly rounded
IEEE operation (+, -, *, /, sqrt) in a fixed order, never a libm or SIMD-library call: so numpy, numba
and a GPU give the same bits (library log/cos/sin differ between numpy's SIMD loops, glibc and CUDA in the
last bits: measured, cupy's float64 normals differed from numpy's in ~9% of the elements).
"""
import functools
import math
import zlib

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57        # Philox4x32 multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85        # Weyl key increments
MASK = 0xFFFFFFFF
ROUNDS = 10
TAG_KEY = (0x243F6A88, 0x85A308D3)     # fixed key of the tag fold (digits of pi)
F24, F53, F51 = 2.0 ** -24, 2.0 ** -53, 2.0 ** -51
# fdlibm (e_log.c, k_sin.c, k_cos.c): log(1 + f) = f - hfsq + s (hfsq + R(s*s)), s = f / (2 + f), and the
# minimax polynomials of sin and cos on [-pi/4, pi/4]
LN2_HI, LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
LG1, LG2, LG3, LG4 = 6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01, \
    2.222219843214978396e-01
LG5, LG6, LG7 = 1.818357216161805012e-01, 1.531383769920937332e-01, 1.479819860511658591e-01
S1, S2, S3 = -1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04
S4, S5, S6 = 2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10
C1, C2, C3 = 4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05
C4, C5, C6 = -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11
SQRT_HALF = 0.70710678118654752440
PIO2 = 1.57079632679489661923


def philox(c, k):
    """Philox4x32-10 of the counter words c = (c0, c1, c2, c3) under the key words k = (k0, k1): the four
    output words. Counter words are Python ints or xp arrays of uint64 holding 32-bit values (products of
    two 32-bit words fit in 64 bits); key words are Python ints."""
    c0, c1, c2, c3 = c
    k0, k1 = k
    for _ in range(ROUNDS):
        p0, p1 = c0 * M0, c2 * M1
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK, (p0 >> 32) ^ c3 ^ k1, p0 & MASK
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return c0, c1, c2, c3


def key_of(seed, name):
    """The key words (k0, k1) of a node's draws (module docstring)."""
    s = int(seed) & 0xFFFFFFFFFFFFFFFF
    return s & MASK, (zlib.crc32(name.encode()) ^ (s >> 32)) & MASK


@functools.lru_cache(maxsize=64)      # the draws of one iteration share it
def tag_words(run_count, tag):
    """The counter words (h0, h1) of one execution of a node: run count and ctx.tag folded (module docstring)."""
    h0 = h1 = 0
    for w in (run_count, *tag):
        w = int(w) & 0xFFFFFFFFFFFFFFFF
        h0, h1, _, _ = philox((w & MASK, w >> 32, h0, h1), TAG_KEY)
    return h0, h1


def per_block(uniform, dtype):
    """Elements one Philox block gives: 4 float32 uniforms, otherwise 2."""
    return 4 if uniform and np.dtype(dtype) == np.float32 else 2


def top_below(a, b, dtype):
    """The largest value of a floating dtype below b, where draws in [a, b) are clamped to it; None when no
    clamp applies (a >= b, an integer dtype, or no value of the dtype in [a, b))."""
    dt = np.dtype(dtype)
    if dt.kind != "f" or not a < b:
        return None
    bb = dt.type(b)
    top = bb if float(bb) < b else np.nextafter(bb, dt.type(-np.inf))
    return top if float(top) >= a else None


CPU_CHUNK = 16384     # blocks per numpy pass: its ~10 temporaries stay in cache (measured: 8x faster than 500K)


def _words(xp, j0, j1, key, h):
    j = xp.arange(j0, j1, dtype=xp.uint64)
    return philox((j & MASK, j >> 32, h[0], h[1]), key)      # arrays from the second round on


def _bits53(hi, lo):
    return ((hi >> 5) << 26) | (lo >> 6)


def _interleave(xp, parts, n):
    return xp.stack(parts, axis=1).reshape(-1)[:n]


def _values(xp, uniform, dt, n, a, b, x0, x1, x2, x3):
    """The float64 values (before rounding) of the n elements that blocks x0..x3 give."""
    if uniform:
        if dt == np.float32:
            u = (_interleave(xp, [x0, x1, x2, x3], n) >> 8).astype(xp.float64) * F24
        else:
            u = _interleave(xp, [_bits53(x0, x1), _bits53(x2, x3)], n).astype(xp.float64) * F53
        return a + (b - a) * u
    lg = _log(xp, (_bits53(x0, x1) + 1).astype(xp.float64) * F53)
    r = xp.sqrt(-2.0 * lg)
    k2 = _bits53(x2, x3)
    q = (k2 + (1 << 50)) >> 51                         # the nearest quarter turn, 0..4
    th = (k2.astype(xp.float64) * F51 - q.astype(xp.float64)) * PIO2
    sn, cs = sin_kernel(th), cos_kernel(th)
    q = q & 3
    c = xp.where(q == 0, cs, xp.where(q == 1, -sn, xp.where(q == 2, -cs, sn)))
    s = xp.where(q == 0, sn, xp.where(q == 1, cs, xp.where(q == 2, -sn, -cs)))
    return a + b * _interleave(xp, [r * c, r * s], n)


def _log(xp, x):
    m, e = xp.frexp(x)                                 # x = m 2**e, m in [1/2, 1): exact
    low = m < SQRT_HALF
    return log_reduced(xp.where(low, m + m, m) - 1.0, xp.where(low, e - 1, e).astype(xp.float64))


def log_reduced(f, k):
    """log((1 + f) 2**k) for f in [sqrt(1/2) - 1, sqrt(2) - 1] (fdlibm's e_log.c; k a float)."""
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (LG2 + w * (LG4 + w * LG6))
    t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)))
    hfsq = 0.5 * f * f
    return k * LN2_HI - ((hfsq - (s * (hfsq + (t2 + t1)) + k * LN2_LO)) - f)


def sin_kernel(x):
    """sin x for |x| <= pi/4 (fdlibm's k_sin.c)."""
    z = x * x
    return x + z * x * (S1 + z * (S2 + z * (S3 + z * (S4 + z * (S5 + z * S6)))))


def cos_kernel(x):
    """cos x for |x| <= pi/4 (fdlibm's k_cos.c)."""
    z = x * x
    r = z * (C1 + z * (C2 + z * (C3 + z * (C4 + z * (C5 + z * C6)))))
    hz = 0.5 * z
    w = 1.0 - hz
    return w + (((1.0 - w) - hz) + z * r)


SMALL = 32     # elements: fewer are computed with Python's scalars (measured: ~5x faster than ~150 numpy calls)


def _normal_pair(x0, x1, x2, x3):
    """_values' two standard normals of one block, on Python ints and floats (IEEE doubles: the same bits)."""
    m, e = math.frexp((_bits53(x0, x1) + 1) * F53)
    if m < SQRT_HALF:
        m, e = m + m, e - 1
    r = math.sqrt(-2.0 * log_reduced(m - 1.0, float(e)))
    k2 = _bits53(x2, x3)
    q = (k2 + (1 << 50)) >> 51
    th = (k2 * F51 - q) * PIO2
    sn, cs = sin_kernel(th), cos_kernel(th)
    c, s = ((cs, sn), (-sn, cs), (-cs, -sn), (sn, -cs))[q & 3]
    return r * c, r * s


def _small(uniform, n, dt, a, b, key, h):
    """draw's float64 values before rounding, one block at a time in Python (for a few elements)."""
    vals = []
    for j in range(-(-n // per_block(uniform, dt))):
        x0, x1, x2, x3 = philox((j & MASK, j >> 32, h[0], h[1]), key)
        if not uniform:
            vals += [a + b * z for z in _normal_pair(x0, x1, x2, x3)]
        elif dt == np.float32:
            vals += [a + (b - a) * ((x >> 8) * F24) for x in (x0, x1, x2, x3)]
        else:
            vals += [a + (b - a) * (_bits53(x0, x1) * F53), a + (b - a) * (_bits53(x2, x3) * F53)]
    return np.array(vals[:n], np.float64)


def draw(xp, uniform, n, dtype, a, b, key, h):
    """n draws (a flat xp array of dtype): uniform in [a, b) or normal (mean a, stddev b), for key words
    `key` and counter words `h` (module docstring). Up to SMALL elements are computed on the host with
    Python's scalars; more by numpy CPU_CHUNK blocks at a time, or by another array module (a GPU's) in one
    pass: the same bits."""
    dt = np.dtype(dtype)
    top = top_below(a, b, dt) if uniform else None
    if n <= SMALL:
        v = _small(uniform, n, dt, a, b, key, h).astype(dt)
        v = v if top is None else np.minimum(v, top)
        return v if xp is np else xp.asarray(v)
    per = per_block(uniform, dt)
    nb = -(-n // per)
    chunk = CPU_CHUNK if xp is np else nb
    out = xp.empty(n, dtype=dt)
    for j0 in range(0, nb, chunk):
        j1 = min(j0 + chunk, nb)
        e0, e1 = j0 * per, min(j1 * per, n)
        out[e0:e1] = _values(xp, uniform, dt, e1 - e0, a, b, *_words(xp, j0, j1, key, h)).astype(dt)
    return out if top is None else xp.minimum(out, float(top))
