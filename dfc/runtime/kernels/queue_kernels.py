"""Kernels of queues and gradient accumulators (whitepaper §4.6), and the asynchronous-kernel protocol.

An op whose OpDef has `async_kernel=True` may have to wait (a dequeue on an empty
queue, an enqueue on a full one, take_grad before enough gradients). Its kernel
does not block: it returns a `Later`, an empty tuple (so kernel wrappers that
look at outputs see none) with

    later.start(done, fail)   # begin; done(outputs) or fail(error) is called exactly once, maybe
                              # at once, maybe later from another thread (the one that enqueued)
    later.cancel()            # the run stopped: withdraw the operation if it has not completed
    later.wait()              # outside a graph: block until done, return the outputs (or raise)

The executor (dfc/runtime/executor.py) posts done/fail to the run's completion
queue, as it does for a Recv, and runs other ready nodes meanwhile; the
reference interpreter (dfc/runtime/reference.py) runs every other ready node
first and waits only when nothing else can run. A timeout attr >= 0 (seconds)
makes an operation still waiting after it fail with DfcQueueTimeout naming the
node; -1 (the default, TensorFlow's behaviour) waits as long as it takes,
because another thread, Session or cluster task sharing the queue may still
fill it. Waiting counts as work for the partition deadlock detector: a step
whose partitions all wait on a queue is not reported as deadlocked.
"""
import threading

import numpy as np

from dfc.errors import DfcError, DfcQueueTimeout, DfcRuntimeError
from dfc.runtime.devices import is_device_array
from dfc.runtime.kernels.registry import host, kernel
from dfc.runtime.containers import AccumulatorResource, QueueResource

POLL_SECONDS = 0.1      # how often a blocking wait() looks up (so Ctrl-C and async exceptions get through)


class Later(tuple):
    """The result of an asynchronous kernel: no outputs yet (see the module docstring)."""

    def __new__(cls, begin, node, timeout=-1.0, what="waiting"):
        """begin(done, fail) -> cancel(): starts the operation; cancel() withdraws it, returning False if
        it already completed."""
        self = tuple.__new__(cls)
        self._begin, self._node, self._timeout, self._what = begin, node, timeout, what
        self._cancel, self._timer, self._finished, self._fail = None, None, False, None
        self._lock = threading.Lock()
        return self

    def start(self, done, fail):
        def finish(fn, x):
            with self._lock:
                if self._finished:
                    return
                self._finished = True
                timer = self._timer
            if timer is not None:
                timer.cancel()
            fn(x)
        node = self._node

        def located(e):     # the error names the node and the user's line that made it
            if isinstance(e, DfcError) and (e.loc is None or e.node is None):
                e = type(e)(e.message, node=e.node or node.name, loc=e.loc or node.loc)
            fail(e)
        self._fail = located
        try:
            cancel = self._begin(lambda x: finish(done, x), lambda e: finish(located, e))
        except Exception as e:   # noqa: BLE001 — reported through fail, like any kernel error
            finish(fail, e)
            return
        with self._lock:
            self._cancel = cancel
            if self._finished or self._timeout is None or self._timeout < 0:
                return
            self._timer = threading.Timer(self._timeout, self._expire)
            self._timer.daemon = True
        self._timer.start()

    def _expire(self):
        if self.cancel():
            name = self._node.name
            with self._lock:
                if self._finished:
                    return
                self._finished = True
            self._fail(DfcQueueTimeout(f"{self._node.op} waited {self._timeout:g} s {self._what} and timed out",
                                       node=name, loc=self._node.loc))

    def cancel(self):
        """Withdraw the operation; False if it already completed (or never started)."""
        with self._lock:
            cancel = self._cancel
            timer = self._timer
        if timer is not None:
            timer.cancel()
        return bool(cancel()) if cancel is not None else False

    def wait(self):
        """Block until the operation completes; its outputs (a tuple), or raise its error."""
        box, event = {}, threading.Event()

        def done(outs):
            box["outs"] = outs
            event.set()

        def fail(e):
            box["error"] = e
            event.set()
        self.start(done, fail)
        try:
            while not event.wait(POLL_SECONDS):
                pass
        except BaseException:
            self.cancel()
            raise
        if "error" in box:
            raise box["error"]
        return box["outs"]

    def __reduce__(self):
        raise TypeError("an asynchronous kernel's pending result cannot be pickled")


def _guarded(fn, done, fail):
    """done(fn(x)), or fail(error) if fn raises (a bad element found while converting outputs)."""
    def f(x):
        try:
            out = fn(x)
        except Exception as e:   # noqa: BLE001
            fail(e)
            return
        done(out)
    return f


# ------------------------------------------------------------------------------------------ queues

def _handle_kernel(kind, make):
    """The kernel of a QueueHandle / AccumulatorHandle node: the resource `shared_name` of its container,
    made by make(name, attrs) the first time (`kind`: the container's method, "queue" or "accumulator")."""
    def build(node, xp):
        at = node.attrs
        name, container = at["shared_name"], at.get("container", "")

        def f(ctx, a):
            return (getattr(ctx.container(container), kind)(name, lambda: make(name, at), node=node.name),)
        return f
    return build


def _checked(cls, what):
    """h if it is a `cls` resource, else the DfcRuntimeError naming the node."""
    def check(h, node):
        if not isinstance(h, cls):
            raise DfcRuntimeError(f"{node.op} needs {what} handle, got {type(h).__name__}", node=node.name)
        return h
    return check


kernel("QueueHandle")(_handle_kernel(
    "queue", lambda name, at: QueueResource(name, at["capacity"], at["dtypes"], at.get("shapes"))))
_queue = _checked(QueueResource, "a queue")


def elements_of(q, components, many, node_name=None):
    """The element tuples an enqueue (many: an enqueue_many, components split along their first dimension)
    adds to queue `q`, checked against its dtypes and shapes."""
    if len(components) != len(q.dtypes):
        raise DfcRuntimeError(f"queue {q.name!r} holds {len(q.dtypes)} component(s) ({', '.join(q.dtypes)}), "
                              f"got {len(components)}", node=node_name)
    for k, (c, d) in enumerate(zip(components, q.dtypes)):
        if c.dtype.name != d:
            raise DfcRuntimeError(f"queue {q.name!r} component {k} is {d}, got {c.dtype.name}", node=node_name)
        shape = tuple(c.shape[1:] if many else c.shape)
        if many and c.ndim == 0:
            raise DfcRuntimeError(f"enqueue_many needs components with a first dimension, component {k} is a "
                                  f"scalar", node=node_name)
        if q.shapes is not None and shape != q.shapes[k]:
            raise DfcRuntimeError(f"queue {q.name!r} component {k} has shape {list(q.shapes[k])}, got "
                                  f"{list(shape)}" + (" per element" if many else ""), node=node_name)
    # the queue's own host copies: a queue is shared by Sessions, devices and tasks, so an element from a GPU
    # is copied to the host here, on the enqueuing device's stream (ordered after the kernel that made it)
    components = [c.get() if is_device_array(c) else c.copy() if isinstance(c, np.ndarray) else c
                  for c in components]
    if not many:
        return [tuple(components)]
    n = {int(c.shape[0]) for c in components}
    if len(n) != 1:
        raise DfcRuntimeError(f"enqueue_many components have different first dimensions {sorted(n)}",
                              node=node_name)
    return [tuple(c[i] for c in components) for i in range(n.pop())]


def stacked(q, elements, xp, node_name=None):
    """The components of `elements` (element tuples) stacked along a new first dimension."""
    out = []
    for k, d in enumerate(q.dtypes):
        vals = [e[k] for e in elements]
        if not vals:
            if q.shapes is None:
                raise DfcRuntimeError(f"dequeue_many(0) from queue {q.name!r} needs the queue's shapes",
                                      node=node_name)
            out.append(xp.zeros((0,) + q.shapes[k], d))
            continue
        shapes = {tuple(v.shape) for v in vals}
        if len(shapes) > 1:
            raise DfcRuntimeError(f"dequeue_many from queue {q.name!r}: component {k} of the elements has "
                                  f"different shapes {sorted(map(list, shapes))}; give the queue shapes",
                                  node=node_name)
        out.append(xp.stack([xp.asarray(v) for v in vals]))
    return tuple(out)


def _timeout(node):
    t = node.attrs.get("timeout", -1.0)
    return -1.0 if t is None else float(t)


@kernel("QueueEnqueue", "QueueEnqueueMany")
def _enqueue(node, xp):
    many = node.op == "QueueEnqueueMany"

    def f(ctx, a):
        q = _queue(a[0], node)
        elements = elements_of(q, list(a[1:]), many, node.name)

        def begin(done, fail):
            w = q.enqueue(elements, lambda _: done(()), fail, node.name)
            return lambda: w is not None and q.cancel(w)
        return Later(begin, node, _timeout(node), f"for room in queue {q.name!r}")
    return f


@kernel("QueueDequeue", "QueueDequeueMany")
def _dequeue(node, xp):
    many = node.op == "QueueDequeueMany"

    def f(ctx, a):
        q = _queue(a[0], node)
        n = int(host(a[1])) if many else 1
        if n < 0:
            raise DfcRuntimeError(f"dequeue_many needs n >= 0, got {n}", node=node.name)

        def convert(elements):      # host arrays: the executor copies them to the dequeuing device
            if many:
                return stacked(q, elements, np, node.name)
            return tuple(np.asarray(v) for v in elements[0])

        def begin(done, fail):
            w = q.dequeue(n, _guarded(convert, done, fail), fail, node.name)
            return lambda: q.cancel(w)
        return Later(begin, node, _timeout(node), f"for {n if many else 'an'} element(s) of queue {q.name!r}")
    return f


@kernel("QueueSize")
def _queue_size(node, xp):
    return lambda ctx, a: (xp.asarray(np.array(_queue(a[0], node).size(), np.int64)),)


@kernel("QueueClose")
def _queue_close(node, xp):
    cancel = node.attrs.get("cancel_pending_enqueues", False)

    def f(ctx, a):
        _queue(a[0], node).close(cancel)
        return ()
    return f


# ------------------------------------------------------------------------------------------ accumulators

kernel("AccumulatorHandle")(_handle_kernel(
    "accumulator", lambda name, at: AccumulatorResource(name, at["dtype"], at.get("shape"))))
_acc = _checked(AccumulatorResource, "an accumulator")


@kernel("AccumulatorApplyGradient")
def _apply_grad(node, xp):
    def f(ctx, a):
        # the accumulator sums on the host
        _acc(a[0], node).apply(host(a[2]), int(host(a[1])), node.name, node.attrs.get("worker", ""))
        return ()
    return f


@kernel("AccumulatorTakeGradient")
def _take_grad(node, xp):
    def f(ctx, a):
        acc = _acc(a[0], node)
        n = int(host(a[1]))
        if n < 1:
            raise DfcError(f"take_grad needs num_required >= 1, got {n}", node=node.name)

        def begin(done, fail):
            w = acc.take(n, lambda avg: done((np.asarray(avg),)), fail, node.name)    # to the device: executor
            return lambda: acc.cancel(w)
        return Later(begin, node, _timeout(node), f"for {n} gradient(s) in accumulator {acc.name!r}")
    return f


@kernel("AccumulatorNumAccumulated")
def _num_accumulated(node, xp):
    return lambda ctx, a: (xp.asarray(np.array(_acc(a[0], node).num_accumulated(), np.int64)),)


@kernel("AccumulatorSetGlobalStep")
def _set_global_step(node, xp):
    def f(ctx, a):
        _acc(a[0], node).set_global_step(int(host(a[1])))
        return ()
    return f
