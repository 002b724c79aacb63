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
import concurrent.futures
import threading
import weakref

from dfc.errors import DfcRuntimeError
from dfc.runtime.devices import _base, is_array


class HostCopy:
    __slots__ = ("value",)

    def __init__(self):
        self.value = None


class Swapped:
    """A stack entry that is (or is being) copied to host."""
    __slots__ = ("value", "host", "out", "inn", "nbytes")

    def __init__(self, value, host, nbytes):
        self.value, self.host, self.nbytes = value, host, nbytes
        self.out = self.inn = None


class Swapper:
    """The swap policy and I/O threads of one device."""

    def __init__(self, device, threshold=0.5, min_bytes=4096, prefetch=2, always=False):
        self.device, self.mem = device, device.memory
        self.threshold, self.min_bytes, self.prefetch, self.always = threshold, min_bytes, prefetch, always
        self.lock = threading.Lock()
        self.copies = {}      # id(device buffer) -> (weakref to it, HostCopy): never copy a value twice
        self.outs = []        # copy-out futures not known to be done
        self._d2h = self._h2d = None
        self.stats = {"swapped_out": 0, "bytes_out": 0, "swapped_in": 0, "prefetched": 0, "reused": 0,
                      "cancelled": 0}
        self.mem.pressure = self.wait_for_copies

    @property
    def d2h(self):
        if self._d2h is None:
            self._d2h = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"dfc-{self.device.name}-d2h")
        return self._d2h

    @property
    def h2d(self):
        if self._h2d is None:
            self._h2d = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"dfc-{self.device.name}-h2d")
        return self._h2d

    def wants(self, v):
        cap = self.mem.capacity
        return cap is not None and is_array(v) and self.mem.nbytes(v) >= self.min_bytes and \
            self.mem.in_use > self.threshold * cap

    # ------------------------------------------------------------------ push / pop
    def push(self, stack, v, node=None):
        self.mem.hold(v, node)
        if not (getattr(stack, "swap", False) or self.always) or not self.wants(v):
            stack.append(v)
            return
        b = _base(v)
        with self.lock:
            rec = self.copies.get(id(b))
            if rec is not None and rec[0]() is b:
                hc = rec[1]
                self.stats["reused"] += 1
            else:
                hc = HostCopy()
                self.copies[id(b)] = (weakref.ref(b), hc)
        e = Swapped(v, hc, self.mem.nbytes(v))
        e.out = self.d2h.submit(self._copy_out, e)
        with self.lock:
            self.outs = [f for f in self.outs if not f.done()]
            self.outs.append(e.out)
        stack.append(e)

    def pop(self, stack, node=None):
        if not stack:
            raise DfcRuntimeError("pop from an empty stack", node=node)
        e = stack.pop()
        if isinstance(e, Swapped):
            if e.out.cancel():
                self.stats["cancelled"] += 1        # never left the device
            else:
                e.out.result()
                if e.inn is not None:
                    try:
                        e.inn.result()
                    except Exception:   # noqa: BLE001 — a failed prefetch is retried below
                        pass
                if e.value is None:
                    v = self.device.copy_from_host(e.host.value)
                    self.mem.acquire(v, 1, node)
                    e.value = v
                    self.stats["swapped_in"] += 1
            v = e.value
        else:
            v = e
        self._prefetch(stack)
        self.mem.handoff(v)
        return v

    # ------------------------------------------------------------------ I/O threads
    def _copy_out(self, e):
        hc = e.host
        if hc.value is None:
            hc.value = self.device.copy_to_host(e.value)
            self.stats["swapped_out"] += 1
            self.stats["bytes_out"] += e.nbytes
        v, e.value = e.value, None
        self.mem.release(v)

    def _copy_in(self, e):
        e.out.result()
        if e.value is None:
            v = self.device.copy_from_host(e.host.value)
            self.mem.acquire(v, 1)
            e.value = v
            self.stats["prefetched"] += 1

    def _prefetch(self, stack):
        cap = self.mem.capacity
        for e in stack[::-1][:self.prefetch]:
            if isinstance(e, Swapped) and e.inn is None and not e.out.cancelled():
                if cap is not None and self.mem.in_use + 2 * e.nbytes > cap:
                    break
                e.inn = self.h2d.submit(self._copy_in, e)

    def wait_for_copies(self):
        with self.lock:
            outs = list(self.outs)
        concurrent.futures.wait(outs)
        return bool(outs)

    def end_run(self):
        """Wait for every copy in flight (stacks die with the run) and forget the host copies."""
        self.wait_for_copies()
        if self._h2d is not None:
            self._h2d.submit(lambda: None).result()
        with self.lock:
            self.copies.clear()
            self.outs = []

    def close(self):
        for ex in (self._d2h, self._h2d):
            if ex is not None:
                ex.shutdown(wait=True)


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
    name = node.attrs["shared_name"]

    def f(ctx, a):
        new = name not in ctx.variables
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
             "AssignAdd": _assign, "AssignSub": _assign}
