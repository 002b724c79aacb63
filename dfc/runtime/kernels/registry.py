from dfc.errors import DfcGraphError

KERNELS = {}


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
        k = lambda ctx, a: (f(*a),)   # noqa: E731
        k.elementwise = f             # fused loops call this directly: one output, no ctx
        return k
    return factory


def kernel_for(node, xp):
    try:
        factory = KERNELS[node.op]
    except KeyError:
        raise DfcGraphError(f"no kernel for op {node.op!r}", node=node.name) from None
    return factory(node, xp)
