"""Second derivatives: dfc.hvp(f, x, v) and dfc.hessian(f), reverse mode over reverse mode.

Forward mode is not available, so both differentiate a first gradient again with dfc.gradients:
an HVP is one second gradient, of <grad f(x), v> with respect to x (the first gradient seeded
with v); a Hessian is one such product per element of x, a row each, so its graph grows with
x's size (meant for small inputs). Called with numpy values they trace once per signature and
run the graph, as dfc.value_and_grad does; inside traced code they build into the graph.
"""
import weakref

import numpy as np

from dfc import nest
from dfc.errors import DfcError, DfcTypeError
from dfc.ir import dtypes as dt
from dfc.compiler import ops_api
from dfc.compiler.tracing import convert, current_builder, user_location
from dfc.compiler.autodiff.gradients import trace_and_run, gradients
from dfc.traceback_filter import api_boundary

_HVP_GRAPHS = weakref.WeakKeyDictionary()     # f -> {signature: (graph, output structure)}


@api_boundary
def hvp(f, x, v):
    """H(x) @ v, the Hessian of scalar f at x times v, without forming the Hessian.

    Equivalent math: d/dx sum(gradients(f(x), x) * v), that is jax.jvp(jax.grad(f), (x,), (v,))[1].
    x is one float tensor or a nested structure of them (lists, tuples, namedtuples, dicts; also
    dfc.Variables inside traced code); v has x's structure and shapes, and the result has x's
    structure (zeros where f is linear in a leaf). f's value is summed, as in dfc.gradients, and its
    Python control flow is converted as in dfc.function. With numpy values for x and v, f is traced
    once per signature and the graph is run; inside traced code the product is built into the graph.
    Works through conds and while loops with data-dependent trip counts. Differs from JAX: reverse
    over reverse.
    """
    if current_builder(required=False) is None:
        try:
            cache = _HVP_GRAPHS.setdefault(f, {})
        except TypeError:                       # f cannot be weakly referenced: trace every call
            cache = {}
        return trace_and_run(cache, f"hvp_{getattr(f, '__name__', 'fn')}", lambda a, b: _hvp(f, a, b), (x, v))
    return _hvp(f, x, v)


def hessian(f, argnums=0):
    """Return h(*args) -> the Hessian of scalar f(*args) with respect to x = args[argnums].

    Equivalent math: H[i..., j...] = d^2 f / dx[i...] dx[j...], of shape x.shape + x.shape (as
    jax.hessian). f must return a scalar; its Python control flow is converted as in dfc.function.
    Called with numpy values, h traces f once per signature and runs the graph; inside traced code
    it builds the Hessian into the graph. The Hessian is built row by row, one gradient of the
    gradient per element of x, so x must be small and its shape known while tracing; for larger x
    use dfc.hvp. Works through conds and while loops. Differs from JAX: x is one float tensor (not a
    nested structure).
    """
    if not isinstance(argnums, int):
        raise DfcError("dfc.hessian(f, argnums) takes one argument number (an int); for several arguments "
                       "use dfc.hvp with a nested structure", loc=user_location())
    cache = {}

    @api_boundary
    def h(*args):
        if current_builder(required=False) is None:
            return trace_and_run(cache, f"hessian_{getattr(f, '__name__', 'fn')}", h, args)
        return _hessian(f, args, argnums)

    h.__name__ = f"hessian_{getattr(f, '__name__', 'fn')}"
    h.__wrapped__ = f
    return h


def _call(f, args):
    from dfc.compiler.autograph.calls import converted_call
    return converted_call(f, args, {})     # converted: `if`/`while` on tensors work in f


def _check_float(x, what):
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        raise DfcTypeError(f"{what} differentiates with respect to tensors or dfc.Variables, not "
                           f"{type(x).__name__}: pass x as an argument of the traced function", loc=user_location())
    if str(dtype) not in dt.FLOATS:
        raise DfcTypeError(f"{what} differentiates with respect to float tensors, got {dtype}: pass x as "
                           f"floats (np.asarray(x, np.float64), or dfc.cast)", loc=user_location())


def _hvp(f, x, v):
    xs = nest.flatten(x)
    if not nest.same_structure(x, v) or len(nest.flatten(v)) != len(xs):
        raise DfcError("dfc.hvp(f, x, v): v must have x's structure (the same nesting, keys and number of "
                       "tensors)", loc=user_location())
    for leaf in xs:
        _check_float(leaf, "dfc.hvp")
    vs = [convert(u, str(leaf.dtype)) for u, leaf in zip(nest.flatten(v), xs)]
    for u, leaf in zip(vs, xs):
        if _known(u.shape) and _known(leaf.shape) and tuple(u.shape) != tuple(leaf.shape):
            raise DfcError(f"dfc.hvp(f, x, v): v has shape {list(u.shape)} where x has {list(leaf.shape)}",
                           loc=user_location())
    g = gradients(_call(f, (x,)), xs)
    pairs = [(gi, u) for gi, u in zip(g, vs) if gi is not None]
    if not pairs:                                  # f does not depend on x: H = 0
        out = [ops_api.zeros_like(u) for u in vs]
    else:
        out = gradients([gi for gi, _ in pairs], xs, grad_ys=[u for _, u in pairs], unconnected_gradients="zero")
    return nest.pack_sequence_as(x, out)


def _hessian(f, args, argnums):
    if argnums >= len(args) or argnums < -len(args):
        raise DfcError(f"dfc.hessian(f, argnums={argnums}) was called with {len(args)} arguments",
                       loc=user_location())
    x = args[argnums]
    if nest.is_nested(x):
        raise DfcTypeError("dfc.hessian differentiates with respect to one tensor, not a nested structure: "
                           "concatenate the parameters into one vector, or use dfc.hvp(f, x, v), which takes "
                           "structures", loc=user_location())
    _check_float(x, "dfc.hessian")
    shape = x.shape
    if not _known(shape):
        raise DfcError(f"dfc.hessian builds one row per element of x, so it needs x's shape known while tracing "
                       f"(got {None if shape is None else list(shape)}): give the argument a full shape "
                       f"(dfc.TensorSpec), or use dfc.hvp(f, x, v) for products with the Hessian",
                       loc=user_location())
    y = convert(_call(f, args))
    if _known(y.shape) and tuple(y.shape) != ():
        raise DfcError(f"dfc.hessian(f) needs f to return a scalar, got shape {list(y.shape)}: reduce it "
                       f"(dfc.reduce_sum) first", loc=user_location())
    shape, dtype = tuple(shape), str(x.dtype)
    n = int(np.prod(shape, dtype=np.int64))
    g = gradients(y, x)
    if g is None:                                   # f does not depend on x
        return ops_api.zeros(list(shape + shape), dtype)
    rows = []
    for i in range(n):
        e = np.zeros(n, dtype)
        e[i] = 1
        row = gradients(g, x, grad_ys=e.reshape(shape), unconnected_gradients="zero")
        rows.append(ops_api.reshape(row, [n]))
    if not rows:
        return ops_api.zeros(list(shape + shape), dtype)
    return ops_api.reshape(ops_api.stack(rows), list(shape + shape))


def _known(shape):
    return shape is not None and None not in shape
