"""Forward mode (dfc.jvp): tangents built into the graph next to the values they differentiate."""
# The sweep that builds them is forward_sweep.py, the per-op rules forward_rules.py.
import weakref

import numpy as np

from dfc import config, nest
from dfc.errors import DfcTypeError
from dfc.ir import dtypes as dt
from dfc.compiler.tracing import Tensor, convert, current_builder, user_location
from dfc.compiler.autodiff import forward_rules as R
from dfc.compiler.autodiff.forward_sweep import ForwardState
from dfc.traceback_filter import api_boundary


@api_boundary
def jvp(f, primals, tangents):
    """Forward mode: `(f(*primals), J @ tangents)` with J the Jacobian of f at primals, as jax.jvp.

    Equivalent Python (in the limit eps -> 0, computed exactly, in one pass):

        out = f(*primals)
        moved = f(*[p + eps * t for p, t in zip(primals, tangents)])
        return out, (moved - out) / eps

    primals and tangents are tuples (or lists) of the same structure; an argument may be a nested
    structure (tuple, list, dict) of float tensors, and each tangent has its primal's dtype and shape.
    The result has the structure of f's; an output that does not depend on the primals gets a zero
    tangent, and values f closes over are constants. f's Python control flow is converted as in
    dfc.function. Tangents go through dfc.cond, dfc.while_loop (nested, data-dependent trip counts),
    TensorArrays, scan and dfc.gradients: `jvp(lambda x: dfc.gradients(loss(x), x), (x,), (v,))[1]` is
    a Hessian-vector product, through loops too. A while loop gets one more loop variable per
    differentiable variable (no stacks: forward mode costs no memory per iteration).

    Inside traced code (dfc.function, dfc.trace) it builds into the current graph; called with numpy
    values it traces f once per signature and runs the graph.

    Differs from JAX: integer primals are refused (JAX gives them float0 tangents).
    """
    loc = user_location()
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise DfcTypeError(f"jvp takes primals and tangents as tuples (or lists), got "
                           f"{type(primals).__name__} and {type(tangents).__name__}", loc=loc)
    if not nest.same_structure(tuple(primals), tuple(tangents)):
        raise DfcTypeError("jvp: primals and tangents have different structures", loc=loc)
    b = current_builder(required=False)
    if b is None or getattr(b, "eager", False):
        return _run_eagerly(f, tuple(primals), tuple(tangents), loc)
    from dfc.compiler.autograph.calls import converted_call
    flat_p, flat_t = nest.flatten(tuple(primals)), nest.flatten(tuple(tangents))
    xs, seeds = [], []
    for k, (p, t) in enumerate(zip(flat_p, flat_t)):
        p = convert(p)
        t = _check_tangent(p, t, k, loc)
        x = b.make1("Identity", (p,), name=b.unique("jvp_primal"))   # f's own use of p: closures stay constant
        xs.append(x)
        seeds.append(t)
    out = converted_call(f, tuple(nest.pack_sequence_as(tuple(primals), xs)), {})
    flat_y = [None if y is None else convert(y) for y in nest.flatten(out)]
    c0 = b.ctx
    fs = ForwardState(b, c0)
    fs.compute_units([x.ref for x in xs], [y.ref for y in flat_y if y is not None])
    for x, t in zip(xs, seeds):
        fs.tan[x.ref] = t
    try:
        fs.propagate(c0)
    finally:
        b.ctx = c0
    touts = []
    for y in flat_y:
        t = fs.tan.get(y.ref) if y is not None and y.ctx is c0 else None
        touts.append(t if t is not None or y is None else R.zeros(y))
    return out, nest.pack_sequence_as(out, touts)


def _check_tangent(p, t, k, loc):
    if p.dtype not in dt.FLOATS:
        raise DfcTypeError(f"jvp: primal {k} is {p.dtype}; only float primals have tangents (cast it to a float "
                           f"dtype, or close over it in f to keep it constant)", loc=loc)
    if not isinstance(t, Tensor) and not hasattr(t, "_dfc_tensor") and \
            not isinstance(t, (np.ndarray, np.generic)):
        t = np.asarray(t, p.dtype)          # a Python number or list takes its primal's dtype
    t = convert(t)
    shapes_differ = p.shape is not None and t.shape is not None and (
        len(p.shape) != len(t.shape) or any(a is not None and c is not None and a != c
                                            for a, c in zip(p.shape, t.shape)))
    if t.dtype != p.dtype or shapes_differ:
        raise DfcTypeError(f"jvp: tangent {k} is {t.dtype}{dt.format_shape(t.shape)} but its primal is "
                           f"{p.dtype}{dt.format_shape(p.shape)} (they must match)", loc=loc)
    return t


_CACHE = weakref.WeakKeyDictionary()    # f -> signature -> traced graph


def _run_eagerly(f, primals, tangents, loc):
    """Trace (primals, tangents) -> jvp(f, primals, tangents) once per signature and run it."""
    from dfc.compiler.autograph.core import trace
    from dfc.compiler.tracing import TensorSpec
    flat_p, flat_t = nest.flatten(primals), nest.flatten(tangents)
    arrays = []
    for k, (p, t) in enumerate(zip(flat_p, flat_t)):
        if not isinstance(p, (np.ndarray, np.generic)):
            p = np.asarray(p, config.default_float() if isinstance(p, float) else None)
        if p.dtype.kind != "f":
            raise DfcTypeError(f"jvp: primal {k} is {p.dtype}; only float primals have tangents (cast it to "
                               f"a float dtype, or close over it in f to keep it constant)", loc=loc)
        t = t if isinstance(t, (np.ndarray, np.generic)) else np.asarray(t, p.dtype)
        if t.dtype != p.dtype or t.shape != p.shape:
            raise DfcTypeError(f"jvp: tangent {k} is {t.dtype}{dt.format_shape(t.shape)} but its primal is "
                               f"{p.dtype}{dt.format_shape(p.shape)} (they must match)", loc=loc)
        arrays.append((np.asarray(p), np.asarray(t)))
    specs = [TensorSpec.from_value(a) for pair in arrays for a in pair]
    key = (repr(nest.map_structure(lambda v: 0, primals)), tuple(repr(s) for s in specs))
    try:
        cache = _CACHE.setdefault(f, {})
    except TypeError:           # f cannot be weakly referenced: trace every call
        cache = {}
    g = cache.get(key)
    if g is None:
        n = len(arrays)

        def traced(*flat):
            ps = nest.pack_sequence_as(primals, list(flat[0:2 * n:2]))
            ts = nest.pack_sequence_as(tangents, list(flat[1:2 * n:2]))
            return jvp(f, tuple(ps), tuple(ts))
        g = cache[key] = trace(traced, specs, {}, f"jvp_{getattr(f, '__name__', 'fn')}")
    return g(*[a for pair in arrays for a in pair])
