"""One task of a cluster: a Ray actor (its own OS process) that runs its partitions of each step.

A task keeps, across steps: the partition graphs it was sent (by hash, so a
graph crosses the network once), their Plans, its devices, a kernel thread
pool, and its Variables — in its own process's resource containers, so they
persist across steps and are shared by every graph that names them.

Per step it runs its partitions on its own threads (one per device, as a
one-process partitioned run does), each device driving its own control-loop
state machines (§4.4, Figure 6): there is no coordinator in the loop. The
chief only sends the step's feeds, receives its fetches, and asks `status`
for the quiescence check that turns a stuck step into a DfcDeadlockError.
Values cross between processes on the task's ZeroMQ `Wire` (wire.py), whose
address the task publishes through `ping` and learns its peers' in `connect`.
"""
import collections
import os
import threading
import time

from dfc.errors import DfcError, DfcRuntimeError
from dfc.ir.serialize import loads
from dfc.runtime import checkpoints, containers
from dfc.runtime.cluster.wire import ChiefBox, Counters, StepRendezvous, Wire
from dfc.runtime.devices import DeviceSet, split_task
from dfc.runtime.executor import KernelContext, PartitionedRun, Plan, Run, Transport, default_printer
from dfc.runtime.rendezvous import Aborted, Coordinator

FINISHED_KEPT = 256          # step ids remembered as finished: late messages for them are dropped


class _Step:
    __slots__ = ("rv", "coord", "runs", "counters", "started", "done", "aborted", "error")

    def __init__(self, rv, counters):
        self.rv, self.counters = rv, counters
        self.coord, self.runs, self.started, self.done = None, {}, time.monotonic(), False
        self.aborted = None     # the reason, when an abort came before the step's runs were made
        self.error = None       # error_info of a message this task could not receive (the step fails)


def error_info(e):
    """A picklable description of an exception raised in a task (rebuilt as a DfcError by the chief)."""
    if isinstance(e, DfcError):
        return {"type": type(e).__name__, "message": e.message, "node": e.node, "loc": e.loc}
    return {"type": "DfcRuntimeError", "message": f"{type(e).__name__}: {e}", "node": None, "loc": None}


class Task:
    """The body of a cluster task's actor (wrapped with ray.remote by dfc.runtime.cluster)."""

    def __init__(self, name, num_threads=None, checkpoint_dir=None, liveness=None, wire_keys=None):
        self.name = name
        self.liveness = liveness    # the cluster's liveness timeout (each step's opts say it again)
        self.devices = DeviceSet()
        self.graphs, self.plans = {}, {}
        self.steps, self.finished = {}, collections.OrderedDict()
        self.lock = threading.Lock()
        self.chief_box = ChiefBox()     # messages to a chief that is not on the wire (Ray Client)
        self.peers = {}
        self.wire = Wire(name, wire_keys, self._arrive, self._unsent)
        n = min(4, os.cpu_count() or 2) if num_threads is None else int(num_threads)
        self.pool = None
        if n > 0:
            from concurrent.futures import ThreadPoolExecutor
            self.pool = ThreadPoolExecutor(n, thread_name_prefix=f"dfc-{name}")
        self.files = checkpoints.Directory(checkpoint_dir, confined=True)
        self.run_count = 0
        self.given = 0          # large values other processes took from this task (Task.take)
        self.current = {}       # step -> name of a node the task was last seen waiting on (for error messages)

    # ------------------------------------------------------------------ set-up
    def ping(self):
        import ray
        return {"task": self.name, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "address": self.wire.address}

    def connect(self, peers, addresses):
        """peers: task name -> actor handle of every other task; addresses: task name (and "chief") -> its
        Wire's address (the chief's None under Ray Client: its messages then wait in the chief box)."""
        self.peers = {name: h for name, h in peers.items() if name != self.name}
        self.wire.connect({name: a for name, a in addresses.items() if name != self.name})
        return True

    def _ship(self, dest, step, key, value):
        if dest is None and not self.wire.reaches("chief"):
            self.chief_box.put(step, key, value)
        else:
            self.wire.send("chief" if dest is None else dest, step, key, value)

    def _take(self, task, step, n, timeout):
        import ray
        return ray.get(self.peers[task].take.remote(step, n), timeout=timeout)

    def take(self, step, n):
        """A value of object_store_bytes or more this task holds for another process (wire.Held): it is
        returned through Ray's object store."""
        with self.lock:
            st = self.steps.get(step)
        if st is None:
            raise DfcRuntimeError(f"task {self.name} no longer holds the values of step {step} (it ended)")
        value = st.rv.give(n)
        with self.lock:
            self.given += 1
        return value

    def held(self):
        """Large values this task holds for other processes ("held": none once their steps ended) and has
        given them ("given", since it started)."""
        with self.lock:
            return {"held": sum(len(st.rv.held) for st in self.steps.values()), "given": self.given}

    def has_graphs(self, hashes):
        return [h for h in hashes if h in self.graphs]

    def load(self, ghash, text):
        """Keep a partition graph (JSON text) under its hash."""
        g = loads(text)
        g.from_file = True      # like any graph that arrives as JSON: checkpoints stay confined
        with self.lock:
            self.graphs[ghash] = g
        return True

    # ------------------------------------------------------------------ steps
    def _state(self, step, opts):
        with self.lock:
            if step in self.finished:
                return None
            st = self.steps.get(step)
            if st is None:
                counters = Counters()
                rv = StepRendezvous(step, self.name, self._ship, counters, opts.get("compression"),
                                    opts.get("store_bytes"), opts.get("liveness", self.liveness), self._take)
                st = self.steps[step] = _Step(rv, counters)
            elif "liveness" in opts:        # made by a message that came before run_step
                st.rv.compression, st.rv.store_bytes = opts.get("compression"), opts.get("store_bytes")
                st.rv.fetch_timeout = opts["liveness"]
            return st

    def deliver(self, batch):
        """Values the chief sent in an actor call, not on the wire: [(step, key, value)] (its values in the
        object store, and all of them under Ray Client)."""
        for step, key, value in batch:
            self._arrive(step, key, value)
        return True

    def _arrive(self, step, key, value):
        """A value another process sent to this task's Recvs. One that cannot be received fails its step:
        left uncounted, it would keep the step from ever looking quiescent, and its Recv would wait
        forever."""
        st = self._state(step, {})
        if st is None:
            return
        try:
            st.rv.arrive(key, value)
        except BaseException as e:   # noqa: BLE001 — reported to the chief by run_step
            self._fail(st, e)

    def _unsent(self, step, error):
        """A message of this task's Wire could not be sent: its step fails (reported by run_step)."""
        with self.lock:
            st = self.steps.get(step)
        if st is not None:
            self._fail(st, error)

    def _fail(self, st, e):
        with self.lock:
            st.error = st.error or error_info(e)
            st.aborted, coord = st.aborted or "error", st.coord
        if coord is not None:
            coord.abort("error")

    def _plan(self, ghash, fetches, feeds, targets, frame_ids, opts):
        key = (ghash, tuple(fetches), tuple(sorted(feeds)), tuple(targets), opts.get("parallel_iterations"),
               opts.get("fuse", True))
        p = self.plans.get(key)
        if p is None:
            g = self.graphs.get(ghash)
            if g is None:
                raise DfcRuntimeError(f"task {self.name} was not sent partition graph {ghash[:12]} "
                                      f"(was it restarted during the step?)")
            dev = self.devices.get(split_task(g.signature.get("device") or next(iter(g.nodes.values())).device)[1])
            p = self.plans[key] = Plan(g, list(fetches), set(feeds), list(targets), device=dev,
                                       frame_ids=frame_ids, parallel_iterations=opts.get("parallel_iterations"),
                                       fuse=opts.get("fuse", True))
        return p

    def run_step(self, step, items, feeds, frame_ids, opts):
        """Run this task's partitions of one step.

        items: [(device, graph hash, fetches, feed names, targets)]; returns ("ok", [values of each item's
        fetches, in order], and this task's message counts}) or ("error", info) or ("aborted", reason)."""
        st = self._state(step, opts)
        if st is None:
            return ("aborted", "step already ended")
        try:
            self.run_count += 1
            runs, order = {}, []
            trace = None
            if opts.get("trace"):
                from dfc.runtime.trace import Trace
                trace = Trace(task=self.name)
            coord = Coordinator([it[0] for it in items], distributed=True)
            for dev, ghash, fetches, feed_names, targets in items:
                plan = self._plan(ghash, fetches, feed_names, targets, frame_ids, opts)
                device = plan.device
                ctx = KernelContext(self._container, self.run_count, default_printer, device=device,
                                    files=self.files)
                ctx.trace = trace
                mine = {k: feeds[k] for k in feed_names}
                pool = None if device.kind == "gpu" else self.pool
                runs[dev] = Run(plan, mine, ctx, pool, Transport(dev, st.rv, coord))
                order += [(dev, k) for k in range(len(fetches))]
            with self.lock:
                st.coord, st.runs = coord, runs
                reason = st.aborted
            if reason is not None:       # the chief aborted the step while it was being set up
                coord.abort(reason)
            values = PartitionedRun(runs, order).execute()
            out = {"values": values, **st.counters.snapshot()}
            if trace is not None:
                out["trace"] = {"events": trace.events(), "wall0": trace.wall0}
            return ("ok", out)
        except Aborted as e:
            return ("error", st.error) if st.error is not None else ("aborted", str(e))
        except BaseException as e:   # noqa: BLE001 — reported to the chief, which raises it there
            return ("error", error_info(e))
        finally:
            st.done = True

    def _container(self, name):
        return containers.get(name)

    def status(self, step):
        """For the chief's quiescence check: idle (nothing can happen here unless a message arrives),
        message counts, and whether this task's part of the step is over."""
        with self.lock:
            st = self.steps.get(step)
        if st is None:      # not started yet (its run_step is still on its way: not idle) or long over
            over = step in self.finished
            return {"idle": over, "done": over, "sent": 0, "received": 0}
        counts = st.counters.snapshot()
        coord = st.coord
        idle = st.done or (coord is not None and coord.idle())
        return {"idle": idle, "done": st.done, "sent": counts["sent"], "received": counts["received"],
                "bytes_sent": counts["bytes_sent"], "stored": counts["stored"]}

    def poll(self, step, timeout):
        """Messages for the chief's Recvs of this step (waiting up to `timeout` s for one), and status."""
        msgs = self.chief_box.take(step, timeout)
        return msgs, self.status(step)

    def waiting_nodes(self, step):
        with self.lock:
            st = self.steps.get(step)
        if st is None:
            return {}
        return {dev: run.waiting_nodes() for dev, run in st.runs.items()}

    def abort(self, step, reason):
        """Stop this task's part of the step (another task failed, or the step is deadlocked)."""
        with self.lock:
            st = self.steps.get(step)
            if st is None:          # run_step has not started it: when it comes, it ends at once
                self._finish(step)
                return True
            st.aborted, coord = reason, st.coord
        if coord is not None:
            coord.abort(reason)
        return True

    def _finish(self, step):
        self.finished[step] = True
        while len(self.finished) > FINISHED_KEPT:
            self.finished.popitem(last=False)

    def end_step(self, step):
        """Forget a step (late messages for it are dropped)."""
        with self.lock:
            st = self.steps.pop(step, None)
            self._finish(step)
            coord = st.coord if st is not None and not st.done else None
        if coord is not None:       # still running (e.g. a dequeue nobody will feed): stop it
            coord.abort("the step ended on the chief")
        self.chief_box.drop(step)
        return True

    # ------------------------------------------------------------------ state from the chief's Python
    def read_variable(self, container, shared_name):
        r = containers.get(container).lookup(shared_name)
        return None if r is None else r.read()

    def update_variable(self, container, shared_name, value, op, init):
        """Assign / AssignAdd / AssignSub from the chief's Python, atomically; the new value."""
        r = containers.get(container).variable(shared_name, lambda: init)
        return r.assign(value, op, shared_name)

    def variables(self, container=None):
        return containers.get(container).snapshot()

    def restore_variables(self, container, values):
        containers.get(container).restore(values)
        return True
