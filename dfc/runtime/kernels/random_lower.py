"""Lowering of random draws (kernel: array_kernels.py): philox.py's stream, computed natively
(philox_numba.py), with the key from the node and the counter from R and the loop counters `it<frame>`."""
from dfc.runtime import emit as E
from dfc.runtime.kernels import philox
from dfc.runtime.kernels.array_lower import literal
from dfc.runtime.kernels.lowering import Unsupported, lowering, scalar_type


@lowering("RandomUniform", "RandomNormal")
def _random(e):
    """The draw into a new flat array, shaped like the kernel's result. Its counter words fold R = [run count,
    *tag of the compiled frame's call] and the (frame, iteration) pairs from that frame to the node's: the
    fused path's (run count, ctx.tag)."""
    at, t = e.node.attrs, e.outs[0]
    if e.ins[0].ndim != 1:
        raise Unsupported("a random shape that is not a 1-D tensor")
    if t.dtype not in ("float32", "float64"):
        raise Unsupported(f"a random draw of {t.dtype} (compiled: float32 and float64)")
    k0, k1 = philox.key_of(at.get("seed", 0), e.node.name)
    a, b = float(at.get("a", 0.0)), float(at.get("b", 1.0))
    shape, ctr, h, flat = e.args[0], e.tmp(), e.tmp(), e.tmp()
    if e.gen.frame_chain:
        e.stmt("{} = np.array([{}], np.int64)", ctr,
               E.join("", [E.fmt("{}, {}, ", E.lit(f), E.ident("it", f)) for f in e.gen.frame_chain]))
    else:       # a draw at the root of a compiled run: numba cannot type an empty list literal
        e.stmt("{} = np.zeros(0, np.int64)", ctr)
    e.stmt("{} = H.philox_tag(R, {})", h, ctr)
    e.stmt("{} = np.empty(H.philox_size({}), {})", flat, shape, scalar_type(t.dtype))
    common = [flat, E.fmt("np.uint64({})", E.lit(k0)), E.fmt("np.uint64({})", E.lit(k1)), E.fmt("{}[0]", h),
              E.fmt("{}[1]", h), literal(a, "float64"), literal(b, "float64")]
    if e.node.op == "RandomUniform":
        top = philox.top_below(a, b, t.dtype)
        e.stmt("H.philox_uniform({})", E.items(common + [literal(0.0 if top is None else float(top), "float64"),
                                                          E.lit(top is not None)]))
    else:
        e.stmt("H.philox_normal({})", E.items(common))
    if t.ndim == 0:
        return [E.fmt("{}[0]", flat)]
    return [E.fmt("H.reshape({}, ({}))", flat, E.items([E.fmt("{}[{}]", shape, E.lit(d)) for d in range(t.ndim)]))]
