"""The reverse sweep: dfc.gradients and dfc.value_and_grad.

`gradients(ys, xs)` adds the gradient subgraph to the graph being built, in
the control-flow context it is called from (c0). The sweep runs over the
*units* of one forward context at a time: a unit is an ordinary node, a whole
cond or a whole while loop whose outer context is that context. Ordinary nodes
use the per-op table (op_grads.GRADS); conds and loops build their duals
(control_flow_grad): a cond on the same predicate, and a loop that runs the
forward trip count backwards, popping the forward values it needs from stacks.

Forward values used by gradient code go through `fwd_value`, which decides
how the gradient context can see them: directly (same frame), through the
usual Switch/Enter capture, or pushed on a stack in the forward loop and
popped in the gradient loop. Only values a gradient rule actually asks for
are saved.
"""
import numpy as np

from dfc import nest
from dfc.errors import DfcError, DfcTypeError
from dfc.ir import dtypes as dt
from dfc.ir import ops as opreg
from dfc.ir.graph import parse_input
from dfc.compiler.tracing import Tensor, convert, current_builder, user_location
from dfc.compiler.control_flow import CondBranch, WhileContext
from dfc.compiler import ops_api
from dfc.compiler.autodiff.op_grads import GRADS, NOT_DIFFERENTIABLE
from dfc.compiler.autodiff import stack_grad
from dfc.compiler.autodiff.stack_grad import StackLinks
from dfc.compiler.autodiff import recompute
from dfc.traceback_filter import api_boundary

_PASS_THROUGH = ("Enter", "Switch", "Identity")


def norm_ref(ref):
    name, port, _ = parse_input(ref)
    return f"{name}:{port}"


def differentiable_dtype(d):
    return d in dt.FLOATS or d == dt.HANDLE


class OpView:
    """What a gradient rule sees of the forward node: inputs, outputs, attrs, shapes.

    `x(k)` / `y(p)` return forward values usable in the gradient context (saved
    on a stack when needed), so a rule only saves what it asks for.
    """

    def __init__(self, gs, node):
        self.gs, self.node, self.attrs, self.type = gs, node, node.attrs, node.op
        self.refs = [norm_ref(r) for r in node.data_inputs]

    @property
    def n_inputs(self):
        return len(self.refs)

    def input(self, k):
        """The forward tensor of input k (not converted to the gradient context)."""
        return self.gs.tensor(self.refs[k])

    def output(self, p=0):
        return self.gs.b.tensors[self.node.name][p]

    def x(self, k):
        return self.gs.fwd_value(self.input(k))

    def y(self, p=0):
        return self.gs.fwd_value(self.output(p))

    def shape_in(self, k):
        return self.gs.shape_of(self.input(k))

    def shape_out(self, p=0):
        return self.gs.shape_of(self.output(p))


class GradState:
    """One call of gradients(): the between set, units per context, loops being differentiated."""

    def __init__(self, b, c0):
        self.b, self.c0, self.graph = b, c0, b.graph
        nodes = self.graph.nodes
        self.loop_of_exit = {}
        for L in b.loops.values():
            if all(e.node in nodes for e in L.exits):
                for e in L.exits:
                    self.loop_of_exit[e.node] = L
        # Exits added to a loop after it was built (a first gradient's trip counter) belong to it too:
        # its gradient loop reads the trip count, so a second gradient must visit the two in order.
        frames = {L.frame_name: L for L in self.loop_of_exit.values()}
        for n in nodes.values():
            if n.op == "Exit" and n.name not in self.loop_of_exit:
                src = self.b.tensors.get(parse_input(n.data_inputs[0])[0])
                L = frames.get(getattr(src[0].ctx, "frame_name", None)) if src else None
                if L is not None and src[0].ctx is L:
                    self.loop_of_exit[n.name] = L
        self.cond_of_merge, self.cond_of_switch = {}, {}
        for m, S in b.conds.items():
            if m in nodes and S.branches:
                self.cond_of_merge[m] = S
                for sw in S.switches.values():
                    if sw.node in nodes:
                        self.cond_of_switch[sw.node] = S
        self.loops = {}          # frame name -> LoopGradState of loops being differentiated
        self.shape_cache = {}    # forward ref -> forward Shape tensor
        self.grad_tas = {}       # TensorArray node name -> (grad handle, grad flow)
        self.between = set()
        self.x_refs = []         # what gradients() differentiates with respect to (compute_between)
        self.stack_ops = {"StackPush": [], "StackPop": []}
        self.units = {}          # forward ctx -> {unit key: (input refs, output refs)}
        self.deferred = {}       # forward MatMul -> loop_matmul.Deferred, while its gradient loop is built
        self.stacks = stack_grad.GradStacks()   # gradients of a first gradient's stacks
        self.links = None        # StackLinks of the graph (compute_between)
        self.concat_parts = {}   # gradient ref -> (piece sizes, piece gradients): a matmul's input gradient
        #                          made piece by piece for the Concat its input is (op_grads._matmul_grad)

    # ------------------------------------------------------------ graph queries
    def tensor(self, ref):
        """The forward Tensor of ref, with the context it lives in."""
        name, port, _ = parse_input(ref)
        t = self.b.tensors[name][port]
        S = self.cond_of_switch.get(name)
        if S is not None:
            return Tensor(self.b, name, port, t.ttype, S.branches[port])
        return t

    def dtype_of(self, ref):
        name, port, _ = parse_input(ref)
        outs = self.b.tensors.get(name)
        return outs[port].dtype if outs and port < len(outs) else None

    def unit_of(self, name):
        """(context, unit key) of the unit node `name` is the output of, or None for structural nodes."""
        L = self.loop_of_exit.get(name)
        if L is not None:
            return L.outer, ("loop", L)
        S = self.cond_of_merge.get(name)
        if S is not None:
            return S.outer, ("cond", S)
        node = self.graph.nodes[name]
        if opreg.get(node.op).kind != "normal":
            return None
        outs = self.b.tensors.get(name)
        if not outs:
            return None
        return outs[0].ctx, name

    def stacked_inputs(self, u):
        """The values pushed on the stacks that unit u pops: u's gradient must be built before theirs."""
        if isinstance(u, str):
            inside = lambda name: name == u
        elif u[0] == "loop":
            inside = lambda name: self.inside(name, u[1])
        else:
            inside = lambda name: any(self.inside(name, B) for B in u[1].branches.values())
        return [self._unit_io(p)[0][1] for pop in self.stack_ops["StackPop"] if inside(pop)
                for p in self.links.pushes_feeding(pop) if p in self.between]

    def pushes_in(self, L):
        """Whether loop L holds a between StackPush (a value a first gradient pops)."""
        return any(self.inside(p, L) for p in self.stack_ops["StackPush"])

    def unit_in(self, name, C):
        """The unit of context C that contains node `name`, or None."""
        u = self.unit_of(name)
        if u is None:
            return None
        ctx, key = u
        while ctx is not C:
            if isinstance(ctx, WhileContext):
                ctx, key = ctx.outer, ("loop", ctx)
            elif isinstance(ctx, CondBranch):
                ctx, key = ctx.state.outer, ("cond", ctx.state)
            else:
                return None
        return key

    def inside(self, name, ctx):
        """Whether node `name` lives in ctx or a context nested in it."""
        outs = self.b.tensors.get(name)
        c = outs[0].ctx if outs else None
        if name in self.cond_of_switch:
            return False
        while c is not None:
            if c is ctx:
                return True
            c = c.outer
        return False

    # ------------------------------------------------------------ the between set
    def compute_between(self, x_refs, y_refs):
        self.x_refs = list(x_refs)        # (custom_gradient's rule asks whether a tensor is one of them)
        graph = self.graph
        cons = {}
        for n in graph.nodes.values():
            for k, ref in enumerate(n.data_inputs):
                cons.setdefault(norm_ref(ref), []).append(n.name)
        links = self.links = StackLinks(graph)
        fwd, seen, stack = set(), set(), list(x_refs)
        while stack:
            r = stack.pop()
            if r in seen:
                continue
            seen.add(r)
            if not differentiable_dtype(self.dtype_of(r)):
                continue
            for c in cons.get(r, ()):
                op = graph.nodes[c].op
                if op == "StackPush" and norm_ref(graph.nodes[c].data_inputs[1]) == r:
                    fwd.add(c)       # a saved value reaches its pops (a first gradient's stacks)
                    fwd.update(links.pops_fed_by(c))
                    stack.extend(f"{p}:0" for p in links.pops_fed_by(c))
                    continue
                if op in NOT_DIFFERENTIABLE or c in fwd:
                    continue
                fwd.add(c)
                for p, t in enumerate(self.b.tensors.get(c, ())):
                    stack.append(f"{c}:{p}")
        bwd, stack = set(), [parse_input(r)[0] for r in y_refs]
        while stack:
            name = stack.pop()
            if name in bwd:
                continue
            bwd.add(name)
            n = graph.nodes[name]
            if n.op == "StackPop":
                for p in links.pushes_feeding(name):
                    bwd.add(p)
                    stack.append(parse_input(graph.nodes[p].data_inputs[1])[0])
                continue
            if n.op in NOT_DIFFERENTIABLE:
                continue
            for ref in n.data_inputs:
                if differentiable_dtype(self.dtype_of(ref)):
                    stack.append(parse_input(ref)[0])
        self.between = fwd & bwd
        self.stack_ops = {"StackPush": [], "StackPop": []}     # the between ones, in graph order
        for name in graph.nodes:
            if name in self.between and graph.nodes[name].op in self.stack_ops:
                self.stack_ops[graph.nodes[name].op].append(name)
        for name in graph.nodes:          # graph order keeps the built graph deterministic
            if name not in self.between:
                continue
            u = self.unit_of(name)
            if u is None:
                continue
            ctx, key = u
            while True:
                units = self.units.setdefault(ctx, {})
                if key in units:
                    break
                units[key] = self._unit_io(key)
                # A cond whose outputs are not between can still hold between nodes (a gradient
                # branch reading its values directly), and a loop whose outputs are not between can
                # still push values a first gradient pops: the outer context must visit it too.
                if isinstance(ctx, CondBranch):
                    ctx, key = ctx.state.outer, ("cond", ctx.state)
                elif isinstance(ctx, WhileContext) and ctx is not self.c0:
                    ctx, key = ctx.outer, ("loop", ctx)
                else:
                    break

    def _unit_io(self, key):
        nodes = self.graph.nodes
        if isinstance(key, str):
            n = nodes[key]
            ins = [norm_ref(r) for r in n.data_inputs]
            if n.op == "StackPush":
                # a value lifted out of a cond branch to be saved: its gradient goes to the branch value
                while parse_input(ins[1])[0] in self.b.lifted:
                    ins[1] = self.b.lifted[parse_input(ins[1])[0]]
            return ins, [t.ref for t in self.b.tensors[key]]
        kind, c = key
        if kind == "loop":
            ins = [norm_ref(nodes[e.node].data_inputs[0]) for e in c.enters + c.constant_enters
                   if e.node in nodes]
            return ins, [e.ref for e in c.exits]
        ins = [norm_ref(nodes[sw.node].data_inputs[0]) for sw in c.switches.values() if sw.node in nodes]
        ins += [r for r in self.foreign_inputs(c) if r not in ins]
        return ins, [m.ref for m in c.merges]

    def foreign_inputs(self, S):
        """Data inputs of nodes inside cond S that come neither from S nor through its Switches.

        Only gradient graphs have them (a gradient branch reading forward branch values
        directly); they matter for gradients of gradients.
        """
        out = []
        for name, outs in self.b.tensors.items():
            if name not in self.graph.nodes or not outs or not any(self.inside(name, B)
                                                                   for B in S.branches.values()):
                continue
            for ref in self.graph.nodes[name].data_inputs:
                src = parse_input(ref)[0]
                if src in self.cond_of_switch and self.cond_of_switch[src] is S:
                    continue
                if any(self.inside(src, B) for B in S.branches.values()):
                    continue
                if src in self.between and norm_ref(ref) not in out:
                    out.append(norm_ref(ref))
        return out

    # ------------------------------------------------------------ the sweep
    def sweep(self, C, seeds):
        """Backpropagate through the units of forward context C, building in the current context.

        seeds: ref -> list of gradients. Returns ref -> list of gradients, boundary refs included.
        """
        grads = {}
        for r, gs in seeds.items():
            grads.setdefault(r, []).extend(gs)
        units = self.units.get(C, {})
        pending = dict.fromkeys(units, 0)
        producers = {}
        for u, (ins, _) in units.items():
            ps = {}
            for r in ins + self.stacked_inputs(u):
                p = self.unit_in(parse_input(r)[0], C)
                if p is not None and p in units and p != u:
                    ps[p] = True
            producers[u] = list(ps)
            for p in ps:
                pending[p] += 1
        ready = [u for u in units if pending[u] == 0]
        while ready:
            u = ready.pop(0)
            self.backprop_unit(u, units[u], grads)
            for p in producers[u]:
                pending[p] -= 1
                if pending[p] == 0:
                    ready.append(p)
        return grads

    def backprop_unit(self, key, io, grads):
        from dfc.compiler.autodiff import control_flow_grad
        if isinstance(key, tuple):
            kind, c = key
            if kind == "loop":
                control_flow_grad.loop_grad(self, c, grads)
            else:
                control_flow_grad.cond_grad(self, c, grads, io[0])
            return
        ins, outs = io
        out_grads = [self.sum(grads, r) for r in outs]
        node = self.graph.nodes[key]
        if node.op in ("StackPush", "StackPop"):
            in_grads = (stack_grad.push_grad(self, OpView(self, node)) if node.op == "StackPush" else
                        stack_grad.pop_grad(self, OpView(self, node), out_grads[0]))
            for r, g in zip(ins, in_grads):
                if g is not None:
                    grads.setdefault(r, []).append(g)
            return
        if all(g is None for g in out_grads):
            return
        if node.op in NOT_DIFFERENTIABLE:
            return
        rule = GRADS.get(node.op)
        if rule is None:
            raise DfcError(f"no gradient rule for op {node.op}: wrap its result in dfc.stop_gradient if no "
                           f"gradient needs to flow through it", node=key, loc=node.loc or user_location())
        d = self.deferred.get(key)
        # Gradient ops run where their forward op runs (a model-parallel layer's gradient stays on its
        # task), as TensorFlow's colocate_gradients_with_ops; saved values follow through their stacks.
        devices = self.b.devices
        if node.device:
            devices.append(node.device)
        try:
            if d is not None and out_grads[0] is not None:
                in_grads = d.backprop(OpView(self, node), out_grads[0])
            else:
                in_grads = rule(OpView(self, node), *out_grads)
        except DfcError as e:
            if e.loc is None:       # a rule's own error: point at the user's line that built the op
                e.loc = node.loc or user_location()
                e.args = (e._format(),)
            raise
        finally:
            if node.device:
                devices.pop()
        if len(in_grads) != len(ins):
            raise DfcError(f"internal: the gradient of {node.op} returned {len(in_grads)} values for "
                           f"{len(ins)} inputs", node=key, loc=node.loc or user_location())
        for r, g in zip(ins, in_grads):
            if g is not None and differentiable_dtype(self.dtype_of(r)):
                grads.setdefault(r, []).append(g)

    def sum(self, grads, ref):
        lst = grads.get(ref)
        if not lst:
            return None
        if len(lst) > 1:
            total = lst[0]
            for g in lst[1:]:
                total = ops_api.add(total, g)
            grads[ref] = lst = [total]
        return lst[0]

    def sum_refs(self, grads, refs):
        gs = [g for g in (self.sum(grads, r) for r in refs) if g is not None]
        return self.sum({"": gs}, "") if gs else None

    # ------------------------------------------------------------ forward values in gradient code
    def on_chain(self, ctx, g):
        if ctx is None:
            return True
        while g is not None:
            if g is ctx:
                return True
            g = g.outer
        return False

    def grad_loop_of(self, g):
        """The innermost gradient loop of this call enclosing context g, or None."""
        while g is not None and g is not self.c0:
            L = g.fwd_loop
            if L is not None and L.frame_name in self.loops and self.loops[L.frame_name].grad_loop is g:
                return g
            g = g.outer
        return None

    def diff_frame(self, ctx):
        """The innermost loop being differentiated that encloses forward context ctx, or None."""
        while ctx is not None and ctx is not self.c0:
            if isinstance(ctx, WhileContext) and ctx.frame_name in self.loops:
                return ctx
            ctx = ctx.outer
        return None

    def source_value(self, t):
        """A cond Switch output or a loop-invariant Enter stands for the value it forwards."""
        while True:
            if t.node in self.cond_of_switch:
                t = self.tensor(self.graph.nodes[t.node].data_inputs[0])
                continue
            n = self.graph.nodes[t.node]
            if n.op == "Enter" and n.attrs.get("is_constant"):
                t = self.tensor(n.data_inputs[0])
                continue
            return t

    def fwd_value(self, t, g="current"):
        """Forward tensor t as a tensor usable in gradient context g (default: the current one)."""
        g = self.b.ctx if g == "current" else g
        t = self.source_value(t)
        if self.on_chain(t.ctx, g):
            return t
        GL = self.grad_loop_of(g)
        L = self.diff_frame(t.ctx)
        if GL is None:
            if L is not None:
                raise DfcError(f"internal: forward value {t.ref} of loop {L.frame_name} used outside its "
                               f"gradient loop")
            # Same frame (a forward cond branch seen from its gradient branch): live exactly when used.
            return Tensor(self.b, t.node, t.port, t.ttype, g)
        if L is GL.fwd_loop:     # stacked, swapped or recomputed (recompute.py)
            return recompute.saved_value(self, self.loops[L.frame_name], t)
        return self.fwd_value(t, GL.outer)

    def fwd_shape(self, t):
        """Shape(t) computed in the forward graph, next to t (small to save, unlike t)."""
        t = self.source_value(t)
        hit = self.shape_cache.get(t.ref)
        if hit is None:
            hit = self.shape_cache[t.ref] = self.b.make1("Shape", (t,), ctx=t.ctx,
                                                         name=self.b.unique(f"{t.node}_shape"))
        return hit

    def shape_of(self, t):
        """The shape of forward tensor t as an int64 tensor in the current gradient context."""
        if t.shape is not None and None not in t.shape:
            return convert(np.array(t.shape, np.int64).reshape(-1))
        return self.fwd_value(self.fwd_shape(t))

    def zeros_for(self, t):
        """Zeros shaped like forward tensor t (for a variable handle: like the variable)."""
        if t.dtype == dt.HANDLE:
            value = _variable_init(self.graph, t)
            return ops_api.zeros(list(value.shape), value.dtype.name)
        if t.shape is not None and None not in t.shape:
            return ops_api.zeros(list(t.shape), t.dtype)
        return ops_api.fill(self.shape_of(t), np.zeros((), t.dtype))

    def grad_dtype(self, t):
        if t.dtype == dt.HANDLE:
            return _variable_init(self.graph, t).dtype.name, tuple(_variable_init(self.graph, t).shape)
        return t.dtype, t.shape

    def lift(self, t, ctx):
        """Route t from a (nested) cond branch up to ctx through Merges with a dummy from the other branch.

        The merged value is live in every iteration, so one push per iteration keeps stacks aligned.
        """
        b = self.b
        while t.ctx is not ctx:
            B = t.ctx
            if not isinstance(B, CondBranch):
                raise DfcError(f"internal: cannot lift {t.ref} out of {getattr(B, 'describe', lambda: B)()}")
            if t.dtype not in dt.ALL:
                raise DfcError(f"cannot save a {t.dtype} value computed inside a cond in a loop for the "
                               f"gradient: compute it before the cond", loc=user_location())
            S = B.state
            other = S.branches[1 - B.branch]
            dummy = b.make1("Const", (), {"value": np.zeros((), t.dtype)}, ctx=other,
                            name=b.unique(f"{S.name}_dummy"))
            live = t.ref
            t = b.make("Merge", (dummy, t), ctx=S.outer, raw=True, name=b.unique(f"{S.name}_lift"))[0]
            b.lifted[t.node] = live
        return t

    def grad_ta(self, handle, dtype, element_shape):
        """(gradient handle, flow) of the TensorArray behind forward `handle`, created once (§5.2)."""
        b, graph = self.b, self.graph
        src = handle
        while graph.nodes[src.node].op in _PASS_THROUGH:
            src = self.tensor(graph.nodes[src.node].data_inputs[0])
        hit = self.grad_tas.get(src.node)
        if hit is not None:
            return hit
        F = src.ctx
        G = self.c0
        c = b.ctx if self.on_chain(self.c0, b.ctx) and F is not self.c0 and F is not None else None
        while c is not None and c is not self.c0:
            if c.fwd_loop is F or c.fwd_branch is F:
                G = c
                break
            c = c.outer
        old, b.ctx = b.ctx, G
        try:
            h = self.fwd_value(src, G)
            es = self.graph.nodes[src.node].attrs.get("element_shape") or element_shape
            hit = self.grad_tas[src.node] = tuple(b.make("TensorArrayGrad", (h,), {
                "dtype": dtype, "element_shape": None if es is None else list(es)},
                name=b.unique(f"{src.node}_grad")))
        finally:
            b.ctx = old
        return hit


def _source(graph, ref):
    name = parse_input(ref)[0]
    while graph.nodes[name].op in _PASS_THROUGH:
        name = parse_input(graph.nodes[name].data_inputs[0])[0]
    return name


def _variable_init(graph, t):
    name = _source(graph, t.ref)
    n = graph.nodes[name]
    if n.op != "VarHandle":
        raise DfcTypeError(f"cannot differentiate with respect to {t.ref}: it is a {n.op} handle, not a variable; "
                           f"differentiate with respect to the tensors it holds", loc=user_location())
    return graph.nodes[parse_input(n.data_inputs[0])[0]].attrs["value"]


def _lookup_capture(t, ctx):
    """t (from ctx or an outer context) as seen in ctx, without creating nodes; None if never captured."""
    chain, c = [], ctx
    while c is not None and c is not t.ctx:
        chain.append(c)
        c = c.outer
    if c is not t.ctx:
        return None
    for c in reversed(chain):
        if isinstance(c, CondBranch):
            sw = c.state.switches.get(t.ref)
            if sw is None:
                return None
            t = Tensor(t.builder, sw.node, c.branch, t.ttype, c)
        else:
            t = c.captured.get(t.ref)
            if t is None:
                return None
    return t


def _as_x(x):
    from dfc.compiler.variables import Variable
    if isinstance(x, Variable):
        return x.handle()
    if isinstance(x, Tensor):
        return x
    if hasattr(x, "_dfc_flatten"):
        return x._dfc_flatten()[0]
    hint = ""
    if isinstance(x, (np.ndarray, np.generic, float, int)):
        hint = (": a Python or numpy value is a constant of the graph; pass it to the traced function as an "
                "argument, or make it a dfc.Variable, to differentiate with respect to it")
    raise DfcTypeError(f"gradients() takes tensors or dfc.Variables as xs (or nested lists, tuples and dicts "
                       f"of them), not {type(x).__name__}{hint}", loc=user_location())


@api_boundary
def gradients(ys, xs, grad_ys=None, unconnected_gradients="none"):
    """Symbolic gradients of sum(ys) with respect to each of xs, built into the current graph.

    Equivalent math: [sum_k d(sum(grad_ys[k] * ys[k])) / d x for x in xs]; grad_ys defaults to ones.
    xs is one value or a nested structure (lists, tuples, namedtuples, dicts) whose leaves are
    tensors or dfc.Variables (a variable's gradient has the variable's shape); the result has xs's
    structure: one value for one x, a list for a list, a dict with the same keys for a dict.
    ys and grad_ys may be nested structures too (their leaves are paired in order). Works through
    dfc.cond, dfc.while_loop (at any nesting; data-dependent trip counts), TensorArrays and
    scan/map_fn/foldl. An x that ys do not depend on gets None, or zeros with
    unconnected_gradients="zero". dfc.stop_gradient blocks. Gradients of gradients work through all
    of these too (Hessian-vector products, gradient penalties, second-order MAML through a tensor
    number of steps). Differs from TF: a tuple of xs gives a tuple (TF gives a list).
    """
    if unconnected_gradients not in ("none", "zero"):
        raise DfcError("unconnected_gradients must be 'none' or 'zero'", loc=user_location())
    b = current_builder()
    if getattr(b, "eager", False):
        raise DfcError("dfc.gradients(ys, xs) differentiates the graph that computes ys, but no graph is being "
                       "built (an eager dfc.function, or dfc ops on numpy values), so ys is only a value. Use "
                       "dfc.value_and_grad(fn)(*args), which traces fn to differentiate it (eagerly too)",
                       loc=user_location())
    c0 = b.ctx
    single_x = not nest.is_nested(xs)
    xs_list = [xs] if single_x else nest.flatten(xs)
    ys_list = [convert(y) for y in nest.flatten(ys)]
    if grad_ys is None:
        gys = [None] * len(ys_list)
    else:
        gys = [None if g is None else convert(g) for g in nest.flatten(grad_ys)]
        if len(gys) != len(ys_list):
            raise DfcError(f"grad_ys has {len(gys)} values for {len(ys_list)} ys", loc=user_location())
    x_ts = [_as_x(x) for x in xs_list]
    x_refs = []
    for x in x_ts:
        seen = x if x.ctx is c0 else _lookup_capture(x, c0)
        if seen is None and x.ctx is not None and not _on_chain(x.ctx, c0):
            raise DfcError(f"cannot differentiate with respect to {x.ref}: it lives inside "
                           f"{x.ctx.describe()}; call dfc.gradients there, or differentiate with respect to "
                           f"a value from outside it", loc=user_location())
        x_refs.append(None if seen is None else seen.ref)
    seeds, y_refs = {}, []
    for y, gy in zip(ys_list, gys):
        if not differentiable_dtype(y.dtype):
            continue
        seen = y if y.ctx is c0 else _lookup_capture(y, c0)
        if seen is None:
            seen = y
        if gy is None:
            # ones of y's static shape do not read y: when nothing else uses y (the value of a potential
            # whose gradient a loop needs), its computation is pruned from the plan instead of run
            static = seen.shape is not None and None not in seen.shape
            gy = ops_api.ones(list(seen.shape), seen.dtype) if static else ops_api.ones_like(seen)
        elif gy.dtype != y.dtype:
            gy = ops_api.cast(gy, y.dtype)
        seeds.setdefault(seen.ref, []).append(gy)
        y_refs.append(seen.ref)
    gs = GradState(b, c0)
    gs.compute_between([r for r in x_refs if r is not None], y_refs)
    grads = gs.sweep(c0, seeds)
    out = []
    for x, r in zip(x_ts, x_refs):
        g = gs.sum(grads, r) if r is not None else None
        if g is None and unconnected_gradients == "zero":
            g = gs.zeros_for(x)
        out.append(g)
    return out[0] if single_x else nest.pack_sequence_as(xs, out)


def _on_chain(ctx, g):
    while g is not None:
        if g is ctx:
            return True
        g = g.outer
    return False


def value_and_grad(fn, argnums=0):
    """Return f(*args) -> (fn(*args), gradient of fn's (summed) value w.r.t. args[argnums]).

    fn's Python control flow is converted as in dfc.function (`if`/`while` on tensors become
    dfc.cond / dfc.while_loop). Inside traced code (dfc.trace, dfc.function) it builds the
    gradient into the graph; called with numpy values (nested structures of them too) it traces
    fn once per signature and runs the graph.
    argnums may be an int (one gradient) or a tuple (a tuple of gradients); an argument
    may be a nested structure of tensors (its gradient has the same structure).
    """
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    cache = {}

    def wrapped(*args, **kwargs):
        if current_builder(required=False) is None:
            return trace_and_run(cache, wrapped.__name__, wrapped, args, kwargs)
        from dfc.compiler.autograph.calls import converted_call
        value = converted_call(fn, args, kwargs)   # converted: `if`/`while` on tensors work in fn
        out = gradients(value, [args[i] for i in nums])
        return value, (out[0] if isinstance(argnums, int) else tuple(out))

    wrapped.__name__ = f"value_and_grad_{getattr(fn, '__name__', 'fn')}"
    wrapped.__wrapped__ = fn
    return wrapped


def trace_and_run(cache, name, build, args, kwargs=None):
    """build(*args, **kwargs) traced once per signature, then run; the result has build's structure.

    Every numpy value or Python number among the leaves of args and kwargs (nested structures
    included) becomes an input of the graph; any other leaf (a bool, a string, an object) is a
    constant of the graph, so its repr is part of the signature.
    """
    from dfc.compiler.autograph.core import trace     # a Python error in fn: a DfcError at its line
    from dfc.compiler.tracing import TensorSpec
    kwargs = kwargs or {}
    names = sorted(kwargs)
    everything = [list(args), [kwargs[k] for k in names]]
    leaves = nest.flatten(everything)
    is_value = [isinstance(a, (np.ndarray, np.generic, float, int)) and not isinstance(a, bool) for a in leaves]
    specs = [TensorSpec.from_value(a) if k else a for a, k in zip(leaves, is_value)]
    key = (repr(nest.map_structure(lambda _: 0, everything)), tuple(names), tuple(repr(s) for s in specs))
    hit = cache.get(key)
    if hit is None:
        structure = []

        def flat_fn(*ts):
            it = iter(ts)
            a, kw = nest.pack_sequence_as(everything, [next(it) if k else v for v, k in zip(leaves, is_value)])
            out = build(*a, **dict(zip(names, kw)))
            structure.append(nest.map_structure(lambda _: None, out))   # not the tensors: their builder
            return nest.flatten(out)
        graph = trace(flat_fn, [s for s, k in zip(specs, is_value) if k], {}, name)
        hit = cache[key] = (graph, structure[0])
    graph, structure = hit
    return nest.pack_sequence_as(structure, list(graph(*[v for v, k in zip(leaves, is_value) if k])))
