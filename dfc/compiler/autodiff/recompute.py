"""What the gradient of a while loop keeps of each forward value it needs: stack, swap or recompute.

By default every forward value a gradient rule asks for inside a loop is pushed on a stack in the
forward loop and popped in the gradient loop (control_flow_grad.LoopGradState.save). Two things change
that, both decided while the gradient is built:

- `recompute_grad(f)`: the values f computes are not saved; the gradient loop re-emits f's computation
  from f's inputs (which are saved as usual), as tf.recompute_grad / jax.checkpoint.
- `gradient_memory(policy, ...)`: a scope around dfc.gradients (or value_and_grad, or an optimizer's
  minimize) that picks, per saved value, one of

      "stack"      push on a stack (the default);
      "swap"       push on a stack that may be swapped to host (dfc/runtime/memory.py);
      "recompute"  re-emit the value in the gradient loop from the loop's state and invariants, unless
                   what its recomputation must save (a random draw, a value inside a cond) takes more
                   bytes than the value (the sum of a draw is saved, not the draw);
      "budget"     stack while the values pushed per iteration fit `budget / iterations` bytes; past that,
                   recompute a value of a cheap producer (work in proportion to its size: elementwise,
                   slicing, concat) when what its recomputation must save takes no more bytes than it does,
                   and swap the others (the output of an expensive op: a matmul, an einsum). A cheap value
                   computed from saved values only (or from the loop's variables) is always recomputed: it
                   costs no memory. When every value the gradient could ask for fits, all are stacked.

Only pure nodes are re-emitted: ordinary ops that are not stateful, built directly in the forward loop's
body. Everything else a recomputation reaches is saved instead: the loop's variables, values inside a
cond or a nested loop of the body, and the outputs of stateful ops. So a random draw inside f is saved,
never drawn again: the gradient sees the very values the forward pass used (a draw is keyed by its
node and iteration, dfc/runtime/kernels/philox.py, so a re-emitted node would draw other numbers).

Outside loops nothing is stacked (the executor frees a value after its last use), so there both
options change nothing.
"""
import contextlib
import math
import threading
import weakref

import numpy as np

from dfc.errors import DfcError
from dfc.ir import dtypes as dt
from dfc.ir import ops as opreg
from dfc.ir.dtypes import FLOATS
from dfc.runtime.limits import parse_bytes
from dfc.traceback_filter import api_boundary

POLICIES = ("stack", "swap", "recompute", "budget")
# A producer is cheap to recompute when its work is at most this many operations per output element
# (the registry's cost model; ops without one do work in proportion to their outputs).
CHEAP_WORK_PER_ELEMENT = 4
# A re-emitted Const is a copy of its value in the graph: bigger ones are saved instead.
MAX_CONST_ELEMENTS = 1024
# Saved rather than recomputed: a few integers, and recomputing one would need the (big) tensor it describes
# (the gradient saves Shape(t) instead of t where it needs only t's shape).
_METADATA = frozenset(("Shape", "Size", "Rank"))

_regions = weakref.WeakKeyDictionary()   # Builder -> names of nodes built inside recompute_grad blocks
_local = threading.local()


class MemoryPolicy:
    """The scope's choice; `per_iteration`: the bytes the budget lets each iteration push."""

    def __init__(self, policy, budget=None, iterations=None):
        if policy not in POLICIES:
            raise DfcError(f"gradient_memory policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        self.policy, self.per_iteration = policy, None
        if policy == "budget":
            if budget is None or iterations is None:
                raise DfcError("gradient_memory('budget') needs budget= (bytes, or a size such as '64MB') and "
                               "iterations= (the trip count to plan for: the loop's stacks may hold budget / "
                               "iterations bytes per iteration)")
            if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
                raise DfcError(f"gradient_memory iterations must be a positive int, not {iterations!r}")
            self.per_iteration = parse_bytes(budget) / iterations
        elif budget is not None or iterations is not None:
            raise DfcError(f"gradient_memory({policy!r}) takes no budget or iterations (only 'budget' does)")


@api_boundary
def gradient_memory(policy="budget", budget=None, iterations=None):
    """A scope: the gradients built inside it keep the forward values of while loops as `policy` says.

        with dfc.gradient_memory("budget", budget="64MB", iterations=1000):
            grads = dfc.gradients(loss, params)

    policy: "stack" (the default outside any scope), "swap", "recompute" or "budget" (see
    dfc/compiler/autodiff/recompute.py). The choice is made when the gradient graph is built, so it is
    part of the graph (saved with it); a dfc.function traced inside the scope keeps it for later calls. A
    Session's memory_limit or memory_caps is what the run is then checked against. Swapping happens on
    devices with a capacity (accel, gpu; values of at least the Session's swap_min_bytes): on cpu a
    swappable stack is an ordinary stack, so there "recompute" and a budget are what save memory.
    Values of dfc.recompute_grad blocks are recomputed under every policy.
    """
    return _scope(MemoryPolicy(policy, budget, iterations))


@contextlib.contextmanager
def _scope(p):
    stack = _local.__dict__.setdefault("stack", [])
    stack.append(p)
    try:
        yield p
    finally:
        stack.pop()


def current_policy():
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def recompute_grad(f):
    """f, whose intermediate values the gradient recomputes instead of saving (tf.recompute_grad,
    jax.checkpoint).

    Equivalent math: recompute_grad(f)(*args) == f(*args), and its gradient is the same. Inside a while
    loop the gradient saves only what f reads from outside it (its inputs and captured values, stacked
    once per iteration) and re-emits f's nodes in the gradient loop from them. f's Python control flow is
    converted as in dfc.function. Differs from JAX: values inside a cond or a nested loop of f, and the
    outputs of stateful ops (random draws), are saved rather than recomputed, so a draw is never redrawn.
    """
    def wrapped(*args, **kwargs):
        from dfc.compiler.tracing import current_builder
        from dfc.compiler.autograph.calls import converted_call
        b = current_builder(required=False)
        if b is None or getattr(b, "eager", False):
            return converted_call(f, args, kwargs)      # values, not a graph: nothing is saved
        start = b.graph.num_nodes()
        out = converted_call(f, args, kwargs)
        _regions.setdefault(b, set()).update(list(b.graph.nodes)[start:])
        return out

    wrapped.__name__ = f"recompute_grad_{getattr(f, '__name__', 'fn')}"
    wrapped.__wrapped__ = f
    return wrapped


# ---------------------------------------------------------------------- the choice, per saved value

class _Choices:
    """One gradients() call's recomputed values and the bytes each loop pushes per iteration."""

    def __init__(self, gs):
        self.policy = current_policy()
        self.region = _regions.get(gs.b, ())
        self.recomputed = {}     # (gradient loop frame, forward ref) -> tensor in the gradient loop
        self.pushed = {}         # forward loop frame -> bytes its stacks take per iteration
        self.decided = {}        # (forward loop frame, forward ref) -> whether it is recomputed
        self.all_fit = {}        # forward loop frame -> whether all its candidate values fit the budget


def _choices(gs):
    c = getattr(gs, "memory_choices", None)
    if c is None:
        c = gs.memory_choices = _Choices(gs)
    return c


def saved_value(gs, state, t):
    """Forward value t of the loop `state` differentiates, as a tensor of its gradient loop: popped from a
    stack (swapped or not) or recomputed there."""
    c = _choices(gs)
    hit = c.recomputed.get((state.grad_loop.frame_name, t.ref))
    if hit is not None:
        return hit
    if _recomputes(gs, c, state, t):
        return _recompute(gs, c, state, t)
    return _save(gs, c, state, t)


def _recomputes(gs, c, state, t):
    """Whether forward value t (source_value'd) is recomputed rather than saved; decided once per value."""
    key = (state.L.frame_name, t.ref)
    hit = c.decided.get(key)
    if hit is None:
        hit = c.decided[key] = _decide(gs, c, state, t)
    return hit


def _decide(gs, c, state, t):
    if t.ref in state.saved or not _pure(gs, state.L, t):
        return False
    policy = c.policy.policy if c.policy is not None else "stack"
    if t.node in c.region:
        return True
    if policy == "recompute":
        return _new_bytes(gs, c, state, t, _pure) <= _nbytes(t)
    if policy == "budget" and _cheap(gs, t) and not _all_fit(gs, c, state):
        return _free(gs, c, state, t) or (
            not _fits(c, state, t) and _new_bytes(gs, c, state, t, _pure_and_cheap) <= _nbytes(t))
    return False


def _save(gs, c, state, t):
    if t.ref in state.saved:
        return state.saved[t.ref]
    policy = c.policy.policy if c.policy is not None else "stack"
    swap = policy == "swap" or (policy == "budget" and not _fits(c, state, t))
    if not swap:
        frame = state.L.frame_name
        c.pushed[frame] = c.pushed.get(frame, 0) + _nbytes(t)
    return state.save(t, swap=swap)


def _recompute(gs, c, state, t):
    """Re-emit t's node in the gradient loop, its inputs taken as the gradient takes any forward value.

    Inputs that are recomputed too are re-emitted first, deepest first, with an explicit stack: a long
    chain of recomputed ops does not recurse."""
    b, GL = gs.b, state.grad_loop
    todo = [t]
    while todo:
        v = todo[-1]
        if (GL.frame_name, v.ref) in c.recomputed:
            todo.pop()
            continue
        node = gs.graph.nodes[v.node]
        srcs = [gs.source_value(gs.tensor(r)) for r in node.data_inputs]
        first = [u for u in srcs if (GL.frame_name, u.ref) not in c.recomputed and u.ctx is state.L and
                 _recomputes(gs, c, state, u)]
        if first:
            todo.extend(first)
            continue
        todo.pop()
        ins = [gs.fwd_value(gs.tensor(r), GL) for r in node.data_inputs]
        outs = b.make(node.op, ins, dict(node.attrs), ctx=GL, name=b.unique(f"{v.node}_recompute"))
        b.graph.nodes[outs[0].node].device = node.device
        for p, o in enumerate(outs):
            c.recomputed[(GL.frame_name, f"{v.node}:{p}")] = o
    return c.recomputed[(GL.frame_name, t.ref)]


def _pure(gs, L, t):
    """Whether t's node may be re-emitted in L's gradient loop: an ordinary, stateless op built directly
    in L's body (not a loop variable's Identity, not inside a cond or a nested loop)."""
    if t.ctx is not L or t.node in gs.cond_of_switch:
        return False
    if t.node in {i.node for i in L.identities}:
        return False
    node = gs.graph.nodes[t.node]
    if node.op in _METADATA or (node.op == "Const" and np.size(node.attrs.get("value")) > MAX_CONST_ELEMENTS):
        return False
    op = opreg.get(node.op)
    return op.kind == "normal" and not op.stateful and not op.in_executor


def _cheap(gs, t):
    """Whether t's node does little work per element of its outputs (so recomputing it costs ~ reading it)."""
    node = gs.graph.nodes[t.node]
    op = opreg.get(node.op)
    if op.cost is None:
        return True
    outs = gs.b.tensors[t.node]
    ins = [gs.tensor(r).ttype for r in node.data_inputs]
    work = op.cost(node.attrs, ins, [o.ttype for o in outs])
    elems = sum(max(1, _elements(o)) for o in outs)
    return work <= CHEAP_WORK_PER_ELEMENT * elems


def _available(gs, c, state, t):
    """Whether the gradient loop has t (source_value'd) at no new cost: already saved or recomputed, a loop
    variable (the gradients of the ops that read it save it), a loop invariant or a value from outside."""
    if gs.on_chain(t.ctx, state.grad_loop):
        return True
    L = state.L
    if t.ctx is L and t.node in {m.node for m in L.merges} | {i.node for i in L.identities}:
        return True
    return t.ref in state.saved or (state.grad_loop.frame_name, t.ref) in c.recomputed


def _all_fit(gs, c, state):
    """Whether every value of the loop's body that the gradient could ask for fits the budget (then plain
    stacks, the fastest, hold them all)."""
    L = state.L
    hit = c.all_fit.get(L.frame_name)
    if hit is None:
        idents = {i.node for i in L.identities}
        total = sum(_nbytes(o) for name in gs.between for o in gs.b.tensors.get(name, ())
                    if o.ctx is L and o.dtype in FLOATS and name not in idents and
                    opreg.get(gs.graph.nodes[name].op).kind == "normal")
        total += sum(_nbytes(i) for i in L.identities)
        hit = c.all_fit[L.frame_name] = total <= c.policy.per_iteration
    return hit


def _free(gs, c, state, t):
    """Whether the gradient loop can have t without pushing anything a gradient would not push anyway: t is
    available (_available) or a cheap pure value of such values. (An explicit stack, not recursion: a
    loop body may chain many ops.)"""
    t = gs.source_value(t)
    memo, todo = {}, [t]
    while todo:
        u = todo[-1]
        if u.ref in memo:
            todo.pop()
        elif _available(gs, c, state, u):
            memo[u.ref] = True
        elif not (_pure(gs, state.L, u) and _cheap(gs, u)):
            memo[u.ref] = False
        else:
            ins = [gs.source_value(gs.tensor(r)) for r in gs.graph.nodes[u.node].data_inputs]
            rest = [w for w in ins if w.ref not in memo]
            if rest:
                todo.extend(rest)
            else:
                memo[u.ref] = all(memo[w.ref] for w in ins)
    return memo[t.ref]


def _new_bytes(gs, c, state, t, through):
    """The bytes a step would push to recompute t, recomputing the values `through` accepts on the way: the
    values its recomputation reaches that are neither available (_available) nor recomputed."""
    total, seen = 0, set()
    todo = [gs.source_value(gs.tensor(r)) for r in gs.graph.nodes[t.node].data_inputs]
    while todo:
        u = todo.pop()
        if u.ref in seen or _available(gs, c, state, u):
            continue
        seen.add(u.ref)
        if through(gs, state.L, u):
            todo += [gs.source_value(gs.tensor(r)) for r in gs.graph.nodes[u.node].data_inputs]
        else:
            total += _nbytes(u)
    return total


def _pure_and_cheap(gs, L, t):
    return _pure(gs, L, t) and _cheap(gs, t)


def _fits(c, state, t):
    return c.pushed.get(state.L.frame_name, 0) + _nbytes(t) <= c.policy.per_iteration


def _elements(t):
    if t.shape is None or None in t.shape:
        return -1
    return math.prod(t.shape)


def _nbytes(t):
    """Bytes of one value of t; unknown shapes count as unbounded (they never fit a budget)."""
    n = _elements(t)
    if n < 0 or t.dtype not in dt.ALL:
        return math.inf
    return n * np.dtype(t.dtype).itemsize
