"""Loop fusion: run a whole loop frame as one generated Python function.

A frame whose nodes are ordinary kernels, conds (Switch/Merge) and nested
loops is turned into straight-line Python: one `while True:` per frame, the
loop variables as locals, a kernel call per node, DEAD checks only where a
cond can make a value dead, nested frames as nested calls. It runs the
iterations one after another, so it gives exactly the values of the general
executor (the reference executor is the definition; tests compare them) at a
fraction of the per-node cost. Frames with anything else (Send/Recv, odd
structure) are not fused and run on the general tagged-frame path.
"""
import numpy as np

from dfc.errors import DfcError, DfcRuntimeError
from dfc.ir import ops as opreg
from dfc.runtime import emit as E
from dfc.runtime import gpu_fusion
from dfc.runtime.limits import kernel_error
from dfc.runtime.values import DEAD

from dfc.ir.kinds import NORMAL, SWITCH, MERGE, ENTER, EXIT, NEXT
# kernels that read ctx.tag: random draws, and TensorArray writes (keys of gradient sums)
_TAGGED_OPS = frozenset({"RandomUniform", "RandomNormal", "TensorArrayWrite", "TensorArrayUnstack",
                         "TensorArrayScatter"})
_NOT_FUSABLE = frozenset({"Send", "Recv"})
_PASS_THROUGH = frozenset({"Identity", "StopGradient", "LoopCond"})


class NotFusable(Exception):
    pass


class FrameAnalysis:
    """What code generation needs to know about one loop frame (node indices of the Plan).

    enters, merges (loop Merges), exits: the frame's Figure 4 nodes; switches: loop Switch -> its
    Merge; loop_cond: the LoopCond; order: the items ("node", i) / ("frame", child fid) in
    dependency order; body: the items that run only when the loop goes on; maybe_dead: the items
    whose inputs a cond may make dead; producer: a child frame's Exit -> that child's item;
    child_programs: child fid -> its generated function's name; tagged: a kernel reads ctx.tag;
    inplace: Add node -> (loop Merge, slot) of an accumulator that may add into its own buffer;
    chains: k -> the gpu_fusion.Chain of item ("chain", k) (elementwise ops run as one kernel on a GPU).
    """
    __slots__ = ("fid", "fname", "enters", "merges", "switches", "exits", "loop_cond", "order", "body",
                 "maybe_dead", "producer", "child_programs", "tagged", "inplace", "chains")

    def __init__(self, *values):
        for name, value in zip(self.__slots__, values, strict=True):
            setattr(self, name, value)


class FrameProgram:
    """The generated function of one loop frame (and the frames nested in it)."""

    def __init__(self, plan, fid, index=None, traced=False):
        """traced: the build a Trace runs (dfc/runtime/trace.py): ctx.tag set every iteration and every
        kernel called through `kern` (no direct calls or in-place adds), so each call can be a span."""
        self.plan, self.fid, self.traced = plan, fid, traced
        self._traced_fn = None
        self.index = index or FrameIndex(plan)
        self.enters = self.index.enters[fid]
        self.enter_pos = {e: k for k, e in enumerate(self.enters)}
        self.exits = list(plan.frame_exits[fid])
        self.lines = E.Lines()
        self.helpers = {}
        self._counter = 0
        self._emit_frame(fid, E.ident("run"), 0)
        self.source = E.source(self.lines)
        env = {"DEAD": DEAD, "np": np}
        if plan.device is not None and plan.device.device_arrays:    # a GPU: predicates reach the host once
            from dfc.runtime.devices import Predicates
            env["_truth"] = Predicates()
        env.update(self.helpers)
        self.fn = E.run(self.source, env, "fused frame")["run"]

    def traced_fn(self):
        """The frame's function built for tracing (see `traced`), made on first use."""
        if self._traced_fn is None:
            self._traced_fn = FrameProgram(self.plan, self.fid, self.index, traced=True).fn
        return self._traced_fn

    # ------------------------------------------------------------------ analysis
    def _members(self, fid):
        return self.index.members[fid]

    def _emit_frame(self, fid, fname, depth):
        p = self.plan
        members = self._members(fid)
        enters = [i for i in members if p.kind[i] == ENTER]
        loop_cond = [i for i in members if p.nodes[i].op == "LoopCond"]
        if len(loop_cond) != 1:
            raise NotFusable("frame without exactly one LoopCond")
        lc = loop_cond[0]
        merges = [i for i in members if p.kind[i] == MERGE and p.merge_need[i] == 1]
        switches = {}
        children = sorted(self._child_frames(fid))
        for i in members:
            op = p.nodes[i].op
            if op in _NOT_FUSABLE or opreg.get(op).async_kernel:     # an async kernel may wait
                raise NotFusable(op)
            if p.kind[i] == SWITCH and p.ins[i][1][0] == lc:
                src = p.ins[i][0][0]
                if src not in merges:
                    raise NotFusable("loop Switch not fed by a loop Merge")
                switches[i] = src
        for m in merges:
            srcs = [p.kind[s] for s, _ in p.ins[m]]
            if sorted(srcs) != sorted([ENTER, NEXT]) or p.ins[m][0][0] not in enters:
                raise NotFusable("loop Merge must take (Enter, NextIteration)")
            if any(p.out_edges[m][1:]):
                raise NotFusable("a loop Merge's value_index is used (only its value is a local here)")
        for sw in switches:
            for dst, _ in p.out_edges[sw][0]:
                if p.kind[dst] != EXIT:
                    raise NotFusable("a loop Switch's false output feeds something other than Exit")
        exits = [i for i in members if p.kind[i] == EXIT]
        for e in exits:
            if p.ins[e][0][0] not in switches or p.ins[e][0][1] != 0:
                raise NotFusable("Exit not fed by a loop Switch")
        child_programs = {}
        for c in children:
            child_programs[c] = self._new_name("frame")
            self._emit_frame(c, child_programs[c], depth)
        items, producer = self._items([i for i in members if not (p.kind[i] in (ENTER, EXIT, NEXT) or i in merges
                                                                 or i in switches)], children)
        deps = {}
        for it in items:
            deps[it] = set()
            for s in self._item_inputs(it):
                if s in producer:
                    deps[it].add(producer[s])
                elif p.fid[s] == fid and p.kind[s] not in (ENTER,) and s not in merges and s not in switches:
                    deps[it].add(("node", s))
        order = _toposort(items, deps)
        # which items run only when the loop continues (downstream of a loop Switch's true output)
        body = set()
        for it in order:
            for s in self._item_inputs(it):
                if s in switches or (s in producer and producer[s] in body) or ("node", s) in body:
                    body.add(it)
                    break
        maybe_dead = set()
        for it in order:
            if it[0] == "node" and p.kind[it[1]] == SWITCH:
                maybe_dead.add(it)
                continue
            for s in self._item_inputs(it):
                if (s in producer and producer[s] in maybe_dead) or ("node", s) in maybe_dead:
                    maybe_dead.add(it)
                    break
        tagged = any(p.nodes[i].op in _TAGGED_OPS for i in members)
        inplace, chains = self._accumulators(merges, switches), {}
        if not self.traced and gpu_fusion.wanted(p):     # a GPU: elementwise chains become one kernel each
            order, chains = gpu_fusion.group(self, order, deps, body, maybe_dead, producer, inplace)
        self._gen(FrameAnalysis(fid, fname, enters, merges, switches, exits, lc, order, body, maybe_dead,
                                producer, child_programs, tagged, inplace, chains))

    def _items(self, nodes, children):
        """(items, producer): ("node", i) per ordinary node and ("frame", c) per child frame; producer maps
        each child frame's Exit to its frame item."""
        items, producer = [("node", i) for i in nodes], {}
        for c in children:
            items.append(("frame", c))
            for e in self.plan.frame_exits[c]:
                producer[e] = ("frame", c)
        return items, producer

    def _child_frames(self, fid):
        return self.index.children[fid]

    def _item_inputs(self, it):
        p = self.plan
        if it[0] == "node":
            return [s for s, _ in p.ins[it[1]]] + list(p.ctrl_ins[it[1]])
        srcs = []
        for e in self.index.enters[it[1]]:
            srcs.extend(s for s, _ in p.ins[e])
            srcs.extend(p.ctrl_ins[e])
        return srcs

    def _new_name(self, base):
        self._counter += 1
        return E.ident(base, self._counter)

    # ------------------------------------------------------------------ code generation
    # Every line goes through the emitter (dfc/runtime/emit.py): node k's values are locals v<k>_<port>,
    # comments name nodes and frames by index, and a failing node reaches _wrap as its index `_n`.
    def _gen(self, a):
        """The function `a.fname(ctx, kern, enters, tag)` running frame `a.fid`'s iterations."""
        p = self.plan
        L = E.Lines()
        w = L.w
        i0, i1, i2, ind = (E.indent(k) for k in range(4))
        w(i0, "def {}(ctx, kern, enters, tag):", a.fname)
        w(i1, "_n = -1")
        w(i1, "try:")
        for k, e in enumerate(a.enters):
            w(i2, "{} = enters[{}]", E.ident("v", e, 0), E.lit(k))
        for m in a.merges:
            w(i2, "{} = {}", E.ident("v", m, 0), E.ident("v", p.ins[m][0][0], 0))
        for m, _ in a.inplace.values():
            w(i2, "{} = False", E.ident("own", m))
        w(i2, "k = 0")
        w(i2, "while True:")
        w(ind, "_t = tag + ({}, k)", E.lit(a.fid))
        if a.tagged or self.traced:
            w(ind, "ctx.tag = _t")
        for it in a.order:
            if it not in a.body:
                self._gen_item(L, ind, it, a)
        pred = self._ref(p.ins[a.loop_cond][0], a)
        w(ind, "_n = {}", E.lit(a.loop_cond))        # a predicate that is not one bool fails below: name the LoopCond
        w(ind, "if {} is DEAD:", pred)
        w(ind, "    return [DEAD] * {}", E.lit(len(a.exits)))
        w(ind, "if not {}:", self._truth(pred))
        w(ind, "    return [{}]", E.join(", ", [E.ident("v", a.switches[p.ins[e][0][0]], 0) for e in a.exits]))
        for it in a.order:
            if it in a.body:
                self._gen_item(L, ind, it, a)
        nexts = []
        for m in a.merges:
            nx = [s for s, _ in p.ins[m] if p.kind[s] == NEXT][0]
            nexts.append(self._ref(p.ins[nx][0], a))
        if a.merges:
            w(ind, "{}, = {},", E.join(", ", [E.ident("v", m, 0) for m in a.merges]), E.join(", ", nexts))
        w(ind, "k += 1")
        w(ind, "if not k & 1023 and ctx.abort is not None:")     # a partition asked to stop
        w(ind, "    ctx.abort()")
        w(i1, "except Exception as _e:")
        w(i2, "raise _wrap(_n, _e) from None")
        self.helpers["_wrap"] = self._wrap
        self.lines.extend(L)
        self.lines.add(E.fmt(""))

    def _accumulators(self, merges, switches):
        """Add nodes that update a loop variable nobody else reads: `acc = acc + x` (the gradient
        of a loop invariant, a running sum). After the first iteration the loop owns acc's buffer,
        so the add can write into it instead of allocating (TF forwards such buffers likewise)."""
        p = self.plan
        switch_of = {m: s for s, m in switches.items()}
        out = {}
        for m in merges:
            s = switch_of.get(m)
            if s is None or [d for d, _ in p.out_edges[m][0]] != [s] or any(p.out_edges[m][1:]):
                continue
            body = p.out_edges[s][1]
            if len(body) != 1 or p.nodes[body[0][0]].op != "Identity":
                continue
            uses = p.out_edges[body[0][0]][0]
            if len(uses) != 1 or p.nodes[uses[0][0]].op != "Add":
                continue
            add, slot = uses[0]
            users = p.out_edges[add][0]
            if len(users) != 1 or p.kind[users[0][0]] != NEXT or not any(src == users[0][0] for src, _ in p.ins[m]):
                continue
            out[add] = (m, slot)
        return out

    def _ref(self, src_port, a):
        """The local variable holding output `src_port` inside frame analysis `a`'s function."""
        s, port = src_port
        p = self.plan
        if s in a.switches:
            return E.ident("v", a.switches[s], 0)
        if s in a.producer:
            c = a.producer[s][1]
            return E.ident("x", c, p.frame_exits[c].index(s))
        return E.ident("v", s, port)

    def _gen_item(self, L, ind, it, a):
        p = self.plan
        w = L.w
        if it[0] == "chain":
            gpu_fusion.emit(self, L, ind, it, a)
            return
        if it[0] == "frame":
            c = it[1]
            c_enters = self.index.enters[c]
            args = [self._ref(p.ins[e][0], a) for e in c_enters]
            n = len(p.frame_exits[c])
            outs = E.join(", ", [E.ident("x", c, k) for k in range(n)])
            call = E.fmt("{}(ctx, kern, [{}], _t)", a.child_programs[c], E.join(", ", args))
            w(ind, "# loop frame {}", E.lit(c))
            pad = call_frame(w, ind, outs, n, call, args if it in a.maybe_dead else [])
            if a.tagged or self.traced:     # the nested frame left its own tag there
                w(pad, "ctx.tag = _t")
            return
        i = it[1]
        kind = p.kind[i]
        ni = E.lit(i)
        w(ind, "# node {}", ni)     # for readers of `dfc show --fused`: the node's index in the plan
        args = [self._ref(sp, a) for sp in p.ins[i]]
        ctrls = [self._ref((c, 0), a) for c in p.ctrl_ins[i]]
        nout = len(p.out_edges[i])
        outs = [E.ident("v", i, k) for k in range(max(nout, 1))]   # a zero-output node gets a liveness marker
        if kind == SWITCH:
            d, pr = args
            w(ind, "_n = {}", ni)
            w(ind, "if {} is DEAD or {} is DEAD:", d, pr)
            w(ind, "    {} = {} = DEAD", outs[0], outs[1])
            w(ind, "elif {}:", self._truth(pr))
            w(ind, "    {}, {} = DEAD, {}", outs[0], outs[1], d)
            w(ind, "else:")
            w(ind, "    {}, {} = {}, DEAD", outs[0], outs[1], d)
            return
        if kind == MERGE:
            for k, x in enumerate(args):
                w(ind, "if {} is not DEAD:" if k == 0 else "elif {} is not DEAD:", x)
                w(ind, "    {}, {} = {}, np.int32({})", outs[0], outs[1], x, E.lit(k))
            w(ind, "else:")
            w(ind, "    {} = {} = DEAD", outs[0], outs[1])
            return
        checks = args + ctrls
        maybe = it in a.maybe_dead and checks
        if i in a.inplace and not maybe and not self.traced:
            m, slot = a.inplace[i]
            acc, x, own = args[slot], args[1 - slot], E.ident("own", m)
            self.helpers["_ndarray"], self.helpers["_add"] = np.ndarray, (p.device.xp if p.device else np).add
            w(ind, "_n = {}", ni)
            w(ind, "if {} and type({}) is _ndarray and {}.shape == getattr({}, 'shape', None):", own, acc, acc, x)
            w(ind, "    {} = _add({}, {}, out={})", outs[0], acc, x, acc)
            w(ind, "else:")
            w(ind, "    {} = _add({}, {})", outs[0], args[0], args[1])
            w(ind, "    {} = True", own)
            return
        call = E.fmt("kern[{}](ctx, ({}))", ni, E.join("", [E.fmt("{}, ", x) for x in args]))
        target = E.fmt("{},", E.join(", ", outs)) if nout else E.fmt("_o")
        op = p.nodes[i].op
        direct = None if self.traced else getattr(p.kern[i], "direct", None)
        if op == "Const":                        # a constant: computed once, outside the loop
            call, target = E.ident("c", i), outs[0]
            self.helpers[call] = p.kern[i](None, ())[0]
        elif op in _PASS_THROUGH:                # Identity-like: no kernel call at all
            call, target = args[0], outs[0]
        elif direct is not None and nout == 1:   # a plain function of its inputs: call it directly
            fn = E.ident("e", i)
            self.helpers[fn] = direct
            call, target = E.fmt("{}({})", fn, E.join(", ", args)), outs[0]
        pad = ind
        if maybe:
            w(ind, "if {}:", any_dead(checks))
            w(ind, "    {} = DEAD", E.join(" = ", outs))
            w(ind, "else:")
            pad = E.deeper(ind)
        w(pad, "_n = {}", ni)
        w(pad, "{} = {}", target, call)
        if op == "StackPop" and p.mem_accounting:     # no executor acquire follows: drop the stack's hold
            w(pad, "ctx.memory.acquire({}, 0)", outs[0])
        if not nout:
            w(pad, "{} = True", outs[0])

    def _truth(self, ref):
        on_device = self.plan.device is not None and self.plan.device.device_arrays
        return E.fmt("_truth({})", ref) if on_device else ref

    def _wrap(self, i, e):
        if i < 0:
            return e if isinstance(e, DfcError) else DfcRuntimeError(f"{type(e).__name__}: {e}")
        return kernel_error(self.plan.nodes[i], e)


def call_frame(w, ind, outs, n, call, dead_args):
    """Write the call of a nested frame's function giving its `n` exits `outs`; where one of `dead_args`
    may be dead (a cond's untaken branch) the frame does not run and its exits are DEAD. Returns the
    indentation the call was written at."""
    body = ind
    if dead_args:
        w(ind, "if {}:", any_dead(dead_args))
        if n:
            w(ind, "    {}, = [DEAD] * {}", outs, E.lit(n))
        else:
            w(ind, "    pass")
        w(ind, "else:")
        body = E.deeper(ind)
    if n:
        w(body, "{}, = {}", outs, call)
    else:
        w(body, "{}", call)
    return body


def any_dead(refs):
    """`r1 is DEAD or r2 is DEAD ...` of the locals refs."""
    return E.join(" or ", [E.fmt("{} is DEAD", r) for r in refs])


def _toposort(items, deps):
    order, seen, temp = [], set(), set()
    index = {it: k for k, it in enumerate(items)}

    def visit(it):
        if it in seen:
            return
        if it in temp:
            raise NotFusable("cycle")
        temp.add(it)
        for d in sorted(deps.get(it, ()), key=lambda x: index.get(x, -1)):
            if d in index:
                visit(d)
        temp.discard(it)
        seen.add(it)
        order.append(it)

    for it in items:
        visit(it)
    return order


class FrameIndex:
    """Per frame id: its nodes, the Enters into it, the frames entered from it (built once per Plan, so
    fusing a graph with many loops takes time linear in its size)."""

    def __init__(self, plan):
        p = plan
        frames = range(len(p.frame_names))
        self.members, self.enters = {f: [] for f in frames}, {f: [] for f in frames}
        self.children = {f: set() for f in frames}
        for i in range(len(p.nodes)):
            self.members[p.fid[i]].append(i)
            if p.kind[i] == ENTER:
                self.enters[p.child_fid[i]].append(i)
                src = p.ins[i][0][0] if p.ins[i] else None
                if src is not None:
                    out = p.frame_parent[p.fid[src]] if p.kind[src] == EXIT else p.fid[src]
                    if p.child_fid[i] != out:
                        self.children.setdefault(out, set()).add(p.child_fid[i])


def build_programs(plan, reasons=None):
    """fid -> FrameProgram for every frame that can be fused; `reasons` (a dict) gets fid -> why not for
    the others."""
    progs = {}
    index = FrameIndex(plan)
    for fid in range(1, len(plan.frame_names)):
        if not index.members[fid]:
            continue
        try:
            progs[fid] = FrameProgram(plan, fid, index)
        except NotFusable as e:
            if reasons is not None:
                reasons[fid] = str(e)
    return progs


def describe(plan):
    """frame name -> the generated Python source of the frame, or why it runs on the general path."""
    reasons = {}
    progs = build_programs(plan, reasons)
    out = {}
    for fid in range(1, len(plan.frame_names)):
        if fid in progs:
            out[plan.frame_names[fid]] = progs[fid].source
        elif fid in reasons:
            out[plan.frame_names[fid]] = f"# not fused: {reasons[fid]}"
    return out
