"""Forward mode: the sweep that adds tangents to a built graph (dfc.jvp, forward.py).

After f's graph is built, tangent nodes are added next to the forward nodes, in forward order over
the same units the reverse sweep uses (gradients.py): an ordinary node, a whole cond or a whole while
loop of one context. Ordinary nodes use the JVP table (forward_rules.py). A cond gets its outputs'
tangents computed inside its own branches and merged by one more Merge of the cond. A while loop gets
one more loop variable per differentiable variable (its tangent), added to the loop already built, as
the reverse mode adds its iteration counter; a loop invariant's tangent is captured as an invariant.
"""
import heapq

from dfc.errors import DfcError
from dfc.ir import dtypes as dt
from dfc.ir.dtypes import TType
from dfc.ir.graph import parse_input
from dfc.compiler.tracing import Tensor, capture, convert, user_location
from dfc.compiler.control_flow import CondBranch, WhileContext, iterates, loop_builder
from dfc.compiler.autodiff import forward_rules as R
from dfc.compiler.autodiff.gradients import GradState, _source, norm_ref
from dfc.compiler.autodiff.stack_grad import StackLinks
from dfc.compiler.autodiff.op_grads import GRADS, NOT_DIFFERENTIABLE


class ForwardState(GradState):
    """One call of jvp(): the nodes between xs and ys, units per context, and the tangents built so far."""

    def __init__(self, b, c0):
        super().__init__(b, c0)
        self.tan = {}            # forward ref -> its tangent (None / absent: zero)
        self.tan_tas = {}        # TensorArray node -> (tangent handle, tangent flow)
        self.tan_stacks = {}     # StackV2 node -> tangent stack
        self.order = {name: k for k, name in enumerate(self.graph.nodes)}
        self.waiters = {}        # node -> the nodes that have it as a control input (before the sweep)
        for n in self.graph.nodes.values():
            for c in n.control_inputs:
                self.waiters.setdefault(c, []).append(n.name)
        # Merges of a value computed in a cond branch with a dummy from the other one, which the reverse mode
        # builds to save the value on a stack (GradState.lift): a unit of the cond's outer context
        loop_merges = {m.node for L in b.loops.values() for m in L.merges}
        self.lifts = {n.name for n in self.graph.nodes.values() if n.op == "Merge" and n.name not in b.conds and
                      n.name not in loop_merges and b.tensors.get(n.name) and
                      all(isinstance(self._ctx_of(r), CondBranch) for r in n.data_inputs)}

    def _ctx_of(self, ref):
        outs = self.b.tensors.get(parse_input(ref)[0])
        return outs[0].ctx if outs else None

    # ------------------------------------------------------------ which nodes need a tangent
    def unit_of(self, name):
        u = super().unit_of(name)
        op = self.graph.nodes[name].op
        if u is None and op == "Merge" and name in self.lifts:
            return self.b.tensors[name][0].ctx, name
        if u is None and op == "Exit":
            # An Exit the reverse mode added to a loop (its iteration counter) still belongs to that loop:
            # the gradient loop that reads it must come after the loop that pushes its stacks.
            outs = self.b.tensors.get(parse_input(self.graph.nodes[name].data_inputs[0])[0])
            L = outs[0].ctx if outs else None
            if isinstance(L, WhileContext):
                return L.outer, ("loop", L)
        return u

    def compute_units(self, x_refs, y_refs):
        graph, nodes = self.graph, self.graph.nodes
        cons, links = {}, StackLinks(graph)
        self.links = links
        for n in nodes.values():
            for ref in n.data_inputs:
                cons.setdefault(norm_ref(ref), []).append(n.name)
        fwd, seen, stack = set(), set(), list(x_refs)
        while stack:
            r = stack.pop()
            if r in seen or self.dtype_of(r) not in dt.FLOATS:
                continue
            seen.add(r)
            for c in cons.get(r, ()):
                op = nodes[c].op
                if c in fwd or (op in NOT_DIFFERENTIABLE and op != "StackPush"):
                    continue
                fwd.add(c)
                stack += [f"{c}:{p}" for p in range(len(self.b.tensors.get(c, ())))]
                if op in _TA_WRITES:
                    # the tangent array is written wherever its array is: every write on the flow chain (a
                    # write of a constant too, or reading its element would find nothing written)
                    src = _ta_source(graph, nodes[c].data_inputs[0])
                    if nodes[src].op in ("TensorArray", "TensorArrayGrad"):
                        stack.append(f"{src}:1")
                if op == "StackPush":     # what is pushed comes back at the pops of the same stack
                    for pop in links.pops_fed_by(c):
                        fwd.add(pop)
                        stack.append(f"{pop}:0")
        bwd, stack = set(), [parse_input(r)[0] for r in y_refs]
        while stack:
            name = stack.pop()
            if name in bwd:
                continue
            bwd.add(name)
            n = nodes[name]
            if n.op == "StackPop":
                stack += links.pushes_feeding(name)
                continue
            if n.op in NOT_DIFFERENTIABLE and n.op != "StackPush":
                continue
            stack += [parse_input(ref)[0] for ref in n.data_inputs if self.dtype_of(ref) in dt.FLOATS + (dt.HANDLE,)]
        self.between = fwd & bwd
        for name in nodes:
            if name not in self.between:
                continue
            u = self.unit_of(name)
            while u is not None:
                ctx, key = u
                units = self.units.setdefault(ctx, {})
                if key in units:
                    break
                units[key] = self._unit_io(key)
                # a loop or cond holding a node that needs a tangent is visited even when its outputs do not
                # (a forward loop whose only use is the stacks a gradient loop pops)
                u = None if ctx is self.c0 or ctx is None else (ctx.outer, ("loop", ctx)) \
                    if isinstance(ctx, WhileContext) else (ctx.state.outer, ("cond", ctx.state))

    def position(self, key):
        if isinstance(key, str):
            return self.order.get(key, len(self.order))
        kind, c = key
        first = [c.enters[0].node] if kind == "loop" and c.enters else \
            [B.pivot.node for B in c.branches.values()] if kind == "cond" else []
        return min([self.order.get(n, len(self.order)) for n in first] or [len(self.order)])

    # ------------------------------------------------------------ values and tangents
    def fwd(self, ref):
        """Forward tensor `ref` as usable in the current context (a gradient branch reads values of its forward
        branch directly: same frame, so they are relabelled, as GradState.fwd_value does)."""
        return self._here(self.tensor(ref))

    def _here(self, t):
        if t is None or self.on_chain(t.ctx, self.b.ctx):
            return t
        return Tensor(self.b, t.node, t.port, t.ttype, self.b.ctx)

    def tangent(self, ref):
        t = self.tan.get(ref)
        if t is None:
            name = parse_input(ref)[0]
            n = self.graph.nodes[name]
            if name in self.cond_of_switch or (n.op == "Enter" and n.attrs.get("is_constant")):
                t = self.tangent(norm_ref(n.data_inputs[0]))   # captured into a branch or a loop
        return self._here(t)

    def tangent_ta(self, handle_ref):
        """(tangent handle, its first flow) of the TensorArray behind a forward handle, created once beside it."""
        name = _ta_source(self.graph, handle_ref)
        node = self.graph.nodes[name]
        if node.op not in ("TensorArray", "TensorArrayGrad"):
            raise DfcError(f"forward mode (dfc.jvp) through a {node.op} handle is not supported", node=name,
                           loc=node.loc)
        hit = self.tan_tas.get(name)
        if hit is None:
            # a TensorArray's tangent is a fresh one of its size; a gradient TensorArray's (reverse mode inside f)
            # another gradient array of the same forward array: it accumulates and reads unwritten elements as
            # zeros, as the one it stands for
            b = self.b
            ins = [self.b.tensors[n][p] for n, p, _ in map(parse_input, node.data_inputs)]
            hit = self.tan_tas[name] = tuple(b.make(node.op, ins, dict(node.attrs), ctx=b.tensors[name][0].ctx,
                                                    raw=True, name=b.unique(f"{name}_tangent")))
        return self._here(hit[0]), self._here(hit[1])

    def tangent_stack(self, handle_ref, create):
        name = _source(self.graph, handle_ref)
        hit = self.tan_stacks.get(name)
        if hit is None and create:
            node, b = self.graph.nodes[name], self.b
            hit = self.tan_stacks[name] = b.make1("StackV2", (), dict(node.attrs), ctx=b.tensors[name][0].ctx,
                                                  name=b.unique(f"{name}_tangent"))
        return hit

    def pushed_between(self, handle_ref):
        """Whether a push on the stack behind handle_ref pushes a value with a tangent."""
        return any(p in self.between for p in self.links.pushes.get(_source(self.graph, handle_ref), ()))

    # ------------------------------------------------------------ the forward sweep
    def propagate(self, C):
        """Build the tangents of the units of forward context C (in C), in an order that respects their data."""
        units = self.units.get(C, {})
        pending, users = dict.fromkeys(units, 0), {u: [] for u in units}
        for u, (ins, _) in units.items():
            deps = {self.unit_in(parse_input(r)[0], C) for r in ins}
            for p in deps:
                if p is not None and p in units and p != u:
                    pending[u] += 1
                    users[p].append(u)
        ready = [(self.position(u), k, u) for k, u in enumerate(units) if pending[u] == 0]
        heapq.heapify(ready)
        index = {u: k for k, u in enumerate(units)}
        done = 0
        while ready:
            _, _, u = heapq.heappop(ready)
            self.b.ctx = C
            if isinstance(u, str):
                self.node_tangent(u)
            elif u[0] == "loop":
                self.loop_tangent(u[1])
            else:
                self.cond_tangent(u[1])
            done += 1
            for v in users[u]:
                pending[v] -= 1
                if pending[v] == 0:
                    heapq.heappush(ready, (self.position(v), index[v], v))
        if done != len(units):
            raise DfcError("internal: the units of a forward-mode sweep form a cycle", loc=user_location())
        self.b.ctx = C

    def node_tangent(self, name):
        node = self.graph.nodes[name]
        op = R.JvpView(self, node)
        ts = [self.tangent(r) for r in op.refs]
        if name in self.lifts:
            self.merge_tangent(name, self.b.ctx)
            return
        if node.op in R.STACK_OPS:
            rule = R.STACK_OPS[node.op]
        elif node.op in R.TA_OPS:       # a write without tangents still writes (zeros) to the tangent array
            rule = R.tensor_array
        elif all(t is None for t in ts) or node.op in NOT_DIFFERENTIABLE:
            return
        elif node.op in R.JVPS:
            rule = R.JVPS[node.op]
        elif node.op in GRADS:
            rule = R.transpose_vjp
        else:
            raise R.not_supported(op)
        try:
            outs = rule(op, *ts)
        except DfcError as e:
            if e.loc is None:       # a rule's own error: point at the user's line that built the op
                e.loc = node.loc or user_location()
                e.args = (e._format(),)
            raise
        for p, (t, y) in enumerate(zip(outs, self.b.tensors[name])):
            if t is not None and y.dtype in dt.FLOATS:
                self.tan[f"{name}:{p}"] = t

    def cond_tangent(self, S):
        b = self.b
        for br in (1, 0):
            self.propagate(S.branches[br])
        b.ctx = S.outer
        for m in list(S.merges):
            if m.node not in self.between or m.dtype not in dt.FLOATS:
                continue
            tm = self.merge_tangent(m.node, S.outer)
            if tm is not None:
                S.merges.append(tm)         # one more output of the cond (the reverse mode sees it as such)
                b.conds[tm.node] = S

    def merge_tangent(self, name, out_ctx):
        """The Merge of its inputs' tangents, each built in its input's branch (zeros where one has none)."""
        b = self.b
        ins = [self.tensor(norm_ref(r)) for r in self.graph.nodes[name].data_inputs]
        found = []
        for x in ins:
            b.ctx = x.ctx
            found.append(self.tangent(x.ref))
        if all(t is None for t in found):
            b.ctx = out_ctx
            return None
        parts = []
        for x, t in zip(ins, found):
            b.ctx = x.ctx
            parts.append(capture(t, x.ctx, b) if t is not None else R.zeros(x))
        b.ctx = out_ctx
        tm = b.make("Merge", parts, ctx=out_ctx, raw=True, name=b.unique(f"{name}_tangent"))[0]
        self.tan[f"{name}:0"] = tm
        return tm

    def loop_tangent(self, L):
        b, nodes, G = self.b, self.graph.nodes, L.outer
        var_ids = [k for k, m in enumerate(L.merges) if m.node in self.between and m.dtype in dt.FLOATS]
        if not var_ids:
            b.ctx = L
            self.propagate(L)
            return
        b.ctx = G
        inits = []
        for k in var_ids:
            ref = norm_ref(nodes[L.enters[k].node].data_inputs[0])
            t = self.tangent(ref)
            inits.append(t if t is not None else R.zeros(self.fwd(ref)))
        lb = loop_builder(b, L, lambda role: f"{L.frame_name}_tangent" + ("" if role == "body" else f"_{role}"))
        for k, t in zip(var_ids, inits):
            m = L.merges[k]
            tm = lb.enter(t if t.dtype == m.dtype else convert(t, m.dtype), TType(m.dtype, m.shape))
            self.tan[m.ref] = tm
        idents = lb.iterate(L.loop_cond)
        for k, t in zip(var_ids, idents):
            self.tan[L.identities[k].ref] = t
        b.ctx = L
        self.propagate(L)
        b.ctx = L
        nexts = []
        for k in var_ids:
            ref = norm_ref(nodes[L.next_iterations[k].node].data_inputs[0])
            t = self.tangent(ref)
            t = t if t is not None else R.zeros(self.fwd(ref))
            if not iterates(b, L.identities + idents, t.node):
                # a loop-invariant tangent passed to NextIteration as it is would also be live after the
                # last iteration: run it once per iteration, as the forward loop does its invariants
                t = b.make1("Identity", (t,), ctx=L, control=[L.pivot_name()],
                            name=b.unique(f"{L.frame_name}_tangent_inv"))
            nexts.append(t)
        lb.close(nexts)
        exits = lb.exit_all()
        for k, e in zip(var_ids, exits):
            self.tan[L.exits[k].ref] = e
        for field in ("enters", "merges", "switches", "identities", "next_iterations", "exits"):
            getattr(L.loop, field).extend(getattr(lb, field))   # the tangents are variables of the loop
        b.ctx = G


_TA_WRITES = ("TensorArrayWrite", "TensorArrayUnstack", "TensorArrayScatter")


def _ta_source(graph, handle_ref):
    """The node that made the TensorArray behind a handle (through captures and loop variables)."""
    name = parse_input(handle_ref)[0]
    while graph.nodes[name].op in ("Enter", "Switch", "Identity", "Merge"):
        name = parse_input(graph.nodes[name].data_inputs[0])[0]
    return name

