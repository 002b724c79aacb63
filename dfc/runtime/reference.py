"""The reference interpreter: the one definition of what a dfc graph computes.

It follows the evaluation rules of Figure 5 (§4.3 of "Dynamic Control Flow in
Large-Scale Machine Learning") directly, with no speed tricks: plain dicts,
one FIFO of ready nodes, one thread. Every faster way of running a graph (the
production executor with its pool, fused loops, partitions) must give the
same results; tests/conftest.py checks that.

Every value is a pair (value, is_dead) at a *tag*. A tag names a dynamic
frame: () is the root; inside a loop it is the parent's tag followed by
(frame name, iteration number), so tag ("while", 2) is the third iteration of
frame "while" in the root. Within one tag a node runs at most once. For a
node of frame F running at tag t (Figure 5):

    Switch(d, p)         port 0 = (d, dead if p or dead(d)),  port 1 = (d, dead if not p or dead(d)), at t
    Merge(d1, ..., dk)   the first live input (port 1: its index); dead once every input it can get is dead
    Enter(d, frame=C)    (d, dead(d)) at t + ((C, 0),); a constant Enter reaches every iteration of C
    Exit(d)              (d, dead(d)) at t without its last element (the parent frame)
    NextIteration(d)     (d, dead(d)) at t with the iteration number plus one
    Op(d1, ..., dm)      Op(values) at t, all outputs dead if any input (control inputs too) is dead;
                         a dead node runs no kernel

A loop Merge receives one input per iteration (the Enter in iteration 0, the
NextIteration afterwards), so it fires on that input. A dead NextIteration
starts no iteration. A dead Exit is not passed on: only when its frame
instance is done (every Enter of it has arrived and nothing in it can run) is
each Exit that never produced a live value passed on as dead, so the parent
sees exactly one value per Exit — live from the iteration that left the loop,
or dead for a loop on an untaken branch.

The interpreter runs until nothing is ready and no frame can finish; a fetch
that then has no value is a DfcDeadlockError naming the nodes still waiting.
An asynchronous kernel (OpDef.async_kernel: a queue's dequeue, which may wait
for another thread or an enqueue later in this graph) is started and its node
completes when its value arrives: every other ready node runs first, and the
interpreter waits for a completion only when nothing else can run.
State (Variables) is reached through the container interface of the kernel
context, exactly as in the executor. `parallel_iterations` only bounds
memory in the executor; it does not change results, so it is not modelled.
"""
import collections
import queue

import numpy as np

from dfc.errors import DfcDeadlockError, DfcError, DfcGraphError, DfcInputError, DfcRuntimeError
from dfc.ir import ops as opreg
from dfc.ir.graph import ROOT_FRAME, parse_input
from dfc.runtime.kernel_context import KernelContext, predicate
from dfc.runtime.kernels import kernel_for
from dfc.runtime.limits import kernel_error

from dfc.ir.kinds import NORMAL, SWITCH, MERGE, ENTER, EXIT, NEXT, OF_PRIMITIVE


class FrameInstance:
    """One activation of a loop frame: frame `name` entered at parent tag `parent_tag`."""

    def __init__(self, parent_tag, name):
        self.parent_tag, self.name = parent_tag, name
        self.enters_seen = set()        # Enter nodes that have delivered their value
        self.constants = []             # (Enter node, (value, is_dead)) reaching every iteration
        self.last_iteration = -1        # iterations 0..last_iteration have started
        self.live_exits = set()

    def tag(self, n):
        return self.parent_tag + ((self.name, n),)


class Interpreter:
    """Run `graph` once: `run()` returns the values of `fetches` ("node:port" refs) given `feeds`."""

    def __init__(self, graph, fetches, feeds, targets=(), ctx=None):
        if any(n.op in ("Send", "Recv") for n in graph.nodes.values()):
            raise DfcGraphError("the reference interpreter runs whole graphs, not device partitions")
        self.graph, self.feeds = graph, dict(feeds)
        self.ctx = ctx or KernelContext()
        self.frame_of, parent = graph.frames()
        # Random kernels seed from ctx.tag as (frame id, iteration, ...), frame ids as the executor numbers them.
        self.frame_id = {f: k for k, f in enumerate(sorted(parent, key=lambda f: (f != ROOT_FRAME, f)))}
        self.fetches = [_ref(f) for f in fetches]
        self.needed = graph.needed([n for n, _ in self.fetches] + list(targets), self.feeds)
        self._index_edges()
        self.inbox = {}                 # (node, tag) -> [input values, any input dead, inputs still missing]
        self.merge_dead = {}            # (merge, tag) -> dead inputs seen
        self.merged = set()             # (merge, tag) that fired
        self.frames = {}                # (parent tag, frame name) -> FrameInstance
        self.ready = collections.deque()
        self.results = {}               # (node, port) -> (value, is_dead) in the root frame
        self.kernels = {}
        self.waiting = {}               # (node, tag) -> the pending Later of an async kernel
        self.completions = queue.SimpleQueue()

    def _index_edges(self):
        g = self.graph
        self.consumers = {n: [] for n in self.needed}        # node -> [(dst, port, slot or None)]
        self.arity = {}                                      # node -> (data inputs, control inputs)
        self.enters_of = collections.defaultdict(set)        # frame -> its Enter nodes
        self.exits_of = collections.defaultdict(list)        # frame -> its Exit nodes
        for name in self.needed:
            node = g.nodes[name]
            if name in self.feeds:
                self.arity[name] = (0, 0)
                continue
            data = ctrl = 0
            for ref in node.inputs:
                src, port, is_ctrl = parse_input(ref)
                if src in self.needed:
                    self.consumers[src].append((name, port, None if is_ctrl else data))
                if is_ctrl:
                    ctrl += 1
                else:
                    data += 1
            self.arity[name] = (data, ctrl)
            if node.op == "Enter":
                self.enters_of[node.attrs["frame_name"]].add(name)
            elif node.op == "Exit":
                self.exits_of[self.frame_of[name]].append(name)

    def kind(self, name):
        return NORMAL if name in self.feeds else OF_PRIMITIVE.get(opreg.get(self.graph.nodes[name].op).kind, NORMAL)

    # ------------------------------------------------------------------ running
    def run(self):
        for name in self.needed:
            if self.arity[name] == (0, 0):
                if self.frame_of[name] != ROOT_FRAME and name not in self.feeds:
                    raise DfcGraphError("a node without inputs must be in the root frame", node=name)
                self.ready.append((name, (), [], False))
        with np.errstate(all="ignore"):
            try:
                while True:
                    while self.ready:
                        self.execute(*self.ready.popleft())
                    if self.complete_async(block=False) or self.finish_a_frame():
                        continue
                    if not self.waiting:
                        break
                    self.complete_async(block=True)     # nothing else can run: wait for an async kernel
            except BaseException:
                for later in self.waiting.values():     # the run stops: withdraw what still waits
                    later.cancel()
                raise
        return [self.fetched(name, port) for name, port in self.fetches]

    def fetched(self, name, port):
        if (name, port) not in self.results:
            waiting = sorted({n for n, _ in self.inbox} | {n for n, _ in self.merge_dead}
                             | {f"frame {f.name} (waiting for its Enters)" for f in self.frames.values()})
            raise DfcDeadlockError(f"execution stopped before {name!r} was computed; nodes still waiting for "
                                   f"inputs: {', '.join(waiting[:10]) or 'none'}", node=name)
        value, dead = self.results[(name, port)]
        if dead:
            raise DfcRuntimeError("fetched value is dead (it comes from a branch that was not taken)", node=name)
        return value

    def execute(self, name, tag, inputs, dead):
        """Evaluate node `name` at `tag` on its input values (Figure 5)."""
        kind = self.kind(name)
        if kind == NORMAL and not dead and name not in self.feeds and \
                opreg.get(self.graph.nodes[name].op).async_kernel:
            self.start_async(name, tag, inputs)
            return
        if kind == NORMAL:
            outs = None if dead else self.compute(name, tag, inputs)
            n = opreg.get(self.graph.nodes[name].op).num_outputs(self.graph.nodes[name].attrs, len(inputs)) \
                if name not in self.feeds else 1
            self.emit(name, tag, [(None, True)] * n if dead else [(v, False) for v in outs], dead)
        elif kind == SWITCH:
            data, pred = inputs
            taken = None if dead else predicate(pred, self.graph.nodes[name])
            self.emit(name, tag, [(data, dead or taken), (data, dead or not taken)], dead)
        elif kind == MERGE:
            value, index = inputs
            self.emit(name, tag, [(value, dead), (None if dead else np.int32(index), dead)], dead)
        elif kind == ENTER:
            self.enter(name, tag, inputs[0] if inputs else None, dead)
        elif kind == EXIT:
            frame = self.frames[(tag[:-1], tag[-1][0])]
            if not dead:                        # a dead Exit waits for its frame to finish
                frame.live_exits.add(name)
                self.emit(name, tag[:-1], [(inputs[0], False)], False)
        elif kind == NEXT:
            if not dead:                        # a dead NextIteration starts nothing
                frame = self.frames[(tag[:-1], tag[-1][0])]
                n = tag[-1][1] + 1
                self.start_iteration(frame, n)
                self.emit(name, frame.tag(n), [(inputs[0], False)], False)

    def compute(self, name, tag, inputs, raw=False):
        if name in self.feeds:
            return (self.feeds[name],)
        node = self.graph.nodes[name]
        if node.op == "Placeholder":
            raise DfcInputError(f"input {name!r} needs a value", node=name)
        self.ctx.tag = tuple(x for f, n in tag for x in (self.frame_id[f], n))
        kernel = self.kernels.get(name)
        if kernel is None:
            kernel = self.kernels[name] = kernel_for(node, np, self.ctx.memory_limit)
        try:
            out = kernel(self.ctx, inputs)
            return out if raw else tuple(out)
        except Exception as e:   # noqa: BLE001 — a failing kernel is the user's error, named by node
            raise kernel_error(node, e) from None

    def start_async(self, name, tag, inputs):
        """Start node `name`'s async kernel; its outputs are emitted when it completes."""
        later = self.compute(name, tag, inputs, raw=True)
        self.waiting[(name, tag)] = later
        put = self.completions.put
        later.start(lambda outs: put((name, tag, tuple(outs), None)), lambda e: put((name, tag, None, e)))

    def complete_async(self, block):
        """Emit the outputs of one async kernel that completed (waiting for one if `block`); False if none."""
        if not self.waiting:
            return False
        try:
            item = self.completions.get_nowait()
        except queue.Empty:
            if not block:
                return False
            while True:     # look up now and then, so Ctrl-C gets through
                try:
                    item = self.completions.get(timeout=0.1)
                    break
                except queue.Empty:
                    pass
        name, tag, outs, error = item
        del self.waiting[(name, tag)]
        if error is not None:
            raise kernel_error(self.graph.nodes[name], error)
        self.emit(name, tag, [(v, False) for v in outs], False)
        return True

    def enter(self, name, tag, value, dead):
        child = self.graph.nodes[name].attrs["frame_name"]
        frame = self.frames.get((tag, child))
        if frame is None:
            frame = self.frames[(tag, child)] = FrameInstance(tag, child)
        frame.enters_seen.add(name)
        if self.graph.nodes[name].attrs.get("is_constant", False):
            frame.constants.append((name, (value, dead)))
            for n in range(frame.last_iteration + 1):       # iterations already running get it too
                self.emit(name, frame.tag(n), [(value, dead)], dead)
        else:
            self.start_iteration(frame, 0)
            self.emit(name, frame.tag(0), [(value, dead)], dead)

    def start_iteration(self, frame, n):
        while frame.last_iteration < n:
            frame.last_iteration += 1
            for enter, (value, dead) in frame.constants:
                self.emit(enter, frame.tag(frame.last_iteration), [(value, dead)], dead)

    # ------------------------------------------------------------------ moving values
    def emit(self, name, tag, outs, node_dead):
        """Give node `name`'s outputs at `tag` to its consumers (control edges carry `node_dead`)."""
        if tag == ():
            for port, out in enumerate(outs):
                self.results[(name, port)] = out
        for dst, port, slot in self.consumers[name]:
            if dst in self.feeds:
                continue
            if slot is None:
                dead = node_dead or (self.kind(name) == SWITCH and all(d for _, d in outs))
                self.deliver(dst, tag, None, None, dead)
            else:
                value, dead = outs[port]
                self.deliver(dst, tag, slot, value, dead)

    def deliver(self, dst, tag, slot, value, dead):
        if self.kind(dst) == MERGE:
            if slot is not None:                # a Merge waits for no control input
                self.deliver_merge(dst, tag, slot, value, dead)
            return
        key = (dst, tag)
        entry = self.inbox.get(key)
        if entry is None:
            data, ctrl = self.arity[dst]
            entry = self.inbox[key] = [[None] * data, False, data + ctrl]
        if slot is not None:
            entry[0][slot] = value
        entry[1] = entry[1] or dead
        entry[2] -= 1
        if entry[2] == 0:
            del self.inbox[key]
            self.ready.append((dst, tag, entry[0], entry[1]))

    def deliver_merge(self, dst, tag, slot, value, dead):
        key = (dst, tag)
        if key in self.merged:
            return
        if not dead:
            self.merged.add(key)
            self.merge_dead.pop(key, None)
            self.ready.append((dst, tag, [value, slot], False))
            return
        seen = self.merge_dead[key] = self.merge_dead.get(key, 0) + 1
        if seen == self.merge_inputs(dst):
            self.merged.add(key)
            del self.merge_dead[key]
            self.ready.append((dst, tag, [None, None], True))

    def merge_inputs(self, merge):
        """How many inputs a Merge gets in one tag: one for a loop Merge, all of them in a cond."""
        srcs = [self.graph.nodes[parse_input(r)[0]].op for r in self.graph.nodes[merge].inputs
                if not parse_input(r)[2]]
        return 1 if "NextIteration" in srcs else len(srcs)

    # ------------------------------------------------------------------ finishing frames
    def finish_a_frame(self):
        """Nothing is ready: finish one frame instance that is done; False if none is."""
        for key, frame in list(self.frames.items()):
            if frame.enters_seen != self.enters_of[frame.name]:
                continue
            if any(_inside(f, frame) for f in self.frames.values()):
                continue                        # a loop inside it is still running
            if any(_tag_in(t, frame) for _, t in self.waiting):
                continue                        # an async kernel in it has not completed
            del self.frames[key]
            for name in self.exits_of[frame.name]:
                if name not in frame.live_exits:
                    self.emit(name, frame.parent_tag, [(None, True)], True)
            return True
        return False


def _inside(inner, outer):
    """Whether frame instance `inner` runs inside an iteration of `outer`."""
    p = outer.parent_tag
    return len(inner.parent_tag) > len(p) and inner.parent_tag[:len(p)] == p and inner.parent_tag[len(p)][0] == outer.name


def _tag_in(tag, frame):
    """Whether tag `tag` is inside an iteration of frame instance `frame`."""
    p = frame.parent_tag
    return len(tag) > len(p) and tag[:len(p)] == p and tag[len(p)][0] == frame.name


def run(graph, fetches, feeds=None, targets=(), ctx=None):
    """The values of `fetches` ("node:port" refs or node names) when `graph` runs with `feeds` (node -> value)."""
    return Interpreter(graph, fetches, feeds or {}, targets, ctx).run()


def _ref(fetch):
    name, port, ctrl = parse_input(fetch)
    if ctrl:
        raise DfcInputError(f"cannot fetch a control input {fetch!r}")
    return name, port
