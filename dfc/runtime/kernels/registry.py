import numpy as np

from dfc.errors import DfcGraphError
from dfc.runtime.devices import is_device_array

KERNELS = {}


def host(v):
    """`v` as a numpy array in host memory: a shape, index or value a kernel reads in Python. cupy refuses
    implicit conversion, so a device array is copied explicitly."""
    return v.get() if is_device_array(v) else np.asarray(v)


def kernel(*names):
    """Register a factory(node, xp) -> kernel(ctx, args) for each op name."""
    def deco(factory):
        for n in names:
            KERNELS[n] = factory
        return factory
    return deco


def simple(names_to_fns):
    """Register kernels that are a plain function of their input values."""
    for name, fn in names_to_fns.items():
        KERNELS[name] = _simple_factory(fn)


def _simple_factory(fn):
    def factory(node, xp):
        f = fn(xp)
        return direct(f)
    return factory


def direct(f):
    """A kernel that is a plain function of its input values with one output; fused loops call
    `f` itself (no ctx, no tuples)."""
    k = lambda ctx, a: (f(*a),)   # noqa: E731
    k.direct = f
    return k


def kernel_for(node, xp, memory_limit=None):
    """The kernel of `node` on array module `xp`, checked against a MemoryLimit when one is given."""
    try:
        factory = KERNELS[node.op]
    except KeyError:
        raise DfcGraphError(f"no kernel for op {node.op!r}", node=node.name) from None
    k = factory(node, xp)
    if memory_limit is not None:
        from dfc.runtime.limits import limit_kernel
        k = limit_kernel(node, k, memory_limit)
    return k
