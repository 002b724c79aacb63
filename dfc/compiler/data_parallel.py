"""Data-parallel training on a cluster: parameters on `ps` tasks, one replica of the step per `worker`.

    dp = dfc.train.DataParallel(cluster, dfc.train.SGD(0.1), mode="sync", replicas_to_aggregate=2)
    w = dp.variable(np.zeros((64, 10), np.float32), name="w")   # round-robin over the ps tasks
    dp.compile(loss_fn, [dfc.TensorSpec([None, 64], "float32"), dfc.TensorSpec([None], "int64")])
    history = dp.run(shards, steps=100, batch_size=32)          # shards: one (x, y) per worker

Between-graph replication (whitepaper §7, course note): every worker runs the same training-step
graph, traced with its compute on `worker:K/cpu:0`, on its own shard of the data, from its own thread
of the chief; the Variables and their updates live on the ps tasks (the update ops follow the
Variable's handle), so every worker reads and nudges the same parameters.

- mode="async": each step reads the parameters, computes gradients and applies them through the
  optimizer at once; nobody waits for anybody.
- mode="sync": each step reads the global step, computes gradients and hands them to a
  ConditionalAccumulator per Variable (on the Variable's task) tagged with that step, then waits for a
  token. The chief's update graph takes the average of `replicas_to_aggregate` (m) fresh gradients per
  Variable, applies it, increments the global step and releases one token per worker: the counter /
  queue barrier before the next step's reads. With m < n the slowest workers' gradients arrive with an
  old step and are dropped (backup workers against stragglers); with m = n one step equals a step on
  the concatenated batch (the mean of the workers' mean gradients, for equal shard batches).

`dp.global_step` is a Variable on the first ps task; learning-rate schedules can read it in the step.
"""
import threading
import time

import numpy as np

from dfc.compiler.api import device as device_scope
from dfc.compiler.autodiff import gradients
from dfc.compiler.queues import ConditionalAccumulator, FIFOQueue
from dfc.compiler.api import trace
from dfc.compiler.tracing import TensorSpec
from dfc.compiler.variables import Variable
from dfc.errors import DfcError

MODES = ("async", "sync")


class DataParallel:
    """Data-parallel training of Variables made with `variable()` on `cluster` (see the module docstring)."""

    def __init__(self, cluster, optimizer, mode="async", replicas_to_aggregate=None, name="dp",
                 checkpoint_every=None, wire_compression=None):
        if mode not in MODES:
            raise DfcError(f"DataParallel mode must be 'async' or 'sync', not {mode!r}")
        tasks = cluster.tasks
        self.workers = sorted((t for t in tasks if t.startswith("worker:")), key=lambda t: int(t.split(":")[1]))
        self.ps = sorted((t for t in tasks if t.startswith("ps:")), key=lambda t: int(t.split(":")[1]))
        if not self.workers or not self.ps:
            raise DfcError(f"DataParallel needs worker and ps tasks; the cluster has {', '.join(tasks)}")
        n = len(self.workers)
        m = n if replicas_to_aggregate is None else int(replicas_to_aggregate)
        if not 1 <= m <= n:
            raise DfcError(f"replicas_to_aggregate must be between 1 and the {n} workers, got {replicas_to_aggregate}")
        self.cluster, self.optimizer, self.mode, self.m, self.name = cluster, optimizer, mode, m, name
        self.checkpoint_every = None if checkpoint_every is None else int(checkpoint_every)
        self.wire_compression = wire_compression     # "bfloat16": float32 values cross tasks as 16 bits
        self.variables = []
        self.global_step = Variable(np.int64(0), name=f"{name}_global_step", device=f"{self.ps[0]}/cpu:0")
        self.sessions, self.chief = [], None

    def variable(self, initial_value, name=None, dtype=None):
        """A parameter on the next ps task (round-robin), with its optimizer slots beside it."""
        dev = f"{self.ps[len(self.variables) % len(self.ps)]}/cpu:0"
        v = Variable(initial_value, name=name, dtype=dtype, device=dev)
        self.variables.append(v)
        return v

    # ------------------------------------------------------------------ graphs
    def compile(self, loss_fn, input_signature):
        """Trace one training step per worker (and the chief's update graph in sync mode)."""
        from dfc.runtime.session import Session
        specs = [s if isinstance(s, TensorSpec) else TensorSpec(*s) for s in input_signature]
        vars_ = list(self.variables)
        if not vars_:
            raise DfcError("make the model's Variables with dp.variable(...) before compile")
        self.sessions = []
        if self.mode == "sync":
            self.accumulators = [ConditionalAccumulator(v.dtype, v.shape, name=f"{self.name}_acc_{v.name}",
                                                        device=v.device) for v in vars_]
            self.tokens = FIFOQueue(1 << 30, "int64", [], name=f"{self.name}_tokens",
                                    device=f"{self.ps[0]}/cpu:0")
        for w in self.workers:
            g = trace(self._worker_step(loss_fn, w, vars_), *specs)
            self.sessions.append(Session(g, cluster=self.cluster, wire_compression=self.wire_compression))
        if self.mode == "sync":
            self.chief = Session(trace(self._chief_step(vars_)), cluster=self.cluster,
                                 wire_compression=self.wire_compression)
        return self

    def _worker_step(self, loss_fn, worker, vars_):
        def step(*inputs):
            local = self.global_step.read_value()
            with device_scope(f"{worker}/cpu:0"):
                loss = loss_fn(*inputs)
                grads = gradients(loss, vars_)
            if self.mode == "async":
                self.optimizer.apply_gradients(list(zip(grads, vars_)))
                self._save_shards(self.global_step.assign_add(np.int64(1)))
            else:
                for acc, g in zip(self.accumulators, grads):
                    acc.apply_grad(g, local)
                self.tokens.dequeue()      # the barrier: wait for the chief's update of this step
            return loss
        step.__name__ = f"train_step_{worker.replace(':', '')}"
        return step

    def _chief_step(self, vars_):
        def update():
            avgs = [acc.take_grad(self.m) for acc in self.accumulators]
            self.optimizer.apply_gradients(list(zip(avgs, vars_)))
            new = self.global_step.assign_add(np.int64(1))
            self._save_shards(new)
            from dfc.compiler.ops_api import fill
            self.tokens.enqueue_many(fill([len(self.workers)], new))
            return new
        update.__name__ = f"{self.name}_chief_update"
        return update

    # ------------------------------------------------------------------ checkpoint shards
    def shard_path(self, ps):
        """The file (in the ps task's checkpoint directory) holding ps task `ps`'s shard."""
        return f"{self.name}_{ps.replace(':', '')}.npz"

    def _shards(self):
        """ps task -> dfc.Checkpoint of the Variables it holds (ps:0's includes the global step)."""
        from dfc.compiler.checkpoint import Checkpoint
        out = {}
        for v in [self.global_step] + self.variables:
            task = str(v.device).split("/")[0]
            out.setdefault(task, {})[v.shared_name] = v
        return {task: Checkpoint(vs) for task, vs in out.items()}

    def _save_shards(self, step):
        """Every `checkpoint_every` updates each ps task saves its own Variables (a Save on that task, in
        the graph that made the update): no coordination, so one shard may have seen more updates than
        another (the course note's point)."""
        if not self.checkpoint_every:
            return
        from dfc.compiler.control_flow import cond
        for task, ckpt in self._shards().items():
            def save(ckpt=ckpt, task=task):
                with device_scope(f"{task}/cpu:0"):
                    ckpt.save(self.shard_path(task))
                return np.int64(0)
            cond(step % self.checkpoint_every == 0, save, lambda: np.int64(0))

    def restore(self, tasks=None):
        """Load each ps task's newest shard into its Variables (all ps tasks, or those in `tasks`, e.g.
        after cluster.restart("ps:0")); returns the restored global step."""
        from dfc.runtime.session import Session
        for task, ckpt in self._shards().items():
            if tasks is not None and task not in tasks:
                continue

            def load(ckpt=ckpt, task=task):
                with device_scope(f"{task}/cpu:0"):
                    return ckpt.restore(self.shard_path(task))[0]
            Session(trace(load), cluster=self.cluster).call()
        return int(self.global_step.numpy())

    # ------------------------------------------------------------------ the loop
    def run(self, shards, steps, batch_size=None, delays=None, on_step=None, restart_failed=False):
        """Train for `steps` updates: every worker loops over minibatches of its shard on its own thread.

        shards: one tuple of arrays per worker (its data); batch_size: rows per step (None: the whole
        shard); delays: seconds each worker sleeps after each of its steps (to study stragglers);
        on_step(worker_index, step_index, loss): called after each worker step. Returns {"losses": a list
        of losses per worker, "worker_steps": steps each worker took, "updates": the global step,
        "failed": {worker: why} for workers whose process died}. In sync mode `steps` counts the chief's
        updates; in async mode each worker takes `steps` steps.

        A worker whose process dies does not stop training: the others go on (in sync mode while at
        least replicas_to_aggregate workers are left) and the result reports it; with
        restart_failed=True the chief restarts its task (cluster.restart) and it rejoins where it was
        (workers hold no state: the parameters live on the ps tasks). A dead ps task stops the run
        with its DfcError.
        """
        if not self.sessions:
            raise DfcError("call dp.compile(loss_fn, input_signature) before dp.run")
        if len(shards) != len(self.workers):
            raise DfcError(f"give one shard per worker: {len(self.workers)} workers, {len(shards)} shards")
        delays = list(delays or [0.0] * len(self.workers))
        losses = [[] for _ in self.workers]
        if self.mode == "sync":      # tokens left over by an earlier run's last release
            left = int(self.tokens.size())
            if left:
                self.tokens.dequeue_many(left)
        errors, stop, failed = [], threading.Event(), {}

        def work(k, i=0):
            shard, s = shards[k], self.sessions[k]
            rows = len(shard[0])
            b = rows if batch_size is None else int(batch_size)
            try:
                while not stop.is_set() and (self.mode == "sync" or i < steps):
                    lo = (i * b) % rows
                    idx = np.arange(lo, lo + b) % rows
                    loss = float(s.call(*[a[idx] for a in shard]))
                    losses[k].append(loss)
                    if on_step is not None:
                        on_step(k, i, loss)
                    i += 1
                    if delays[k]:
                        time.sleep(delays[k])
            except DfcError as e:
                worker = self.workers[k]
                if f"task {worker} died" not in str(e):
                    errors.append(e)
                    stop.set()
                    return
                failed[worker] = e.message
                if restart_failed and not stop.is_set():
                    self.cluster.restart(worker)
                    return work(k, i)
                if self.mode == "sync" and len(self.workers) - len(failed) < self.m:
                    errors.append(e)
                    stop.set()
            except Exception as e:   # noqa: BLE001 — raised in the caller's thread
                errors.append(e)
                stop.set()

        threads = [threading.Thread(target=work, args=(k,), daemon=True, name=f"dfc-dp-{w}")
                   for k, w in enumerate(self.workers)]
        for t in threads:
            t.start()
        try:
            if self.mode == "sync":
                for _ in range(steps):
                    if errors:
                        break
                    self.chief.call()
            else:                        # async: every worker takes its `steps` steps
                for t in threads:
                    while t.is_alive():
                        t.join(0.1)
        finally:
            stop.set()
            if self.mode == "sync":      # let every waiting worker finish its last step
                self.tokens.enqueue_many(np.zeros(len(self.workers) * 2, np.int64))
            for t in threads:
                t.join(120)
        if errors:
            raise errors[0]
        moved = sum(s.wire_stats()["bytes_sent"] for s in self.sessions + ([self.chief] if self.chief else []))
        return {"losses": losses, "worker_steps": [len(x) for x in losses], "updates": int(self.global_step.numpy()),
                "failed": failed, "bytes_between_processes": moved}
