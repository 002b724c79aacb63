"""DataParallel.run: the chief's threads driving the workers' (and in sync mode the chief's) graphs, and
recovery from dead tasks.

Failures (course note, "checkpoints and recovery"):
- a dead worker does not stop training: the others go on (sync mode while at least m workers are left),
  the result reports it, and with restart_failed=True its task is restarted and it rejoins where it was
  (workers hold no state: the parameters live on the ps tasks). In async mode every worker step has an
  id and each ps device applies a step id at most once (ApplyOnce, all of the step's updates there or
  none), so a worker killed after its update reached the ps does not apply that step again: its loss is
  NaN in the result and it goes on with its next step. In sync mode the restarted worker runs its step
  again; the accumulators drop its second gradient for an update that has its first, and it goes on
  only at a token of an update after the step it read (see DataParallel);
- a dead ps task stops every step that touches it with a DfcError naming it. Without restart_failed
  that error ends the run. With restart_failed=True the chief pauses new steps, restarts the task,
  restores its newest shard (losing the updates made since; a task with no shard yet starts from the
  initial values), and every failed step is run again.
"""
import logging
import re
import threading
import time

import numpy as np

from dfc.compiler.data_parallel import FOREVER, STOP
from dfc.errors import DfcError

_DIED = re.compile(r"task (\S+) died")
log = logging.getLogger("dfc.train")      # the chief reports dead tasks here (stderr by default)


def dead_task(error):
    """The task a DfcError says died, or None."""
    m = _DIED.search(str(error))
    return m.group(1) if m else None


class _Recovery:
    """Runs step calls; a call that fails because a ps task died waits while one thread restarts the task
    and restores its shard, then runs again."""

    def __init__(self, dp, restart_failed):
        self.dp, self.restart_failed = dp, restart_failed
        self.lock, self.open, self.generation = threading.Lock(), threading.Event(), 0
        self.open.set()
        self.events = []       # what happened, for the result: {"task", "error", "restored_step"}

    def call(self, fn):
        while True:
            self.open.wait()
            generation = self.generation
            try:
                return fn()
            except DfcError as e:
                task = dead_task(e)
                if task is None or not task.startswith("ps:") or not self.restart_failed:
                    raise
                self._recover(task, generation, e)

    def _recover(self, task, generation, error):
        with self.lock:
            if self.generation != generation:      # another thread brought the tasks back since
                return
            self.open.clear()
            log.warning("%s died (%s); restarting it and restoring its newest checkpoint shard", task,
                        error.message.split(";")[0])
            try:
                self.dp.cluster.restart(task)
                try:
                    step = self.dp.restore([task])
                except DfcError as e:              # no shard saved yet: the task keeps its initial values
                    if "cannot restore" not in str(e):
                        raise
                    self.dp._resync()
                    step = None
                self.events.append({"task": task, "error": error.message, "restored_step": step})
                self.generation += 1
            finally:
                self.open.set()


def run(dp, shards, steps, batch_size=None, delays=None, on_step=None, restart_failed=False):
    """Train for `steps` updates: every worker loops over minibatches of its shard on its own thread.

    shards: one tuple of arrays per worker (its data); batch_size: rows per step (None: the whole
    shard); delays: seconds each worker sleeps after each of its steps (to study stragglers; Python
    loops only); on_step(worker_index, step_index, loss): called after each worker step (Python loops;
    in-graph loops show progress with compile(progress=True)). In sync mode `steps` counts the chief's
    updates (the run ends when the global step is `steps` past where it began); in async mode each
    worker takes `steps` steps.

    Returns {"losses": each worker's losses (NaN for steps of an in-graph loop whose process died before
    returning them), "worker_steps": steps each worker took, "updates": the
    global step, "failed": {worker: why} for workers whose process died, "recovered": [ps restarts],
    "bytes_between_processes": bytes the run's steps moved between processes}. See the module docstring
    for what happens when a task dies.
    """
    if not dp.sessions:
        raise DfcError("call dp.compile(loss_fn, input_signature) before dp.run")
    n = len(dp.workers)
    if len(shards) != n:
        raise DfcError(f"give one shard per worker: {n} workers, {len(shards)} shards")
    graph = dp.loop == "graph"
    if graph and (delays or on_step):
        raise DfcError("delays and on_step need compile(loop='python'); an in-graph loop shows progress "
                       "with compile(progress=True)")
    delays = list(delays or [0.0] * n)
    losses = [[] for _ in range(n)]
    recovery = _Recovery(dp, restart_failed)
    errors, stop, failed = [], threading.Event(), {}
    sessions = dp.sessions + ([dp.chief] if dp.chief else [])

    def halt(e):
        """Stop the run with error e: the other threads' steps in flight (a worker waiting for a token, the
        chief for gradients that will not come) are cancelled, so nothing hangs."""
        errors.append(e)
        if not stop.is_set():
            stop.set()
            for s in sessions:
                s.cancel(f"the run stopped: {getattr(e, 'message', e)}")
    if dp.mode == "sync":
        dp.drain_tokens()
    start_step = int(dp.global_step.numpy())
    target = start_step + int(steps)
    counted = {w: int(v.numpy()) for w, v in dp.worker_steps.items()} if graph else {}
    # async: each worker step has an id (base + its index in this run); the ps applies a step id once
    base = {w: max(_records(dp, w), default=0) for w in dp.workers}

    def applied_steps(w):
        """How many of worker w's steps of this run every ps device has applied (async)."""
        return max(0, min(_records(dp, w)) - base[w])

    def python_steps(k, i):
        shard, s = shards[k], dp.sessions[k]
        rows = len(shard[0])
        b = rows if batch_size is None else int(batch_size)
        while not stop.is_set() and (dp.mode == "sync" or i < steps):
            idx = np.arange(i * b, i * b + b) % rows
            sid = np.int64(base[dp.workers[k]] + i)
            loss, token = recovery.call(lambda: s.call(*[a[idx] for a in shard], sid))
            if dp.mode == "sync" and int(token) == STOP:
                return
            losses[k].append(float(loss))
            if on_step is not None:
                on_step(k, i, float(loss))
            i += 1
            if delays[k]:
                time.sleep(delays[k])

    def graph_loop(k):
        shard, s, w = shards[k], dp.sessions[k], dp.workers[k]
        rows = len(shard[0])
        b = np.int64(rows if batch_size is None else int(batch_size))
        total = np.int64(steps if dp.mode == "async" else FOREVER)
        if dp.mode == "async":                                            # steps applied this run (a restart)
            done = np.int64(recovery.call(lambda: applied_steps(w)))
        else:
            done = np.int64(int(dp.worker_steps[w].numpy()) - counted[w])
        if dp.mode == "async" and done >= total:
            return
        del losses[k][int(done):]          # a restored ps lost them: taken again
        losses[k].extend([float("nan")] * (int(done) - len(losses[k])))   # lost with a dead worker's process
        out = recovery.call(lambda: s.call(*shard, total, b, done, np.int64(base[w])))
        if dp.mode == "sync":
            out = out[:-1]      # the step that dequeued STOP (its gradient went stale): not counted
        losses[k].extend(float(x) for x in out)

    def work(k, i=0):
        worker = dp.workers[k]
        try:
            if graph:
                graph_loop(k)
            else:
                python_steps(k, i)
        except DfcError as e:
            if dead_task(e) != worker:
                halt(e)
                return
            failed[worker] = e.message
            why = e.message.split(";")[0]
            if restart_failed and not stop.is_set():
                log.warning("%s died (%s); restarting it", worker, why)
                dp.cluster.restart(worker)
                if dp.mode == "async" and not graph:
                    # its step may have been applied before it died: then it is not run again (its loss is
                    # lost with the process)
                    done = recovery.call(lambda: applied_steps(worker))
                    losses[k].extend([float("nan")] * (min(done, len(losses[k]) + 1) - len(losses[k])))
                return work(k, len(losses[k]))
            if dp.mode == "sync" and n - len(failed) < dp.m:
                halt(DfcError(f"sync training needs {dp.m} workers per update and only {n - len(failed)} are "
                              f"left: {', '.join(failed)} died ({why}); pass restart_failed=True to restart "
                              f"dead workers"))
            else:
                log.warning("%s died (%s); training goes on without it", worker, why)
        except Exception as e:   # noqa: BLE001 — raised in the caller's thread
            halt(e)

    threads = [threading.Thread(target=work, args=(k,), daemon=True, name=f"dfc-dp-{w}")
               for k, w in enumerate(dp.workers)]
    for t in threads:
        t.start()
    try:
        if dp.mode == "sync":
            _chief(dp, recovery, target, errors, halt)
        else:
            for t in threads:
                while t.is_alive():
                    t.join(0.1)
    finally:
        stop.set()
        if dp.mode == "sync":       # let every waiting worker finish: one STOP token each
            try:
                dp.release_all(STOP)
            except DfcError:        # the queue's task is dead: its waiting workers failed already
                pass
        for t in threads:
            t.join(120)
    if errors:
        raise errors[0]
    return {"losses": losses, "worker_steps": [len(x) for x in losses], "updates": int(dp.global_step.numpy()),
            "failed": failed, "recovered": recovery.events,
            "bytes_between_processes": sum(s.wire_stats()["bytes_sent"] for s in sessions)}


def _records(dp, worker):
    """The values of the worker's applied-step records, one per ps device (none in sync mode)."""
    return [int(v.numpy()) for (w, _dev), v in dp.applied.items() if w == worker]


def _chief(dp, recovery, target, errors, halt):
    """Sync mode: run the chief's updates until the global step reaches `target`."""
    try:
        if dp.loop == "graph":
            recovery.call(lambda: dp.chief.call(np.int64(target)))
            return
        step = int(dp.global_step.numpy())
        while step < target and not errors:
            step = int(recovery.call(dp.chief.call))
    except Exception as e:   # noqa: BLE001 — reported like the workers' errors
        if not errors:
            halt(e)
