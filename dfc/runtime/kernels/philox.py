"""Random draws: one counter-based stream (Philox4x32-10) shared by every execution path.

Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the generator of
TensorFlow's stateless random ops and of numpy.random.Philox) maps a 128-bit counter and a 64-bit key to
128 random bits. Every draw of a RandomUniform / RandomNormal node is a pure function of

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
    normal (any dtype): block i // 2: u1 = (k(x0, x1) + 1) / 2**53 in (0, 1], u2 = k(x2, x3) / 2**53 with k
                      the 53-bit integer above; Box-Muller r = sqrt(-2 log u1), t = 2 pi u2, element 2j is
                      r cos t and element 2j + 1 is r sin t; value = a + b * z in float64, rounded once

`draw(xp, ...)` computes that with `xp`'s array arithmetic (numpy, cupy, dfc's strict double), the
nopython implementation (philox_numba.py) with a scalar loop; log, cos and sin are numpy's own loops on
both (numba's libm calls may differ in the last bit), the rest is exact or correctly rounded IEEE
arithmetic, so the two give the same bits. On cupy log, cos and sin are CUDA's, whose last bits may
differ from numpy's before the final rounding.
"""
import math
import zlib

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57        # Philox4x32 multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85        # Weyl key increments
MASK = 0xFFFFFFFF
ROUNDS = 10
TAG_KEY = (0x243F6A88, 0x85A308D3)     # fixed key of the tag fold (digits of pi)
TWO_PI = 2.0 * math.pi
F24, F53, F26 = 2.0 ** -24, 2.0 ** -53, 67108864.0


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
            u = _bits53(_interleave(xp, [x0, x2], n), _interleave(xp, [x1, x3], n)).astype(xp.float64) * F53
        return a + (b - a) * u
    u1 = (_bits53(x0, x1) + 1).astype(xp.float64) * F53
    t = _bits53(x2, x3).astype(xp.float64) * F53 * TWO_PI
    r = xp.sqrt(-2.0 * xp.log(u1))
    return a + b * _interleave(xp, [r * xp.cos(t), r * xp.sin(t)], n)


def draw(xp, uniform, n, dtype, a, b, key, h):
    """n draws (a flat xp array of dtype): uniform in [a, b) or normal (mean a, stddev b), for key words
    `key` and counter words `h` (module docstring). numpy computes them CPU_CHUNK blocks at a time, other
    array modules (a GPU's) in one pass: the same bits."""
    dt = np.dtype(dtype)
    per = per_block(uniform, dt)
    nb = -(-n // per)
    chunk = CPU_CHUNK if xp is np else max(nb, 1)
    out = xp.empty(n, dtype=dt)
    for j0 in range(0, nb, chunk):
        j1 = min(j0 + chunk, nb)
        e0, e1 = j0 * per, min(j1 * per, n)
        out[e0:e1] = _values(xp, uniform, dt, e1 - e0, a, b, *_words(xp, j0, j1, key, h)).astype(dt)
    top = top_below(a, b, dt) if uniform else None
    return out if top is None else xp.minimum(out, float(top))
