"""Random draws in the XLA lowering: philox.py's stream (the numpy kernel's definition) in jax.numpy, bit for bit.

The key comes from the node (static), the counter words from the run count (an input of the program, so
consecutive calls draw anew without recompiling) and the tag: the (frame id, iteration) pairs of the loops
around the draw, the iterations being the while_loops' traced counters (lower.py keeps them in `tag`).

Philox runs on uint32 words; the 32x32 -> 64-bit products go through uint64 (exact under jax's x64 mode).
The floating-point steps are philox.py's, in the same order, with one guard: XLA's CPU compiler contracts
a product feeding an addition into a fused multiply-add (one rounding instead of numpy's two; unguarded,
~1% of float64 normals differed in the last bit), as GPU compilers do by default. So every product gets
`zero` added, a -0.0 the compiler cannot see (it comes from the run count): the product becomes
fma(x, y, -0.0), which is x * y rounded (exactly: -0.0 keeps the sign of any product), and what adds it to
something else is a plain addition. (Multiplying by an opaque 1.0 instead is not enough: XLA reorders
(x * c) * one into (x * one) * c for a constant c, and then contracts.) The constants a, b pass through the
guard too, so that XLA does not simplify 0 + x to x (which keeps a -0.0 that numpy's 0.0 + -0.0 drops).
"""
import numpy as np

import jax.numpy as jnp

from dfc.runtime.kernels import philox as P
from dfc.runtime.xla.jops import NotLowerable, static

OPS = ("RandomUniform", "RandomNormal")
_U32, _U64 = jnp.uint32, jnp.uint64
_32 = np.uint64(32)


def _u32(x):
    return jnp.asarray(x).astype(_U32)


def philox(c, k):
    """philox.philox on uint32 arrays (or scalars) c, Python int key words k."""
    c0, c1, c2, c3 = (_u32(x) for x in c)
    k0, k1 = k
    for _ in range(P.ROUNDS):
        p0 = c0.astype(_U64) * np.uint64(P.M0)
        p1 = c2.astype(_U64) * np.uint64(P.M1)
        c0, c1, c2, c3 = ((p1 >> _32).astype(_U32) ^ c1 ^ np.uint32(k0), p1.astype(_U32),
                          (p0 >> _32).astype(_U32) ^ c3 ^ np.uint32(k1), p0.astype(_U32))
        k0, k1 = (k0 + P.W0) & P.MASK, (k1 + P.W1) & P.MASK
    return c0, c1, c2, c3


def _split(w):
    """A word (a nonnegative int, static or traced) as its (low, high) 32-bit halves."""
    if isinstance(w, int):
        return np.uint32(w & P.MASK), np.uint32((w >> 32) & P.MASK)
    w = jnp.asarray(w).astype(_U64)
    return w.astype(_U32), (w >> _32).astype(_U32)


def tag_words(run_count, tag):
    """philox.tag_words(run_count, flattened tag) with traced words: tag is [(frame id, iteration), ...].

    The words pass through `_kept` after the run count and after each (frame, iteration) pair: without
    it, each fusion of a loop body that draws compiled its own copy of the fold (30 scalar Philox rounds
    in a loop; 8 copies in the particle filter benchmark), and its loop-invariant part again outside."""
    one = (jnp.asarray(run_count) >= 0).astype(_U64)
    h = _fold((np.uint32(0), np.uint32(0)), run_count)
    h = _kept(h, one)
    for fid, k in tag:
        h = _kept(_fold(_fold(h, fid), k), one)
    return h


def _fold(h, w):
    lo, hi = _split(w)
    return philox((lo, hi, h[0], h[1]), P.TAG_KEY)[:2]


def _kept(h, one):
    """h as it is, through one integer division by an opaque 1: XLA does not copy a division into the
    fusions that read its result."""
    both = ((jnp.asarray(h[0]).astype(_U64) << _32) | jnp.asarray(h[1]).astype(_U64)) // one
    return (both >> _32).astype(_U32), both.astype(_U32)


class _Exact:
    """Float64 arithmetic with numpy's roundings under XLA (the module docstring's `zero`)."""

    def __init__(self, zero):
        self.zero = zero

    def mul(self, x, y):
        return x * y + self.zero

    def log(self, x):
        m, e = jnp.frexp(x)
        low = m < P.SQRT_HALF
        return self.log_reduced(jnp.where(low, m + m, m) - 1.0, jnp.where(low, e - 1, e).astype(jnp.float64))

    def log_reduced(self, f, k):
        """philox.log_reduced."""
        m = self.mul
        s = f / (2.0 + f)
        z = m(s, s)
        w = m(z, z)
        t1 = m(w, P.LG2 + m(w, P.LG4 + m(w, P.LG6)))
        t2 = m(z, P.LG1 + m(w, P.LG3 + m(w, P.LG5 + m(w, P.LG7))))
        hfsq = m(m(0.5, f), f)
        return m(k, P.LN2_HI) - ((hfsq - (m(s, hfsq + (t2 + t1)) + m(k, P.LN2_LO))) - f)

    def sin_kernel(self, x):
        m = self.mul
        z = m(x, x)
        return x + m(m(z, x), P.S1 + m(z, P.S2 + m(z, P.S3 + m(z, P.S4 + m(z, P.S5 + m(z, P.S6))))))

    def cos_kernel(self, x):
        m = self.mul
        z = m(x, x)
        r = m(z, P.C1 + m(z, P.C2 + m(z, P.C3 + m(z, P.C4 + m(z, P.C5 + m(z, P.C6))))))
        hz = m(0.5, z)
        w = 1.0 - hz
        return w + (((1.0 - w) - hz) + m(z, r))


def _bits53(hi, lo):
    return ((hi.astype(_U64) >> np.uint64(5)) << np.uint64(26)) | (lo.astype(_U64) >> np.uint64(6))


def _interleave(parts, n):
    return jnp.stack(parts, axis=1).reshape(-1)[:n]


def draw(uniform, n, dtype, a, b, key, h, zero):
    """philox.draw: n values of dtype (a flat array) for key words `key` and traced counter words `h`."""
    dt = np.dtype(dtype)
    X = _Exact(zero)
    a_, b_ = X.mul(a, 1.0), X.mul(b, 1.0)
    if not uniform:
        return (a_ + X.mul(b_, _normals(n, key, h, X))).astype(dt)
    nb = -(-n // P.per_block(uniform, dt))
    x0, x1, x2, x3 = philox(_counters(np.arange(nb, dtype=np.uint64), h), key)
    if dt == np.float32:
        u = (_interleave([x0, x1, x2, x3], n) >> np.uint32(8)).astype(jnp.float64) * P.F24
    else:
        u = _interleave([_bits53(x0, x1), _bits53(x2, x3)], n).astype(jnp.float64) * P.F53
    v = (a_ + X.mul(b - a, u)).astype(dt)
    top = P.top_below(a, b, dt)
    return v if top is None else jnp.minimum(v, jnp.asarray(top, dt))


def _counters(j, h):
    return j & P.MASK, j >> np.uint64(32), jnp.broadcast_to(h[0], j.shape), jnp.broadcast_to(h[1], j.shape)


def _normals(n, key, h, X):
    """n standard normals, philox.draw's Box-Muller pairs. Computed per element (element i from block i // 2,
    its cosine or sine): both elements of a pair compute the block, but XLA fuses it all into one loop;
    computed per block and interleaved, XLA fused the whole computation into the interleaving, ~15x slower."""
    i = np.arange(n, dtype=np.uint64)
    x0, x1, x2, x3 = philox(_counters(i >> np.uint64(1), h), key)
    lg = X.log((_bits53(x0, x1) + np.uint64(1)).astype(jnp.float64) * P.F53)
    r = jnp.sqrt(-2.0 * lg)
    k2 = _bits53(x2, x3)
    q = (k2 + np.uint64(1 << 50)) >> np.uint64(51)             # the nearest quarter turn, 0..4
    th = X.mul(k2.astype(jnp.float64) * P.F51 - q.astype(jnp.float64), P.PIO2)
    sn, cs = X.sin_kernel(th), X.cos_kernel(th)
    # the cosine of quarter q is (cs, -sn, -cs, sn)[q]; the sine is the cosine's entry at q + 3
    q = (q + np.uint64(3) * (i & np.uint64(1))) & np.uint64(3)
    return X.mul(r, jnp.where(q == 0, cs, jnp.where(q == 1, -sn, jnp.where(q == 2, -cs, sn))))


def lower(node, vals, run_count, tag):
    """The draw of RandomUniform / RandomNormal `node` (vals: its inputs) in the run `run_count` (traced) at
    tag [(frame id, traced iteration), ...]: what the numpy kernel gives for the same run and tag."""
    at = node.attrs
    shape = tuple(int(d) for d in static(vals[0], node, "shape").reshape(-1))
    if any(d < 0 for d in shape):
        raise NotLowerable(f"random shape {list(shape)} has a negative dimension", node=node.name)
    dtype = np.dtype(at["dtype"])
    if dtype.kind != "f":
        raise NotLowerable(f"a random draw of {dtype} (lowered: floating dtypes)", node=node.name)
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return [jnp.zeros(shape, dtype)]
    key = P.key_of(at.get("seed", 0), node.name)
    zero = jnp.where(jnp.asarray(run_count) < 0, 1.0, -0.0)      # -0.0, opaque to the compiler
    v = draw(node.op == "RandomUniform", n, dtype, float(at.get("a", 0.0)), float(at.get("b", 1.0)), key,
             tag_words(run_count, tag), zero)
    return [v.reshape(shape)]
