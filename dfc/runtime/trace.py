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
executor keeps its kernel table unwrapped. Recording is thread-safe (one
lock); a session's trace keeps every run, so each write holds all the runs
so far (a long Python loop of runs makes a large file: trace a few runs).
The reference interpreter (mode="reference") records only the run spans;
a cluster step (dfc/runtime/cluster) is not traced yet.
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
        self._lock = threading.Lock()
        self._events = []
        self._pids = {}          # process name -> pid
        self._tids = {}          # (pid, lane) -> tid
        self._packed = {}        # (pid, lane) -> end time of the last span of each sub-lane
        self._t0 = time.perf_counter()

    # ------------------------------------------------------------------ recording
    def now(self):
        """Microseconds since this Trace was made."""
        return (time.perf_counter() - self._t0) * 1e6

    def process_name(self, device):
        device = device or "cpu:0"
        if self.task and "/" not in device:
            return f"{self.task}/{device}"
        return device

    def span(self, device, lane, name, start, end, cat, args=None):
        """A complete ("X") event on `lane` of `device`'s process (device=None: the session process)."""
        with self._lock:
            pid, tid = self._lane(device, lane)
            self._add(pid, tid, name, start, end, cat, args)

    def packed_span(self, device, lane, name, start, end, cat, args=None):
        """Like span, for spans that may overlap (Recvs waiting at once): a span goes to the first of
        `lane`, `lane 2`, ... whose last span ended before it started, so every lane nests properly.
        Spans must be recorded in the order they end (as they are: at their end, under the lock)."""
        with self._lock:
            key = (device, lane)
            ends = self._packed.setdefault(key, [])
            k = next((j for j, e in enumerate(ends) if e <= start), len(ends))
            if k == len(ends):
                ends.append(end)
            else:
                ends[k] = end
            pid, tid = self._lane(device, lane if k == 0 else f"{lane} {k + 1}")
            self._add(pid, tid, name, start, end, cat, args)

    def _lane(self, device, lane):
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
        return pid, tid

    def _add(self, pid, tid, name, start, end, cat, args):
        ev = {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": round(start, 3),
              "dur": round(max(end - start, 0.0), 3)}
        if args:
            ev["args"] = args
        self._events.append(ev)

    # ------------------------------------------------------------------ output
    def events(self):
        """A copy of the trace events recorded so far."""
        with self._lock:
            return list(self._events)

    def to_json(self):
        return {"traceEvents": self.events(), "displayTimeUnit": "ms",
                "otherData": {"producer": "dfc"}}

    def write(self, path):
        """Write the trace-event file (atomically: a reader never sees half a file)."""
        data = json.dumps(self.to_json(), separators=(",", ":"))
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(data)
        os.replace(tmp, path)

    # ------------------------------------------------------------------ executor hooks
    def instrument(self, run):
        """Wrap the kernels of an executor Run (dfc/runtime/executor.py) so each call is a span."""
        p = run.p
        device = p.device.name if p.device is not None else "cpu:0"
        fed = set(p.feed_index.values())
        for i, k in enumerate(run.kern):
            if k is not None and i not in fed:
                run.kern[i] = self._traced_kernel(k, p, i, device)

    def _traced_kernel(self, kern, plan, i, device):
        node = plan.nodes[i]
        name, op = node.name, node.op
        frame_names = plan.frame_names

        def traced(ctx, args, tag=None):
            start = self.now()
            try:
                return kern(ctx, args)
            finally:
                end = self.now()
                t = ctx.tag if tag is None else tag
                lane = "scheduler" if tag is None else f"pool {threading.current_thread().name}"
                self.span(device, lane, name, start, end, "kernel", kernel_args(op, name, t, frame_names))
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


def swap_span(trace, device, lane, start, nbytes, node=None):
    """A copy between device and host memory (memory.py's I/O threads, or a StackPop's own copy-in)."""
    args = {"bytes": int(nbytes)}
    if node:
        args["node"] = node
    trace.span(device, lane, f"{lane} {nbytes} B", start, trace.now(), "swap", args)
