"""Resource containers (whitepaper §4.7 "Containers"): where Variables live.

A container maps a shared name to a resource. The default container (name
"") lasts as long as the process and is shared by every graph, dfc.function,
trace and Session in it, so a Variable trained by one function is the same
Variable another function reads. Named containers are made on first use;
`names()` lists them and `reset(name)` drops a container's state, after which
each Variable starts again from its initial value.

    containers.get("").variable("w", init)   # the resource "w", made from init() if it is new
    containers.reset()                        # every Variable back to its initial value

The executor reaches state only through `Container.variable` and the
`VariableResource` methods (read / assign / snapshot), so a later container can
live in another process (a parameter-server task) behind the same interface.

Queues (`QueueResource`, `Container.queue`) and gradient accumulators
(`AccumulatorResource`, `Container.accumulator`) live in containers the same way
(whitepaper §4.6): found by shared name, so every graph, Session and task naming
one shares it. Their operations that may wait never block: they take `done` /
`fail` callbacks, which run (on whichever thread makes the operation possible,
outside the resource's lock) once the operation completes or cannot.
"""
import collections
import threading

import numpy as np

from dfc.errors import DfcError, DfcQueueClosed, DfcRuntimeError
from dfc.runtime.devices import is_device_array

DEFAULT = ""


class VariableResource:
    """The backing store of one Variable: a value whose dtype and shape never change.

    Stored numpy values are read-only, so a value fetched from a graph or
    returned by `numpy()` can never change the Variable behind the user's back.
    """
    __slots__ = ("name", "value", "lock")

    def __init__(self, name, value):
        self.name, self.value, self.lock = name, _frozen(value), threading.Lock()

    def read(self):
        return self.value

    def place(self, xp):
        """Keep the value in the memory of array module `xp` (numpy, or cupy for a GPU): a Variable lives
        where the graph that uses it runs, and moves when a graph on another kind of device uses it."""
        with self.lock:
            on_gpu = is_device_array(self.value)
            if xp is np and on_gpu:
                self.value = _frozen(self.value.get(), fresh=True)
            elif xp is not np and not on_gpu:
                self.value = xp.asarray(self.value)
            elif on_gpu and hasattr(xp, "cuda") and \
                    getattr(getattr(self.value, "device", None), "id", None) not in (None, xp.cuda.Device().id):
                # last set by a graph on another GPU: a copy on this run's device (copy() allocates there)
                self.value = self.value.copy()
        return self

    def assign(self, value, op="Assign", node=None):
        """Set the value (op "Assign") or add / subtract to it atomically; return the new value."""
        with self.lock:
            self.value = updated(self, value, op, node)
            return self.value

    def _check(self, value, node):
        old = self.value
        if value.dtype != old.dtype or tuple(value.shape) != tuple(old.shape):
            raise DfcRuntimeError(f"cannot assign {value.dtype}{list(value.shape)} to variable {self.name!r} of "
                                  f"{old.dtype}{list(old.shape)}", node=node)

    def __repr__(self):
        return f"<VariableResource {self.name!r} {self.value.dtype}{list(self.value.shape)}>"


def updated(resource, value, op, node=None):
    """The value `op` (Assign / AssignAdd / AssignSub) of `value` would give VariableResource `resource`,
    checked, not yet set (the caller holds its lock)."""
    if op == "AssignAdd":
        new = _frozen(resource.value + value, fresh=True)
    elif op == "AssignSub":
        new = _frozen(resource.value - value, fresh=True)
    else:
        new = _frozen(value)
    resource._check(new, node)
    return new


def _frozen(value, fresh=False):
    """`value` as an array nobody can write: a read-only copy, or `value` itself when it is already
    read-only or `fresh` (just computed, so no one else holds it). GPU arrays are stored as they are."""
    if isinstance(value, (np.generic, int, float, bool)):
        value, fresh = np.asarray(value), True
    if isinstance(value, np.ndarray) and value.flags.writeable:
        if not fresh:
            value = value.copy()
        value.flags.writeable = False
    return value


class _Waiter:
    """One waiting operation on a queue or accumulator: its callbacks and what it has so far."""
    __slots__ = ("n", "items", "done", "fail", "node")

    def __init__(self, n, items, done, fail, node):
        self.n, self.items, self.done, self.fail, self.node = n, items, done, fail, node


class QueueResource:
    """A FIFO queue of elements (tuples of arrays of `dtypes`) holding at most `capacity` of them.

    `enqueue(elements, done, fail)` adds elements as room appears (an enqueue of many on a full queue
    completes once all are in), `dequeue(n, done, fail)` takes n elements as they arrive; waiting operations
    are served in the order they came (one dequeue_many(5) ahead of a dequeue waits first). `close()`:
    later enqueues fail with DfcQueueClosed; dequeues go on while elements remain, and a dequeue the
    remaining elements cannot satisfy fails (its elements stay in the queue); pending enqueues still
    complete as room appears unless `cancel_pending_enqueues`. Callbacks run outside the lock.
    """

    def __init__(self, name, capacity, dtypes, shapes=None):
        self.name, self.capacity = name, int(capacity)
        self.dtypes = tuple(dtypes)
        self.shapes = None if shapes is None else tuple(tuple(s) for s in shapes)
        self.items = collections.deque()
        self.getters, self.putters = collections.deque(), collections.deque()
        self.closed = False
        self.lock = threading.Lock()

    def spec(self):
        return self.capacity, self.dtypes, self.shapes

    def describe(self):
        shapes = "" if self.shapes is None else f", shapes {[list(s) for s in self.shapes]}"
        return f"a queue of capacity {self.capacity} of ({', '.join(self.dtypes)}{shapes})"

    def size(self):
        with self.lock:
            return len(self.items)

    def enqueue(self, elements, done, fail, node=None):
        """Add `elements` (a list of tuples); done() once all are in. Returns a token for `cancel`."""
        with self.lock:
            if self.closed:
                calls = [(fail, DfcQueueClosed(f"enqueue to queue {self.name!r}, which is closed", node=node))]
                w = None
            else:
                w = _Waiter(len(elements), collections.deque(elements), done, fail, node)
                self.putters.append(w)
                calls = self._pump()
        _call(calls)
        return w

    def dequeue(self, n, done, fail, node=None):
        """Take `n` elements; done(list of n element tuples) once they are there. Returns a token for `cancel`."""
        w = _Waiter(int(n), [], done, fail, node)
        with self.lock:
            self.getters.append(w)
            calls = self._pump()
        _call(calls)
        return w

    def close(self, cancel_pending_enqueues=False):
        with self.lock:
            self.closed = True
            calls = self._pump()
            if cancel_pending_enqueues:
                while self.putters:
                    w = self.putters.popleft()
                    calls.append((w.fail, DfcQueueClosed(f"enqueue to queue {self.name!r} cancelled: the queue "
                                                         f"was closed", node=w.node)))
        _call(calls)

    def cancel(self, w):
        """Withdraw a waiting operation (its run stopped); False if it already completed. A cancelled
        dequeue puts back the elements it had taken."""
        with self.lock:
            if w in self.getters:
                self.getters.remove(w)
                self.items.extendleft(reversed(w.items))
                calls = self._pump()
            elif w in self.putters:
                self.putters.remove(w)
                calls = self._pump()
            else:
                return False
        _call(calls)
        return True

    def _pump(self):
        """Move elements from waiting enqueues to the queue to waiting dequeues; the callbacks to run."""
        calls, items = [], self.items
        while True:
            moved = False
            while self.putters and len(items) < self.capacity:
                w = self.putters[0]
                items.append(w.items.popleft())
                moved = True
                if not w.items:
                    self.putters.popleft()
                    calls.append((w.done, None))
            while self.getters and (items or len(self.getters[0].items) == self.getters[0].n):
                w = self.getters[0]
                if len(w.items) < w.n:
                    w.items.append(items.popleft())
                    moved = True
                if len(w.items) == w.n:
                    self.getters.popleft()
                    calls.append((w.done, w.items))
            if moved:
                continue
            if self.closed and self.getters and not self.putters:
                w = self.getters.popleft()      # nothing can add elements: it cannot be satisfied
                items.extendleft(reversed(w.items))
                many = f"{w.n} elements" if w.n != 1 else "an element"
                calls.append((w.fail, DfcQueueClosed(f"queue {self.name!r} is closed and has only {len(items)} "
                                                     f"element(s); cannot dequeue {many}", node=w.node)))
                continue
            return calls

    def __repr__(self):
        return f"<QueueResource {self.name!r} {len(self.items)}/{self.capacity}{' closed' if self.closed else ''}>"


class AccumulatorResource:
    """A gradient accumulator (TF's ConditionalAccumulator): gradients of `dtype` and `shape` are summed
    until a `take` of n finds at least n; it gets their average, the sum starts again from zero and the
    accumulator's global step goes up by one. A gradient computed at a step older than the global step
    (stale) is dropped, and so is a second gradient of one named worker for the same update (a restarted
    worker running its step again): an average holds at most one gradient per worker. Takes wait in the
    order they came."""

    def __init__(self, name, dtype, shape=None):
        self.name, self.dtype = name, dtype
        self.shape = None if shape is None else tuple(shape)
        self.sum, self.count, self.global_step = None, 0, 0
        self.workers = set()        # the named workers whose gradients are in the sum
        self.takers = collections.deque()
        self.lock = threading.Lock()

    def spec(self):
        return self.dtype, self.shape

    def describe(self):
        return f"an accumulator of {self.dtype}{'' if self.shape is None else list(self.shape)}"

    def apply(self, grad, local_step, node=None, worker=""):
        """Add `grad`, computed at `local_step` by `worker` ("": anonymous); False (dropped) if the step is
        stale or the worker's gradient for this update is in already."""
        if grad.dtype.name != self.dtype or (self.shape is not None and tuple(grad.shape) != self.shape):
            raise DfcRuntimeError(f"accumulator {self.name!r} holds {self.describe()[3:]}, got a gradient of "
                                  f"{grad.dtype.name}{list(grad.shape)}", node=node)
        with self.lock:
            if int(local_step) < self.global_step or worker in self.workers:
                return False
            if self.sum is not None and tuple(self.sum.shape) != tuple(grad.shape):
                raise DfcRuntimeError(f"accumulator {self.name!r} holds gradients of shape {list(self.sum.shape)}, "
                                      f"got one of shape {list(grad.shape)}", node=node)
            self.sum = grad.copy() if self.sum is None else self.sum + grad
            self.count += 1
            if worker:
                self.workers.add(worker)
            calls = self._pump()
        _call(calls)
        return True

    def take(self, n, done, fail, node=None):
        """done(average) once at least `n` gradients are in; returns a token for `cancel`."""
        if int(n) < 1:
            raise DfcRuntimeError(f"take_grad needs num_required >= 1, got {int(n)}", node=node)
        w = _Waiter(int(n), None, done, fail, node)
        with self.lock:
            self.takers.append(w)
            calls = self._pump()
        _call(calls)
        return w

    def cancel(self, w):
        with self.lock:
            if w not in self.takers:
                return False
            self.takers.remove(w)
            calls = self._pump()
        _call(calls)
        return True

    def num_accumulated(self):
        with self.lock:
            return self.count

    def set_global_step(self, step):
        """Gradients tagged older than `step` are stale from now on. Moving the step back (parameters
        restored from an older checkpoint) also drops the gradients summed so far: they were computed
        from parameters the restore undid."""
        with self.lock:
            if int(step) < self.global_step:
                self.sum, self.count, self.workers = None, 0, set()
            self.global_step = int(step)

    def _pump(self):
        calls = []
        while self.takers and self.count >= self.takers[0].n:
            w = self.takers.popleft()
            avg = self.sum / self.sum.dtype.type(self.count)
            self.sum, self.count, self.workers = None, 0, set()
            self.global_step += 1
            calls.append((w.done, avg))
        return calls

    def __repr__(self):
        return f"<AccumulatorResource {self.name!r} {self.count} gradient(s), step {self.global_step}>"


def _call(calls):
    for fn, arg in calls:
        fn(arg)


class Container:
    """A named set of resources, safe to use from many threads."""

    def __init__(self, name):
        self.name = name
        self._items = {}
        self._lock = threading.Lock()

    def variable(self, shared_name, init, node=None):
        """The Variable resource `shared_name`; made from `init()` (an array) if the container has none.

        `init()` also gives the dtype and shape the caller expects: an existing
        resource of another dtype or shape is an error, never reinterpreted.
        """
        with self._lock:
            r = self._items.get(shared_name)
            if r is None:
                r = self._items[shared_name] = VariableResource(shared_name, init())
                return r
        if not isinstance(r, VariableResource):
            raise DfcRuntimeError(f"resource {shared_name!r} in container {self.name!r} is a "
                                  f"{type(r).__name__}, not a Variable", node=node)
        want = init()
        if want.dtype != r.value.dtype or tuple(want.shape) != tuple(r.value.shape):
            raise DfcRuntimeError(f"variable {shared_name!r} in container {self.name!r} holds "
                                  f"{r.value.dtype}{list(r.value.shape)}, but this graph declares it "
                                  f"{want.dtype}{list(want.shape)}", node=node)
        return r

    def queue(self, shared_name, make, node=None):
        """The queue resource `shared_name`; made by `make()` (a QueueResource) if the container has none.
        An existing queue of another capacity, dtypes or shapes is an error."""
        return self._resource(shared_name, make, QueueResource, "queue", node)

    def accumulator(self, shared_name, make, node=None):
        """The gradient accumulator `shared_name`; made by `make()` (an AccumulatorResource) if new."""
        return self._resource(shared_name, make, AccumulatorResource, "accumulator", node)

    def _resource(self, shared_name, make, cls, what, node):
        with self._lock:
            r = self._items.get(shared_name)
            if r is None:
                r = self._items[shared_name] = make()
                return r
        if not isinstance(r, cls):
            raise DfcRuntimeError(f"resource {shared_name!r} in container {self.name!r} is a "
                                  f"{type(r).__name__}, not a {what}", node=node)
        want = make()
        if want.spec() != r.spec():
            raise DfcRuntimeError(f"{what} {shared_name!r} in container {self.name!r} is {r.describe()}, but this "
                                  f"graph declares it {want.describe()}", node=node)
        return r

    def lookup(self, shared_name):
        """The resource `shared_name`, or None."""
        with self._lock:
            return self._items.get(shared_name)

    def names(self):
        with self._lock:
            return sorted(self._items)

    def snapshot(self):
        """shared name -> current value of every Variable (values are immutable, so no copy is needed)."""
        with self._lock:
            return {n: r.value for n, r in self._items.items() if isinstance(r, VariableResource)}

    def restore(self, values):
        """Put back a snapshot: those Variables take those values, Variables made since are dropped."""
        with self._lock:     # queues and accumulators are not part of a snapshot: they stay
            others = {n: r for n, r in self._items.items() if not isinstance(r, VariableResource)}
            self._items = {n: VariableResource(n, v) for n, v in values.items()}
            self._items.update((n, r) for n, r in others.items() if n not in self._items)

    def reset(self):
        with self._lock:
            self._items.clear()

    def __repr__(self):
        return f"<dfc container {self.name!r}: {', '.join(self.names()) or 'empty'}>"


_containers = {DEFAULT: Container(DEFAULT)}
_lock = threading.Lock()


def get(name=DEFAULT):
    """The container `name` (None or "" is the default one), made on first use."""
    name = DEFAULT if name is None else name
    if not isinstance(name, str):
        raise DfcError(f"a container name is a string, not {type(name).__name__}")
    with _lock:
        c = _containers.get(name)
        if c is None:
            c = _containers[name] = Container(name)
        return c


def names():
    """The names of the containers that exist ("" is the default one)."""
    with _lock:
        return sorted(_containers)


def reset(name=None):
    """Drop the state of container `name` (None: the default one); its Variables start again from their
    initial values. Named containers other than the default are removed."""
    name = DEFAULT if name is None else name
    with _lock:
        c = _containers.get(name)
        if c is None:
            raise DfcError(f"no container named {name!r} (containers: {', '.join(map(repr, sorted(_containers)))})")
        if name != DEFAULT:
            del _containers[name]
    c.reset()
