"""dfc.custom_gradient: a function that brings its own gradient (as tf.custom_gradient).

The function's values leave it through one CustomGradient node whose inputs are the values and the
function's tensor arguments. The node forwards the values when the graph runs; for the reverse sweep it
is the unit whose rule (`backprop`, in the gradient table) calls the user's grad_fn with the upstream
gradients and gives the values' inputs no gradient, so the computation inside the function is never
differentiated.

grad_fn runs while the gradient graph is being built, in a gradient context (a gradient loop, a gradient
cond branch), and it closes over forward tensors: the arguments, the values, intermediates. While it runs,
the builder routes each forward tensor it reads through GradState.fwd_value: directly where the gradient
context can see it, else pushed on a stack in the forward loop and popped in the gradient loop, like
every value a built-in gradient rule reads. grad_fn exists only while the graph is traced; the saved graph
holds the gradient it built.
"""
import functools
import weakref

from dfc import nest
from dfc.errors import DfcError, DfcTypeError
from dfc.ir import dtypes as dt
from dfc.ir.graph import parse_input
from dfc.compiler import ops_api
from dfc.compiler.tracing import SOURCE_MAPS, Tensor, convert, current_builder, user_location
from dfc.traceback_filter import api_boundary

_PASS_THROUGH = ("Enter", "Switch", "Identity")
_ENTRIES = weakref.WeakKeyDictionary()      # Builder -> {CustomGradient node name: _Entry}


class _Entry:
    """What the gradient rule of one CustomGradient node needs, kept while its graph is traced."""

    def __init__(self, name, grad_fn, n_args, tensor_slots, outside):
        self.name, self.grad_fn = name, grad_fn
        self.n_args = n_args                # leaves of the flattened positional arguments
        self.tensor_slots = tensor_slots    # positions of the tensor arguments among them
        self.outside = outside              # (node made by the function, outside tensor that node reads)


def custom_gradient(f):
    """Decorate f(*args) -> (value, grad_fn) so that gradients through f use grad_fn.

    Equivalent math: value = f(*args)[0]; the gradient of a loss L through value with respect to the
    tensor arguments xs (the tensors among the flattened positional args) is
    grad_fn(*dL_dvalue) instead of what differentiating f's operations would give, where dL_dvalue
    holds one upstream gradient per tensor in value (flattened; zeros for one the loss does not use).
    grad_fn returns one gradient per tensor argument (a single tensor when there is one; a list or
    tuple, or a structure like args, otherwise; None for no gradient), each of its argument's shape.

        @dfc.custom_gradient
        def log1pexp(x):
            e = dfc.exp(x)
            def grad_fn(dy):
                return dy * (1 - 1 / (1 + e))      # finite where dy * e / (1 + e) is nan
            return dfc.log1p(e), grad_fn

    Works in traced code, in dfc.function (also inside tensor loops and conds: forward tensors that
    grad_fn reads are saved for the gradient loop automatically), dfc.gradients and dfc.value_and_grad;
    the graph with the gradient saves and loads like any other. grad_fn runs when the gradient is built
    (at trace time); a graph loaded from a file keeps the gradient it was saved with. Inside a tensor
    loop, grad_fn is called twice while the gradient loop is built (first to learn which forward tensors
    it reads), so it should not depend on Python side effects.
    Differs from TF: grad_fn takes no `variables` argument; f must take every tensor it reads whose
    gradient is needed (a dfc.Variable included: pass its value) as an argument, or the gradient is a
    DfcError (TF would silently give such a tensor no gradient through f).
    """
    name = getattr(f, "__name__", "custom_gradient")

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        b = current_builder()
        loc = user_location()
        if getattr(b, "eager", False):       # ops computed at once: only the value matters
            return _split(f(*args, **kwargs), name, loc)[0]
        return _build(b, f, name, loc, args, kwargs)

    return api_boundary(wrapped)


def _split(result, name, loc):
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and callable(result[1])):
        raise DfcTypeError(f"custom_gradient function {name} must return (value, grad_fn), got "
                           f"{type(result).__name__}", loc=loc)
    return result


def _build(b, f, name, loc, args, kwargs):
    from dfc.compiler.autograph.calls import converted_call
    leaves = nest.flatten(args)
    slots = [k for k, a in enumerate(leaves) if isinstance(a, Tensor)]
    xs = [leaves[k] for k in slots]
    for x in xs:
        if x.dtype == dt.HANDLE:
            raise DfcTypeError(f"custom_gradient function {name} takes resource handle {x.ref} as an "
                               f"argument: pass tensors", loc=loc)
    start = b.graph.num_nodes()
    value, grad_fn = _split(converted_call(f, args, kwargs), name, loc)
    flat = nest.flatten(value)
    if not flat:
        raise DfcTypeError(f"custom_gradient function {name} returned no value", loc=loc)
    outs = []
    for v in flat:
        if not isinstance(v, Tensor) and not isinstance(v, (int, float)) and not hasattr(v, "dtype"):
            raise DfcTypeError(f"custom_gradient function {name} returned a {type(v).__name__} in its value; "
                               f"the value must be tensors", loc=loc)
        outs.append(convert(v))
    for v in outs:
        if v.dtype == dt.HANDLE:
            raise DfcTypeError(f"custom_gradient function {name} returned resource handle {v.ref}: its value "
                               f"must be tensors", loc=loc)
    outside = _reads_from_outside(b, start, xs)
    marked = b.make("CustomGradient", outs + xs, {"num_values": len(outs)},
                    name=b.unique(f"{name}_custom_gradient"))
    for m, v in zip(marked, outs):
        m.weak = v.weak
    _ENTRIES.setdefault(b, {})[marked[0].node] = _Entry(name, grad_fn, len(leaves), slots, outside)
    return nest.pack_sequence_as(value, marked)


def _origin(graph, ref):
    """ref followed back through captures (Enter, Switch) and Identities: the tensor it forwards."""
    name, port, _ = parse_input(ref)
    while graph.nodes[name].op in _PASS_THROUGH:
        name, port, _ = parse_input(graph.nodes[name].data_inputs[0])
    return name, port


def _reads_from_outside(b, start, xs):
    """(node, source) for each node f made that reads a tensor made before f ran, other than its arguments
    (and (handle, itself) for a Variable's handle f made)."""
    graph = b.graph
    made = list(graph.nodes)[start:]
    new, args = set(made), {_origin(graph, x.ref) for x in xs}
    out = []
    for name in made:
        if graph.nodes[name].op == "VarHandle":        # a Variable first used in f: read as if from outside
            out.append((name, (name, 0)))
        for ref in graph.nodes[name].data_inputs:
            src = _origin(graph, ref)
            if parse_input(ref)[0] not in new and src not in args:
                out.append((name, src))
    return out


# ---------------------------------------------------------------- the gradient rule

def backprop(op, *out_grads):
    """The CustomGradient node's rule: no gradient for the values' inputs, grad_fn's for the arguments."""
    gs, node = op.gs, op.node
    e = _ENTRIES.get(gs.b, {}).get(node.name)
    if e is None:
        raise DfcError(f"the gradient function of {node.name} is not known here: a custom_gradient's grad_fn "
                       f"exists only while the graph that called it is being traced", node=node.name,
                       loc=node.loc)
    n = node.attrs["num_values"]
    differentiated = {_origin(gs.graph, r) for r in gs.x_refs}
    for inner, (src, port) in e.outside:
        needed = (src, port) in differentiated or src in gs.between
        if needed and (inner in gs.between or inner == src):
            what = f"dfc.Variable {src}" if gs.graph.nodes[src].op == "VarHandle" else \
                f"tensor {src}:{port}, made outside it,"
            raise DfcError(f"custom_gradient function {e.name} reads {what} "
                           f"and the gradient depends on it: take its value as an argument (and return its "
                           f"gradient from grad_fn), or the gradient through {e.name} would miss it",
                           loc=node.loc)
    upstream = [g if g is not None else gs.zeros_for(op.output(p)) for p, g in enumerate(out_grads)]
    xs = [op.input(k) for k in range(n, op.n_inputs)]
    got = _call_grad_fn(gs, e, op.output(0).ctx, upstream)
    grads = _one_per_argument(got, e, len(xs), node.loc)
    return [None] * n + [_checked(gs, e, k, x, g, node.loc) for k, (x, g) in enumerate(zip(xs, grads))]


def _call_grad_fn(gs, e, fwd_ctx, upstream):
    """grad_fn(*upstream), each forward tensor it reads routed into the gradient context.

    Inside a gradient loop, routing pushes the tensor on a stack (nodes in the forward loop, the pop in
    the gradient loop, state in GradState) and must not happen inside a loop or cond that grad_fn itself
    builds: such a construct may be traced again, dropping what was built in it. So there grad_fn is called
    twice: once with stand-ins, to learn which forward tensors it reads (then dropped), and once after
    routing each of those in the gradient context itself.
    """
    b, G = gs.b, gs.b.ctx

    def reachable(t):
        if not gs.on_chain(t.ctx, fwd_ctx):
            raise DfcError(f"the gradient function of custom_gradient {e.name} reads tensor {t.ref}, made inside "
                           f"{t.ctx.describe()}, which the call of {e.name} does not see: compute what grad_fn "
                           f"needs from the arguments or the value", loc=user_location())
        return t

    if gs.grad_loop_of(G) is None:      # no stacks: a forward tensor is used where it is (no nodes made)
        return _with_map(b, e, upstream, lambda t: gs.fwd_value(reachable(t)))
    read, stand_ins = {}, {}

    def stand_in(t):
        if t.ref not in read:
            read[t.ref] = reachable(t)
            stand_ins[t.ref] = b.make1("Placeholder", (), {
                "dtype": t.dtype, "shape": None if t.shape is None else list(t.shape)}, ctx=G)
        return stand_ins[t.ref]

    mark = b.mark()
    try:
        _with_map(b, e, upstream, stand_in)
    finally:
        b.rollback(mark)
    routed = {ref: gs.fwd_value(t) for ref, t in read.items()}

    def premapped(t):
        hit = routed.get(t.ref)
        if hit is None:
            raise DfcError(f"the gradient function of custom_gradient {e.name} read tensor {t.ref} when it was "
                           f"called again but not the first time (it is called twice while a gradient loop is "
                           f"built): make what it reads independent of Python state", loc=user_location())
        return hit

    return _with_map(b, e, upstream, premapped)


def _with_map(b, e, upstream, map_foreign):
    from dfc.compiler.autograph.calls import converted_call
    old, b.map_foreign = b.map_foreign, map_foreign
    try:
        return converted_call(e.grad_fn, tuple(upstream))
    finally:
        b.map_foreign = old


def _one_per_argument(got, e, n, call_loc):
    """grad_fn's result as one gradient (or None) per tensor argument."""
    flat = [got] if isinstance(got, Tensor) or not nest.is_nested(got) else nest.flatten(got)
    if len(flat) == n:
        return flat
    if len(flat) == e.n_args:           # one per argument leaf (TF's structure), static ones included
        return [flat[k] for k in e.tensor_slots]
    also = f" or {e.n_args} (one per argument)" if e.n_args != n else ""
    raise DfcError(f"the gradient function of custom_gradient {e.name} returned {len(flat)} gradients; it "
                   f"must return {n} (one per tensor argument){also}", loc=_defined_at(e.grad_fn, call_loc))


def _checked(gs, e, k, x, g, call_loc):
    """Gradient g of tensor argument x: its dtype, and its shape checked (statically, else when it runs)."""
    if g is None or x.dtype not in dt.FLOATS:
        return None
    where = _defined_at(e.grad_fn, call_loc)
    if not isinstance(g, Tensor):
        g = convert(g, x.dtype)
    elif g.dtype != x.dtype:
        g = ops_api.cast(g, x.dtype)
    sx, sg = x.shape, g.shape
    what = f"the gradient function of custom_gradient {e.name} returned a gradient of shape"
    if sx is None or sg is None:
        return g
    if len(sx) != len(sg) or any(a is not None and c is not None and a != c for a, c in zip(sx, sg)):
        raise DfcError(f"{what} {dt.format_shape(sg)} for argument {k} of shape {dt.format_shape(sx)}", loc=where)
    if None in sx or None in sg:        # known when it runs: checked then, before the gradient is used
        ok = ops_api.reduce_all(ops_api.equal(ops_api.shape(g), gs.shape_of(x)))
        g = ops_api.checked_when_used(g, ok, f"{where}: {what} other than its argument {k}'s")
    return g


def _defined_at(fn, fallback):
    """'file.py:12' of the user's def of fn (generated code mapped back), else fallback."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return fallback
    smap = SOURCE_MAPS.get(code.co_filename)
    if smap is not None:
        orig = smap.get(code.co_firstlineno)
        return f"{orig[0]}:{orig[1]}" if orig is not None else fallback
    return fallback if code.co_filename.startswith("<") else f"{code.co_filename}:{code.co_firstlineno}"


__all__ = ["custom_gradient", "backprop"]
