"""Clusters: tasks as Ray actors, partitions in their task's process (extra `dfc[cluster]`).

    c = dfc.cluster.connect(tasks={"worker": 2, "ps": 1})   # local Ray; or address="auto" / "ray://host:10001"
    with dfc.device("ps:0/cpu:0"): ...                       # in traced code: JOB:TASK/KIND:N
    dfc.Session(g, cluster=c).run(...)                       # or: with c: f(x)
    c.restart("worker:1")                                    # a dead task back (then restore a Checkpoint)

Each task ("worker:0", "ps:0", ...) is one Ray actor: its own OS process,
placed by Ray on any node of the Ray cluster (asking Ray for GPUs when
`gpus={"worker": 1}`). The process running the Session is the chief: devices
without a task prefix are its own. Ray is imported only here, so a
one-process dfc never needs it.

Without an address, `connect` starts a private Ray for this process (never
joining a cluster found through RAY_ADDRESS or a `ray start` on the machine),
and that Ray is torn down when this process ends, even when it is killed.

Liveness: a task that gives the chief no reply for `liveness_timeout` seconds
(default 30, or $DFC_CLUSTER_LIVENESS_TIMEOUT) while a step or a call needs it
— its process stopped, hung, swapped out or cut off — fails the step with a
DfcRuntimeError naming it, as a dead task does; `restart` replaces it. A task
answers the chief on threads of its own that kernels do not block, so a long
kernel is not a silent task.
"""
import contextvars
import os
import threading

from dfc.config import DEFAULT_LIVENESS_TIMEOUT, LIVENESS_ENV, parse_liveness_timeout  # noqa: F401 (re-exported)
from dfc.errors import DfcError, DfcRuntimeError
from dfc.runtime.overlap import BLAS_THREAD_VARS, blas_threads

_current = contextvars.ContextVar("dfc_cluster", default=None)
_connected = []         # clusters connected in this process and not shut down, oldest first
_DEFAULT_THREADS = 2
START_TIMEOUT = 120.0   # how long a task's actor may take to start (Ray may have to start a process for it)
_DIED = ("ActorDiedError", "ActorUnavailableError", "RayActorError")


def no_answer(task, seconds):
    """Why a task that gave no reply for `seconds` counts as dead (the words "task T died" are what callers
    such as DataParallel's recovery look for)."""
    return (f"task {task} died or hangs: no reply for {seconds:g} s (its process stopped, hung, swapped out or "
            f"cut off; the limit is connect(liveness_timeout=...) or ${LIVENESS_ENV})")


def _ray():
    # Ray's progress-bar support replaces builtins.print in the driver process; dfc users' print (and
    # converted print in dfc.functions) must stay Python's own.
    os.environ.setdefault("RAY_TQDM_PATCH_PRINT", "0")
    try:
        import ray
    except ImportError:
        raise DfcError("clusters need Ray: pip install 'dfc[cluster]' (or pip install ray)") from None
    return ray


def parse_tasks(spec):
    """{"worker": 2, "ps": 1} or "worker=2,ps=1" -> the task names ["ps:0", "worker:0", "worker:1"]."""
    if isinstance(spec, str):
        pairs = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            job, eq, n = part.partition("=")
            if not eq or not job.strip().isidentifier() or not n.strip().isdigit():
                raise DfcError(f"bad task list {spec!r} (use JOB=N,JOB=N such as worker=2,ps=1)")
            pairs[job.strip()] = int(n)
        spec = pairs
    if not isinstance(spec, dict) or not spec:
        raise DfcError("tasks must name at least one job, e.g. {'worker': 2, 'ps': 1}")
    names = []
    for job, n in sorted(spec.items()):
        if not (isinstance(job, str) and job.isidentifier()) or not isinstance(n, int) or n < 1:
            raise DfcError(f"bad task count {job!r}: {n!r} (a job name and a positive int)")
        names += [f"{job}:{k}" for k in range(n)]
    return names


class Cluster:
    """A set of tasks (Ray actors). Use `connect`; `with cluster:` makes dfc.function calls run on it."""

    def __init__(self, tasks, address=None, num_threads=_DEFAULT_THREADS, gpus=None, checkpoint_dir=None,
                 ray_init=None, liveness_timeout=None, placement=None):
        from dfc.runtime.cluster import placement as places, wire
        self.placement = places.parse(placement, list(tasks))     # before Ray starts: bad input fails fast
        self._keys = wire.keypair()                               # (and a missing pyzmq)
        ray = _ray()
        self.address = address
        self.liveness_timeout = parse_liveness_timeout(liveness_timeout)
        self._started_ray = False
        self._reaper = None
        if not ray.is_initialized():
            kw = dict(ray_init or {})
            local = address in (None, "local")
            if local:
                kw.setdefault("include_dashboard", False)
                kw.setdefault("num_cpus", max(4, len(tasks)))
            try:
                # "local": Ray's own default (None) would join RAY_ADDRESS or a `ray start` cluster
                ray.init(address="local" if local else address, **kw)
            except Exception as e:   # noqa: BLE001 — Ray's own start-up / connection errors
                where = "start a local Ray" if local else f"join the Ray cluster at {address!r}"
                raise DfcError(f"could not {where}: {type(e).__name__}: {str(e).strip().splitlines()[0]}"
                               ) from None
            self._started_ray = True
            if local:
                from dfc.runtime.cluster import reaper
                self._reaper = reaper.watch()
        self.task_names = list(tasks)
        self.gpus = dict(gpus or {})
        self.num_threads, self.checkpoint_dir = num_threads, checkpoint_dir
        self.handles = {}
        self.loaded = {}            # task -> graph hashes it holds
        self.lock = threading.Lock()
        self.generation = {}        # task -> how many times it was (re)started
        self._tokens = []
        self._stale = set()         # tasks that may not have the newest peer handles (no reply to connect)
        self.addresses = {}         # task -> its Wire's address
        self.routes = {}            # step id -> the ClusterStep whose messages the chief's Wire hands over
        self.wire = None            # the chief's Wire; None under Ray Client (the tasks may not reach it)
        try:
            if not _client_mode():
                self.wire = wire.Wire("chief", self._keys, self._arrive, self._unsent)
            for t in self.task_names:
                self._start(t)
            self._connect_all()
        except BaseException:
            self.shutdown()         # the tasks that did start, and the Ray this cluster started
            raise
        _connected.append(self)     # only a cluster whose tasks all started holds Variables

    def _actor_class(self):
        from dfc.runtime.cluster.task import Task
        return _ray().remote(Task)

    def _start(self, name):
        ray = _ray()
        job = name.split(":")[0]
        opts = dict(max_concurrency=64, num_cpus=0, max_restarts=0, name=None)
        if self.gpus.get(job):
            opts["num_gpus"] = self.gpus[job]
        # Ray starts actors with OMP_NUM_THREADS=1; BLAS splits a matmul's sums by its thread count, so a
        # task's matmul would differ in the last bits from the chief's: tasks use the chief's count.
        threads = str(blas_threads())
        opts["runtime_env"] = {"env_vars": {v: threads for v in BLAS_THREAD_VARS}}
        if name in self.placement:
            from dfc.runtime.cluster import placement
            opts.update(placement.ray_options(name, self.placement[name], ray.nodes(), self.gpus.get(job, 0)))
        opts.pop("name")
        h = self._actor_class().options(**opts).remote(name, self.num_threads, self.checkpoint_dir,
                                                      self.liveness_timeout, self._keys)
        wait = max(START_TIMEOUT, self.liveness_timeout)
        try:
            address = ray.get(h.ping.remote(), timeout=wait)["address"]
        except Exception as e:   # noqa: BLE001 — Ray's timeout and actor errors
            try:
                ray.kill(h)
            except Exception:   # noqa: BLE001 — it never started
                pass
            why = f"it did not start within {wait:g} s (does the Ray cluster have room for it?)" \
                if isinstance(e, ray.exceptions.GetTimeoutError) else _why(e)
            raise DfcRuntimeError(f"task {name} could not be started: {why}") from None
        self.handles[name] = h
        self.addresses[name] = address
        if self.wire is not None:
            self.wire.connect({name: address})
        self._stale.discard(name)
        self.loaded[name] = set()
        self.generation[name] = self.generation.get(name, 0) + 1

    def _connect_all(self):
        """Tell every task the others' handles (again after a restart). A task that is dead itself is
        left out: its own restart connects it. One that does not answer within the liveness timeout is
        told again before its next step (ensure_graphs)."""
        ray = _ray()
        addresses = self._addresses()
        refs = {h.connect.remote(self.handles, addresses): task for task, h in self.handles.items()}
        done, late = ray.wait(list(refs), num_returns=len(refs), timeout=self.liveness_timeout)
        self._stale.update(refs[r] for r in late)
        for ref in done:
            try:
                ray.get(ref, timeout=self.liveness_timeout)
            except Exception as e:   # noqa: BLE001 — Ray's actor errors
                if type(e).__name__ not in _DIED:
                    raise

    @property
    def tasks(self):
        return list(self.task_names)

    def handle(self, task):
        h = self.handles.get(task)
        if h is None:
            raise DfcError(f"the cluster has no task {task!r} (tasks: {', '.join(self.task_names)})")
        return h

    def ask(self, task, method, *args):
        """ray.get of the actor method `method` of `task`; a dead task, or one that gives no reply within
        the liveness timeout, is a DfcRuntimeError naming it."""
        ray = _ray()
        h = self.handle(task)
        try:
            return ray.get(getattr(h, method).remote(*args), timeout=self.liveness_timeout)
        except DfcError:
            raise
        except Exception as e:   # noqa: BLE001 — Ray's actor errors
            if isinstance(e, ray.exceptions.GetTimeoutError):
                raise DfcRuntimeError(f"{no_answer(task, self.liveness_timeout)}; restart it with "
                                      f"cluster.restart({task!r})") from None
            if type(e).__name__ in _DIED:
                raise DfcRuntimeError(f"task {task} died ({_why(e)}); restart it with "
                                      f"cluster.restart({task!r})") from None
            raise

    def pid(self, task):
        """The OS process id of a task's actor."""
        return self.ask(task, "ping")["pid"]

    def where(self, task=None):
        """The Ray node id a task runs on; without a task, {task: node id} of every task."""
        if task is None:
            return {t: self.where(t) for t in self.task_names}
        return self.ask(task, "ping")["node"]

    def restart(self, task):
        """Replace a (dead or alive) task's actor with a fresh process. Its Variables start from their
        initial values: restore them from a dfc.Checkpoint."""
        with self.lock:
            old = self.handle(task)
            try:
                _ray().kill(old)
            except Exception:   # noqa: BLE001 — already dead
                pass
            self._start(task)
            self._connect_all()

    def _addresses(self):
        return {**self.addresses, "chief": self.wire.address if self.wire is not None else None}

    def ship(self, dest, step, key, value):
        """A message from the chief to task `dest`: on the wire, or in a Task.deliver call (a value in the
        object store, whose reference Ray must count, and every message under Ray Client)."""
        from dfc.runtime.cluster.wire import Stored
        if self.wire is not None and not isinstance(value, Stored):
            self.wire.send(dest, step, key, value)
            return
        h = self.handles.get(dest)
        if h is None:
            raise DfcRuntimeError(f"the cluster has no live task {dest} (was it restarted during the step?)")
        h.deliver.remote([(step, key, value)])

    def take(self, task, step, n, timeout):
        """A value task holds for the chief (wire.Held), through Ray's object store."""
        return _ray().get(self.handle(task).take.remote(step, n), timeout=timeout)

    def _arrive(self, step, key, value):
        route = self.routes.get(step)
        if route is not None:       # else the step is over: a late message is dropped
            route.arrive(key, value)

    def _unsent(self, step, error):
        route = self.routes.get(step)
        if route is not None:       # the step fails with this error
            route.failed = route.failed or error

    def ensure_graphs(self, task, graphs):
        """Before a step on `task`: send it the partition graphs (hash -> JSON text) it does not hold yet,
        and the peer handles if it missed the newest ones."""
        if task in self._stale:
            self.ask(task, "connect", self.handles, self._addresses())
            self._stale.discard(task)
        have = self.loaded[task]
        missing = [(h, text) for h, text in graphs if h not in have]
        if missing:
            for h, text in missing:
                self.ask(task, "load", h, text)
            have.update(h for h, _ in missing)

    def read_variable(self, task, shared_name, container=""):
        return self.ask(task, "read_variable", container, shared_name)

    def update_variable(self, task, shared_name, value, op, init, container=""):
        return self.ask(task, "update_variable", container, shared_name, value, op, init)

    def variables(self, task, container=""):
        """shared name -> value of the Variables in a task's container."""
        return self.ask(task, "variables", container)

    def shutdown(self):
        """Stop the tasks (and the local Ray this cluster started)."""
        ray = _ray()
        for h in self.handles.values():
            try:
                ray.kill(h)
            except Exception:   # noqa: BLE001
                pass
        self.handles.clear()
        if self.wire is not None:
            self.wire.close()
            self.wire = None
        if self in _connected:
            _connected.remove(self)
        if self._started_ray:
            ray.shutdown()
        if self._reaper is not None:
            self._reaper.release()
            self._reaper = None

    def __enter__(self):
        self._tokens.append(_current.set(self))
        return self

    def __exit__(self, *exc):
        _current.reset(self._tokens.pop())
        return False

    def __repr__(self):
        return f"<dfc.Cluster tasks={self.task_names}>"


def connect(address=None, tasks=None, num_threads=_DEFAULT_THREADS, gpus=None, checkpoint_dir=None,
            liveness_timeout=None, placement=None, **ray_init):
    """Start a private Ray on this machine (address=None or "local") or join a running Ray cluster
    ("auto", "host:6379", "ray://host:10001"), and start one actor per task.

    tasks: {"worker": 2, "ps": 1} (or "worker=2,ps=1") makes worker:0, worker:1 and ps:0; gpus:
    {"worker": 1} asks Ray for a GPU per worker task. placement: where tasks run, per job or task:
    {"ps": "label:zone=b", "worker": "spread", "worker:1": "node:ID"} (also "ip:ADDRESS",
    "resource:NAME"; see dfc.runtime.cluster.placement); `cluster.where()` says where each task runs. Without an address dfc never joins an existing
    cluster (not even one named by RAY_ADDRESS), and the Ray it starts ends with this process, however
    the process ends. liveness_timeout: seconds a task may give the chief no reply while a step or a call
    needs it before the step fails naming it (default 30, or $DFC_CLUSTER_LIVENESS_TIMEOUT); raise it for
    a task that is expected to be slow to answer (a machine swapping heavily, a slow network). If this
    process already called ray.init, dfc uses that Ray as it is."""
    return Cluster(parse_tasks(tasks or {"worker": 1}), address, num_threads, gpus, checkpoint_dir, ray_init,
                   liveness_timeout, placement)


def _client_mode():
    """This process reaches Ray through Ray Client (ray://): the tasks may have no route back to it."""
    try:
        from ray.util.client import ray as client
    except ImportError:
        return False
    return client.is_connected()


def _why(e):
    """One line on a Ray error."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else 'actor died'}"[:300]


def current():
    """The cluster of the innermost `with cluster:` block, or None."""
    return _current.get()


def holding(task):
    """The cluster whose task `task` holds state for the chief's Python (a Variable's numpy/assign): the
    current one, else the newest connected cluster that has that task; None if there is none."""
    c = _current.get()
    if c is not None and task in c.task_names:
        return c
    for c in reversed(_connected):
        if task in c.task_names:
            return c
    return None
