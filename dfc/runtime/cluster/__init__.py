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
"""
import contextvars
import threading

from dfc.errors import DfcError, DfcRuntimeError

_current = contextvars.ContextVar("dfc_cluster", default=None)
_connected = []         # clusters connected in this process and not shut down, oldest first
_DEFAULT_THREADS = 2


def _ray():
    import os
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
                 ray_init=None):
        ray = _ray()
        self.address = address
        self._started_ray = False
        if not ray.is_initialized():
            kw = dict(ray_init or {})
            if address is None:
                kw.setdefault("include_dashboard", False)
                kw.setdefault("num_cpus", max(4, len(tasks)))
            try:
                ray.init(address=address, **kw)
            except Exception as e:   # noqa: BLE001 — Ray's own start-up / connection errors
                where = "start a local Ray" if address is None else f"join the Ray cluster at {address!r}"
                raise DfcError(f"could not {where}: {type(e).__name__}: {str(e).strip().splitlines()[0]}"
                               ) from None
            self._started_ray = True
        self.task_names = list(tasks)
        self.gpus = dict(gpus or {})
        self.num_threads, self.checkpoint_dir = num_threads, checkpoint_dir
        self.handles = {}
        self.loaded = {}            # task -> graph hashes it holds
        self.lock = threading.Lock()
        self.generation = {}        # task -> how many times it was (re)started
        self._tokens = []
        self._outboxes = {}         # task -> Outbox of the chief's Sends to it (shared by every Session)
        for t in self.task_names:
            self._start(t)
        self._connect_all()
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
        opts.pop("name")
        h = self._actor_class().options(**opts).remote(name, self.num_threads, self.checkpoint_dir)
        ray.get(h.ping.remote())
        self.handles[name] = h
        self.loaded[name] = set()
        self.generation[name] = self.generation.get(name, 0) + 1

    def _connect_all(self):
        """Tell every task the others' handles (again after a restart). A task that is dead itself is
        left out: its own restart connects it."""
        refs = {task: h.connect.remote(self.handles) for task, h in self.handles.items()}
        for task, ref in refs.items():
            try:
                _ray().get(ref)
            except Exception as e:   # noqa: BLE001 — Ray's actor errors
                if type(e).__name__ not in ("ActorDiedError", "ActorUnavailableError", "RayActorError"):
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
        """ray.get of the actor method `method` of `task`; a dead task is a DfcRuntimeError naming it."""
        h = self.handle(task)
        try:
            return _ray().get(getattr(h, method).remote(*args))
        except DfcError:
            raise
        except Exception as e:   # noqa: BLE001 — Ray's actor errors
            if type(e).__name__ in ("ActorDiedError", "ActorUnavailableError", "RayActorError"):
                text = str(e).strip().splitlines()
                raise DfcRuntimeError(f"task {task} died ({type(e).__name__}: "
                                      f"{text[0] if text else 'actor died'}); restart it with "
                                      f"cluster.restart({task!r})") from None
            raise

    def pid(self, task):
        """The OS process id of a task's actor."""
        return self.ask(task, "ping")["pid"]

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

    def chief_outboxes(self):
        """task -> the Outbox that ships the chief's Sends to that task (remade when a task restarts)."""
        from dfc.runtime.cluster.wire import Outbox
        with self.lock:
            for task, h in self.handles.items():
                box = self._outboxes.get(task)
                if box is None or box.handle is not h:
                    if box is not None:
                        box.close()
                    self._outboxes[task] = Outbox(h, task)
            return self._outboxes

    def ensure_graphs(self, task, graphs):
        """Send the partition graphs (hash -> JSON text) a task does not hold yet."""
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
        if self in _connected:
            _connected.remove(self)
        if self._started_ray:
            ray.shutdown()

    def __enter__(self):
        self._tokens.append(_current.set(self))
        return self

    def __exit__(self, *exc):
        _current.reset(self._tokens.pop())
        return False

    def __repr__(self):
        return f"<dfc.Cluster tasks={self.task_names}>"


def connect(address=None, tasks=None, num_threads=_DEFAULT_THREADS, gpus=None, checkpoint_dir=None, **ray_init):
    """Start (address=None: a local Ray on this machine) or join ("auto", "ray://host:10001") a Ray
    cluster and start one actor per task. tasks: {"worker": 2, "ps": 1} (or "worker=2,ps=1") makes
    worker:0, worker:1 and ps:0; gpus: {"worker": 1} asks Ray for a GPU per worker task."""
    return Cluster(parse_tasks(tasks or {"worker": 1}), address, num_threads, gpus, checkpoint_dir, ray_init)


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
