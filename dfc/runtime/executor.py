"""The tagged-frame executor (§4.3, Figure 5).

Every value moving along an edge is tagged by the frame iteration it belongs
to (an `Iter`), and is either live (its array) or DEAD. A node runs at most
once per frame iteration. Enter moves a value into a child frame (created on
first use), Exit back to the parent frame, NextIteration to the next
iteration of the same frame. A non-control node with a dead input skips its
kernel and outputs DEAD; Switch makes its untaken output DEAD; Merge fires on
its first live input and is dead only when all inputs are dead. Exits of a
frame that never produced a live value (a loop inside an untaken branch)
send DEAD to the parent when the frame finishes.

One scheduler thread owns all bookkeeping (no locks); in "threads" mode heavy
kernels run on a thread pool (numpy releases the GIL) while cheap nodes run
inline. "reference" mode runs everything inline in FIFO order and is the
living definition: both modes must give identical results.

A partition of a multi-device graph (dfc/runtime/partition.py) runs as one
Run with a `Transport`: Send puts its value (or DEAD) in the run's rendezvous
under (tensor name, devices, frame tag) and never blocks; Recv registers a
callback and never blocks the scheduler either: its value comes back through
the partition's completion queue like a pool kernel's (§4.3: "all Recv nodes
are regarded as source nodes"). Both run even when dead, so a dead signal
crosses devices (§4.4). On a device that accounts memory, every live array is
reference counted from the node that makes it until its last consumer is done.
"""
import collections
import contextlib
import queue
import sys

import numpy as np

from dfc import config
from dfc.errors import DfcDeadlockError, DfcError, DfcRuntimeError, DfcInputError
from dfc.ir import dtypes as dt
from dfc.ir import ops as opreg
from dfc.ir.graph import ROOT_FRAME, parse_input
from dfc.runtime.kernel_context import KernelContext, predicate  # noqa: F401 (re-exported)
from dfc.runtime.devices import Predicates
from dfc.runtime.kernels import kernel_for
from dfc.runtime.limits import SENT, kernel_error, limit_kernel
from dfc.runtime.values import DEAD
from dfc.ir.kinds import NORMAL, SWITCH, MERGE, ENTER, EXIT, NEXT, SEND, RECV, ASYNC, OF_PRIMITIVE

_XFER = {"Send": SEND, "Recv": RECV}
TOKEN = np.bool_(True)    # the value a Send of a control edge carries
HEAVY_ELEMENTS = 16384   # below this many input elements a heavy kernel still runs inline




class Pending:
    """A node of one iteration waiting for its inputs: how many are still missing (control inputs
    count), whether any was dead, and the data values so far (for a Merge: its value and index)."""
    __slots__ = ("missing", "dead", "args")

    def __init__(self, missing, args, dead=False):
        self.missing, self.args, self.dead = missing, args, dead


FIRED = Pending(0, ())   # in an iteration's states: a Merge that already fired there


class Transport:
    """How a partition talks to the others: the run's rendezvous and its completion queue."""
    __slots__ = ("name", "rendezvous", "coord")

    def __init__(self, name, rendezvous, coord):
        self.name, self.rendezvous, self.coord = name, rendezvous, coord


class Frame:
    __slots__ = ("fid", "parent_iter", "iters", "pending_enters", "inv", "max_par", "deferred",
                 "next_num", "oldest", "live_exits", "tag")

    def __init__(self, fid, parent_iter, pending_enters, max_par):
        self.fid, self.parent_iter = fid, parent_iter
        self.iters, self.pending_enters, self.inv = {}, pending_enters, []
        self.max_par, self.deferred = max_par, []
        self.next_num = self.oldest = 0
        self.live_exits = set()
        self.tag = () if parent_iter is None else parent_iter.tag


class Iter:
    __slots__ = ("frame", "num", "states", "outstanding", "children", "tag")

    def __init__(self, frame, num):
        self.frame, self.num, self.states, self.outstanding, self.children = frame, num, {}, 0, {}
        self.tag = frame.tag + (frame.fid, num) if frame.fid else ()


class Plan:
    """Precomputed per-node tables for one (fetches, feeds, targets) subgraph."""

    def __init__(self, graph, fetches, feed_names, targets, xp=np, parallel_iterations=None, fuse=False,
                 frame_ids=None, device=None, memory_limit=None, overlap=False, compile_loops=False):
        """frame_ids: frame name -> id shared by all partitions of one graph, so frame tags (and the
        rendezvous keys made from them) agree across devices. device: a dfc.runtime.devices.Device.
        memory_limit: a dfc.runtime.limits.MemoryLimit every kernel is checked against (or None).
        overlap: the run has a kernel pool, so a frame with heavy work off its loop recurrence runs
        unfused to overlap its iterations (dfc/runtime/overlap.py).
        compile_loops: fused frames whose ops all have lowerings run as numba code (dfc/runtime/compiled/):
        True compiles each on its first run, "auto" once it has taken long enough on the fused path."""
        self.graph, self.device, self.memory_limit = graph, device, memory_limit
        self.mem_accounting = device is not None and device.memory is not None
        feed_names = set(feed_names)
        self._index(graph, [parse_input(f)[0] for f in fetches] + list(targets), feed_names, frame_ids)
        with device.run_context() if device is not None else contextlib.nullcontext():   # constants live there
            self._kernels(feed_names, xp if device is None else device.xp, device, memory_limit)
        self._wire(feed_names)
        self._frames(parallel_iterations)
        self._fetches(fetches)
        self.programs = {}
        if fuse and (not self.mem_accounting or device.fuses):
            from dfc.runtime.fused import build_programs
            self.programs = build_programs(self)
            if overlap and self.programs and (device is None or not device.device_arrays):   # gpu, strict: no pool
                from dfc.runtime.overlap import overlapping_frames
                for fid in overlapping_frames(self):
                    self.programs.pop(fid, None)
            # compile_loops: fused frames become numba code (dfc/runtime/compiled/); that code calls no
            # kernels, so not where kernels are wrapped (a memory limit, byte accounting) or off the host
            if compile_loops and memory_limit is None and not self.mem_accounting and \
                    (device is None or device.kind == "cpu"):
                from dfc.runtime.compiled import compile_programs
                self.programs = compile_programs(self, self.programs, policy=compile_loops)
        # the root frame as one generated function, when the scheduler has nothing else to do (fused_root.py)
        self.root_program, self.root_inline = None, not any(self.heavy[i] for i in range(len(self.nodes))
                                                             if self.fid[i] == 0)
        if fuse and memory_limit is None and not self.mem_accounting and (device is None or not device.device_arrays):
            from dfc.runtime.fused import FrameIndex
            from dfc.runtime.fused_root import build
            index = FrameIndex(self)
            self.root_program = build(self, index)
            if self.root_program is not None:
                self.root_feeds = [self.nodes[i].name for i in self.root_program.enters]
                if compile_loops and (device is None or device.kind == "cpu"):
                    from dfc.runtime.compiled import compile_root
                    rp = self.root_program
                    self.root_program = compile_root(self, rp, index, policy=compile_loops)
                    # compiled code runs every kernel inline anyway (a matmul's BLAS uses its own threads):
                    # no run of the scheduler first, which would compile the frames one by one too
                    self.root_inline = self.root_inline or self.root_program is not rp
        self.chains, self.pooled = {}, ()       # pooled: chains that go to the pool whatever their inputs' size
        if overlap and not self.mem_accounting and (device is None or not device.device_arrays) and \
                config.env("DFC_CHAINS"):
            self._chains()

    def _chains(self):
        """Chains of pure kernels in the loop frames the scheduler runs become one kernel each
        (dfc/runtime/chains.py): one pool round trip instead of one per kernel."""
        general = set()
        for fid in range(1, len(self.frame_names)):
            f = fid
            while f > 0 and f not in self.programs:
                f = self.frame_parent[f]
            if f <= 0:
                general.add(fid)
        if general:
            from dfc.runtime.chains import build_chains
            self.chains, self.pooled = build_chains(self, general, HEAVY_ELEMENTS)

    def _index(self, graph, wanted, feed_names, frame_ids):
        """The nodes the run needs, numbered; frames numbered (the root is 0)."""
        self.frame_of, self.parent = frame_of, parent = graph.frames()
        needed = graph.needed(wanted, feed_names)
        self.nodes = [n for n in graph.nodes.values() if n.name in needed]
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        if frame_ids is None:
            fids = {f: k for k, f in enumerate(sorted(parent, key=lambda f: (f != ROOT_FRAME, f)))}
        else:
            fids = {f: frame_ids[f] for f in parent}
        self.fids = fids
        self.frame_names = [None] * (max(fids.values()) + 1)
        for f, k in fids.items():
            self.frame_names[k] = f
        self.frame_parent = [fids[parent[f]] if f is not None and parent[f] is not None else -1
                             for f in self.frame_names]
        self.fid = [fids[frame_of[n.name]] for n in self.nodes]

    def _kernels(self, feed_names, xp, device, memory_limit):
        """Each node's kind (NORMAL, SWITCH, ...) and kernel; a fed node just yields its feed."""
        N = len(self.nodes)
        self.kind, self.kern, self.heavy = [0] * N, [None] * N, [False] * N
        self.feed_index, self.xfer = {}, {}      # xfer: Send/Recv -> (tensor_name, send_device, recv_device)
        for i, n in enumerate(self.nodes):
            opdef = opreg.get(n.op)
            fed = n.name in feed_names
            k = NORMAL if fed else _XFER.get(n.op) or OF_PRIMITIVE.get(opdef.kind, NORMAL)
            if k == NORMAL and opdef.async_kernel and not fed:
                k = ASYNC       # may wait (a queue's dequeue): completes through the completion queue
            self.kind[i] = k
            if fed:
                self.feed_index[n.name] = i
            elif n.op == "Placeholder":
                raise DfcInputError(f"input {n.name!r} needs a value", node=n.name)
            elif not opdef.in_executor:
                if device is not None:
                    device.check_op(n)
                self.kern[i] = kernel_for(n, xp)
                if self.mem_accounting:
                    from dfc.runtime.memory import accounting_kernel
                    self.kern[i] = accounting_kernel(n, xp, self.kern[i])
                if memory_limit is not None:
                    self.kern[i] = limit_kernel(n, self.kern[i], memory_limit)
            if k in (SEND, RECV):
                a = n.attrs
                self.xfer[i] = (a["tensor_name"], a["send_device"], a["recv_device"])
            self.heavy[i] = opdef.heavy and not fed

    def _wire(self, feed_names):
        """Edges both ways (data by port and slot, control), what each node waits for, the roots."""
        N, idx = len(self.nodes), self.index
        self.ins, self.ctrl_ins = [[] for _ in range(N)], [[] for _ in range(N)]
        self.out_edges, self.ctrl_outs = [[] for _ in range(N)], [[] for _ in range(N)]
        self.arity = [(0, 0)] * N     # (inputs to wait for, control ones included; data inputs)
        self.roots = []
        for i, n in enumerate(self.nodes):
            ins = [] if n.name in feed_names else n.inputs
            nin = 0
            for ref in ins:
                src, port, ctrl = parse_input(ref)
                s = idx[src]
                if ctrl:
                    self.ctrl_outs[s].append(i)
                    self.ctrl_ins[i].append(s)
                else:
                    self.ins[i].append((s, port))
                    outs = self.out_edges[s]
                    while len(outs) <= port:
                        outs.append([])
                    outs[port].append((i, nin))
                    nin += 1
            self.arity[i] = (len(ins), nin)
            if not ins:
                if self.fid[i] != 0:
                    raise DfcError("node without inputs inside a loop frame", node=n.name)
                self.roots.append(i)
        for i, n in enumerate(self.nodes):   # every output port gets an edge list
            nout = opreg.get(n.op).num_outputs(n.attrs, len(n.data_inputs))
            while len(self.out_edges[i]) < nout:
                self.out_edges[i].append([])

    def _frames(self, parallel_iterations):
        """Per loop frame: its Enters, Exits and iteration bound; per Merge, the inputs it waits for."""
        N, nf = len(self.nodes), len(self.frame_names)
        self.merge_need, self.child_fid, self.is_constant = [0] * N, [0] * N, [False] * N
        self.enter_count, self.frame_exits, self.max_par = [0] * nf, [[] for _ in range(nf)], [1 << 30] * nf
        for i, n in enumerate(self.nodes):
            k = self.kind[i]
            if k == MERGE:
                srcs = [self.graph.nodes[parse_input(r)[0]].op for r in n.inputs]
                self.merge_need[i] = 1 if "NextIteration" in srcs else self.arity[i][1]
            elif k == ENTER:
                cf = self.fids[n.attrs["frame_name"]]
                self.child_fid[i] = cf
                self.is_constant[i] = n.attrs.get("is_constant", False)
                self.enter_count[cf] += 1
                par = parallel_iterations or n.attrs.get("parallel_iterations", 32)
                self.max_par[cf] = min(self.max_par[cf], max(1, int(par)))
            elif k == EXIT:
                self.frame_exits[self.fid[i]].append(i)

    def _fetches(self, fetches):
        """(node, port) of each fetch, which must live in the root frame."""
        idx = self.index
        self.fetches = []
        for f in fetches:
            name, port, _ = parse_input(f)
            if name not in idx:
                raise DfcError(f"fetch {f!r} names no node")
            out_frame = self.fid[idx[name]]
            if self.kind[idx[name]] == EXIT:
                out_frame = self.fids[self.parent[self.frame_names[out_frame]]]
            if out_frame != 0:
                raise DfcError(f"cannot fetch {f!r}: it lives inside a loop frame", node=name)
            if port >= len(self.out_edges[idx[name]]):
                raise DfcError(f"fetch {f!r}: node has {len(self.out_edges[idx[name]])} outputs", node=name)
            self.fetches.append((idx[name], port))
        self.fetch_nodes = {i for i, _ in self.fetches}
        self.fetch_set = set(self.fetches)
        self.fetch_types = _declared_types(self.graph, fetches)


class Run:
    """One execution of a Plan (one partition of a multi-device run when `transport` is given)."""

    def __init__(self, plan, feeds, ctx, pool=None, transport=None):
        self.p, self.ctx, self.pool, self.transport = plan, ctx, pool, transport
        if transport is not None:
            ctx.abort = transport.coord.check
        self.results, self.feeds = {}, feeds
        self.mem = plan.device.memory if plan.mem_accounting else None
        self.recvs_pending = 0
        self.kernels_in_flight = 0
        self.root_pooled = False      # a root-frame kernel went to the pool (Plan.root_inline)
        self.recv_waits = {}
        self.async_waits = {}       # (node, tag) -> the pending Later of an async kernel
        self._done = transport.coord.queues[transport.name] if transport is not None else queue.SimpleQueue()
        self.kern = list(plan.kern)
        # on a GPU, each predicate value comes to the host once, however many Switches read it
        self.truth = Predicates() if plan.device is not None and plan.device.device_arrays else None
        for name, value in feeds.items():
            if name in plan.feed_index:
                self.kern[plan.feed_index[name]] = (lambda v: lambda c, a: (v,))(value)
        self.trace = ctx.trace
        if self.trace is not None:      # only when tracing: every kernel call becomes a span
            self.trace.instrument(self)

    def execute(self):
        """Run to completion; return the fetched values (those of this partition)."""
        p = self.p
        rp = p.root_program
        if rp is not None and self.trace is None and self.transport is None and (self.pool is None or p.root_inline):
            feeds = self.feeds
            with np.errstate(all="ignore"):
                values = rp.fn(self.ctx, self.kern, [feeds[name] for name in p.root_feeds], ())
            return self._fetched(values)
        root = Frame(0, None, 0, 1)
        it0 = self.it0 = Iter(root, 0)
        root.iters[0] = it0
        root.next_num = 1
        ready = collections.deque()
        for i in p.roots:
            it0.outstanding += 1
            ready.append((i, it0, Pending(0, [])))
        with np.errstate(all="ignore"):
            try:
                if self.pool is None:
                    self._loop_inline(ready)
                else:
                    self._loop_pool(ready)
            except BaseException:
                self._cancel_async()
                raise
        if self.pool is not None and not self.root_pooled:
            p.root_inline = True        # no root kernel was worth the pool: later runs may use p.root_program
        values = []
        for i, port in p.fetches:
            v = self.results.get((i, port))
            if v is None:
                self._stuck(it0, p.nodes[i].name)
            values.append(v)
        return self._fetched(values)

    def _fetched(self, values):
        """The fetched values as the run returns them (each checked: not dead, of its declared type)."""
        p = self.p
        out = []
        for (i, port), v in zip(p.fetches, values):
            if v is DEAD:
                raise DfcRuntimeError("fetched value is dead (it comes from a branch that was not taken)",
                                      node=p.nodes[i].name)
            _check_declared(v, p.fetch_types[len(out)], p.nodes[i].name)
            out.append(v)
        return out if p.device is None else p.device.fetch(out)     # a GPU's copies wait for their producers

    # -------------------------------------------------------------- scheduling loops
    def _loop_inline(self, ready):
        p, kern, ctx, mem = self.p, self.kern, self.ctx, self.mem
        kind = p.kind
        popleft, finish = ready.popleft, self._finish
        coord = self.transport.coord if self.transport is not None else None
        steps = 0
        while True:
            while ready:
                if coord is not None:       # another partition failed, or the caller gave up: stop
                    steps += 1
                    if not steps & 1023:
                        coord.check()
                i, it, st = popleft()
                k = kind[i]
                if k == NORMAL:
                    if st.dead:
                        outs = None
                    else:
                        ctx.tag = it.tag
                        try:
                            outs = kern[i](ctx, st.args)
                        except Exception as e:   # noqa: BLE001 — re-raised as a DfcError naming the node
                            raise self._wrap(i, e) from None
                    self._propagate(i, it, outs, ready)
                    if mem is not None:
                        self._release(st)
                    it.outstanding -= 1
                    if it.outstanding == 0:
                        self._cleanup(it.frame, ready)
                elif k == RECV:
                    self._post_recv(i, it)
                elif k == ASYNC and not st.dead:
                    self._start_async(i, it, st)
                else:
                    finish(i, it, st, None, ready)
            if not (self.recvs_pending or self.async_waits):
                break
            error = self._complete(self._next_completion(), ready)
            if error is not None:
                raise error

    def _loop_pool(self, ready):
        kern, ctx, heavy, kind, pooled = self.kern, self.ctx, self.p.heavy, self.p.kind, self.p.pooled
        done, transport = self._done, self.transport
        error = None

        if transport is None:
            put = done.put
        else:
            put = (lambda name: lambda item: transport.coord.post_kernel(name, item))(transport.name)

        traced = self.trace is not None

        def task(i, it, args):
            try:
                put((i, it, kern[i](ctx, args, it.tag) if traced else kern[i](ctx, args), None, args))
            except Exception as e:   # noqa: BLE001
                put((i, it, None, e, args))

        steps = 0
        while True:
            while ready and error is None:
                if transport is not None:       # another partition failed, or the caller gave up: stop
                    steps += 1
                    if not steps & 1023:
                        transport.coord.check()
                i, it, st = ready.popleft()
                if kind[i] == RECV:
                    self._post_recv(i, it)
                elif kind[i] == ASYNC and not st.dead:
                    self._start_async(i, it, st)
                elif heavy[i] and not st.dead and (sum(getattr(a, "size", 1) for a in st.args) >= HEAVY_ELEMENTS
                                                   or i in pooled):
                    if not it.tag:
                        self.root_pooled = True
                    if transport is not None:
                        transport.coord.started_kernel()
                    self.pool.submit(task, i, it, st.args)
                    self.kernels_in_flight += 1
                else:
                    try:
                        self._finish(i, it, st, None, ready)
                    except DfcError as e:
                        error = e
                while (self.kernels_in_flight or self.recvs_pending or self.async_waits) and not done.empty():
                    error = self._complete(self._next_completion(), ready) or error
            if error is not None:
                self._drain_kernels()
                raise error
            if not (self.kernels_in_flight or self.recvs_pending or self.async_waits):
                break
            error = self._complete(self._next_completion(), ready) or error

    def _next_completion(self):
        if self.transport is None:
            if not self.async_waits:
                return self._done.get()
            while True:     # an async kernel may wait long: look up now and then (Ctrl-C, async exceptions)
                try:
                    return self._done.get(timeout=0.1)
                except queue.Empty:
                    pass
        return self.transport.coord.get(self.transport.name)

    def _drain_kernels(self):
        """After an error: wait for the kernels still on the pool (they may touch variables)."""
        while self.kernels_in_flight:
            item = self._done.get()
            if isinstance(item, tuple) and len(item) == 5 and item[4] is not None:
                self.kernels_in_flight -= 1

    def _complete(self, item, ready):
        i, it, outs, exc, args = item
        if self.p.kind[i] == RECV:
            self.recvs_pending -= 1
            del self.recv_waits[(i, it.tag)]
            if outs is not None and self.p.device is not None:
                outs = (self.p.device.to_device(outs[0]),)
        elif self.p.kind[i] == ASYNC:
            del self.async_waits[(i, it.tag)]
            if outs is not None and self.p.device is not None:     # a dequeue's host arrays, onto the device
                outs = tuple(self.p.device.to_device(v) for v in outs)
        else:
            self.kernels_in_flight -= 1
        if exc is not None:
            return self._wrap(i, exc)
        try:
            self._finish(i, it, None, outs, ready)
            if self.mem is not None and args is not None:
                self._release_values(args)
        except DfcError as e:
            return e
        return None

    def _wrap(self, i, e):
        return kernel_error(self.p.nodes[i], e)

    # -------------------------------------------------------------- asynchronous kernels
    def _start_async(self, i, it, st):
        """Run node i's async kernel (OpDef.async_kernel): it returns a Later whose completion comes back
        through the completion queue, like a Recv's value; other nodes run meanwhile. While it waits it
        counts as work for the partition deadlock detector (a queue may be filled by another Session)."""
        self.ctx.tag = it.tag
        try:
            later = self.kern[i](self.ctx, st.args)
        except Exception as e:   # noqa: BLE001
            raise self._wrap(i, e) from None
        self.async_waits[(i, it.tag)] = later
        if self.mem is not None:
            self._release(st)       # what the kernel keeps (an enqueued element) the queue holds now
        args = None
        t = self.transport
        if t is None:
            put = self._done.put
        else:
            t.coord.started_kernel()
            put = (lambda coord, name: lambda item: coord.post_kernel(name, item))(t.coord, t.name)
        later.start(lambda outs: put((i, it, tuple(outs), None, args)),
                    lambda e: put((i, it, None, e, args)))

    def _cancel_async(self):
        """The run stops: withdraw the async kernels still waiting (a dequeue must not take an element
        for a run that is gone)."""
        for later in list(self.async_waits.values()):
            try:
                later.cancel()
            except Exception:   # noqa: BLE001 — stopping anyway
                pass
        self.async_waits.clear()

    # -------------------------------------------------------------- Send / Recv
    def _post_recv(self, i, it):
        """Ask the rendezvous for node i's value in iteration it; it arrives on the completion queue."""
        t = self.transport
        if t is None:
            raise DfcError("Recv outside a partitioned run", node=self.p.nodes[i].name)
        self.recvs_pending += 1
        self.recv_waits[(i, it.tag)] = it
        coord, name = t.coord, t.name

        limit = self.p.memory_limit
        trace, start = self.trace, self.trace.now() if self.trace is not None else None

        def deliver(v):
            if limit is not None:
                limit.drop_entry(v, coord, SENT)
            if trace is not None:
                trace.transfer(self, i, it.tag, start, "recv")
            coord.post(name, (i, it, None if v is DEAD else (v,), None, None))
        try:
            t.rendezvous.recv(self.p.xfer[i] + (it.tag,), deliver)
        except RuntimeError as e:
            raise DfcRuntimeError(str(e), node=self.p.nodes[i].name) from None

    def _send(self, i, it, st):
        t = self.transport
        if t is None:
            raise DfcError("Send outside a partitioned run", node=self.p.nodes[i].name)
        v = DEAD if st.dead else (st.args[0] if st.args else TOKEN)
        if v is not DEAD and self.p.device is not None:
            v = self.p.device.outgoing(v)       # a GPU value travels with an event recorded after its producer
        if self.p.memory_limit is not None:     # held by the rendezvous until its Recv takes it
            self.p.memory_limit.add_entry(v, t.coord, self.p.nodes[i].name, "Send", SENT)
        start = self.trace.now() if self.trace is not None else None
        try:
            t.rendezvous.send(self.p.xfer[i] + (it.tag,), v)
        except RuntimeError as e:
            raise DfcRuntimeError(str(e), node=self.p.nodes[i].name) from None
        if start is not None:
            self.trace.transfer(self, i, it.tag, start, "send")

    # -------------------------------------------------------------- memory accounting
    def _acquire_outputs(self, i, it, outs):
        """Each live output is held once per consumer (and once more if fetched)."""
        p = self.p
        for port, edges in enumerate(p.out_edges[i]):
            v = outs[port]
            if v is not DEAD:
                fetched = it.frame.fid == 0 and (i, port) in self.p.fetch_set
                self.mem.acquire(v, len(edges) + fetched, p.nodes[i].name)

    def _release(self, st):
        mem = self.mem
        for v in st.args:
            if v is not None and v is not DEAD:
                mem.release(v)

    def _release_values(self, values):
        for v in values:
            if v is not None and v is not DEAD:
                self.mem.release(v)

    # -------------------------------------------------------------- node semantics
    def _finish(self, i, it, st, outs, ready):
        """Run (if st is given) or complete (if outs is given) node i in iteration it."""
        p = self.p
        k = p.kind[i]
        release = st is not None and self.mem is not None
        if k == NORMAL or k == RECV or k == ASYNC:
            if st is not None:
                if st.dead:
                    outs = None
                else:
                    self.ctx.tag = it.tag
                    try:
                        outs = self.kern[i](self.ctx, st.args)
                    except Exception as e:   # noqa: BLE001
                        raise self._wrap(i, e) from None
            self._propagate(i, it, outs, ready)
        elif k == SWITCH:
            if st.dead:
                self._propagate(i, it, None, ready)
            else:
                v = st.args[0]
                taken = predicate(st.args[1], self.p.nodes[i], self.truth)
                self._propagate(i, it, (DEAD, v) if taken else (v, DEAD), ready, ports_may_be_dead=True)
        elif k == MERGE:
            outs = None if st.dead else (st.args[0], np.int32(st.args[1]))
            self._propagate(i, it, outs, ready)
        elif k == ENTER:
            self._enter(i, it, DEAD if st.dead else st.args[0], ready)
        elif k == EXIT:
            if not st.dead:
                frame = it.frame
                frame.live_exits.add(i)
                self._propagate(i, frame.parent_iter, (st.args[0],), ready)
        elif k == NEXT:
            if not st.dead:
                release = self._next_iteration(i, it, st.args[0], ready) and release
        else:  # SEND
            self._send(i, it, st)
        if release:
            self._release(st)
        it.outstanding -= 1
        if it.outstanding == 0:
            self._cleanup(it.frame, ready)

    def _record(self, i, outs):
        for port in range(len(self.p.out_edges[i])):
            if (i, port) in self.p.fetch_set:
                self.results[(i, port)] = DEAD if outs is None else outs[port]

    def _propagate(self, i, it, outs, ready, ports_may_be_dead=False):
        p = self.p
        if i in p.fetch_nodes and it.frame.fid == 0:
            self._record(i, outs)
        kind, arity = p.kind, p.arity
        states = it.states
        dead_node = outs is None
        if self.mem is not None and not dead_node:
            self._acquire_outputs(i, it, outs)
        for port, edges in enumerate(p.out_edges[i]):
            if not edges:
                continue
            v = DEAD if dead_node else outs[port]
            for dst, slot in edges:
                if kind[dst] == MERGE:
                    self._deliver_merge(dst, slot, v, it, ready)
                    continue
                st = states.get(dst)
                if st is None:
                    need, nargs = arity[dst]
                    st = states[dst] = Pending(need, [None] * nargs)
                if v is DEAD:
                    st.dead = True
                else:
                    st.args[slot] = v
                st.missing -= 1
                if st.missing == 0:
                    del states[dst]
                    it.outstanding += 1
                    ready.append((dst, it, st))
        ctrl = p.ctrl_outs[i]
        if ctrl:
            dead = dead_node or (ports_may_be_dead and all(o is DEAD for o in outs))
            for dst in ctrl:
                st = states.get(dst)
                if st is None:
                    need, nargs = arity[dst]
                    st = states[dst] = Pending(need, [None] * nargs)
                if dead:
                    st.dead = True
                st.missing -= 1
                if st.missing == 0:
                    del states[dst]
                    it.outstanding += 1
                    ready.append((dst, it, st))

    def _deliver_merge(self, dst, slot, v, it, ready):
        states = it.states
        st = states.get(dst)
        if st is FIRED:
            if self.mem is not None and v is not DEAD:
                self.mem.release(v)     # a second live input of a fired Merge is dropped
            return
        if v is DEAD:
            if st is None:
                st = states[dst] = Pending(self.p.merge_need[dst], ())
            st.missing -= 1
            if st.missing == 0:
                states[dst] = FIRED
                it.outstanding += 1
                ready.append((dst, it, Pending(0, (), dead=True)))
        else:
            states[dst] = FIRED
            it.outstanding += 1
            ready.append((dst, it, Pending(0, (v, slot))))

    # -------------------------------------------------------------- frames
    def _enter(self, i, it, v, ready):
        p = self.p
        cf = p.child_fid[i]
        prog = p.programs.get(cf)
        if prog is not None:
            self._enter_fused(prog, i, it, v, ready)
            return
        child = it.children.get(cf)
        if child is None:
            child = it.children[cf] = Frame(cf, it, p.enter_count[cf], p.max_par[cf])
            it.outstanding += 1
            self._new_iteration(child, ready)
        child.pending_enters -= 1
        if p.is_constant[i]:
            child.inv.append((i, v))
            if self.mem is not None and v is not DEAD:
                self.mem.acquire(v, 1, p.nodes[i].name)     # held by the frame until it finishes
            for sub in list(child.iters.values()):
                self._propagate(i, sub, (v,) if v is not DEAD else None, ready)
        else:
            self._propagate(i, child.iters[0], (v,) if v is not DEAD else None, ready)
        if child.pending_enters == 0:
            self._cleanup(child, ready)

    def _enter_fused(self, prog, i, it, v, ready):
        """Collect the frame's Enter values; when all are in, run the fused loop in one call."""
        key = ("fused", prog.fid)
        buf = it.children.get(key)
        if buf is None:
            buf = it.children[key] = [len(prog.enters), [None] * len(prog.enters)]
            it.outstanding += 1
        buf[1][prog.enter_pos[i]] = v
        if self.mem is not None and v is not DEAD:
            self.mem.acquire(v, 1, self.p.nodes[i].name)     # held until the fused loop is done
        buf[0] -= 1
        if buf[0]:
            return
        del it.children[key]
        vals = buf[1]
        loop_dead = any(v is DEAD for e, v in zip(prog.enters, vals) if not self.p.is_constant[e])
        if loop_dead:
            exits = [DEAD] * len(prog.exits)
        else:
            fn = prog.fn if self.trace is None else self.trace.fused(self, prog)
            exits = fn(self.ctx, self.kern, vals, it.tag)
        for e, x in zip(prog.exits, exits):
            self._propagate(e, it, None if x is DEAD else (x,), ready)
        if self.mem is not None:
            self._release_values(vals)
        it.outstanding -= 1     # the caller's own decrement follows; the iteration stays alive until then

    def _new_iteration(self, frame, ready):
        sub = Iter(frame, frame.next_num)
        frame.iters[frame.next_num] = sub
        frame.next_num += 1
        for e, v in frame.inv:
            self._propagate(e, sub, (v,) if v is not DEAD else None, ready)
        return sub

    def _next_iteration(self, i, it, v, ready):
        """Send v to the next iteration; False when it had to wait (parallel_iterations in flight)."""
        frame = it.frame
        nxt = frame.iters.get(it.num + 1)
        if nxt is None:
            if frame.deferred or frame.next_num - frame.oldest >= frame.max_par:
                frame.deferred.append((i, v))     # at most max_par iterations in flight
                return False
            nxt = self._new_iteration(frame, ready)
        self._propagate(i, nxt, (v,), ready)
        return True

    def _cleanup(self, frame, ready):
        """Retire finished iterations in order; finish the frame when nothing is left."""
        if frame.pending_enters > 0:
            return
        iters = frame.iters
        while True:
            sub = iters.get(frame.oldest)
            if sub is None or sub.outstanding > 0:
                break
            del iters[frame.oldest]
            frame.oldest += 1
            if frame.deferred and frame.next_num - frame.oldest < frame.max_par:
                deferred, frame.deferred = frame.deferred, []
                nxt = self._new_iteration(frame, ready)
                for e, v in deferred:
                    self._propagate(e, nxt, (v,), ready)
                    if self.mem is not None:
                        self.mem.release(v)
        if iters or frame.deferred or frame.parent_iter is None:
            return
        parent = frame.parent_iter
        for e in self.p.frame_exits[frame.fid]:
            if e not in frame.live_exits:       # a loop that never ran live: its exits are dead
                self._propagate(e, parent, None, ready)
        if self.mem is not None:
            for _, v in frame.inv:
                if v is not DEAD:
                    self.mem.release(v)
        del parent.children[frame.fid]
        parent.outstanding -= 1
        if parent.outstanding == 0:
            self._cleanup(parent.frame, ready)

    # -------------------------------------------------------------- diagnostics
    def _stuck(self, it0, fetch_name):
        names = []
        self._collect_pending(it0, names)
        shown = ", ".join(sorted(set(names))[:10]) or "none"
        raise DfcDeadlockError(f"execution stopped before {fetch_name!r} was computed; nodes still waiting "
                               f"for inputs: {shown}", node=fetch_name)

    def waiting_nodes(self):
        """Names of the nodes this (quiescent) run still waits on: posted Recvs first."""
        p = self.p
        names = []
        for i, tag in self.recv_waits:
            a = p.nodes[i].attrs
            where = "".join(f" in {p.frame_names[tag[k]]} iteration {tag[k + 1]}" for k in range(0, len(tag), 2))
            names.append(f"{p.nodes[i].name} (Recv of {a['tensor_name']} from {a['send_device']}{where})")
        for i, tag in self.async_waits:
            names.append(f"{p.nodes[i].name} ({p.nodes[i].op}, waiting)")
        pending = []
        if hasattr(self, "it0"):
            self._collect_pending(self.it0, pending)
        return names + sorted(set(pending))

    def _collect_pending(self, it, names):
        for dst, st in it.states.items():
            if st is not FIRED:
                names.append(self._pending_name(dst, st))
        for key, child in it.children.items():
            if isinstance(key, tuple):      # a fused frame still collecting its Enter values
                fname = self.p.frame_names[key[1]]
                names.append(f"frame {fname} (fused; waiting for {child[0]} Enter value(s))")
                continue
            fname = self.p.frame_names[child.fid]
            if child.pending_enters:
                names.append(f"frame {fname} (waiting for {child.pending_enters} Enter value(s))")
            for sub in child.iters.values():
                self._collect_pending(sub, names)

    def _pending_name(self, i, st):
        """The name of node i, waiting with pending state st; for a chain (chains.py), its member whose
        input is missing, and the chain's first node."""
        p = self.p
        chain = p.chains.get(i)
        if chain is not None:
            missing = {k for k, a in enumerate(st.args) if a is None}
            for member, spec in zip(chain, p.kern[i].specs):
                if missing.intersection(spec):
                    if member != i:
                        return f"{p.nodes[member].name} (in the chain from {p.nodes[i].name})"
                    break
        return p.nodes[i].name


def _declared_types(graph, fetches):
    """The static type of each fetch, or None where the graph's types cannot be inferred."""
    try:
        types = graph.infer_types()
    except DfcError:
        return [None] * len(fetches)
    out = []
    for f in fetches:
        name, port, _ = parse_input(f)
        ts = types.get(name)
        out.append(ts[port] if ts is not None and 0 <= port < len(ts) else None)
    return out


def check_fetches(graph, fetches, values):
    """Raise a DfcRuntimeError if a fetched value differs from the type the graph declares for it."""
    for f, v, t in zip(fetches, values, _declared_types(graph, fetches)):
        _check_declared(v, t, parse_input(f)[0])


def _check_declared(v, t, node):
    """A fetched value must have the dtype and shape the graph declares: a loaded graph's attrs could
    declare one type and compute another, and callers trust the declaration."""
    if t is None or t.dtype == dt.HANDLE:
        return
    dtype = getattr(v, "dtype", None)
    if dtype is None or dtype != t.dtype or not dt.shapes_compatible(tuple(v.shape), t.shape):
        got = f"{dtype}{list(getattr(v, 'shape', ()))}" if dtype is not None else type(v).__name__
        raise DfcRuntimeError(f"computed {got}, but the graph declares {t!r}: the graph's declared types "
                              f"do not match what it computes", node=node)


def default_printer(text):
    sys.stdout.write(text)
    sys.stdout.flush()


class PartitionedRun:
    """One step of a partitioned graph: every partition's Run on its own thread, talking only through
    Send/Recv. The first error stops all partitions; if every partition waits for a value that can
    never arrive, a DfcDeadlockError names what each one waits for."""

    def __init__(self, runs, fetch_order):
        self.runs, self.fetch_order = runs, fetch_order     # runs: device -> Run; fetch_order: [(device, k)]

    def execute(self):
        import threading
        from dfc.runtime.rendezvous import Aborted
        results, errors, aborted = {}, [], []
        coord = next(iter(self.runs.values())).transport.coord

        def work(name, run):
            try:
                with run.p.device.run_context() if run.p.device is not None else contextlib.nullcontext():
                    results[name] = run.execute()
                coord.finish(name)
            except Aborted:
                aborted.append(name)
            except BaseException as e:   # noqa: BLE001 — reported to the caller's thread
                errors.append(e)
                coord.fail()

        threads = [threading.Thread(target=work, args=(name, run), name=f"dfc-{name}", daemon=True)
                   for name, run in self.runs.items()]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.1)     # not one long wait: the caller can still be interrupted
        except BaseException:       # KeyboardInterrupt, or the caller's own timeout: stop the partitions
            coord.fail()
            for t in threads:
                t.join(1.0)
            raise
        if errors:
            raise errors[0]
        if aborted and coord.abort_reason not in (None, "deadlock"):    # stopped from outside (a cluster's chief)
            raise Aborted(coord.abort_reason)
        if coord.abort_reason == "deadlock":
            waits = []
            for name, run in sorted(self.runs.items()):
                w = run.waiting_nodes()
                if w:
                    waits.append(f"{name}: " + ", ".join(w[:6]) + (" ..." if len(w) > 6 else ""))
            first = next((r.p.nodes[i].name for _, r in sorted(self.runs.items())
                          for (i, _t) in r.recv_waits), None)
            raise DfcDeadlockError("partitions stopped before the fetches were computed; nodes still waiting: "
                                   + ("; ".join(waits) or "none"), node=first)
        return [results[d][k] for d, k in self.fetch_order]
