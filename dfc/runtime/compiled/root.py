"""numba source for a whole run: the root frame (a straight-line graph) with its loop frames inlined.

The fused path runs the root frame as one generated Python function (dfc/runtime/fused_root.py) calling
each loop frame's program; this is that function as machine code. `run(e0, ..., K, LP, R)` takes the feeds
(in RootProgram.enters order) and returns the fetched values followed by one dead flag each; the loop
frames become nested `while True` blocks, as codegen.FrameSource nests a frame's inner loops. A gradient
stack created at the root (StackV2) is local here (a typed List, or for scalars an array and a count): the
forward loop pushes, the gradient loop pops, and nothing crosses to Python between them (a frame compiled
alone gets the stack's elements copied in and out on each call, resources.py).

So is a TensorArray made at the root (not an accumulating one, a gradient's): a pair of typed Lists, its
elements and which are written: written, read, sized, stacked, unstacked and concatenated with the kernels'
checks (an error replays the run on the fused path, which names the node). A root with anything else
holding state (Variables, queues, prints, gathers and scatters of TensorArrays) is blocked: it runs as
the fused root program, each loop frame compiled on its own. So is a root whose code is longer than
MAX_LINES: numba's compile time grows faster than the code (LLVM optimizes one function as a whole; a
training step's 700 lines take ~25 s, an ODE integrator's gradient 1 500 lines ~30 s, a graph of many
unrolled conds minutes and gigabytes), while its
frames compiled one by one cost what they cost anyway. $DFC_COMPILE_ROOT=0 turns whole-run compiling off
(loop frames still compile one by one).
"""

from dfc import config
from dfc.runtime import emit as E
from dfc.runtime.compiled.codegen import Analyses, Blocked, FrameSource, head, module

MAX_LINES = 2000
ENABLED = config.env("DFC_COMPILE_ROOT")


class RootSource(FrameSource):
    """The generated source of a Plan's root frame, as FrameSource is for a loop frame (same attributes:
    source, enter_types = feeds, exit_types = fetches, consts, loops, resources = {})."""

    def __init__(self, plan, index, types, root):      # noqa: D107 — deliberately not FrameSource.__init__
        self.plan, self.fid, self.types = plan, 0, types
        self.lines, self.loops, self.consts = E.Lines(), [], []
        self.placeholders = {}
        self._n = 0
        self.flagged, self.lift_dummies, self.objmode, self.exits_may_die = set(), {}, False, {}
        self._emitters()
        a = root.analysis
        self.an = {0: a}
        for c in a.child_programs:
            self.an.update(Analyses(plan, c, index).by_fid)
        self.ta_writers, self.frame_chain, self.resources = [], [], {}
        self._stack_owner = None
        self.enter_types = [self._type(i, 0, "feed") for i in root.enters]
        self.exit_types = [self._type(i, port, "fetch") for i, port in plan.fetches]
        for (i, _), t in zip(plan.fetches, self.exit_types):
            if t.dtype == "resource":
                raise Blocked(plan.nodes[i].name, "a resource handle is fetched")
        params = [E.ident("e", k) for k in range(len(root.enters))]
        ind = E.indent(1)
        fed = dict(zip(root.enters, params))
        for i, e in fed.items():
            self.w(ind, "{} = {}", E.ident("v", i, 0), e)
        self.fusion.plan_frame(a)
        for it in a.order:
            if not (it[0] == "node" and it[1] in fed):
                self._item(it, a, ind)
        if len(self.lines) > MAX_LINES:
            raise Blocked(None, f"the whole run is {len(self.lines)} lines of compiled code, more than "
                          f"{MAX_LINES}: too long to compile as one function (its loop frames compile one by one)")
        refs = [self.ref(f, a) for f in plan.fetches]
        deads = [self.dead(f, a) or E.fmt("False") for f in plan.fetches]
        self.source = module(head(E.fmt("# the root frame"), self.objmode, params) + self.hoisted() + self.lines +
                             [E.fmt("    return ({})", E.items(refs + deads)), E.fmt("")])

    local_resources = True      # the resources the lowerings see are made here (state_lower.py)

    def ta_type(self, i):
        """The element Type of the TensorArray node i makes, from its writes, reads and stacks (through
        Enters and cond Switches); Blocked if it is used any other way."""
        p = self.plan
        ts = {}
        for dst, slot in self.handle_users(i):
            op = p.nodes[dst].op
            if slot != 0 or op not in ("TensorArrayWrite", "TensorArrayRead", "TensorArraySize",
                                       "TensorArrayStack", "TensorArrayUnstack", "TensorArrayConcat"):
                raise Blocked(p.nodes[dst].name, f"{op} takes a TensorArray handle (lowered for one made "
                              "in the compiled code: write, read, size, stack, unstack, concat)")
            if op == "TensorArrayWrite":
                t = self._type(*p.ins[dst][2], "written value")
            elif op == "TensorArrayConcat":
                t = self._type(dst, 0, "concatenated value")
                if t.ndim == 0:
                    raise Blocked(p.nodes[dst].name, "a concat of scalars")
            elif op == "TensorArrayUnstack":
                s = self._type(*p.ins[dst][1], "unstacked value")
                if s.ndim == 0:
                    raise Blocked(p.nodes[dst].name, "an unstack of a scalar")
                t = s.with_shape(s.shape[1:])
            elif op == "TensorArrayRead":
                t = self._type(dst, 0, "read value")
            elif op == "TensorArrayStack":
                s = self._type(dst, 0, "stacked value")
                t = s.with_shape(s.shape[1:])
            else:
                continue
            ts[(t.dtype, t.ndim)] = t
        if len(ts) != 1:
            raise Blocked(p.nodes[i].name, "a TensorArray of values of different types" if ts else
                          "a TensorArray whose elements the compiled code never sees")
        return ts.popitem()[1]

    def scalar_stack(self, i):
        """The StackV2 node whose stack push or pop node i works on (i itself for a StackV2), when that
        stack holds scalars (an array and a count: state_lower.py), else None."""
        if self._stack_owner is None:
            self._stack_owner = {}
            for j, node in enumerate(self.plan.nodes):
                if node.op != "StackV2":
                    continue
                try:
                    if self.stack_type(j).ndim != 0:
                        continue
                except Blocked:         # (its own lowering says why)
                    continue
                self._stack_owner[j] = j
                for dst, _ in self.handle_users(j):
                    self._stack_owner[dst] = j
        return self._stack_owner.get(i)

    def stack_type(self, i):
        """The element Type of the gradient stack StackV2 node i makes (what its pushes push and its pops
        pop, through Enters and cond Switches): one dtype and rank."""
        p = self.plan
        ts = {}
        for dst, slot in self.handle_users(i):
            op = p.nodes[dst].op
            if slot != 0 or op not in ("StackPush", "StackPop"):
                raise Blocked(p.nodes[dst].name, f"{op} takes a stack handle")
            t = self._type(*p.ins[dst][1], "pushed value") if op == "StackPush" else self._type(dst, 0, "popped value")
            ts[(t.dtype, t.ndim)] = t
        if len(ts) != 1:
            raise Blocked(p.nodes[i].name, "a stack of values of different types" if ts else "an unused stack")
        return ts.popitem()[1]
