"""`with dfc.control_dependencies([...]):` — ops built inside wait for the listed nodes (as TensorFlow).

Equivalent semantics: every op built in the block (in traced or converted code, including the ops of a
cond branch or loop body built in it) gets a control input on each listed tensor's node, so it runs only
after that node ran, and fetching it runs that node too. Blocks nest (the lists add up);
`control_dependencies(None)` clears them inside. Outside a graph (eager code) ops run at once, in order,
and the block does nothing.

A control edge cannot enter a loop or a branch directly: a node inside one waits for a token made where
the dependency lives (a scalar Const with a control input on it), carried in like any captured value
(through the cond's Switch or the loop's constant Enter) to an Identity in the node's context — run once
per iteration in a loop. A control edge between devices or tasks is a Send/Recv of a token
(dfc/runtime/partition.py).

Where dfc differs: as in TensorFlow, only ops built in the block wait — a tensor made before it and
passed through (returned as it is from a branch, a loop variable of a loop that runs no iteration) does
not; wrap it in `dfc.identity` inside the block. Ops that dfc builds outside the block's context (a
Variable's handle, a loop's Enter nodes) and the Merge/Switch/Enter/Exit/NextIteration machinery of loops
do not wait either; a loop built in the block waits through its condition and body.
"""
import contextlib

import numpy as np

from dfc import nest
from dfc.errors import DfcTypeError
from dfc.compiler.tracing import Tensor, capture, current_builder, user_location


class _Scope:
    """One `with control_dependencies(...)` block: the context it was opened in and its nodes (None: a
    block that clears the ones around it)."""

    __slots__ = ("ctx", "deps")

    def __init__(self, ctx, deps):
        self.ctx, self.deps = ctx, deps


class control_dependencies:
    """Ops built inside the block run after the nodes of `control_inputs` (a list, possibly nested, of
    tensors, e.g. `v.assign_add(1)`); None clears the dependencies of enclosing blocks. See the module
    docstring for loops, branches and devices."""

    def __init__(self, control_inputs):
        self.builder = b = current_builder(required=False)
        if b is None:           # eager: ops already run in program order
            return
        loc = user_location()
        deps = None if control_inputs is None else [_node_of(b, t, loc) for t in nest.flatten(control_inputs)]
        self.scope = _Scope(b.ctx, deps)

    def __enter__(self):
        if self.builder is not None:
            _scopes(self.builder).append(self.scope)
        return self

    def __exit__(self, *exc):
        if self.builder is not None:
            _scopes(self.builder).remove(self.scope)


def _scopes(b):
    if not hasattr(b, "control_scopes"):
        b.control_scopes = []
        b.control_tokens = {}
    return b.control_scopes


def _node_of(b, t, loc):
    """(node name, context of its outputs) of a dependency, checked to be usable where the block opens."""
    if not isinstance(t, Tensor) and hasattr(t, "_dfc_tensor") and not hasattr(t, "read_value"):
        t = t._dfc_tensor()
    if not isinstance(t, Tensor):
        raise DfcTypeError(f"control_dependencies takes tensors (an op's result, e.g. v.assign_add(1)), not "
                           f"{type(t).__name__}", loc=loc)
    if t.builder is not b:
        raise DfcTypeError(f"control_dependencies: tensor {t.ref} belongs to another graph", loc=loc)
    c = b.ctx
    while c is not None and c is not t.ctx:
        c = c.outer
    if c is not t.ctx:
        raise DfcTypeError(f"control_dependencies: tensor {t.ref} was created inside {t.ctx.describe()} and "
                           f"cannot be waited for outside it", loc=loc)
    return t.node, t.ctx


def control_inputs_for(b, ctx):
    """The control inputs (node names) that a node built now in context `ctx` takes from the open blocks."""
    active = []
    for scope in reversed(b.control_scopes):
        if scope.deps is None:
            break
        if _within(ctx, scope.ctx):
            active = scope.deps + active
    if not active:
        return []
    scopes, b.control_scopes = b.control_scopes, []    # the tokens built below wait for nothing themselves
    try:
        return list(dict.fromkeys(_visible(b, node, dctx, ctx) for node, dctx in active))
    finally:
        b.control_scopes = scopes


@contextlib.contextmanager
def suspended(b):
    """No open block applies to the nodes built inside (a loop's Figure 4 machinery)."""
    scopes = getattr(b, "control_scopes", None)
    if not scopes:
        yield
        return
    b.control_scopes = []
    try:
        yield
    finally:
        b.control_scopes = scopes


def _within(ctx, outer):
    while ctx is not None and ctx is not outer:
        ctx = ctx.outer
    return ctx is outer


def _visible(b, node, dctx, ctx):
    """A node of context `ctx` that runs after `node` (of context `dctx`, which encloses ctx)."""
    if dctx is ctx:
        return node
    pivot = getattr(ctx.pivot, "node", None)
    key = (node, id(ctx), pivot)
    hit = b.control_tokens.get(key)
    if hit is not None and hit in b.graph.nodes:
        return hit
    token = b.make1("Const", (), {"value": np.array(0, np.int32)}, ctx=dctx, control=[node],
                    name=b.unique(f"{node}_done"))
    inside = capture(token, ctx, b)
    from dfc.compiler.control_flow import WhileContext      # (control_flow imports this module's users)
    per_iteration = [pivot] if isinstance(ctx, WhileContext) and pivot else []
    ident = b.make1("Identity", (inside,), ctx=ctx, control=per_iteration, name=b.unique(f"{node}_done_in"))
    b.control_tokens[key] = ident.node
    return ident.node
