"""Session: feed/fetch execution of a Graph (whitepaper §4.2).

`Session(graph).run(fetches, feeds)` runs only the subgraph the fetches (and
the graph's side-effect targets, when asked) need. `mode="reference"` runs
the reference interpreter (dfc/runtime/reference.py: the definition of the
semantics, one thread, whole graph, devices ignored); `mode="threads"` (the
default) the production executor: kernels on a pool of `num_threads`
threads (default: the cores this process may use, or $DFC_NUM_THREADS; 0: every
kernel inline), fused loops (a loop with heavy work its iterations can share runs
unfused to overlap them, dfc/runtime/overlap.py), partitions per device. `compile_loops`
("auto", the default, or $DFC_COMPILE_LOOPS) runs fused loop frames as numba machine code
(dfc/runtime/compiled/): "auto" once a frame's fused runs took 0.5 s, compiled by a child
process while the frame keeps running fused; True compiles on the first run in this process;
False never compiles. `compiled_frames()` says which frames compile and what blocks the
others. Variables live in a
resource container (dfc/runtime/containers.py), not in the session: by
default the process's default container, shared by every graph and session,
so state persists across runs, sessions and graphs; `container="name"` gives
a session's Variables their own named container.

Save/Restore (checkpoints) touch files under `checkpoint_dir` only. A graph
loaded from JSON may name only relative paths inside it (default: the
current directory); a graph traced in this process uses the paths its code
wrote unless a checkpoint_dir is given.

Devices (dfc/runtime/devices.py, partition.py): nodes run on the device of
their `dfc.device` scope after `device_map` ({"gpu:0": "accel:0"}), the rest
are placed by a cost model among the devices in use (`devices` adds more);
`placement_costs` (a trace file of an earlier run, or node -> seconds) replaces the
model's estimates by what each node cost then (whitepaper §3.2.1).
A graph on one device runs on one executor; otherwise it is partitioned and
each device's partition runs on its own thread, talking through Send/Recv.
`memory_caps` sets accelerator capacities; `memory_stats()` and
`peak_bytes()` report bytes per device; swap_* options control §5.3 swapping.

Observing runs: `trace="run.json"` records a Chrome trace-event timeline
(dfc/runtime/trace.py) and rewrites the file after every run with all the
runs so far; `summary_dir` is where summary ops write TensorBoard events
(default: the calling thread's `dfc.summary.create_file_writer(...)
.as_default()`, else $DFC_SUMMARY_DIR, else nowhere;
dfc/runtime/kernels/summary_kernels.py); `progress` turns the bars of
progress ops on (True), off (False) or on only when stderr is a terminal
(None; dfc/runtime/kernels/progress_kernels.py).
"""
import contextlib
import dataclasses
import os
import threading
import time
import weakref

import numpy as np

from dfc import config
from dfc import nest
from dfc.errors import DfcInputError, DfcError
from dfc.ir import dtypes as dt
from dfc.ir import structure
from dfc.ir.graph import parse_input
from dfc.runtime import checkpoints, containers, cse, devices, folding, host_memory, reference
from dfc.runtime.executor import Plan, Run, KernelContext, default_printer, Transport, PartitionedRun, check_fetches
from dfc.runtime.limits import MemoryLimit
from dfc.runtime.options import RunOptions
from dfc.traceback_filter import api_boundary

MODES = ("reference", "threads")


def _costs(placement_costs):
    """Session(placement_costs=): node -> seconds, or a trace file of an earlier run (trace.node_costs)."""
    if placement_costs is None or isinstance(placement_costs, dict):
        return placement_costs
    from dfc.runtime.trace import node_costs
    try:
        return node_costs(placement_costs)
    except (OSError, ValueError) as e:
        raise DfcError(f"placement_costs: cannot read the trace {placement_costs!r}: {e}") from None


def default_mode():
    return config.env("DFC_EXECUTOR")


def default_num_threads():
    """The kernel pool's size when a Session does not give num_threads: $DFC_NUM_THREADS if set, else the
    number of cores this process may run on (0 runs every kernel inline on the scheduler thread)."""
    n = config.env("DFC_NUM_THREADS")
    if n is not None:
        return n
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 2


class Session:
    """Runs a Graph: `run(fetches, feeds)` computes the fetched tensors (and the graph's side effects when
    asked), `call(*args)` runs its signature and returns outputs in their nesting. The module docstring
    lists the options (mode, threads, devices, memory, swapping, containers, checkpoints, tracing,
    clusters). A Session keeps its plans, thread pool and device state across runs; Variables live in
    resource containers, not in the Session."""
    def __init__(self, graph, options=None, **keywords):
        """options: a dfc.RunOptions (dfc/runtime/options.py lists and documents every option); keywords: the
        same options by name, on top of it (Session(g, num_threads=0, trace="run.json"))."""
        o = self.options = RunOptions.of(options, keywords)
        (mode, num_threads, parallel_iterations, printer, fuse_loops, compile_loops, device_map, devices,
         default_device, placement_costs, memory_caps, track_memory, memory_limit, swap_memory, swap_threshold,
         swap_min_bytes, swap_prefetch, container, checkpoint_dir, cluster, wire_compression, object_store_bytes,
         trace, summary_dir, progress) = (getattr(o, f.name) for f in dataclasses.fields(o))
        mode = mode or default_mode()
        if mode not in MODES:
            raise DfcError(f"unknown executor mode {mode!r} (use one of {', '.join(MODES)})")
        if mode == "reference" and (memory_caps or track_memory or swap_memory):
            raise DfcError("the reference interpreter does not model device memory (memory_caps, track_memory, "
                           "swap_memory); use mode='threads' (num_threads=0 runs every kernel inline)")
        self.graph, self.mode = graph, mode
        host_memory.keep_freed_memory()     # glibc's malloc keeps freed blocks for the next step (once)
        # Loop fusion is the fast path of "threads" mode; the reference interpreter never fuses.
        self.fuse_loops = (mode == "threads") if fuse_loops is None else bool(fuse_loops)
        # Fused frames compiled to machine code with numba (dfc/runtime/compiled/): True compiles each
        # frame on its first run, in this process (numba's compile, cached on disk after that); "auto" (the
        # default) has a child process compile a frame once its fused runs took long enough, and runs it
        # compiled when the machine code is in the disk cache; False never compiles. DFC_COMPILE_LOOPS=
        # 1/auto/0 sets the default.
        if compile_loops is None:
            compile_loops = config.env("DFC_COMPILE_LOOPS")
        if compile_loops not in (True, False, "auto"):
            raise DfcError(f"compile_loops must be True, False or 'auto', not {compile_loops!r}")
        self.compile_loops = compile_loops if self.fuse_loops else False
        self.parallel_iterations = parallel_iterations
        self.printer = printer or default_printer
        self.container = containers.get(container).name     # where Variables without a container live
        self.checkpoint_dir = checkpoint_dir
        # Bytes (int, or "2GB" / "512MiB") the kernels may hold at once; past it, DfcOutOfMemory.
        self.memory_limit = MemoryLimit.of(memory_limit)
        self.run_count = 0
        self.trace_path, self.trace = _trace_file(trace), None
        if self.trace_path is not None:
            from dfc.runtime.trace import Trace
            self.trace = Trace()
        self.summary_dir, self.progress = summary_dir, progress
        self._observes = None     # whether the graph has ops a summary writer or progress display serves
        self._summary = self._progress = None     # this run's summary writer and progress display
        self._plans = {}
        self._pool = None
        self._num_threads = default_num_threads() if num_threads is None else int(num_threads)
        self._lock = threading.Lock()
        graph.verify()
        self.files = checkpoints.Directory(checkpoint_dir, confined=graph.from_file)
        checkpoints.check_graph(graph, self.files)
        from dfc.runtime.devices import DeviceSet, default_device as process_default_device
        self.devices = DeviceSet(memory_caps, track_memory)
        default_device = default_device or process_default_device()
        self.swap_options = dict(threshold=float(swap_threshold), min_bytes=int(swap_min_bytes),
                                 prefetch=int(swap_prefetch), always=bool(swap_memory))
        self._swappers = {}
        self.placement = None      # node name -> device, when the graph uses devices at all
        if device_map or devices or default_device != "cpu:0" or memory_caps or track_memory or \
                any(n.device for n in graph.nodes.values()):
            from dfc.runtime.partition import place
            self.placement = place(graph, self.devices, device_map, default_device, devices,
                                   _costs(placement_costs))
        # Clusters (dfc/runtime/cluster): partitions of devices named JOB:TASK/KIND:N run in that task's
        # process; the chief (this process) feeds, runs its own devices' partitions and collects fetches.
        self.cluster = cluster
        if wire_compression not in (None, "bfloat16"):
            raise DfcError(f"wire_compression must be None or 'bfloat16', not {wire_compression!r}")
        self.wire_compression, self.object_store_bytes = wire_compression, object_store_bytes
        self._wire_bytes = 0
        self._cluster_steps = set()     # cluster steps in flight (cancel() aborts them)
        if mode == "reference" and cluster is not None:
            raise DfcError("the reference interpreter runs in one process; a cluster needs mode='threads'")
        if self.placement is not None and (cluster is not None or any("/" in d for d in self.placement.values())):
            from dfc.runtime.cluster.step import check_tasks
            check_tasks(cluster, self.placement)
        # compile_loops="auto" on one host device: each run compiles whole to XLA in the background
        # (dfc/runtime/xla/auto.py); numba compiles the loop frames of the runs XLA refuses.
        self._xla_runs = None
        if self.compile_loops == "auto" and self.placement is None and cluster is None and self.trace is None \
                and self.memory_limit is None and container is None and not swap_memory:
            from dfc.runtime.xla import auto
            self._xla_runs = {} if auto.available() else None

    def _get_pool(self):
        if self._num_threads <= 0:
            return None
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor
            self._pool = ThreadPoolExecutor(self._num_threads, thread_name_prefix="dfc-kernel")
        return self._pool

    def plan(self, fetches, feed_names, targets):
        """A Plan (one device) or a _Partitioned (several) for these fetches, feeds and targets."""
        key = _plan_key(fetches, feed_names, targets)
        p = self._plans.get(key)
        if p is None:
            # with runs compiled by XLA, numba waits until XLA refuses the run (then _xla_run replans)
            numba = self.compile_loops if self._xla_runs is None else False
            p = self._plans[key] = self._make_plan(fetches, set(feed_names), targets, numba)
        return p

    def _xla_run(self, fetches, feeds, targets):
        """The XlaRun of this run (None where runs do not compile to XLA); a run XLA refused is replanned
        with numba compiling its loop frames."""
        key = _plan_key(fetches, feeds, targets)     # (the plan's own: a refused run replaces its plan)
        xr = self._xla_runs.get(key)
        if xr is None:
            from dfc.runtime.xla.auto import XlaRun
            xr = self._xla_runs[key] = XlaRun(self.graph, fetches, feeds.keys(), targets)
        elif xr.state == "refused" and not xr.replanned:
            xr.replanned = True
            self._plans[key] = self._make_plan(list(fetches), set(feeds), tuple(targets), self.compile_loops)
        return xr

    def compiled_runs(self):
        """How each run of this Session compiles to XLA (compile_loops="auto"): a list of dicts with the
        run's fetches, its state ("fused" before the compile starts, "compiling", "trial", "compiled",
        "slower", "refused", "failed"), the reason where it did not compile, the compile seconds and the
        median fused and compiled milliseconds."""
        return [dict(fetches=list(k[0]), **xr.describe()) for k, xr in (self._xla_runs or {}).items()]

    def _make_plan(self, fetches, feed_names, targets, compile_loops=False):
        kw = dict(parallel_iterations=self.parallel_iterations, fuse=self.fuse_loops, memory_limit=self.memory_limit,
                  overlap=self._num_threads > 0, compile_loops=compile_loops)
        if self.placement is None:
            graph = self._optimized(self.graph, fetches, feed_names, targets, fold=self.fuse_loops)
            return Plan(graph, fetches, feed_names, targets, **kw)
        from dfc.runtime import partition as pt
        sub = pt.prune(self.graph, [parse_input(f)[0] for f in fetches], targets, feed_names)
        used = {self.placement[n] for n in sub.nodes}
        sub = self._optimized(sub, fetches, feed_names, targets, fold=False)
        if len(used) <= 1 and not (self.cluster is not None and any("/" in d for d in used)):
            dev = self.devices.get(used.pop() if used else "cpu:0")
            return Plan(sub, fetches, feed_names, targets, device=dev, **kw)
        frame_ids = pt.frame_ids_of(self.graph)
        if self.cluster is not None and any("/" in d for d in used):
            from dfc.runtime.cluster.step import ClusterPlan
            return ClusterPlan(pt.partition(sub, self.placement, frame_ids), fetches, feed_names, targets,
                               self.devices, frame_ids, kw)
        parts = pt.partition(sub, self.placement, frame_ids)
        return _Partitioned(parts, fetches, feed_names, targets, self.devices, frame_ids, kw)

    def _swapper(self, device):
        if device is None or device.memory is None or device.memory.capacity is None:
            return None
        sw = self._swappers.get(device.name)
        if sw is None:
            from dfc.runtime.memory import Swapper
            sw = self._swappers[device.name] = Swapper(device, **self.swap_options)
            sw.trace = self.trace
        return sw

    def _context(self, device=None):
        mem = device.memory if device is not None else None
        ctx = KernelContext(self._container, self.run_count, self.printer, memory=mem,
                            swapper=self._swapper(device) if mem is not None else None, device=device,
                            files=self.files, memory_limit=self.memory_limit)
        ctx.trace, ctx.summary, ctx.progress = self.trace, self._summary, self._progress
        return ctx

    @contextlib.contextmanager
    def _observed(self):
        """One run, observed: its summary writer and progress display are chosen as it starts (in the
        caller's thread); after it, summaries are flushed, the bars settle and the trace file is written."""
        from dfc.runtime.kernels import progress_kernels, summary_kernels
        if self._observes is None:      # (looked up once: a writer and a display cost ~4 us a run)
            self._observes = not {n.op for n in self.graph.nodes.values()}.isdisjoint(_OBSERVING_OPS)
        if not self._observes and self.trace is None:
            self._summary = self._progress = None
            yield
            return
        self._summary = summary_kernels.writer_for_run(self.summary_dir)
        self._progress = progress_kernels.display_for_run(self.progress)
        start = self.trace.now() if self.trace is not None else None
        try:
            yield
        finally:
            if self._summary is not None:
                self._summary.flush()
            if self._progress is not None:
                self._progress.end_run()
            if start is not None:
                self.trace.span(None, "runs", f"run {self.run_count}", start, self.trace.now(), "run",
                                {"mode": self.mode})
                self.trace.write(self.trace_path)

    def _container(self, name):
        return containers.get(name or self.container)

    def variables(self):
        """shared name -> current value of the Variables in this session's default container."""
        return containers.get(self.container).snapshot()

    def _execute(self, plan, feeds):
        if isinstance(plan, Plan):
            dev = plan.device
            if dev is not None and dev.device_arrays:
                feeds = {k: dev.to_device(v) for k, v in feeds.items()}
                with dev.run_context():
                    return Run(plan, feeds, self._context(dev), None).execute()
            return Run(plan, feeds, self._context(dev), self._get_pool()).execute()
        from dfc.runtime.rendezvous import Rendezvous, Coordinator
        rv, coord = Rendezvous(), Coordinator(list(plan.plans))
        runs = {}
        for d, p in plan.plans.items():
            dev = p.device
            mine = {k: dev.to_device(v) for k, v in feeds.items() if k in plan.feeds_of[d]}
            pool = None if dev.device_arrays else self._get_pool()   # GPU kernels are queued on its stream
            runs[d] = Run(p, mine, self._context(dev), pool, Transport(d, rv, coord))
        return PartitionedRun(runs, plan.fetch_order).execute()

    def cancel(self, reason="cancelled"):
        """Abort this session's cluster steps in flight, e.g. steps waiting on a queue nobody will fill
        any more: each raises DfcRuntimeError naming `reason`, and the tasks stay usable. Returns how
        many steps were cancelled."""
        with self._lock:
            steps = list(self._cluster_steps)
        for step in steps:
            step.cancel(reason)
        return len(steps)

    def wire_stats(self):
        """Bytes this session's steps sent between the processes of its cluster (after compression)."""
        return {"bytes_sent": self._wire_bytes, "compression": self.wire_compression}

    def fused_frames(self, names=None):
        """frame name -> the Python source the executor generates for that loop frame when the graph's
        signature runs (`dfc show --fused`), or a comment saying why the frame is not fused. The sources
        name nodes and frames by index only; `names` (a dict) gets {"nodes": node names by index, "frames":
        frame names by index} of the plan they come from (`dfc show --fused` prints them as a legend)."""
        from dfc.runtime.fused import describe
        sig = self.graph.signature
        fetches = [leaf["ref"] for leaf in structure.leaves(sig.get("outputs"))]
        feeds = {i["node"] for i in sig.get("inputs", [])}
        targets = tuple(sig.get("targets", []))
        plan = Plan(self.graph, fetches, feeds, targets, fuse=False, parallel_iterations=self.parallel_iterations)
        if names is not None:
            names.update(_names(plan))
        out = describe(plan)
        if self.fuse_loops and self._num_threads > 0:
            from dfc.runtime.overlap import overlapping_frames
            reasons = {}
            overlapping_frames(plan, reasons)
            for fid, why in reasons.items():
                if not out.get(plan.frame_names[fid], "").startswith("# not fused"):
                    out[plan.frame_names[fid]] = f"# not fused: {why}"
            if reasons:     # the chains the scheduler runs as one task each there (chains.py)
                graph = self._folded(fetches, feeds, targets) if self.placement is None else self.graph
                run = Plan(graph, fetches, feeds, targets, fuse=True, overlap=True,
                           parallel_iterations=self.parallel_iterations)
                for members in run.chains.values():
                    name = run.frame_names[run.fid[members[0]]]
                    if out.get(name, "").startswith("# not fused"):
                        out[name] += "\n# chain (one task): " + " -> ".join(run.nodes[i].name for i in members)
        return out

    def compiled_frames(self):
        """frame name -> how the executor runs that loop frame of the graph's signature with compiled loops:
        {"status": "compiled" | "fused" | "not fused", "blocked_by": the node that kept it from being
        compiled (None if none or not one node), "reason", "source": the numba (or fused Python) source,
        "compile_seconds": {argument types: seconds its first call spent compiling or loading from the disk
        cache} once this session ran it}. Frames nested in a compiled frame are compiled with it."""
        from dfc.runtime.compiled import explain
        return explain(self._signature_plan(), [p for p in self._plans.values() if isinstance(p, Plan)])

    def compiled_run(self, names=None):
        """How a run of the graph's signature goes as a whole with compiled loops (dfc/runtime/compiled/
        root.py): {"status": "compiled" (the root frame and its loops as one numba function) | "fused" (the
        root frame as generated Python calling each loop frame, compiled or not) | "scheduled" (the tagged-
        frame scheduler runs the root frame), "blocked_by": the node that kept it from being compiled,
        "reason", "source", "compile_seconds" once this session ran it}. `names`: as for fused_frames (the
        source's plan is another: node indices differ)."""
        from dfc.runtime.compiled import explain_root
        plan = self._signature_plan()
        if names is not None:
            names.update(_names(plan))
        return explain_root(plan, [p for p in self._plans.values() if isinstance(p, Plan)])

    def _signature_plan(self):
        sig = self.graph.signature
        fetches = [leaf["ref"] for leaf in structure.leaves(sig.get("outputs"))]
        feeds = {i["node"] for i in sig.get("inputs", [])}
        targets = tuple(sig.get("targets", []))
        graph = self._folded(fetches, feeds, targets) if self.placement is None else self.graph    # as _make_plan
        return Plan(graph, fetches, feeds, targets, fuse=True, parallel_iterations=self.parallel_iterations)

    def _folded(self, fetches, feed_names, targets):
        """The graph a single-device fused run executes (see _optimized)."""
        return self._optimized(self.graph, fetches, feed_names, targets)

    def _optimized(self, graph, fetches, feed_names, targets, fold=True):
        """The graph a run executes: identical pure nodes merged (cse.py) and, when `fold` (a single-device
        fused run), constants folded (folding.py); its feeds, fetches and targets kept as they are. The
        reference interpreter and the unfused paths' folding run the graph as written."""
        keep = {parse_input(f)[0] for f in fetches} | set(targets)
        if cse.ENABLED:
            graph = cse.eliminate(graph, keep, feed_names, self.placement)[0]
        if fold and folding.ENABLED:
            graph = folding.fold(graph, keep | set(feed_names), self.memory_limit)[0]
        return graph

    def memory_stats(self):
        """device -> {"in_use", "peak", "capacity"} for every device that accounts bytes."""
        stats = self.devices.memory_stats()
        for name, sw in self._swappers.items():
            stats.setdefault(name, {})["swap"] = dict(sw.stats)
        return stats

    def peak_bytes(self):
        """device -> the most bytes it held at once (devices that account bytes)."""
        return {d: s["peak"] for d, s in self.devices.memory_stats().items()}

    def partitions(self, fetches=None):
        """device -> Graph of the partitioned graph this session runs (the whole graph by default)."""
        from dfc.runtime import partition as pt
        if self.placement is None:
            return {"cpu:0": self.graph}
        return pt.partition(self.graph, self.placement, pt.frame_ids_of(self.graph)).graphs

    @api_boundary
    def run(self, fetches, feeds=None, targets=()):
        """Fetch a tensor ref ("node:port" or node name) or a nested structure of them."""
        feeds = {self._feed_name(k): v for k, v in (feeds or {}).items()}
        types = self.graph.infer_types()
        for name in list(feeds):
            t = types[name][0]
            feeds[name] = convert_input(feeds[name], t.dtype, t.shape, name)
        return self._run(fetches, feeds, targets)

    def _run(self, fetches, feeds, targets):
        """run() with feeds checked and converted already: node name -> value."""
        flat = [f if ":" in f else f + ":0" for f in nest.flatten(fetches)]
        fed = any(devices.is_device_array(v) for v in feeds.values())
        if fed:     # cupy arrays the caller made: each waits for the work on the caller's current stream
            feeds = {k: devices.fed(v) if devices.is_device_array(v) else v for k, v in feeds.items()}
        if self.mode == "reference":
            if fed:
                feeds = {k: devices.on_host(v) for k, v in feeds.items()}
            with self._lock:
                self.run_count += 1
                with self._observed():
                    values = reference.run(self.graph, flat, feeds, tuple(targets), self._context(None))
            check_fetches(self.graph, flat, values)
            return nest.pack_sequence_as(fetches, [_to_numpy(v) for v in values])
        plan = self.plan(flat, feeds.keys(), tuple(targets))
        if fed and not _takes_device_arrays(plan):      # the host runs it (a partition's device copies itself)
            feeds = {k: devices.on_host(v) for k, v in feeds.items()}
        if getattr(plan, "remote", None):       # a cluster step: steps may be in flight together
            from dfc.runtime.cluster.step import ClusterStep
            with self._lock:
                self.run_count += 1
            step = ClusterStep(self, plan, feeds)
            with self._lock:
                self._cluster_steps.add(step)
            try:
                with self._observed():
                    values = step.execute()
            finally:
                with self._lock:
                    self._cluster_steps.discard(step)
            return nest.pack_sequence_as(fetches, [_to_numpy(v) for v in values])
        xr = self._xla_run(flat, feeds, targets) if self._xla_runs is not None and isinstance(plan, Plan) \
            and not fed else None
        with self._lock:
            self.run_count += 1
            with self._observed():
                try:
                    values = None if xr is None else xr.run(feeds, self.run_count)
                    if values is None:
                        t = time.perf_counter()
                        values = self._execute(plan, feeds)
                        if xr is not None:
                            xr.fused(time.perf_counter() - t, feeds)
                finally:
                    for sw in self._swappers.values():
                        sw.end_run()
                    for d in self.devices.devices.values():
                        d.end_run()         # a GPU's streams finish the run's work, even after an error
                        if d.memory is not None:
                            d.memory.end_run()
        return nest.pack_sequence_as(fetches, [_to_numpy(v) for v in values])

    def _feed_name(self, key):
        name, port, _ = parse_input(key)
        if name not in self.graph.nodes:
            raise DfcInputError(f"feed {key!r} names no node")
        if port != 0:
            raise DfcInputError(f"can only feed output 0 of a node, not {key!r}")
        return name

    @api_boundary
    def call(self, *args, **kwargs):
        """Run the graph's signature: positional/keyword inputs in, outputs in their nesting."""
        return structure.pack(self.graph.signature.get("outputs"), self.call_flat(*args, **kwargs))

    @api_boundary
    def call_flat(self, *args, **kwargs):
        """Like call, but the outputs flattened depth-first in return order."""
        sig = self.graph.signature
        inputs = sig.get("inputs", [])
        names = [i["name"] for i in inputs]
        if len(args) > len(names):
            raise DfcInputError(f"{sig.get('name')} takes {len(names)} inputs ({', '.join(names)}), "
                                f"got {len(args)}")
        given = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise DfcInputError(f"{sig.get('name')} has no input {k!r} (inputs: {', '.join(names)})")
            if k in given:
                raise DfcInputError(f"input {k!r} given twice")
            given[k] = v
        missing = [n for n in names if n not in given]
        if missing:
            raise DfcInputError(f"missing input(s) {', '.join(missing)} for {sig.get('name')}")
        feeds = {}
        for spec in inputs:
            feeds[spec["node"]] = convert_input(given[spec["name"]], spec["dtype"], spec.get("shape"),
                                                spec["name"])
        leaves = structure.leaves(sig.get("outputs"))
        refs = [leaf["ref"] for leaf in leaves]
        return self._run(refs, feeds, tuple(sig.get("targets", [])))     # (the feeds are converted above)


_OBSERVING_OPS = ("SummaryScalar", "SummaryHistogram", "Progress")     # ops a run's writer or display serves
_sessions = weakref.WeakKeyDictionary()     # graph -> the Session that runs `graph(...)` calls
_sessions_lock = threading.Lock()


def _plan_key(fetches, feed_names, targets):
    """The key of a run's Plan in Session._plans, and of its XlaRun."""
    return tuple(fetches), tuple(sorted(feed_names)), tuple(targets)


def session_for(graph):
    """The Session `graph(...)` and `dfc.run(graph, ...)` use: made once, even by concurrent first calls.
    Inside `with cluster:` it is the graph's Session on that cluster."""
    from dfc.runtime.cluster import current
    cluster = current()
    key = None if cluster is None else id(cluster)
    by = _sessions.get(graph)
    s = None if by is None else by.get(key)
    if s is None:
        with _sessions_lock:
            by = _sessions.setdefault(graph, {})
            s = by.get(key)
            if s is None or (cluster is not None and s.cluster is not cluster):
                s = by[key] = Session(graph, cluster=cluster)
    return s


def _trace_file(path):
    """The trace file a Session writes (None: no tracing); its directory must exist."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise DfcError(f"trace must be a file path, got {path!r}")
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise DfcError(f"cannot write the trace file {path!r}: directory {parent!r} does not exist")
    return path


def _names(plan):
    """The names of a plan's nodes and frames by index (generated sources name them by index only)."""
    return {"nodes": [n.name for n in plan.nodes], "frames": list(plan.frame_names)}


def _to_numpy(v):
    """A result the caller owns: read-only arrays (a Variable's value, a constant) are copied."""
    if isinstance(v, np.ndarray):
        return v if v.flags.writeable else v.copy()
    if hasattr(v, "get") and hasattr(v, "__cuda_array_interface__"):
        return v.get()
    return np.asarray(v)


def _takes_device_arrays(plan):
    """Whether a plan's own devices take fed device arrays: a GPU plan, or partitions (each device's
    to_device copies to the host or onto itself); not a host plan nor a cluster step."""
    if isinstance(plan, Plan):
        return plan.device is not None and plan.device.device_arrays
    return not getattr(plan, "remote", None)


def convert_input(value, dtype, shape, name, what="input"):
    """numpy value of `dtype` for an input; only value-preserving conversions are allowed. A cupy array
    (on a GPU) is taken as it is, without a copy, if its dtype is the input's."""
    if devices.is_device_array(value):
        return _device_input(value, dtype, shape, name, what)
    try:
        arr = np.asarray(value)
    except Exception as e:   # noqa: BLE001 — any object numpy cannot take is a bad input
        raise DfcInputError(f"{what} {name!r}: cannot convert {type(value).__name__} to an array: {e}") from None
    if arr.dtype != dtype:          # (not .name: numpy builds that string on every access, ~2 us)
        src, dst = arr.dtype.kind, np.dtype(dtype).kind
        ok = src in "biuf" and (src == dst or (src == "f" and dst == "f") or (src in "iu" and dst in "if")
                                or (src == "b" and dst in "iuf"))
        if ok:
            conv = arr.astype(dtype)
            if src != "f":
                with np.errstate(all="ignore"):
                    ok = bool(np.array_equal(conv.astype(arr.dtype), arr))
        if not ok:
            raise DfcInputError(f"{what} {name!r}: expected {dtype}, got {arr.dtype} (converting would change "
                                f"the values)")
        arr = conv
    _check_shape(arr, shape, name, what)
    return arr


def _device_input(value, dtype, shape, name, what):
    if not hasattr(value, "get"):
        raise DfcInputError(f"{what} {name!r}: {type(value).__name__} is a CUDA array dfc does not take directly; "
                            f"pass cupy.asarray(value) (no copy) or a numpy array")
    if value.dtype != dtype:
        raise DfcInputError(f"{what} {name!r}: expected {dtype}, got a device array of {value.dtype} (device arrays "
                            f"are not converted implicitly: pass value.astype({str(np.dtype(dtype))!r}))")
    _check_shape(value, shape, name, what)
    return value


def _check_shape(arr, shape, name, what):
    if shape is not None:
        if arr.ndim != len(shape):
            raise DfcInputError(f"{what} {name!r}: expected rank {len(shape)} {dt.format_shape(shape)}, "
                                f"got shape {list(arr.shape)}")
        for d, (want, got) in enumerate(zip(shape, arr.shape)):
            if want is not None and want != got:
                raise DfcInputError(f"{what} {name!r}: dimension {d} must be {want}, got {got} "
                                    f"(shape {list(arr.shape)})")


class _Partitioned:
    """The per-device Plans of one (fetches, feeds, targets) key of a partitioned graph."""

    def __init__(self, parts, fetches, feed_names, targets, devices, frame_ids, kw):
        from dfc.runtime.partition import route
        self.parts = parts
        fetch_of, self.fetch_order, self.feeds_of, targets_of = route(parts, fetches, feed_names, targets)
        self.plans = {d: Plan(g, fetch_of[d], self.feeds_of[d], targets_of[d], device=devices.get(d),
                              frame_ids=frame_ids, **kw) for d, g in parts.graphs.items()}
