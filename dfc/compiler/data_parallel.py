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
  ConditionalAccumulator per Variable (on the Variable's task) tagged with that step and the worker,
  then waits for a token. The chief's update graph takes the average of `replicas_to_aggregate` (m)
  fresh gradients per Variable, applies it, increments the global step and puts a token (the new global
  step) in each worker's token queue: the counter / queue barrier before the next step's reads. Each
  update averages at most one gradient per worker (a restarted worker's second gradient for a step is
  dropped like a stale one), and a worker that computed at step s goes on only at a token newer than s:
  a token left from an update it did not wait for (its process died waiting, or it was a straggler) is
  dropped, so it never runs ahead of the update its gradient went to. With m < n the slowest workers'
  gradients arrive with an old step and are dropped (backup workers against stragglers); with m = n
  one step equals a step on the concatenated batch (the mean of the workers' mean gradients, for
  equal shard batches). Accumulators are not checkpointed: a restored ps task's start empty at the
  restored step (and an accumulator whose step moves back drops its sum with its set of workers).

The training loop is either a Python loop of steps (`compile(..., loop="python")`, one Session call
per step) or the paper's in-graph loop (`loop="graph"`): each worker's whole loop, minibatch slicing
included, is one dfc.while_loop and one call; in sync mode the chief's updates are a loop too, and the
workers' loops end at the stop token the chief enqueues (to each worker) after its last update.

`dp.global_step` is a Variable on the first ps task; a learning-rate schedule
(`dfc.train.exponential_decay`) reads it in the step. Checkpoints: with `checkpoint_every=k` and/or
`checkpoint_secs=t` each ps task counts its own updates and saves the Variables it holds (a Save on
that task, in the graph that made the update) every k of them and/or once t seconds have passed since
its last save (`dfc.timestamp` in the graph): no coordination, so a shard of one task may have seen
more updates than another's. `dp.restore()` loads each task's newest shard; the run loop
(dfc/compiler/data_parallel_run.py) does it by itself after restarting a dead ps task.
"""
import numpy as np

from dfc.compiler import ops_api, variables
from dfc.compiler.api import device as device_scope
from dfc.compiler.api import trace
from dfc.compiler.autodiff import gradients
from dfc.compiler.control_flow import cond, while_loop
from dfc.compiler.queues import ConditionalAccumulator, FIFOQueue
from dfc.compiler.sharded import sharded_variable
from dfc.compiler.sparse import sparse_gradients
from dfc.compiler.tensor_array import TensorArray
from dfc.compiler.tracing import TensorSpec, current_builder
from dfc.compiler.variables import Variable
from dfc.errors import DfcError

MODES = ("async", "sync")
LOOPS = ("python", "graph")
CHIEF = "cpu:0"          # the chief's own device: progress bars of in-graph loops draw there
STOP = -1                # the token after which a sync worker's loop ends
FOREVER = 1 << 62        # steps of a sync worker's in-graph loop (it ends at STOP)


class DataParallel:
    """Data-parallel training of Variables made with `variable()` on `cluster` (see the module docstring)."""

    def __init__(self, cluster, optimizer, mode="async", replicas_to_aggregate=None, name="dp",
                 checkpoint_every=None, checkpoint_secs=None, wire_compression=None, workers=None):
        """workers: the worker tasks to train on (default: every `worker:K` task of the cluster)."""
        if mode not in MODES:
            raise DfcError(f"DataParallel mode must be 'async' or 'sync', not {mode!r}")
        tasks = cluster.tasks
        self.workers = sorted((t for t in tasks if t.startswith("worker:")), key=lambda t: int(t.split(":")[1]))
        if workers is not None:
            unknown = [w for w in workers if w not in self.workers]
            if unknown or not workers:
                raise DfcError(f"workers must be some of the cluster's worker tasks ({', '.join(self.workers)}), "
                               f"got {list(workers)}")
            self.workers = list(workers)
        self.ps = sorted((t for t in tasks if t.startswith("ps:")), key=lambda t: int(t.split(":")[1]))
        if not self.workers or not self.ps:
            raise DfcError(f"DataParallel needs worker and ps tasks; the cluster has {', '.join(tasks)}")
        n = len(self.workers)
        m = n if replicas_to_aggregate is None else int(replicas_to_aggregate)
        if not 1 <= m <= n:
            raise DfcError(f"replicas_to_aggregate must be between 1 and the {n} workers, got {replicas_to_aggregate}")
        self.cluster, self.optimizer, self.mode, self.m, self.name = cluster, optimizer, mode, m, name
        self.checkpoint_every = None if checkpoint_every is None else int(checkpoint_every)
        self.checkpoint_secs = None if checkpoint_secs is None else float(checkpoint_secs)
        if (self.checkpoint_every is not None and self.checkpoint_every < 1) or \
                (self.checkpoint_secs is not None and self.checkpoint_secs <= 0):
            raise DfcError("checkpoint_every must be >= 1 and checkpoint_secs > 0")
        self.wire_compression = wire_compression     # "bfloat16": float32 values cross tasks as 16 bits
        self.variables = []
        self.global_step = Variable(np.int64(0), name=f"{name}_global_step", device=f"{self.ps[0]}/cpu:0")
        self.sessions, self.chief, self.loop = [], None, "python"
        self.progress = False
        self._ps_clock = {}          # ps task -> (its update counter, the time of its last save), on that task
        self.worker_steps = {}       # worker -> Variable counting its steps (in-graph loops), on ps:0
        self.applied = {}            # async: (worker, ps device) -> Variable: how many of its steps applied there

    def variable(self, initial_value, name=None, dtype=None):
        """A parameter on the next ps task (round-robin), with its optimizer slots beside it."""
        dev = f"{self.ps[len(self.variables) % len(self.ps)]}/cpu:0"
        v = Variable(initial_value, name=name, dtype=dtype, device=dev)
        self.variables.append(v)
        return v

    def sharded_variable(self, initial_value, num_shards=None, name="sharded", dtype=None):
        """A table whose rows are split over the ps tasks (num_shards blocks, default one per ps task, placed
        round-robin): look rows up with dfc.embedding_lookup(table, ids). In async mode with SGD or
        Adagrad each shard is updated by rows (only the looked-up rows cross the wire)."""
        n = len(self.ps) if num_shards is None else int(num_shards)
        first = len(self.variables)
        devices = [f"{self.ps[(first + k) % len(self.ps)]}/cpu:0" for k in range(n)]
        table = sharded_variable(initial_value, n, devices, name=name, dtype=dtype)
        self.variables.extend(table.shards)
        return table

    # ------------------------------------------------------------------ graphs
    def compile(self, loss_fn, input_signature, loop="python", progress=False):
        """Trace the workers' training step (loop="python") or whole training loop (loop="graph"), and
        the chief's update graph in sync mode. progress=True: in-graph loops draw a bar per worker on
        the chief (dfc.progress); Python loops report through run(on_step=...)."""
        from dfc.runtime.session import Session
        if loop not in LOOPS:
            raise DfcError(f"DataParallel loop must be 'python' or 'graph', not {loop!r}")
        specs = [s if isinstance(s, TensorSpec) else TensorSpec(*s) for s in input_signature]
        vars_ = list(self.variables)
        if not vars_:
            raise DfcError("make the model's Variables with dp.variable(...) before compile")
        self.loop, self.progress, self.sessions = loop, bool(progress), []
        if self.checkpoint_every or self.checkpoint_secs:
            for task in self._shards():
                if task not in self._ps_clock:
                    dev, tag = f"{task}/cpu:0", f"{self.name}_{task.replace(':', '')}"
                    self._ps_clock[task] = (Variable(np.int64(0), name=f"{tag}_updates", device=dev),
                                            Variable(np.float64(0), name=f"{tag}_saved_at", device=dev))
        if self.mode == "sync":
            self.accumulators = [ConditionalAccumulator(v.dtype, v.shape, name=f"{self.name}_acc_{v.name}",
                                                        device=v.device) for v in vars_]
            self.tokens = {w: FIFOQueue(1 << 30, "int64", [], name=f"{self.name}_tokens_{w.replace(':', '')}",
                                        device=f"{self.ps[0]}/cpu:0") for w in self.workers}
        scalar = TensorSpec([], "int64")
        for w in self.workers if self.mode == "async" else ():    # all before any step: shards hold them all
            for d in sorted({str(v.device) for v in [self.global_step] + vars_}):
                self._record(w, d)
        for w in self.workers:
            step = self._worker_step(loss_fn, w, vars_)
            if loop == "graph":
                if w not in self.worker_steps:
                    self.worker_steps[w] = self._record(w, str(self.global_step.device)) if self.mode == "async" \
                        else Variable(np.int64(0), name=f"{self.name}_{w.replace(':', '')}_steps",
                                      device=f"{self.ps[0]}/cpu:0")
                g = trace(self._worker_loop(step, w, len(specs)), *specs, scalar, scalar, scalar, scalar)
            else:
                g = trace(step, *specs, scalar)
            self.sessions.append(Session(g, cluster=self.cluster, wire_compression=self.wire_compression,
                                         progress=self.progress or None))
        self.chief = None
        if self.mode == "sync":
            update = self._chief_update(vars_)
            g = trace(self._chief_loop(update), scalar) if loop == "graph" else trace(update)
            self.chief = Session(g, cluster=self.cluster, wire_compression=self.wire_compression)
        return self

    def _record(self, worker, dev):
        """The Variable on ps device `dev` counting the worker's steps applied there (async mode)."""
        key = (worker, dev)
        if key not in self.applied:
            tag = f"{self.name}_{worker.replace(':', '')}_applied_{dev.split('/')[0].replace(':', '')}"
            self.applied[key] = Variable(np.int64(0), name=tag, device=dev)
        return self.applied[key]

    def _worker_step(self, loss_fn, worker, vars_):
        """step(*batch, sid) -> (loss, token): async, the new global step; sync, the token that released it.
        sid: the worker's step id (async: applied only if not applied before; sync: unused)."""
        def step(*inputs):
            *inputs, sid = inputs
            local = self.global_step.read_value()
            with device_scope(f"{worker}/cpu:0"):
                loss = loss_fn(*inputs)
                # async: a table read only by gathers sends and applies rows (sync accumulates dense sums)
                sparse = self.mode == "async" and getattr(self.optimizer, "sparse_updates", False)
                grads = sparse_gradients(loss, vars_) if sparse else gradients(loss, vars_)
            if self.mode == "async":
                token = self._apply_once(worker, sid, lambda: self.optimizer.apply_gradients(
                    list(zip(grads, vars_)), global_step=local))
            else:
                for acc, g in zip(self.accumulators, grads):
                    acc.apply_grad(g, local, worker=worker)
                token = self._wait_for_update(worker, local)
            return loss, token
        step.__name__ = f"train_step_{worker.replace(':', '')}"
        return step

    def _wait_for_update(self, worker, local):
        """The barrier: the worker's first token newer than `local` (the update its gradient went to, or a
        later one) or STOP; older tokens are dropped. On ps:0, beside the queue and the global step."""
        q = self.tokens[worker]
        with device_scope(f"{self.ps[0]}/cpu:0"):
            return while_loop(lambda t: ops_api.logical_and(t != STOP, t <= local), lambda t: q.dequeue(),
                              q.dequeue(), parallel_iterations=1, name=f"{self.name}_wait_{worker.replace(':', '')}")

    def _apply_once(self, worker, sid, build):
        """The updates `build()` traces (the optimizer's), the global step's increment and the checkpoint
        counters, as one ApplyOnce per ps device: each applies all its updates or none, and only if the
        worker's step `sid` was not applied there before (a restarted worker may run a step again whose
        update had reached the ps). Returns the new global step."""
        updates = []

        def hook(var, op, value):
            updates.append((var, op, value))
            if op == "Assign":
                return value
            if op.startswith("ResourceScatter"):      # the rows it will give, read on the Variable's device
                idx, rows = value
                with device_scope(str(var.device)):
                    old = ops_api.gather(var.read_value(), idx)
                return old + rows if op == "ResourceScatterAdd" else old - rows
            return var.read_value() + value if op == "AssignAdd" else var.read_value() - value
        variables.update_hooks.hook = hook
        try:
            build()
        finally:
            variables.update_hooks.hook = None
        one = ops_api.constant(np.int64(1))
        updates.append((self.global_step, "AssignAdd", one))
        for counter, _saved_at in self._ps_clock.values():
            updates.append((counter, "AssignAdd", one))
        shards = self._shards() if self._ps_clock else {}
        by_dev, token = {}, None
        for var, op, value in updates:
            by_dev.setdefault(str(var.device), []).append((var, op, value))
        for dev, items in sorted(by_dev.items()):
            task = dev.split("/")[0]
            snap = [v for v in [self.global_step] if str(v.device) == dev]
            if task in shards:
                seen = set(map(id, snap))
                snap += [v for v in [*shards[task].variables.values(), self._ps_clock[task][0]] if id(v) not in seen]
            scatter = [x for _, op, x in items if op.startswith("ResourceScatter")]
            ins = [self._record(worker, dev).handle(), sid] + [v.handle() for v, _, _ in items] + \
                [x[1] if op.startswith("ResourceScatter") else x for _, op, x in items] + \
                [v.handle() for v in snap] + [idx for idx, _ in scatter]
            out = current_builder().make("ApplyOnce", ins, {"ops": [op for _, op, _ in items],
                                                             "dtypes": [v.dtype for v in snap]})
            values = dict(zip(map(id, snap), out[1:]))
            if str(self.global_step.device) == dev:
                token = values[id(self.global_step)]
            if task in shards:
                self._save_snapshot(task, shards[task], out[0], values)
        return token

    def _save_snapshot(self, task, ckpt, applied, values):
        """Save task's shard from the values its ApplyOnce read (one consistent state: Variables and the
        workers' applied-step records) when this update is due for a checkpoint."""
        counter, saved_at = self._ps_clock[task]
        with device_scope(f"{task}/cpu:0"):
            due = ops_api.constant(False)
            if self.checkpoint_every:
                due = ops_api.logical_or(due, values[id(counter)] % self.checkpoint_every == 0)
            if self.checkpoint_secs:
                due = ops_api.logical_or(due, ops_api.timestamp() - saved_at.read_value() >= self.checkpoint_secs)
            due = ops_api.logical_and(applied, due)

            def save():
                with device_scope(f"{task}/cpu:0"):
                    current_builder().make("Save", [values[id(v)] for v in ckpt.variables.values()],
                                           {"path": self.shard_path(task), "names": list(ckpt.variables)})
                    saved_at.assign(ops_api.timestamp())
                return np.int64(0)
            cond(due, save, lambda: np.int64(0))

    def _worker_loop(self, step, worker, n_inputs):
        """The paper's in-graph training loop: loop(*shard, steps, batch, start, base) runs minibatches
        start, start+1, ... of the shard (wrapping around) until `steps` (async) or the STOP token (sync)
        and returns each step's loss (float64); minibatch i is the worker's step base + i."""
        counter = self.worker_steps[worker]

        def loop(*args):
            data, (steps, batch, start, base) = args[:n_inputs], args[n_inputs:]
            rows = ops_api.shape(data[0])[0]

            def body(i, go, losses):
                with device_scope(f"{worker}/cpu:0"):
                    idx = ops_api.mod(i * batch + ops_api.range(batch), rows)
                    loss, token = step(*[ops_api.gather(a, idx) for a in data], base + i)
                if self.mode == "sync":      # async: the step's ApplyOnce counts it (counter is its record)
                    counter.assign_add(np.int64(1))
                if self.progress:
                    with device_scope(CHIEF):
                        from dfc.compiler.progress import progress
                        progress(i + 1, steps if self.mode == "async" else i + 1, name=f"{self.name} {worker}",
                                 loss=loss)
                nxt = i + 1
                more = nxt < steps if self.mode == "async" else ops_api.logical_and(token != STOP, nxt < steps)
                return nxt, more, losses.write(i - start, ops_api.cast(loss, "float64"))
            out = while_loop(lambda i, go, losses: go, body, (start, start < steps, TensorArray("float64")),
                             parallel_iterations=1, name=f"training_loop_{worker.replace(':', '')}")
            return out[2].stack()
        loop.__name__ = f"train_loop_{worker.replace(':', '')}"
        return loop

    def _chief_update(self, vars_):
        def update():
            avgs = [acc.take_grad(self.m) for acc in self.accumulators]
            local = self.global_step.read_value()
            self.optimizer.apply_gradients(list(zip(avgs, vars_)), global_step=local)
            new = self.global_step.assign_add(np.int64(1))
            self._save_shards()
            for q in self.tokens.values():
                q.enqueue(new)
            return new
        update.__name__ = f"{self.name}_chief_update"
        return update

    def _chief_loop(self, update):
        """In-graph sync loop: updates until the global step reaches `target`, then a STOP per worker."""
        def chief_loop(target):
            s = while_loop(lambda s: s < target, lambda s: update(), self.global_step.read_value(),
                           parallel_iterations=1, name=f"{self.name}_update_loop")
            for q in self.tokens.values():
                q.enqueue(np.int64(STOP))
            return s
        chief_loop.__name__ = f"{self.name}_chief_loop"
        return chief_loop

    # ------------------------------------------------------------------ checkpoint shards
    def shard_path(self, ps):
        """The file (in the ps task's checkpoint directory) holding ps task `ps`'s shard."""
        return f"{self.name}_{ps.replace(':', '')}.npz"

    def _shards(self):
        """ps task -> dfc.Checkpoint of the Variables it holds (ps:0's includes the global step; async, each
        task's includes the workers' applied-step records there)."""
        from dfc.compiler.checkpoint import Checkpoint
        out = {}
        for v in [self.global_step] + self.variables + list(self.applied.values()):
            task = str(v.device).split("/")[0]
            out.setdefault(task, {})[v.shared_name] = v
        return {task: Checkpoint(vs) for task, vs in out.items()}

    def _save_shards(self):
        """Each ps task counts its updates and saves its own Variables every `checkpoint_every` of them
        and/or once `checkpoint_secs` have passed since its last save: all on that task, in the graph
        that made the update; no coordination between tasks (the course note's point)."""
        if not self._ps_clock:
            return
        for task, ckpt in self._shards().items():
            updates, saved_at = self._ps_clock[task]
            with device_scope(f"{task}/cpu:0"):
                n = updates.assign_add(np.int64(1))
                due = ops_api.constant(False)
                if self.checkpoint_every:
                    due = ops_api.logical_or(due, n % self.checkpoint_every == 0)
                if self.checkpoint_secs:
                    now = ops_api.timestamp()
                    due = ops_api.logical_or(due, now - saved_at.read_value() >= self.checkpoint_secs)

                def save(ckpt=ckpt, task=task, saved_at=saved_at):
                    with device_scope(f"{task}/cpu:0"):
                        ckpt.save(self.shard_path(task))
                        saved_at.assign(ops_api.timestamp())
                    return np.int64(0)
                cond(due, save, lambda: np.int64(0))

    def restore(self, tasks=None):
        """Load each ps task's newest shard into its Variables (all ps tasks, or those in `tasks`, e.g.
        after cluster.restart("ps:0")); returns the restored global step. In sync mode the
        accumulators then count from that step, and tokens left in the queue are dropped."""
        from dfc.runtime.session import Session
        for task, ckpt in self._shards().items():
            if tasks is not None and task not in tasks:
                continue

            def load(ckpt=ckpt, task=task):
                with device_scope(f"{task}/cpu:0"):
                    return ckpt.restore(self.shard_path(task))[0]
            Session(trace(load), cluster=self.cluster).call()
        self._resync()
        return int(self.global_step.numpy())

    def _resync(self):
        """Sync mode: accumulators take the global step (gradients tagged older are dropped from now on)
        and leftover tokens go."""
        if self.mode != "sync" or self.chief is None:
            return
        from dfc.runtime.session import Session

        def resync():
            step = self.global_step.read_value()
            for acc in self.accumulators:
                acc.set_global_step(step)
            return step
        Session(trace(resync), cluster=self.cluster).call()
        self.drain_tokens()

    def drain_tokens(self):
        """Drop the tokens left in the sync queues (by an earlier run's last release or a failed step)."""
        for q in self.tokens.values():
            left = int(q.size())
            if left:
                q.dequeue_many(left)

    def release_all(self, token):
        """Put `token` in every worker's queue (STOP: each waiting worker's step ends)."""
        for q in self.tokens.values():
            q.enqueue(np.int64(token))

    def run(self, shards, steps, batch_size=None, delays=None, on_step=None, restart_failed=False):
        """Train for `steps` updates; see dfc/compiler/data_parallel_run.py (`run`) for the details."""
        from dfc.compiler.data_parallel_run import run
        return run(self, shards, steps, batch_size, delays, on_step, restart_failed)
