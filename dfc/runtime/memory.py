"""Memory swapping of gradient-stack tensors (§5.3), and the holds of stateful kernels on accounting devices.

On a device that accounts bytes (accel, gpu), StackPush of a tensor of at
least `min_bytes`, when the device's usage is above `threshold` x capacity,
copies the tensor to host on a separate I/O thread (the device-to-host
stream on a GPU) and then drops the stack's hold on the device copy; the
forward loop does not wait. StackPop takes the entry back (from the device
if the copy-out has not started yet, else from host) and prefetches the next
entries of the stack to the device on another I/O thread, so the gradient
loop finds them there. A buffer is copied out once even if it is pushed many
times (a loop invariant). When an allocation would pass the capacity while
copies are in flight, the allocator waits for them before giving up.

Stacks swap when their StackV2 has swap_memory=True (dfc.while_loop(...,
swap_memory=True)) or when the session's swap_memory option is on.
"""
import queue
import threading
import weakref

from dfc.errors import DfcRuntimeError
from dfc.runtime.devices import is_array
from dfc.runtime.trace import swap_span


class HostCopy:
    __slots__ = ("value",)

    def __init__(self):
        self.value = None


QUEUED, CANCELLED, COPYING, OUT, FETCHING, IN = range(6)


class Swapped:
    """A stack entry that is (or is being) copied to host; `state` moves QUEUED -> COPYING -> OUT
    (-> FETCHING -> IN when prefetched), or QUEUED -> CANCELLED when popped before its copy started."""
    __slots__ = ("value", "host", "nbytes", "state", "event")

    def __init__(self, value, host, nbytes, event=None):
        self.value, self.host, self.nbytes, self.state, self.event = value, host, nbytes, QUEUED, event


class Swapper:
    """The swap policy and the two I/O threads (device-to-host, host-to-device) of one device."""

    def __init__(self, device, threshold=0.5, min_bytes=4096, prefetch=2, always=False):
        self.device, self.mem = device, device.memory
        self.threshold, self.min_bytes, self.prefetch, self.always = threshold, min_bytes, prefetch, always
        self.cond = threading.Condition()
        self.copies = {}      # id(device array) -> (weakref to it, HostCopy): never copy a value twice
        self.pending_out = 0  # entries queued or being copied out
        self._d2h = self._h2d = None
        self.stats = {"swapped_out": 0, "bytes_out": 0, "swapped_in": 0, "prefetched": 0, "reused": 0,
                      "cancelled": 0}
        self.mem.pressure = self.wait_for_copies
        self.trace = None     # a dfc.runtime.trace.Trace: copies become spans on the device's swap lanes

    def _queue(self, which):
        q = getattr(self, which)
        if q is None:
            q = queue.SimpleQueue()
            setattr(self, which, q)
            loop = self._copy_out_loop if which == "_d2h" else self._copy_in_loop
            threading.Thread(target=loop, args=(q,), name=f"dfc-{self.device.name}{which}", daemon=True).start()
        return q

    def wants(self, v):
        """Swap v out? Only arrays that own their memory (copying a view frees nothing), of at least
        min_bytes, when the device holds more than threshold x capacity."""
        cap = self.mem.capacity
        return cap is not None and is_array(v) and v.nbytes >= self.min_bytes and \
            self.mem.nbytes(v) == v.nbytes and self.device.used_bytes() > self.threshold * cap

    # ------------------------------------------------------------------ push / pop
    def push(self, stack, v, node=None):
        self.mem.hold(v, node)
        if not (getattr(stack, "swap", False) or self.always) or not self.wants(v):
            stack.append(v)
            return
        rec = self.copies.get(id(v))      # keyed by the array object: views of one buffer differ
        if rec is not None and rec[0]() is v:
            hc = rec[1]
            self.stats["reused"] += 1
        else:
            hc = HostCopy()
            self.copies[id(v)] = (weakref.ref(v), hc)
        e = Swapped(v, hc, v.nbytes, self.device.record_event())
        with self.cond:
            self.pending_out += 1
        self._queue("_d2h").put(e)
        stack.append(e)

    def pop(self, stack, node=None):
        if not stack:
            raise DfcRuntimeError("pop from an empty stack", node=node)
        e = stack.pop()
        if isinstance(e, Swapped):
            with self.cond:
                if e.state == QUEUED:
                    e.state = CANCELLED           # never left the device; the stack's hold is intact
                    self.stats["cancelled"] += 1
                while e.state in (COPYING, FETCHING):
                    self.cond.wait()
                state = e.state
            if state == OUT:
                start = self.trace.now() if self.trace is not None else None
                v = self.device.copy_from_host(e.host.value)
                if start is not None:
                    swap_span(self.trace, self.device.name, "swap in", start, e.nbytes, node)
                self.mem.acquire(v, 1, node)
                e.value, e.state = v, IN
                self.stats["swapped_in"] += 1
            v = e.value
        else:
            v = e
        if self.prefetch:
            self._prefetch(stack)
        self.mem.handoff(v)
        return v

    def _prefetch(self, stack):
        cap = self.mem.capacity
        for e in stack[-1:-self.prefetch - 1:-1]:
            if isinstance(e, Swapped) and e.state == OUT:
                if cap is not None and self.mem.in_use + 2 * e.nbytes > cap:
                    break
                with self.cond:
                    if e.state != OUT:
                        continue
                    e.state = FETCHING
                self._queue("_h2d").put(e)

    # ------------------------------------------------------------------ I/O threads
    def _copy_out_loop(self, q):
        while True:
            e = q.get()
            if e is None:
                return
            with self.cond:
                if e.state == CANCELLED:
                    self.pending_out -= 1
                    self.cond.notify_all()
                    continue
                e.state = COPYING
            hc = e.host
            if hc.value is None:
                start = self.trace.now() if self.trace is not None else None
                hc.value = self.device.copy_to_host(e.value, e.event)
                if start is not None:
                    swap_span(self.trace, self.device.name, "swap out", start, e.nbytes)
                self.stats["swapped_out"] += 1
                self.stats["bytes_out"] += e.nbytes
            self.mem.release(e.value)
            with self.cond:
                e.value, e.state = None, OUT
                self.pending_out -= 1
                self.cond.notify_all()

    def _copy_in_loop(self, q):
        while True:
            e = q.get()
            if e is None:
                return
            if isinstance(e, threading.Event):
                e.set()
                continue
            start = self.trace.now() if self.trace is not None else None
            v = self.device.copy_from_host(e.host.value)
            if start is not None:
                swap_span(self.trace, self.device.name, "prefetch", start, e.nbytes)
            try:
                self.mem.acquire(v, 1)
            except DfcRuntimeError:       # no room after all: the pop copies it in itself
                v = None
            with self.cond:
                if v is None:
                    e.state = OUT
                else:
                    e.value, e.state = v, IN
                    self.stats["prefetched"] += 1
                self.cond.notify_all()

    def wait_for_copies(self):
        """Block until every queued copy-out is done (the allocator's answer to memory pressure)."""
        with self.cond:
            waited = self.pending_out > 0
            while self.pending_out:
                self.cond.wait()
        return waited

    def end_run(self):
        """Wait for every copy in flight (stacks die with the run) and forget the host copies."""
        self.wait_for_copies()
        if self._h2d is not None:
            done = threading.Event()
            self._h2d.put(done)
            done.wait()
        self.copies.clear()

    def close(self):
        for q in (self._d2h, self._h2d):
            if q is not None:
                q.put(None)


# ---------------------------------------------------------------------- kernels on accounting devices

def accounting_kernel(node, xp, kern):
    """`kern` wrapped so that the values a stateful op keeps are counted on the device while kept."""
    wrap = _WRAPPERS.get(node.op)
    return kern if wrap is None else wrap(node, kern)


def _push(node, kern):
    def f(ctx, a):
        if ctx.swapper is not None:
            ctx.swapper.push(a[0], a[1], node.name)
        else:
            if ctx.memory is not None:
                ctx.memory.hold(a[1], node.name)
            a[0].append(a[1])
        return (a[1],)
    return f


def _pop(node, kern):
    def f(ctx, a):
        if ctx.swapper is not None:
            return (ctx.swapper.pop(a[0], node.name),)
        out = kern(ctx, a)
        if ctx.memory is not None:
            ctx.memory.handoff(out[0])
        return out
    return f


def _holds(k):
    """TensorArray writes: the array keeps argument k until the run ends."""
    def wrap(node, kern):
        def f(ctx, a):
            out = kern(ctx, a)
            if ctx.memory is not None:
                ctx.memory.hold(a[k], node.name)
            return out
        return f
    return wrap


def _var_handle(node, kern):
    name, container = node.attrs["shared_name"], node.attrs.get("container", "")

    def f(ctx, a):
        new = ctx.container(container).lookup(name) is None
        out = kern(ctx, a)
        if new and ctx.memory is not None:
            ctx.memory.pin(out[0].value, node.name)
        return out
    return f


def _assign(node, kern):
    def f(ctx, a):
        old = a[0].value
        out = kern(ctx, a)
        if ctx.memory is not None and a[0].value is not old:
            ctx.memory.pin(a[0].value, node.name)
            ctx.memory.unpin(old)
        return out
    return f


_WRAPPERS = {"StackPush": _push, "StackPop": _pop, "TensorArrayWrite": _holds(2), "TensorArrayUnstack": _holds(1),
             "TensorArrayScatter": _holds(2), "VarHandle": _var_handle, "Assign": _assign,
             "AssignAdd": _assign, "AssignSub": _assign,
             "ResourceScatterAdd": _assign, "ResourceScatterSub": _assign}
