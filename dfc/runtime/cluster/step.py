"""The chief's side of a cluster step: feed the tasks, run its own partitions, collect the fetches.

The chief sends each task the step's feeds and which of its partitions to run
(the graphs themselves went once, by hash), runs the partitions of its own
devices on threads as a one-process run does, and waits. It is not in any
loop's control path: tasks drive their own control-loop state machines and
talk to each other directly. The chief also

- receives the messages tasks send to its own Recvs on its Wire (under Ray
  Client, from each task's chief box, which its status poller empties);
- detects a stuck step by a distributed quiescence check: when, in two
  successive rounds of status reports, every process is idle, every message
  sent has been received and no count has moved, nothing can ever happen —
  a DfcDeadlockError naming what each task waits for (not a timeout guess);
- turns a task's kernel error or death into a DfcError naming the task and
  node, and aborts the step everywhere, leaving the other tasks usable. A task
  that gives no reply to its poller for the cluster's liveness timeout counts
  as dead: every wait of the chief on a task is bounded, so no step hangs on
  a process that stopped answering.
"""
import hashlib
import itertools
import os
import threading
import time

from dfc import errors as dfc_errors
from dfc.errors import DfcDeadlockError, DfcError, DfcRuntimeError
from dfc.ir.graph import parse_input
from dfc.ir.serialize import to_json
from dfc.runtime.cluster import no_answer
from dfc.runtime.cluster.wire import Counters, StepRendezvous, task_of
from dfc.runtime.executor import PartitionedRun, Plan, Run, Transport
from dfc.runtime.partition import route
from dfc.runtime.rendezvous import Aborted, Coordinator

POLL_SECONDS = 0.05
SETTLE_SECONDS = 10.0    # after an abort, how long the chief waits for the step's runs to end (_settle)
_steps = itertools.count(1)


class ClusterPlan:
    """The partitions of one (fetches, feeds, targets) key: the chief's Plans and each task's graphs."""

    def __init__(self, parts, fetches, feed_names, targets, devices, frame_ids, kw):
        self.frame_ids = frame_ids
        fetch_of, self.fetch_order, feeds_of, targets_of = route(parts, fetches, feed_names, targets)
        self.feeds_of = {d: sorted(names) for d, names in feeds_of.items()}     # sorted: part of a task's plan key
        self.local, self.remote = {}, {}      # device -> Plan; task -> [(device, hash, fetches, feeds, targets)]
        self.texts = {}                       # task -> [(hash, json text)]
        self.opts = {"parallel_iterations": kw.get("parallel_iterations"), "fuse": kw.get("fuse", True)}
        for d, g in parts.graphs.items():
            tgts = targets_of[d]
            task = task_of(d)
            if task is None:
                self.local[d] = Plan(g, fetch_of[d], set(self.feeds_of[d]), tgts, device=devices.get(d),
                                     frame_ids=frame_ids, **kw)
                continue
            g.signature = {"name": g.signature.get("name"), "inputs": [], "outputs": None, "targets": [],
                           "device": d}
            text = to_json(g)
            h = hashlib.sha256(text.encode()).hexdigest()
            self.texts.setdefault(task, []).append((h, text))
            self.remote.setdefault(task, []).append((d, h, list(fetch_of[d]), self.feeds_of[d], tgts))


class ClusterStep:
    """One step of a ClusterPlan on a cluster (see the module docstring)."""

    def __init__(self, session, plan, feeds):
        self.s, self.plan, self.feeds = session, plan, feeds
        self.cluster = session.cluster
        self.step = f"{os.getpid()}-{id(session):x}-{next(_steps)}"
        self.counters = Counters()
        self.status = {}            # task -> (poll count, status)
        self.polls_lock = threading.Lock()
        self.dead = {}              # task -> what happened to it ("died ...", or no reply in time)
        self.failed = None          # an error the pollers met (a message that could not be received)
        self.liveness = self.cluster.liveness_timeout
        self.replied = {}           # task -> time.monotonic() of its latest poll reply
        self.over = threading.Event()
        self.cancelled = None       # the reason, once Session.cancel asked this step to stop

    # ------------------------------------------------------------------ run
    def execute(self):
        import ray
        p, c = self.plan, self.cluster
        for task, texts in p.texts.items():
            c.ensure_graphs(task, texts)
        opts = dict(p.opts, compression=self.s.wire_compression, store_bytes=self.s.object_store_bytes,
                    trace=self.s.trace is not None, liveness=self.liveness)
        self.rv = StepRendezvous(self.step, None, c.ship, self.counters, opts["compression"], opts["store_bytes"],
                                 fetch_timeout=self.liveness, take=c.take)
        c.routes[self.step] = self
        self.coord = Coordinator(list(p.local), distributed=True) if p.local else None
        refs, handles = {}, {}
        for task, items in p.remote.items():
            feeds = {n: self.feeds[n] for it in items for n in it[3]}
            handles[task] = c.handle(task)
            refs[handles[task].run_step.remote(self.step, items, feeds, p.frame_ids, opts)] = task
        now = time.monotonic()
        self.replied = {t: now for t in p.remote}
        pollers = [threading.Thread(target=self._poll, args=(t, handles[t]), daemon=True, name=f"dfc-poll-{t}")
                   for t in p.remote]
        for t in pollers:
            t.start()
        local_result, local_thread = {}, None
        if p.local:
            runs = {d: Run(plan, {k: self.feeds[k] for k in p.feeds_of[d]}, self.s._context(plan.device),
                           self.s._get_pool(), Transport(d, self.rv, self.coord)) for d, plan in p.local.items()}
            self.local_runs = runs
            order = [(d, k) for d in runs for k in range(len(p.local[d].fetches))]
            local_thread = threading.Thread(target=self._run_local, args=(runs, order, local_result), daemon=True,
                                            name="dfc-chief")
            local_thread.start()
        results, error = {}, None
        try:
            error = self._wait(refs, results, local_thread, local_result)
        finally:
            self.over.set()
            c.routes.pop(self.step, None)
            for h in [c.handles.get(t) for t in p.remote]:
                if h is not None:
                    try:
                        h.end_step.remote(self.step)
                    except Exception:   # noqa: BLE001 — a dead task
                        pass
        if error is not None:
            raise error
        values = {}
        for task, items in p.remote.items():
            flat = iter(results[task]["values"])
            for d, _h, fetches, _f, _t in items:
                for k in range(len(fetches)):
                    values[(d, k)] = next(flat)
        if p.local:
            flat = iter(local_result["values"])
            for d, plan in p.local.items():
                for k in range(len(plan.fetches)):
                    values[(d, k)] = next(flat)
        if self.s.trace is not None:       # each task's spans of this step, on the chief's timeline
            for r in results.values():
                if "trace" in r:
                    self.s.trace.merge(r["trace"]["events"], r["trace"]["wall0"])
        self.s._wire_bytes += self.counters.snapshot()["bytes_sent"] + sum(r["bytes_sent"] for r in results.values())
        return [values[key] for key in p.fetch_order]

    def _run_local(self, runs, order, out):
        try:
            out["values"] = PartitionedRun(runs, order).execute()
        except Aborted as e:
            out["aborted"] = str(e)
        except BaseException as e:   # noqa: BLE001 — raised by the chief's main thread
            out["error"] = e

    def _poll(self, task, h):
        """Keep the task's latest status (and, under Ray Client, move its messages to the chief's Recvs); a
        task that gives no reply within the liveness timeout is taken for dead (the step fails naming it)."""
        import ray
        n = 0
        while not self.over.is_set():
            try:
                msgs, status = ray.get(h.poll.remote(self.step, POLL_SECONDS), timeout=self.liveness)
            except Exception as e:   # noqa: BLE001 — no reply in time, or the task's process is gone
                if isinstance(e, ray.exceptions.GetTimeoutError):
                    self.dead.setdefault(task, no_answer(task, self.liveness))
                else:
                    self.dead.setdefault(task, f"task {task} died during the step ({_death(e)})")
                return
            self.replied[task] = time.monotonic()
            for key, value in msgs:         # only under Ray Client: else they come on the chief's Wire
                if not self.arrive(key, value, task):
                    return
            n += 1
            with self.polls_lock:
                self.status[task] = (n, status)

    def arrive(self, key, value, task=None):
        """A message a task sent to the chief's Recvs; False if it cannot be received (the step fails)."""
        try:
            self.rv.arrive(key, value)
            return True
        except Exception as e:   # noqa: BLE001 — a value that cannot be received: the step cannot finish
            who = f"task {task}" if task is not None else f"task {task_of(key[1])}"
            self.failed = self.failed or DfcRuntimeError(f"a value {who} sent to the chief could not be "
                                                         f"received: {e}")
            return False

    def _wait(self, refs, results, local_thread, local_result):
        """Wait for every part of the step; return the error to raise, or None."""
        import ray
        pending = dict(refs)
        self._pending, self._local_thread = pending, local_thread     # (_settle, after an abort)
        last = None
        while pending or (local_thread is not None and local_thread.is_alive()):
            if pending:
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=POLL_SECONDS)
            else:
                local_thread.join(POLL_SECONDS)
                ready = []
            for ref in ready:
                task = pending.pop(ref)
                try:
                    kind, value = ray.get(ref, timeout=self.liveness)
                except Exception as e:   # noqa: BLE001 — the actor died during the step
                    return self._fail(self._lost(task, f"task {task} died during the step ({_death(e)})"))
                if kind == "ok":
                    results[task] = value
                elif kind == "error":
                    return self._fail(_rebuild(task, value))
                elif self.cancelled is None and not self.dead:   # aborted, though the chief did not abort it
                    return self._fail(DfcRuntimeError(f"task {task} ended its part of the step early ({value})",
                                                      node=self._node_on(task)))
            if local_thread is not None and not local_thread.is_alive() and "error" in local_result:
                return self._fail(local_result.pop("error"))
            if self.failed is not None:
                return self._fail(self.failed)
            silent = self._silent()
            if silent is not None:      # a dead task may have held messages the step needs: it cannot finish
                return self._fail(self._lost(silent, self.dead[silent]))
            if self.cancelled is not None:
                return self._fail(DfcRuntimeError(f"the step was cancelled: {self.cancelled}"))
            last, stuck = self._quiescent(last, pending, local_thread)
            if stuck:
                return self._fail(self._deadlock())
        if local_thread is not None and "aborted" in local_result:
            return DfcRuntimeError(f"the step was aborted ({local_result['aborted']})")
        return None

    def _silent(self):
        """A task of the step that died or gave no reply within the liveness timeout (also when its poller
        is held up somewhere other than the reply it waits for), or None."""
        now = time.monotonic()
        for task, last in list(self.replied.items()):
            if task not in self.dead and now - last > 2 * self.liveness + 1:
                self.dead.setdefault(task, no_answer(task, round(now - last, 1)))
        return next(iter(self.dead), None)

    def _lost(self, task, why):
        return DfcRuntimeError(f"{why}; restart it with cluster.restart({task!r}); {self._waiting_on(task)}",
                               node=self._node_on(task))

    # ------------------------------------------------------------------ quiescence
    def _quiescent(self, last, pending, local_thread):
        """(snapshot, stuck): stuck when two successive complete rounds show every process idle, no
        message in flight, and no count moved between them."""
        with self.polls_lock:
            status = dict(self.status)
        tasks = list(self.plan.remote)
        if any(t not in status for t in tasks):
            return last, False
        local_idle = self.coord is None or local_thread is None or not local_thread.is_alive() or self.coord.idle()
        counts = self.counters.snapshot()
        idle = local_idle and all(status[t][1]["idle"] for t in tasks)
        sent = counts["sent"] + sum(status[t][1]["sent"] for t in tasks)
        received = counts["received"] + sum(status[t][1]["received"] for t in tasks)
        rounds = tuple(status[t][0] for t in tasks)
        snap = (tuple((status[t][1]["sent"], status[t][1]["received"]) for t in tasks),
                counts["sent"], counts["received"])
        if not (idle and sent == received):
            return None, False
        if pending and all(status[t][1]["done"] for t in pending.values()):
            return None, False       # every part is over: the results are on their way
        if last is None:
            return (rounds, snap), False
        prev_rounds, prev_snap = last
        if any(r <= q for r, q in zip(rounds, prev_rounds)):
            return last, False       # wait until every task has reported again
        return (rounds, snap), prev_snap == snap

    def _deadlock(self):
        import ray
        waits = []
        for task in self.plan.remote:
            try:
                w = ray.get(self.cluster.handle(task).waiting_nodes.remote(self.step), timeout=5)
            except Exception:   # noqa: BLE001
                w = {}
            for dev, names in sorted(w.items()):
                if names:
                    waits.append(f"{dev}: " + ", ".join(names[:6]) + (" ..." if len(names) > 6 else ""))
        for dev, run in sorted(getattr(self, "local_runs", {}).items()):
            names = run.waiting_nodes()
            if names:
                waits.append(f"{dev}: " + ", ".join(names[:6]) + (" ..." if len(names) > 6 else ""))
        first = waits[0].split(": ", 1)[1].split(" (")[0] if waits else None
        return DfcDeadlockError("the tasks stopped before the fetches were computed (every task idle, no "
                                "message in flight); nodes still waiting: " + ("; ".join(waits) or "none"),
                                node=first)

    # ------------------------------------------------------------------ failure
    def cancel(self, reason):
        """Stop waiting: the step ends (within a poll interval) with a DfcRuntimeError naming reason."""
        self.cancelled = str(reason)

    def _fail(self, error):
        """Abort the step on every task and on the chief; the error is what the caller sees."""
        for task in self.plan.remote:
            h = self.cluster.handles.get(task)
            if h is not None and task not in self.dead:
                try:
                    h.abort.remote(self.step, "error")
                except Exception:   # noqa: BLE001
                    pass
        if self.coord is not None:
            self.coord.abort("error")
        self._settle()
        return error

    def _settle(self):
        """After an abort: wait (at most SETTLE_SECONDS) until the step's runs on the live tasks and on the
        chief have ended, so nothing of the failed step runs on once the caller sees its error (a cancelled
        step's dequeue must not take an element enqueued after the step raised)."""
        import ray
        refs = [r for r, task in getattr(self, "_pending", {}).items() if task not in self.dead]
        if refs:
            try:
                ray.wait(refs, num_returns=len(refs), timeout=SETTLE_SECONDS)
            except Exception:   # noqa: BLE001 — a task that died meanwhile has ended too
                pass
        thread = getattr(self, "_local_thread", None)
        if thread is not None:
            thread.join(SETTLE_SECONDS)

    def _node_on(self, task):
        """A node of the dead task's partitions (the first one the step needed from it)."""
        for d, _h, fetches, _f, tgts in self.plan.remote.get(task, []):
            if fetches:
                return parse_input(fetches[0])[0]
            if tgts:
                return tgts[0]
        return None

    def _waiting_on(self, task):
        devs = sorted(d for d, *_ in self.plan.remote.get(task, []))
        return f"its partitions {', '.join(devs)} did not finish; the step was aborted on the other tasks"


def _death(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else 'actor died'}"[:300]


def _rebuild(task, info):
    cls = getattr(dfc_errors, info.get("type") or "", None)
    if not (isinstance(cls, type) and issubclass(cls, DfcError)):
        cls = DfcRuntimeError
    return cls(f"on task {task}: {info.get('message')}", node=info.get("node"), loc=info.get("loc"))


def check_tasks(cluster, placement):
    """Every task a node is placed on must be a task of the cluster."""
    tasks = {task_of(d) for d in placement.values()} - {None}
    missing = sorted(tasks - set(cluster.tasks)) if cluster is not None else sorted(tasks)
    if missing and cluster is None:
        node = next(n for n, d in placement.items() if task_of(d) in tasks)
        raise DfcError(f"the graph places nodes on task(s) {', '.join(missing)}; run it on a cluster "
                       f"(Session(..., cluster=dfc.cluster.connect(...)), `with cluster:` or dfc run --cluster) "
                       f"or remap them with device_map", node=node)
    if missing:
        node = next(n for n, d in placement.items() if task_of(d) in missing)
        raise DfcError(f"the graph places nodes on task(s) {', '.join(missing)}, which the cluster does not "
                       f"have (its tasks: {', '.join(cluster.tasks)})", node=node)
