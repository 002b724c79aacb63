"""Gradients of cond and while_loop (§5.1).

cond: the gradient is a cond on the same predicate; each branch backpropagates
through its forward branch (Merge <-> Switch duals). A branch whose forward
branch does not touch an input gives zeros for it.

while_loop: the forward loop gets a counter (nodes added to its frame) and, for
each forward value the gradient needs, a StackPush; the gradient loop runs the
counter down to zero, pops the values in reverse, carries one gradient per
differentiable loop variable and sums the gradients of loop invariants in
accumulator loop variables. Pushes are ordered by control edges on the
forward counter (Identity -> push -> increment) and pops on the gradient
counter, so parallel iterations cannot reorder them. A nested loop's trip
count is itself a saved value of the outer loop, and an inner loop's pushes
(pops) of one outer iteration finish before those of the next start.
"""
import numpy as np

from dfc.ir.dtypes import TType
from dfc.ir.graph import parse_input
from dfc.compiler.control_flow import WhileContext, cond, loop_builder
from dfc.compiler import ops_api
from dfc.compiler.tracing import convert
from dfc.compiler.autodiff import loop_matmul


def _ref(t):
    return f"{t.node}:{t.port}"


class LoopGradState:
    """Per forward loop L in one gradients() call: its counter, stacks and gradient loop."""

    def __init__(self, gs, L):
        self.gs, self.L = gs, L
        self.saved = {}          # forward ref -> popped tensor (in the gradient loop)
        self.grad_loop = None
        self.sync = []           # nodes the gradient counter's decrement waits for (pops, inner loops)
        self.deferred_sync = []  # tensors inside gradient cond branches, lifted when the loop is closed
        gs.loops[L.frame_name] = self
        self._add_forward_counter()

    def _add_forward_counter(self):
        gs, L = self.gs, self.L
        b, outer, name = gs.b, L.outer, L.frame_name
        ctrl = [outer.pivot_name()] if outer is not None else []
        outer_loop = gs.diff_frame(outer)
        if outer_loop is not None:
            # This loop's pushes of outer iteration i come after outer iteration i starts ...
            ctrl.append(gs.loops[outer_loop.frame_name].count_ident.node)
        zero = b.make1("Const", (), {"value": np.zeros((), np.int64)}, ctx=outer, control=ctrl,
                       name=b.unique(f"{name}_count_init"))
        counter = loop_builder(b, L, lambda role: f"{name}_count" + ("" if role == "body" else f"_{role}"))
        counter.enter(zero)
        self.count_ident, = counter.iterate(L.loop_cond)
        one = b.make1("Const", (), {"value": np.ones((), np.int64)}, ctx=L, control=[self.count_ident.node],
                      name=b.unique(f"{name}_count_one"))
        self.count_add = b.make1("Add", (self.count_ident, one), ctx=L, name=b.unique(f"{name}_count_add"))
        counter.close([self.count_add])
        # ... and the trip count (an Exit) is pushed by the outer loop, which waits for it.
        self.count_exit, = counter.exit_all()

    def save(self, t, swap=False):
        """Push forward value t (in this loop) every iteration; return its pop in the gradient loop.
        swap: the stack may go to host even if the loop does not swap (recompute.py's choice)."""
        gs, L, b = self.gs, self.L, self.gs.b
        if t.ctx is L and t.node in {m.node for m in L.merges}:
            t = L.identities[[m.node for m in L.merges].index(t.node)]
        hit = self.saved.get(t.ref)
        if hit is not None:
            return hit
        v = gs.lift(t, L)
        stack = b.make1("StackV2", (), {"elem_dtype": t.dtype, "swap_memory": L.swap_memory or swap},
                        ctx=gs.c0, name=b.unique(f"{L.frame_name}_stack"))
        push = b.make1("StackPush", (stack, v), ctx=L, control=[self.count_ident.node],
                       name=b.unique(f"{L.frame_name}_push"))
        b.graph.add_control_input(self.count_add.node, push.node)
        GL = self.grad_loop
        pop = b.make1("StackPop", (stack,), {"elem_dtype": t.dtype,
                                             "shape": None if t.shape is None else list(t.shape)},
                      ctx=GL, control=[GL.identities[0].node], name=b.unique(f"{GL.frame_name}_pop"))
        self.sync.append(pop.node)
        self.saved[t.ref] = pop
        return pop

    def add_sync(self, t):
        """Make the gradient counter's decrement wait for t (built somewhere inside the gradient loop)."""
        if t.ctx is self.grad_loop:
            self.sync.append(t.node)
        else:
            self.deferred_sync.append(t)

    def close_sync(self):
        for t in self.deferred_sync:
            self.sync.append(self.gs.lift(t, self.grad_loop).node)
        self.deferred_sync = []


def loop_grad(gs, L, grads):
    """Backpropagate through while loop L (a unit of the current forward context)."""
    b, nodes = gs.b, gs.graph.nodes
    G = b.ctx
    var_ids = [k for k, m in enumerate(L.merges) if m.node in gs.between]
    caps = [e for e in L.constant_enters if e.node in gs.between]
    exit_grads = [gs.sum(grads, _ref(L.exits[k])) for k in var_ids]
    if all(g is None for g in exit_grads) and not gs.pushes_in(L):
        return
    state = LoopGradState(gs, L)
    cap_srcs = [gs.tensor(nodes[e.node].data_inputs[0]) for e in caps]
    inits = [gs.fwd_value(state.count_exit)]
    inits += [g if g is not None else gs.zeros_for(L.exits[k]) for g, k in zip(exit_grads, var_ids)]
    inits += [gs.zeros_for(t) for t in cap_srcs]
    types = [TType("int64", ())] + [TType(L.merges[k].dtype, L.merges[k].shape) for k in var_ids]
    types += [TType(*gs.grad_dtype(t)) for t in cap_srcs]
    deferred = loop_matmul.find(gs, L, caps)
    for d in deferred.values():
        inits += d.init(types[1 + len(var_ids) + d.cap_index].dtype, inits[0])
        types += d.flow_types()

    GL = WhileContext(b, G, b.unique(f"{L.frame_name}_grad"), L.parallel_iterations, L.swap_memory)
    GL.fwd_loop = L
    state.grad_loop = GL
    for init, tt in zip(inits, types):
        GL.loop.enter(convert(init, tt.dtype), tt)
    for done in gs.stacks.waits(G):      # pops of gradient stacks wait until they are all pushed
        gs.graph.add_control_input(GL.enters[0].node, done)
    pushed_before = gs.stacks.pushed
    GL.pivot = GL.merges[0]
    b.ctx = GL
    try:
        GL.loop_cond = GL.loop.loop_cond(ops_api.greater(GL.merges[0], 0))
        GL.loop.iterate(GL.loop_cond)
        GL.pivot = GL.identities[0]
        gs.deferred.update(deferred)
        GL.loop.close(_grad_body(gs, state, var_ids, caps, list(deferred.values())))
    finally:
        b.ctx = G
        for name in deferred:
            gs.deferred.pop(name, None)
    GL.loop.exit_all()
    gs.stacks.finished(G, pushed_before, GL.exits[0].node)
    b.loops[GL.frame_name] = GL
    for j, k in enumerate(var_ids):
        ref = parse_input(nodes[L.enters[k].node].data_inputs[0])
        grads.setdefault(f"{ref[0]}:{ref[1]}", []).append(GL.exits[1 + j])
    for c, e in enumerate(caps):
        ref = parse_input(nodes[e.node].data_inputs[0])
        grads.setdefault(f"{ref[0]}:{ref[1]}", []).append(GL.exits[1 + len(var_ids) + c])
    first = 1 + len(var_ids) + len(caps)
    for j, d in enumerate(deferred.values()):
        if d.flows is not None:
            ref = parse_input(nodes[caps[d.cap_index].node].data_inputs[0])
            total = d.total(GL.exits[first + 2 * j:first + 2 * j + 2])
            grads.setdefault(f"{ref[0]}:{ref[1]}", []).append(total)
    outer = gs.grad_loop_of(G)
    if outer is not None:
        # The next outer gradient iteration pops this loop's stacks only after this run of it is done.
        gs.loops[outer.fwd_loop.frame_name].add_sync(GL.exits[0])


def _grad_body(gs, state, var_ids, caps, deferred):
    """One iteration of the gradient loop: backpropagate through the forward loop's body; the next
    values of the counter, of the variables' gradients, of the invariants' accumulators and of the
    deferred matmuls' TensorArray flows (loop_matmul.py)."""
    b, nodes, L, GL = gs.b, gs.graph.nodes, state.L, state.grad_loop
    nv, nc = len(var_ids), len(caps)
    g_vars, accs = GL.identities[1:1 + nv], GL.identities[1 + nv:1 + nv + nc]
    if deferred:
        index = loop_matmul.index_of(GL.identities[0])
        for j, d in enumerate(deferred):
            d.loop_flows, d.index = GL.identities[1 + nv + nc + 2 * j:1 + nv + nc + 2 * j + 2], index
    seeds = {}
    for g, k in zip(g_vars, var_ids):
        ref = parse_input(nodes[L.next_iterations[k].node].inputs[0])
        seeds.setdefault(f"{ref[0]}:{ref[1]}", []).append(g)
    body = gs.sweep(L, seeds)
    outs = []
    for g, k in zip(g_vars, var_ids):
        new = gs.sum_refs(body, [_ref(L.switches[k][1]), _ref(L.merges[k])])
        outs.append(new if new is not None else ops_api.zeros_like(g))
    for acc, e in zip(accs, caps):
        new = gs.sum(body, _ref(e))
        outs.append(acc if new is None else ops_api.add(acc, new))
    for d in deferred:
        outs += d.flows if d.flows is not None else list(d.loop_flows)
    state.close_sync()
    one = convert(np.ones((), np.int64))
    outs.insert(0, b.make1("Sub", (GL.identities[0], one), control=state.sync,
                           name=b.unique(f"{GL.frame_name}_count")))
    return outs


def cond_grad(gs, S, grads, input_refs):
    """Backpropagate through cond S: a cond on the same predicate, one branch per forward branch."""
    b, nodes = gs.b, gs.graph.nodes
    merge_grads = [(m, gs.sum(grads, _ref(m))) for m in S.merges]
    inner = [r for r in list(grads) if grads[r] and any(gs.inside(parse_input(r)[0], B)
                                                         for B in S.branches.values())]
    if all(g is None for _, g in merge_grads) and not inner:
        return
    inputs = []
    for r in input_refs:
        sw = S.switches.get(r)
        if sw is not None and sw.node in nodes:
            if sw.node in gs.between and gs.tensor(r).dtype != "bool":
                inputs.append((r, f"{sw.node}:"))
        elif parse_input(r)[0] in gs.between:
            inputs.append((r, None))
    if not inputs:
        return

    def branch(br):
        B = S.branches[br]
        b.ctx.fwd_branch = B
        seeds = {}
        for m, g in merge_grads:
            if g is not None:
                ref = parse_input(nodes[m.node].inputs[br])
                seeds.setdefault(f"{ref[0]}:{ref[1]}", []).append(g)
        for r in inner:
            if gs.inside(parse_input(r)[0], B):
                seeds.setdefault(r, []).extend(grads[r])
        got = gs.sweep(B, seeds)
        out = []
        for r, sw in inputs:
            g = gs.sum(got, sw + str(br) if sw else r)
            out.append(g if g is not None else gs.zeros_for(gs.tensor(r)))
        return out

    pred = gs.fwd_value(S.pred)
    res = cond(pred, lambda: branch(1), lambda: branch(0), name=f"{S.name}_grad")
    for (r, _), g in zip(inputs, res):
        grads.setdefault(r, []).append(g)


__all__ = ["loop_grad", "cond_grad", "LoopGradState"]
