"""Send/Recv between the processes of a cluster: routing, batching, the object store, compression.

Every process of a cluster step (the chief and each task's actor) has one
`StepRendezvous` per step in flight. A Send whose Recv is on a device of the
same process completes through the in-process table, as in a one-process run;
a Send to another task is handed to that task's `Outbox`, whose thread ships
whatever has queued up in one Ray actor call (`Task.deliver`), so a loop that
sends a predicate every iteration costs one call per batch, not per value.
Values of `object_store_bytes` or more are put in Ray's object store once and
only their reference travels in the call. Messages to the chief (which is not
an actor) wait in the task's chief box until the chief's poller takes them.

Keys are (step id, tensor name, send device, recv device, frame tag): two steps
in flight never meet. Dead signals cross as the DEAD singleton (it pickles as a
reference). Opt-in lossy compression (whitepaper §5.5) sends float32 values as
their 16 high bits (bfloat16: the mantissa truncated) and widens them on arrival.
"""
import collections
import threading

import numpy as np

from dfc.errors import DfcRuntimeError
from dfc.runtime.devices import Sent, is_device_array, split_task
from dfc.runtime.values import DEAD
from dfc.runtime.rendezvous import Rendezvous

COMPRESSIONS = (None, "bfloat16")


def task_of(device):
    """The task a device belongs to ('worker:1' for 'worker:1/cpu:0'); None for the chief's devices."""
    return split_task(device)[0]


class Encoded:
    """A float32 array sent as bfloat16 bits (the upper half of each float32)."""
    __slots__ = ("bits",)

    def __init__(self, bits):
        self.bits = bits

    def decode(self):
        return (self.bits.astype(np.uint32) << 16).view(np.float32)


class Stored:
    """A value in Ray's object store: only its reference crosses in the actor call."""
    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref


def encode(v, compression):
    """What a Send to another process ships for value v (and how many bytes that is)."""
    if compression == "bfloat16" and isinstance(v, np.ndarray) and v.dtype == np.float32:
        bits = (np.ascontiguousarray(v).view(np.uint32) >> 16).astype(np.uint16)
        return Encoded(bits), bits.nbytes
    return v, getattr(v, "nbytes", 8)


def decode(v, timeout=None):
    """The value a message carries; a value in the object store is fetched, waiting at most `timeout` s
    (its owner may have stopped answering: the wait must end)."""
    if isinstance(v, Stored):
        import ray
        try:
            v = ray.get(v.ref, timeout=timeout)
        except Exception as e:   # noqa: BLE001 — Ray's timeout and owner-died errors
            raise DfcRuntimeError(f"a value in Ray's object store could not be fetched within {timeout:g} s "
                                  f"({type(e).__name__})" if timeout else
                                  f"a value in Ray's object store could not be fetched ({type(e).__name__})"
                                  ) from None
    if isinstance(v, Encoded):
        return v.decode()
    if isinstance(v, np.ndarray) and not v.flags.writeable:
        return v.copy()     # zero-copy reads from the object store are read-only; kernels may own their inputs
    return v


class Counters:
    """Messages this process handed to others and received from them (for quiescence), and bytes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = self.received = self.bytes_sent = self.stored = 0

    def add_sent(self, nbytes, stored):
        with self.lock:
            self.sent += 1
            self.bytes_sent += nbytes
            self.stored += stored

    def add_received(self, n=1):
        with self.lock:
            self.received += n

    def snapshot(self):
        with self.lock:
            return {"sent": self.sent, "received": self.received, "bytes_sent": self.bytes_sent,
                    "stored": self.stored}


class Outbox:
    """Messages to one other task, shipped by one thread in batches (one actor call per batch)."""

    def __init__(self, handle, name):
        self.handle = handle
        self.cv = threading.Condition()
        self.items = []
        self.closed = False
        self.thread = threading.Thread(target=self._ship, name=f"dfc-send-{name}", daemon=True)
        self.thread.start()

    def put(self, item):
        with self.cv:
            self.items.append(item)
            self.cv.notify()

    def close(self):
        with self.cv:
            self.closed = True
            self.cv.notify()

    def _ship(self):
        while True:
            with self.cv:
                while not self.items and not self.closed:
                    self.cv.wait()
                if not self.items:
                    return
                batch, self.items = self.items, []
            try:
                self.handle.deliver.remote(batch)
            except Exception:   # noqa: BLE001 — the peer is gone: the chief sees its step fail and aborts
                pass


def leaving(value):
    """A value about to leave its process, in host memory: a GPU partition's Send carries the device array
    and an event recorded after the work producing it, and neither pickles; wait for the event, then copy
    the array to the host (the receiving process copies it onto its own device)."""
    if isinstance(value, Sent):
        if value.event is not None:
            value.event.synchronize()
        value = value.value
    value = value.get() if is_device_array(value) else value
    if not (value is DEAD or isinstance(value, (np.ndarray, np.generic))):
        # the outbox thread would fail to pickle it and the message would be lost: fail the Send instead
        raise DfcRuntimeError(f"a {type(value).__name__} cannot be sent to another process (only arrays "
                              f"cross between tasks; keep resources such as TensorArrays on one task)")
    return value


class StepRendezvous:
    """The rendezvous of one step in one process of a cluster (see the module docstring).

    me: this process's task (None: the chief); outboxes: task -> Outbox; chief_box: where messages to the
    chief wait (on a task), or None (on the chief, which never sends to itself through it)."""

    def __init__(self, step, me, outboxes, counters, compression=None, store_bytes=None, chief_box=None,
                 fetch_timeout=None):
        self.step, self.me, self.outboxes, self.counters = step, me, outboxes, counters
        self.compression, self.store_bytes, self.chief_box = compression, store_bytes, chief_box
        self.fetch_timeout = fetch_timeout      # seconds a value in the object store may take to fetch
        self.local = Rendezvous()

    def send(self, key, value):
        dest = task_of(key[2])
        if dest == self.me:
            self.local.send(key, value)
            return
        v, nbytes = encode(leaving(value), self.compression)
        stored = False
        if self.store_bytes is not None and nbytes >= self.store_bytes and isinstance(v, np.ndarray):
            import ray
            v, stored = Stored(ray.put(v)), True
        self.counters.add_sent(nbytes, stored)
        if dest is None:
            self.chief_box.put(self.step, key, v)
        else:
            self.outboxes[dest].put((self.step, key, v))

    def recv(self, key, callback):
        self.local.recv(key, callback)

    def arrive(self, key, value):
        """A value sent by another process for this step.

        Counted as received only once it is handed to its Recv (whose partition is then busy): counted
        before, the quiescence check could see this process idle and every count balanced while a large
        value is still being decoded or copied, and report a deadlock that is not one."""
        self.local.send(key, decode(value, self.fetch_timeout))
        self.counters.add_received()


class ChiefBox:
    """A task's messages to the chief, per step, until the chief's poller takes them."""

    def __init__(self):
        self.cv = threading.Condition()
        self.items = collections.defaultdict(list)

    def put(self, step, key, value):
        with self.cv:
            self.items[step].append((key, value))
            self.cv.notify_all()

    def take(self, step, timeout):
        with self.cv:
            if not self.items.get(step):
                self.cv.wait(timeout)
            return self.items.pop(step, [])

    def drop(self, step):
        with self.cv:
            self.items.pop(step, None)
