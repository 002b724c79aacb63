"""The rendezvous of one partitioned run, and the coordinator that detects cross-partition deadlock.

A Send puts (key, value) and never blocks; a Recv registers a callback and
never blocks either: whichever of the two comes second completes the pair, and
the callback posts the value to the receiving partition's completion queue
(§3: "the rendezvous key contains the frame tag"; §4.4: dead values cross as
dead signals). Keys are (tensor_name, send_device, recv_device, frame tag).

The coordinator counts the work that can still wake a partition (messages
queued but not taken, kernels in flight). When every unfinished partition is
waiting and that count is zero, nothing can ever arrive: a deadlock, reported
with the nodes each partition is waiting for — execution never hangs.
"""
import queue
import threading

POLL_SECONDS = 0.05


class Rendezvous:
    def __init__(self):
        self.lock = threading.Lock()
        self.table = {}        # key -> ("value", v) | ("waiter", callback)

    def send(self, key, value):
        with self.lock:
            item = self.table.pop(key, None)
            if item is None:
                self.table[key] = ("value", value)
                return
            if item[0] == "value":
                self.table[key] = item
                raise RuntimeError(f"two Sends with rendezvous key {key!r}")
        item[1](value)

    def recv(self, key, callback):
        with self.lock:
            item = self.table.pop(key, None)
            if item is None:
                self.table[key] = ("waiter", callback)
                return
            if item[0] == "waiter":
                self.table[key] = item
                raise RuntimeError(f"two Recvs with rendezvous key {key!r}")
        callback(item[1])


class Aborted(Exception):
    """Raised inside a partition when another partition failed or a deadlock was found."""


class Coordinator:
    """Completion queues of the partitions of one run, with quiescence (deadlock) detection."""

    def __init__(self, names, distributed=False):
        """distributed: the partitions talk to other processes too, so local quiescence is not a deadlock
        (a value may still arrive from another task); the cluster's chief decides, from every task's
        idle() and message counts, and calls abort()."""
        self.distributed = distributed
        self.lock = threading.Lock()
        self.queues = {n: queue.SimpleQueue() for n in names}
        self.waiting = {n: False for n in names}
        self.done = {n: False for n in names}
        self.work = 0            # messages queued + kernels in flight, over all partitions
        self.abort_reason = None  # None, "error" or "deadlock"

    def post(self, name, item):
        with self.lock:
            self.work += 1
        self.queues[name].put(item)

    def started_kernel(self):
        with self.lock:
            self.work += 1

    def post_kernel(self, name, item):
        """A kernel finished on the pool: its completion was counted when it started."""
        self.queues[name].put(item)

    def get(self, name):
        """The next completion of partition `name`; raises Aborted when the run cannot go on."""
        q = self.queues[name]
        while True:
            try:
                item = q.get_nowait()
            except queue.Empty:
                item = None
            if item is None:
                with self.lock:
                    self.waiting[name] = True
                    if not self.distributed and self.abort_reason is None and self.work == 0 and \
                            all(self.waiting[n] or self.done[n] for n in self.waiting):
                        self._abort("deadlock")
                try:
                    item = q.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    continue
                finally:
                    with self.lock:
                        self.waiting[name] = False
            if item is _WAKE:
                raise Aborted(self.abort_reason)
            with self.lock:
                self.work -= 1
            return item

    def check(self):
        if self.abort_reason is not None:
            raise Aborted(self.abort_reason)

    def finish(self, name):
        with self.lock:
            self.done[name] = True
            if not self.distributed and self.abort_reason is None and self.work == 0 and \
                    not all(self.done.values()) and all(self.waiting[n] or self.done[n] for n in self.waiting):
                self._abort("deadlock")

    def idle(self):
        """Every partition is finished or waiting, with nothing queued and no kernel running."""
        with self.lock:
            return self.work == 0 and all(self.waiting[n] or self.done[n] for n in self.waiting)

    def abort(self, reason):
        """Stop every partition of this run (another task failed, or the step is deadlocked)."""
        with self.lock:
            if self.abort_reason is None:
                self._abort(reason)

    def fail(self):
        with self.lock:
            if self.abort_reason is None:
                self._abort("error")

    def _abort(self, reason):
        self.abort_reason = reason
        for q in self.queues.values():
            q.put(_WAKE)


_WAKE = object()
