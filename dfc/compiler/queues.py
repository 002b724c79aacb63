"""Queues, gradient accumulators and a counter barrier as graph ops (whitepaper §4.6).

    q = dfc.FIFOQueue(capacity=4, dtypes=["float32", "int64"], shapes=[[3], []], shared_name="batches")
    # in traced code (or outside any graph, where each call runs at once and may block):
    q.enqueue([x, label]);  q.enqueue_many([xs, labels])    # xs: [k, 3] -> k elements
    x, label = q.dequeue();  xs, labels = q.dequeue_many(8)
    q.size();  q.close()

A queue lives in a resource container (dfc/runtime/containers.py) under its
shared name, like a Variable: every graph, dfc.function, Session and cluster task
that names it shares it, and the ops on its handle run where it lives (its
`device=`, or the `dfc.device` scope it is made in: "ps:0/cpu:0" keeps it on a
parameter-server task, and workers on other tasks reach it through Send/Recv).

Semantics (TensorFlow's FIFOQueue): elements leave in the order they came. A
dequeue on an empty queue and an enqueue on a full one wait, without blocking
the executor's other work (they are asynchronous kernels, like Recv: see
dfc/runtime/kernels/queue_kernels.py). After `close()` enqueues fail with
dfc.DfcQueueClosed, dequeues go on while elements remain, and a dequeue the
remaining elements cannot satisfy fails with DfcQueueClosed naming its node
(the way to end an input pipeline). By default a wait lasts as long as it takes
(as in TensorFlow: another thread, Session or task may still fill the queue);
`timeout=` seconds turns a wait that long into dfc.DfcQueueTimeout (a
DfcDeadlockError) naming the node. Queue ops are ordered in program order with
the other side effects of a dfc.function (Variable reads and assigns, prints).

`ConditionalAccumulator` aggregates gradients for synchronous training
(TensorFlow's ConditionalAccumulator); `CounterBarrier` is the queue-of-tokens
barrier that makes workers wait for each other.
"""

import numpy as np

from dfc.errors import DfcError
from dfc.ir import dtypes as dt
from dfc.compiler.tracing import convert, current_builder, user_location
from dfc.compiler.variables import UniqueNames

_unique_name = UniqueNames().take      # queues' and accumulators' shared names (their own namespace)


def _placement(device):
    from dfc.compiler.api import python_device
    b = current_builder(required=False)
    return device or (b.devices[-1] if b is not None and b.devices else python_device())


def _remote(device):
    """The cluster holding the task of `device`, or None (the resource lives in this process)."""
    if not device or "/" not in str(device):
        return None
    from dfc.runtime.devices import split_task
    from dfc.runtime.cluster import holding
    return holding(split_task(str(device))[0])


class _Resource:
    """What queues and accumulators share: a handle node per graph (at the top level, on the resource's
    device), and ops outside any graph that run at once, here or on the cluster task holding it."""
    _op = None

    def _attrs(self):
        raise NotImplementedError

    def handle(self):
        b = current_builder()
        if getattr(b, "eager", False):
            return b.make1(self._op, (), self._attrs(), name=self.name)
        h = b.variables.get(id(self))
        if h is None or h.node not in b.graph.nodes:
            from dfc.compiler.control_deps import suspended
            with suspended(b):      # made once for the whole graph: it waits for no control_dependencies block
                h = b.make1(self._op, (), self._attrs(), ctx=None, name=b.unique(self.name))
            if self.device:
                b.graph.nodes[h.node].device = str(self.device)
            b.variables[id(self)] = h
        return h

    def _make(self, op, what, inputs, attrs=None):
        b = current_builder()
        return b.make(op, inputs, attrs, name=b.unique(f"{self.name}_{what}"))

    def _run(self, fn):
        """fn() in traced code; outside any graph, fn() at once, or in a one-op graph on the cluster task
        that holds the resource."""
        if current_builder(required=False) is not None:
            return fn()
        cluster = _remote(self.device)
        if cluster is None:
            try:
                return fn()
            except DfcError as e:
                raise type(e)(e.message, node=e.node, loc=e.loc or user_location()) from None
        from dfc.compiler.api import trace
        from dfc.runtime.session import Session
        g = trace(lambda: _with_device(self.device, fn))
        return Session(g, cluster=cluster).call()


def _with_device(device, fn):
    from dfc.compiler.api import device as scope
    with scope(device):
        return fn()


class FIFOQueue(_Resource):
    """A first-in first-out queue of at most `capacity` elements, each a tuple of tensors of `dtypes`.

    dtypes: one dtype (dequeue gives a tensor) or a list (one tensor per dtype; a list of one gives a
    tensor too). shapes: None (any shapes; dequeue_many then needs elements of one shape), or one shape
    per dtype (a single shape when there is one dtype). shared_name: the name in the container (default:
    a name unique in this process made from `name`); two FIFOQueues with one shared name are one queue.
    container: the resource container ("" : the Session's default). device: where the queue lives
    (default: the enclosing `dfc.device` scope). timeout: seconds a waiting op may wait before
    dfc.DfcQueueTimeout (None: as long as it takes); each op may override it.
    """
    _op = "QueueHandle"

    def __init__(self, capacity, dtypes, shapes=None, shared_name=None, container="", device=None,
                 name="fifo_queue", timeout=None):
        loc = user_location()
        if not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool) or capacity < 1:
            raise DfcError(f"FIFOQueue capacity must be an integer >= 1, got {capacity!r}", loc=loc)
        single = isinstance(dtypes, str) or not isinstance(dtypes, (list, tuple))
        self.dtypes = [dt.as_dtype(d) for d in ([dtypes] if single else dtypes)]
        if not self.dtypes:
            raise DfcError("FIFOQueue needs at least one dtype", loc=loc)
        self.capacity, self.container, self.name = int(capacity), container, name
        self.shapes = _shapes(shapes, len(self.dtypes), loc)
        self.shared_name = shared_name or _unique_name(name)
        self.timeout = _check_timeout(timeout, loc)
        self.device = _placement(device)
        if current_builder(required=False) is None and _remote(self.device) is None:
            self._run(self.handle)      # made now: a clash with an existing queue of that name shows here

    def _attrs(self):
        return {"shared_name": self.shared_name, "container": self.container, "capacity": self.capacity,
                "dtypes": list(self.dtypes), "shapes": None if self.shapes is None else [list(s) for s in self.shapes]}

    def _components(self, values, many):
        vals = list(values) if isinstance(values, (list, tuple)) else [values]
        if len(vals) != len(self.dtypes):
            raise DfcError(f"queue {self.shared_name!r} holds {len(self.dtypes)} component(s) "
                           f"({', '.join(self.dtypes)}), got {len(vals)}", loc=user_location())
        out = []
        for k, (v, d) in enumerate(zip(vals, self.dtypes)):
            t = convert(v, d)
            if t.dtype != d:
                raise DfcError(f"queue {self.shared_name!r} component {k} is {d}, got {t.dtype}", loc=user_location())
            if self.shapes is not None and t.shape is not None:
                shape = t.shape[1:] if many else t.shape
                if many and not t.shape:
                    raise DfcError(f"enqueue_many: component {k} needs a first dimension (it is a scalar)",
                                   loc=user_location())
                if not dt.shapes_compatible(tuple(shape), tuple(self.shapes[k])):
                    raise DfcError(f"queue {self.shared_name!r} component {k} has shape {list(self.shapes[k])}, "
                                   f"got {list(shape)}" + (" per element" if many else ""), loc=user_location())
            out.append(t)
        return out

    def _timeout_attr(self, timeout):
        t = self.timeout if timeout is None else _check_timeout(timeout, user_location())
        return -1.0 if t is None else t

    def enqueue(self, values, timeout=None):
        """Add one element (a tensor, or a list/tuple with one tensor per dtype); waits while the queue is
        full. Fails with DfcQueueClosed on a closed queue."""
        def f():
            comps = self._components(values, False)
            self._make("QueueEnqueue", "enqueue", [self.handle()] + comps, {"timeout": self._timeout_attr(timeout)})
        self._run(f)

    def enqueue_many(self, values, timeout=None):
        """Add the elements made by splitting each component along its first dimension (all components
        have the same first dimension), in order; waits for room as needed."""
        def f():
            comps = self._components(values, True)
            self._make("QueueEnqueueMany", "enqueue_many", [self.handle()] + comps,
                                   {"timeout": self._timeout_attr(timeout)})
        self._run(f)

    def _dequeue_attrs(self, timeout):
        return {"dtypes": list(self.dtypes), "timeout": self._timeout_attr(timeout),
                "shapes": None if self.shapes is None else [list(s) for s in self.shapes]}

    def dequeue(self, timeout=None):
        """Take the oldest element: a tensor (one dtype) or a list of tensors; waits while the queue is
        empty. On a closed, empty queue: DfcQueueClosed naming the node."""
        def f():
            outs = self._make("QueueDequeue", "dequeue", (self.handle(),), self._dequeue_attrs(timeout))
            return outs[0] if len(outs) == 1 else list(outs)
        return self._run(f)

    def dequeue_many(self, n, timeout=None):
        """Take the `n` oldest elements, each component stacked along a new first dimension; waits until
        there are n. A closed queue holding fewer fails with DfcQueueClosed (and keeps its elements)."""
        def f():
            outs = self._make("QueueDequeueMany", "dequeue_many", (self.handle(), convert(n, "int64")),
                                          self._dequeue_attrs(timeout))
            return outs[0] if len(outs) == 1 else list(outs)
        return self._run(f)

    def size(self):
        """The number of elements in the queue now (int64)."""
        return self._run(lambda: self._make("QueueSize", "size", (self.handle(),))[0])

    def close(self, cancel_pending_enqueues=False):
        """Close the queue: later enqueues fail; dequeues go on while elements remain. With
        cancel_pending_enqueues, enqueues waiting for room fail too (else they complete as room appears)."""
        self._run(lambda: self._make("QueueClose", "close", (self.handle(),),
                                                 {"cancel_pending_enqueues": bool(cancel_pending_enqueues)}))

    def __repr__(self):
        return f"<dfc.FIFOQueue {self.shared_name!r} capacity {self.capacity} of ({', '.join(self.dtypes)})>"


class ConditionalAccumulator(_Resource):
    """Aggregates gradients of `dtype` and `shape` for synchronous training (TF's ConditionalAccumulator).

    apply_grad(grad, local_step, worker=None): adds `grad`, computed at step `local_step`, unless that
    step is older than the accumulator's global step (a stale gradient from a slow worker: dropped
    silently) or `worker` (a name) has a gradient in this update already (dropped the same way: a
    restarted worker running its step again is not counted twice; None: every gradient counts).
    take_grad(num_required): waits (asynchronously) until at least num_required gradients have been
    applied, returns their average, starts the sum again from zero and increments the global step.
    num_accumulated(): gradients in the sum now; set_global_step(step): set the global step.
    shared_name / container / device / timeout: as for FIFOQueue.
    """
    _op = "AccumulatorHandle"

    def __init__(self, dtype, shape, shared_name=None, container="", device=None, name="accumulator",
                 timeout=None):
        loc = user_location()
        self.dtype = dt.as_dtype(dtype)
        if self.dtype not in dt.FLOATS:
            raise DfcError(f"a ConditionalAccumulator holds float32 or float64 gradients, not {self.dtype}", loc=loc)
        self.shape = None if shape is None else _shape(shape, loc)
        self.container, self.name = container, name
        self.shared_name = shared_name or _unique_name(name)
        self.timeout = _check_timeout(timeout, loc)
        self.device = _placement(device)
        if current_builder(required=False) is None and _remote(self.device) is None:
            self._run(self.handle)

    def _attrs(self):
        return {"shared_name": self.shared_name, "container": self.container, "dtype": self.dtype,
                "shape": None if self.shape is None else list(self.shape)}

    def apply_grad(self, grad, local_step=0, worker=None):
        """Add a gradient computed at `local_step` by `worker` (dropped if older than the global step, or
        if that worker's gradient for this update is in already)."""
        if worker is not None and (not isinstance(worker, str) or not worker):
            raise DfcError(f"apply_grad: worker must be a non-empty str naming the worker, got {worker!r}",
                           loc=user_location())

        def f():
            g = convert(grad, self.dtype)
            if self.shape is not None and g.shape is not None and not dt.shapes_compatible(g.shape, self.shape):
                raise DfcError(f"accumulator {self.shared_name!r} holds gradients of shape {list(self.shape)}, "
                               f"got {list(g.shape)}", loc=user_location())
            self._make("AccumulatorApplyGradient", "apply_grad", (self.handle(), convert(local_step, "int64"), g),
                       {"worker": worker or ""})
        self._run(f)

    def take_grad(self, num_required, timeout=None):
        """The average of the gradients applied since the last take, once there are num_required."""
        t = self.timeout if timeout is None else _check_timeout(timeout, user_location())
        return self._run(lambda: self._make(
            "AccumulatorTakeGradient", "take_grad", (self.handle(), convert(num_required, "int64")),
            {"dtype": self.dtype, "shape": None if self.shape is None else list(self.shape),
             "timeout": -1.0 if t is None else t})[0])

    def num_accumulated(self):
        return self._run(lambda: self._make("AccumulatorNumAccumulated", "num_accumulated", (self.handle(),))[0])

    def set_global_step(self, step):
        self._run(lambda: self._make("AccumulatorSetGlobalStep", "set_global_step",
                                    (self.handle(), convert(step, "int64"))))

    def __repr__(self):
        return f"<dfc.ConditionalAccumulator {self.shared_name!r} {self.dtype}{list(self.shape or [])}>"


class CounterBarrier:
    """A barrier for `num_workers` workers and one chief, made of two FIFOQueues of tokens.

    Each worker's step ends with `arrive()` (enqueue a token) and the next begins with `wait_release()`
    (dequeue one release token); the chief's step begins with `wait_all()` (dequeue_many the workers'
    tokens: it waits until all have arrived) and ends with `release()` (enqueue_many one release token per
    worker). So no worker starts step k+1 before the chief has finished step k, which needs every worker's
    step k: the synchronous-training barrier placed before the next step's Variable reads. With
    `num_required` < num_workers the chief goes on after the first num_required arrivals (the rest are
    consumed by later steps' waits: late workers never hold the chief up). All four work in traced code
    (ordered with the step's other side effects) and outside any graph.
    """

    def __init__(self, num_workers, shared_name=None, container="", device=None, name="barrier",
                 num_required=None, timeout=None):
        self.num_workers = int(num_workers)
        self.num_required = self.num_workers if num_required is None else int(num_required)
        if not 1 <= self.num_required <= self.num_workers:
            raise DfcError(f"CounterBarrier: num_required must be between 1 and num_workers ({self.num_workers}), "
                           f"got {num_required}", loc=user_location())
        base = shared_name or _unique_name(name)
        cap = 1 << 30
        self.arrivals = FIFOQueue(cap, "int64", [], f"{base}/arrivals", container, device, timeout=timeout)
        self.releases = FIFOQueue(cap, "int64", [], f"{base}/releases", container, device, timeout=timeout)

    def arrive(self, step=0):
        """A worker is done with its step (enqueues a token carrying `step`)."""
        self.arrivals.enqueue(convert(step, "int64"))

    def wait_all(self):
        """The chief waits for num_required arrivals; returns their step tokens."""
        return self.arrivals.dequeue_many(self.num_required)

    def release(self, step=0):
        """The chief lets every worker go on (one release token each, carrying `step`)."""
        b = current_builder(required=False)
        if b is None:
            self.releases.enqueue_many(np.full(self.num_workers, step, np.int64))
        else:
            from dfc.compiler.ops_api import fill
            self.releases.enqueue_many(fill([self.num_workers], convert(step, "int64")))

    def wait_release(self):
        """A worker waits for the chief's release token; returns its step."""
        return self.releases.dequeue()


def _check_timeout(t, loc):
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, (int, float, np.integer, np.floating)) or not t >= 0:
        raise DfcError(f"timeout must be None or a number of seconds >= 0, got {t!r}", loc=loc)
    return float(t)


def _shape(s, loc):
    if isinstance(s, (int, np.integer)):
        s = [s]
    if not isinstance(s, (list, tuple)) or not all(d is None or (isinstance(d, (int, np.integer)) and d >= 0)
                                                   for d in s):
        raise DfcError(f"a shape is a list of dimensions (ints >= 0 or None), got {s!r}", loc=loc)
    return tuple(None if d is None else int(d) for d in s)


def _shapes(shapes, n, loc):
    """One shape per dtype, or None."""
    if shapes is None:
        return None
    shapes = list(shapes) if isinstance(shapes, (list, tuple)) else [shapes]
    per_dtype = len(shapes) == n and all(isinstance(s, (list, tuple)) for s in shapes)
    if not per_dtype:
        if n != 1:
            raise DfcError(f"shapes must give one shape per dtype ({n}), got {shapes!r}", loc=loc)
        shapes = [shapes]
    return [_shape(s, loc) for s in shapes]
