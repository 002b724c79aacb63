"""Timelines of runs as Chrome trace-event files (whitepaper §9.2 "EEG", Figure 13 of the paper).

`Session(graph, trace="run.json")` records a `Trace` while it runs and
writes it after every run; `dfc run ... --trace out.json` does the same for
one run of a loaded graph. The file is the standard trace-event JSON
(`{"traceEvents": [...], "displayTimeUnit": "ms"}`) that Perfetto
(ui.perfetto.dev) and chrome://tracing open. Times are microseconds since the
Trace was made.

Lanes (a trace "process" per device, "threads" inside it):

- process `session`, thread `runs`: one span per `Session.run` ("run 3").
- process per device (`cpu:0`, `accel:0`, `worker:1/cpu:0`; with a task
  prefix, `TASK/DEVICE`), thread `scheduler`: the kernels the device's
  scheduler thread runs inline, and one span per run of a fused loop frame
  ("frame while_1") with the kernels of its iterations nested inside;
  threads `pool dfc-kernel_N`: kernels run on the session's thread pool.
- threads `send` and `recv`: a span per Send (putting the value in the
  rendezvous) and per Recv (from posting the request to the value's
  arrival; Recvs that overlap go to `recv 2`, `recv 3`, ...).
- threads `swap out`, `prefetch` and `swap in` on a device that swaps
  (dfc/runtime/memory.py): copies of stack tensors to host, prefetches back
  to the device, and copies back that a StackPop had to wait for.

A kernel span is named after its node and carries `args`: `op`, `node`, and
inside a loop `frame` and `iteration` (the innermost frame) plus `frames`
("outer[2]/inner[5]") for nested loops. Fed nodes are not spans.

With `trace=None` (the default) nothing here is imported or called: the
executor keeps its kernel table unwrapped. Recording is thread-safe (a span
is one list append; a lock only makes new lanes); a session's trace keeps
every run, so each write holds all the runs so far (a long Python loop of
runs makes a large file: trace a few runs).
The reference interpreter (mode="reference") records only the run spans.
On a cluster (dfc/runtime/cluster) each task records its own partitions' spans
for the step and the chief merges them: lanes `worker:1/cpu:0` etc., on the
chief's clock (wall-clock aligned; exact on one machine).
"""
import json
import os
import threading
import time

SESSION_PROCESS = "session"


class Trace:
    """Spans of one or more runs, written as a Chrome trace-event file by `write(path)`.

    task: a prefix for device lanes ("worker:1" makes lane `worker:1/cpu:0`), for traces recorded in
    one task of a cluster; device names that already name a task keep theirs.
    """

    def __init__(self, task=None):
        self.task = task
        self._lock = threading.Lock()       # taken to make a lane; a span is one list append (atomic)
        self._events = []        # metadata dicts and spans (lane ids, name, start, end, cat, args)
        self._pids = {}          # process name -> pid
        self._tids = {}          # (pid, lane) -> tid
        self._ids = {}           # (device, lane) -> (pid, tid)
        self._packed = {}        # (device, lane) -> end time of the last span of each sub-lane
        self._encoded, self._chunks = 0, []     # events already turned into JSON text by write()
        self._t0 = time.perf_counter()
        self.wall0 = time.time()     # the same instant on the wall clock (to merge other processes' traces)

    # ------------------------------------------------------------------ recording
    def now(self):
        """Microseconds since this Trace was made."""
        return (time.perf_counter() - self._t0) * 1e6

    def process_name(self, device):
        device = device or "cpu:0"
        if self.task and "/" not in device:
            return f"{self.task}/{device}"
        return device

    def lane(self, device, lane):
        """(pid, tid) of `lane` in `device`'s process (device=None: the session process), made on first use."""
        ids = self._ids.get((device, lane))
        if ids is None:
            with self._lock:
                ids = self._ids.get((device, lane)) or self._new_lane(device, lane)
        return ids

    def span(self, device, lane, name, start, end, cat, args=None):
        """A complete ("X") event on `lane` of `device`'s process (device=None: the session process)."""
        self._events.append((self.lane(device, lane), name, start, end, cat, args))

    def packed_span(self, device, lane, name, start, end, cat, args=None):
        """Like span, for spans that may overlap (Recvs waiting at once): a span goes to the first of
        `lane`, `lane 2`, ... whose last span ended before it started, so every lane nests properly.
        Spans must be recorded in the order they end (as they are: at their end, under the lock)."""
        with self._lock:
            ends = self._packed.setdefault((device, lane), [])
            k = next((j for j, e in enumerate(ends) if e <= start), len(ends))
            if k == len(ends):
                ends.append(end)
            else:
                ends[k] = end
            sub = lane if k == 0 else f"{lane} {k + 1}"
            ids = self._ids.get((device, sub)) or self._new_lane(device, sub)
            self._events.append((ids, name, start, end, cat, args))

    def _new_lane(self, device, lane):
        pname = SESSION_PROCESS if device is None else self.process_name(device)
        pid = self._pids.get(pname)
        if pid is None:
            pid = self._pids[pname] = len(self._pids) + 1
            self._events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                 "args": {"name": pname}})
            self._events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                 "args": {"sort_index": 0 if device is None else pid}})
        tid = self._tids.get((pid, lane))
        if tid is None:
            tid = self._tids[(pid, lane)] = len([k for k in self._tids if k[0] == pid]) + 1
            self._events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": lane}})
            self._events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                                 "args": {"sort_index": tid}})
        self._ids[(device, lane)] = (pid, tid)
        return pid, tid

    def merge(self, events, wall0):
        """Add the events another process's Trace recorded (its `events()`, made at wall-clock `wall0`): a
        cluster task's spans of one step, on lanes named after its devices, shifted onto this trace's clock
        (exact on one machine; across machines, as good as their clocks agree)."""
        shift = (wall0 - self.wall0) * 1e6
        pnames, lanes = {}, {}
        for e in events:
            if e.get("ph") == "M" and e["name"] == "process_name":
                pnames[e["pid"]] = e["args"]["name"]
            elif e.get("ph") == "M" and e["name"] == "thread_name":
                lanes[(e["pid"], e["tid"])] = e["args"]["name"]
        for e in events:
            if e.get("ph") != "X":
                continue
            pname, lane = pnames.get(e["pid"], "?"), lanes.get((e["pid"], e["tid"]), "?")
            ids = self.lane(pname if "/" in pname else f"?/{pname}", lane)
            start = e["ts"] + shift
            self._events.append((ids, e["name"], start, start + e["dur"], e.get("cat", ""), e.get("args")))

    # ------------------------------------------------------------------ output
    def events(self):
        """The trace events recorded so far, as trace-event dicts."""
        return [_event(e) for e in self._events[:len(self._events)]]

    def write(self, path):
        """Write the trace-event file (atomically: a reader never sees half a file). Events written before
        are not encoded again."""
        n = len(self._events)
        if n > self._encoded:
            text = json.dumps([_event(e) for e in self._events[self._encoded:n]], separators=(",", ":"))
            self._chunks.append(text[1:-1])
            self._encoded = n
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write('{"traceEvents":[')
            f.write(",".join(self._chunks))
            f.write('],"displayTimeUnit":"ms","otherData":{"producer":"dfc"}}')
        os.replace(tmp, path)

    # ------------------------------------------------------------------ executor hooks
    def instrument(self, run):
        """Wrap the kernels of an executor Run (dfc/runtime/executor.py) so each call is a span."""
        p = run.p
        device = p.device.name if p.device is not None else "cpu:0"
        fed = set(p.feed_index.values())
        for i, k in enumerate(run.kern):
            if k is not None and i not in fed:
                chain = getattr(k, "with_kernels", None)       # a chain (chains.py): a span per member
                run.kern[i] = self._traced_kernel(k, p, i, device) if chain is None else \
                    chain(lambda j, kern: self._traced_kernel(kern, p, j, device))

    def _traced_kernel(self, kern, plan, i, device):
        node = plan.nodes[i]
        name, op = node.name, node.op
        frame_names = plan.frame_names
        now, append, lane = self.now, self._events.append, self.lane
        scheduler = lane(device, "scheduler")

        def traced(ctx, args, tag=None):
            start = now()
            try:
                return kern(ctx, args)
            finally:
                if tag is None:
                    ids, tag = scheduler, ctx.tag
                else:
                    ids = lane(device, "pool " + threading.current_thread().name)
                append((ids, name, start, now(), "kernel", (op, name, tag, frame_names)))
        return traced

    def fused(self, run, prog):
        """The function to call for a fused frame (dfc/runtime/fused.py) of `run`: its traced build
        (every kernel through the kernel table, ctx.tag set each iteration) inside a frame span. A
        program without a traced build (a frame compiled to machine code) is one span, no kernels."""
        traced_fn = getattr(prog, "traced_fn", None)
        fn = prog.fn if traced_fn is None else traced_fn()
        p = run.p
        device = p.device.name if p.device is not None else "cpu:0"
        fname = p.frame_names[prog.fid]

        def call(ctx, kern, enters, tag):
            start = self.now()
            try:
                return fn(ctx, kern, enters, tag)
            finally:
                ctx.tag = tag
                self.span(device, "scheduler", f"frame {fname}", start, self.now(), "frame",
                          dict(frame_args(tag, p.frame_names), fused_frame=fname))
        return call

    def transfer(self, run, i, tag, start, kind):
        """A Send (kind "send") or Recv ("recv") of node i in iteration `tag`, started at `start`."""
        p = run.p
        a = p.nodes[i].attrs
        device = p.device.name if p.device is not None else "cpu:0"
        args = dict(frame_args(tag, p.frame_names), node=p.nodes[i].name, tensor=a["tensor_name"],
                    send_device=a["send_device"], recv_device=a["recv_device"])
        title = f"{kind} {a['tensor_name']}"
        if kind == "send":
            self.span(device, "send", title, start, self.now(), "send", args)
        else:
            self.packed_span(device, "recv", title, start, self.now(), "recv", args)


def frame_args(tag, frame_names):
    """{"frame", "iteration", "frames"} of a frame tag (fid, n, fid, n, ...); {} in the root frame."""
    if not tag:
        return {}
    pairs = [(frame_names[tag[k]], tag[k + 1]) for k in range(0, len(tag), 2)]
    out = {"frame": pairs[-1][0], "iteration": pairs[-1][1]}
    if len(pairs) > 1:
        out["frames"] = "/".join(f"{f}[{n}]" for f, n in pairs)
    return out


def kernel_args(op, name, tag, frame_names):
    args = {"op": op, "node": name}
    args.update(frame_args(tag, frame_names))
    return args


def _event(e):
    """A recorded event as a trace-event dict (a kernel's args are made here, not while it runs)."""
    if isinstance(e, dict):
        return e
    (pid, tid), name, start, end, cat, args = e
    ev = {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": round(start, 3),
          "dur": round(max(end - start, 0.0), 3)}
    if isinstance(args, tuple):
        args = kernel_args(*args)
    if args:
        ev["args"] = args
    return ev


def swap_span(trace, device, lane, start, nbytes, node=None):
    """A copy between device and host memory (memory.py's I/O threads, or a StackPop's own copy-in)."""
    args = {"bytes": int(nbytes)}
    if node:
        args["node"] = node
    trace.span(device, lane, f"{lane} {nbytes} B", start, trace.now(), "swap", args)


def node_costs(source, steps=1):
    """node name -> seconds its kernels ran per step in a trace (`Session(trace=...)`'s file, or its list of
    events), for `Session(placement_costs=...)`: the placer then uses what each node cost instead of its
    fixed cost model (whitepaper §3.2.1). `steps`: how many steps the trace recorded. Nodes of a frame
    compiled to machine code have no kernel spans of their own and keep the model's estimate."""
    if isinstance(source, (str, os.PathLike)):
        with open(source) as f:
            source = json.load(f)
    events = source.get("traceEvents", []) if isinstance(source, dict) else source
    costs = {}
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") == "X" and e.get("cat") == "kernel" and "node" in args:
            costs[args["node"]] = costs.get(args["node"], 0.0) + e.get("dur", 0.0) * 1e-6 / steps
    return costs
