"""Lowering of random draws (kernels: array_kernels.py)."""
from dfc.runtime.kernels.lowering import Unsupported, lowering


@lowering("RandomUniform", "RandomNormal")
def _random(e):
    """The kernel itself, called from compiled code (object mode): numba's generators cannot reproduce
    numpy's default_rng seeded by (seed, node, run, iteration), so the numbers are the fused path's."""
    if e.ins[0].ndim != 1:
        raise Unsupported("a random shape that is not a 1-D tensor")
    out = e.tmp()
    e.kernel_call(out, e.args)
    return [out]
