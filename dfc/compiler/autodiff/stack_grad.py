"""Gradients through the stacks of a first gradient: what makes gradients of gradients through loops work.

A first gradient through loop L pushes forward values on a stack in L (one push per iteration) and
pops them in its gradient loop GL (one pop per iteration, in reverse). For a second gradient the pop
is a function of the push: pop j of GL returns the value pushed in forward iteration N-1-j. So the
sweep treats each stack as a data edge from its pushed value to its pops (`StackLinks`), and
differentiates it with a stack of its own, as TensorFlow 2 treats the accumulated values of while_v2
as loop outputs:

* the pop's gradient is built in GGL, the gradient loop of GL, which visits GL's iterations in
  reverse, i.e. forward iterations 0, 1, ..., N-1: it pushes the pop's gradient on a gradient stack;
* the push's gradient is built in GL2, the gradient loop of L, which visits forward iterations
  N-1, ..., 0: it pops the gradient stack, last pushed first.

GGL is always built before GL2 (GL reads L's trip count, so the sweep reaches GL first), and GL2
waits for GGL to finish (`done`): the counter of the gradient loop built next in the same context
takes a control input from the counter exit of every gradient loop that pushed gradient stacks.
The first gradient's memory is unchanged: only a second gradient adds these stacks.
"""
from dfc.errors import DfcError
from dfc.ir.graph import parse_input

_PASS_THROUGH = ("Enter", "Switch", "Identity")


def stack_of(graph, node):
    """The StackV2 node behind a push's or pop's handle input."""
    name = parse_input(node.data_inputs[0])[0]
    while graph.nodes[name].op in _PASS_THROUGH:
        name = parse_input(graph.nodes[name].data_inputs[0])[0]
    return name


class StackLinks:
    """Pushes and pops of each stack of a graph: the edges `compute_between` follows through stacks."""

    def __init__(self, graph):
        self.pushes, self.pops = {}, {}
        for n in graph.nodes.values():
            if n.op in ("StackPush", "StackPop"):
                side = self.pushes if n.op == "StackPush" else self.pops
                side.setdefault(stack_of(graph, n), []).append(n.name)
        self.graph = graph

    def pops_fed_by(self, push):
        return self.pops.get(stack_of(self.graph, self.graph.nodes[push]), ())

    def pushes_feeding(self, pop):
        return self.pushes.get(stack_of(self.graph, self.graph.nodes[pop]), ())


class GradStacks:
    """The gradient stacks of one gradients() call and the loops that must finish before they are popped."""

    def __init__(self):
        self.stacks = {}      # forward stack node -> gradient stack handle (in the call's context c0)
        self.pushed = 0       # gradient stacks pushed so far (a loop that pushed some becomes a marker)
        self.done = {}        # gradient context -> counter Exits of gradient loops that pushed stacks there

    def waits(self, ctx):
        return self.done.get(ctx, [])

    def finished(self, ctx, pushed_before, exit_node):
        if self.pushed > pushed_before:
            self.done.setdefault(ctx, []).append(exit_node)


def pop_grad(gs, view, g):
    """Gradient of a first gradient's StackPop (built in the gradient loop of that gradient loop)."""
    b, node = gs.b, view.node
    GGL = gs.grad_loop_of(b.ctx)
    if GGL is None:
        raise DfcError(f"internal: the gradient of stack pop {node.name} is built outside a gradient loop")
    state = gs.loops[GGL.fwd_loop.frame_name]
    fwd_stack = stack_of(gs.graph, node)
    handle = gs.stacks.stacks.get(fwd_stack)
    if handle is None:
        attrs = gs.graph.nodes[fwd_stack].attrs
        handle = gs.stacks.stacks[fwd_stack] = b.make1(
            "StackV2", (), {"elem_dtype": node.attrs["elem_dtype"], "swap_memory": attrs.get("swap_memory", False)},
            ctx=gs.c0, name=b.unique(f"{fwd_stack}_grad"))
    if g is None:
        g = gs.zeros_for(view.output())
    push = b.make1("StackPush", (handle, g), control=[GGL.identities[0].node], name=b.unique(f"{fwd_stack}_grad_push"))
    state.add_sync(push)
    gs.stacks.pushed += 1
    return [None]


def push_grad(gs, view):
    """Gradient of the value a StackPush saved: the pop's gradient, popped in the forward loop's gradient loop."""
    b, node = gs.b, view.node
    fwd_stack = stack_of(gs.graph, node)
    handle = gs.stacks.stacks.get(fwd_stack)
    GL = gs.grad_loop_of(b.ctx)
    if handle is None or GL is None:
        # no pop of this stack reached the gradient: the saved value gets none through it
        return [None, None]
    state = gs.loops[GL.fwd_loop.frame_name]
    pop_node = gs.graph.nodes[gs.links.pops_fed_by(node.name)[0]]
    pop = b.make1("StackPop", (handle,), {"elem_dtype": pop_node.attrs["elem_dtype"],
                                          "shape": pop_node.attrs.get("shape")},
                  control=[GL.identities[0].node], name=b.unique(f"{fwd_stack}_grad_pop"))
    state.add_sync(pop)
    return [None, pop]
