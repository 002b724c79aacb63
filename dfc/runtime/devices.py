"""Devices: where a partition runs, which array module it uses, and how many bytes it holds.

Four kinds, named "KIND:N":

- `cpu:N`  numpy; `cpu:0` ... `cpu:7` always exist. Several logical CPU devices
  let a graph be partitioned and run concurrently on one machine.
- `gpu:N`  cupy, imported only when a gpu device is first used (see "Streams").
- `strict:N` (N < 4) the same device code on dfc/runtime/strict.py, a cupy stand-in whose arrays
  refuse implicit conversion to numpy and whose streams check ordering: it runs every GPU code path
  on a machine without a GPU (`DFC_TEST_DEVICE=strict python -m pytest tests`).
- `accel:N` a memory-capped accelerator made of numpy arrays: every tensor's
  bytes are counted from its creation until its last consumer is done, and
  going past the capacity raises DfcOutOfMemory. It makes the memory
  behaviour of §5.3 (swapping) testable without a GPU.

Accounting is by buffer: a value and its views (reshape, slicing, Identity)
share one entry, counted once; an entry is freed when its reference count
(set by the executor from the number of consumers, plus holds by stacks,
TensorArrays and variables) returns to zero. On gpu/strict devices the array
module's memory pool (bytes really allocated) is reported too, and swapping
decides from the larger of the two.

Streams (§5.3), gpu and strict: kernels run on the device's compute stream;
values come in on the host-to-device stream (from the host, or a peer copy
from another GPU) and the compute stream waits on an event recorded after the
copy; a value leaves (a Send, the final fetch) only after an event recorded
on its producer's stream: a Send carries the value with that event (`Sent`),
a Recv on the host or another GPU waits on it before copying, and the fetch
copy's device-to-host stream waits on the compute stream. Swapping copies
out and prefetches on two more streams of their own. Loop and cond
predicates reach the host once per value (`Predicates`), not once per Switch.
"""
import contextlib
import re
import threading
import weakref

import numpy as np

from dfc.errors import DfcError, DfcGraphError, DfcOutOfMemory

KINDS = ("cpu", "gpu", "accel", "strict")
NUM_CPUS = 8
NUM_ACCELS = 8
NUM_STRICT = 4           # dfc.runtime.strict.NUM_DEVICES
DEFAULT_ACCEL_CAPACITY = 256 << 20
# Ops whose kernels exist only on the host (they talk to files or stdout).
HOST_ONLY_OPS = frozenset({"Print", "Save", "Restore", "Progress", "SummaryScalar", "SummaryHistogram",
                           "Timestamp"})

_NAME = re.compile(r"^/?(?:device:)?([A-Za-z]+)(?::(\d+))?$")
# A task prefix: "worker:1/", or TensorFlow's "/job:worker/task:1/" ("/job:worker/" alone is task 0).
_TASK = re.compile(r"^(?:([A-Za-z_][A-Za-z0-9_]*):(\d+)|/?job:([A-Za-z_][A-Za-z0-9_]*)(?:/(?:replica:\d+/)?task:(\d+))?)/(.*)$")


def canonical_name(name, node=None):
    """'cpu:1', 'CPU:1', '/device:CPU:1', 'cpu' -> 'cpu:1' / 'cpu:0'; a task prefix is kept in the form
    'JOB:TASK/KIND:N' ('worker:1/cpu:0', '/job:worker/task:1/device:CPU:0' -> 'worker:1/cpu:0');
    anything else is a DfcError."""
    task, local = split_task(name, node)
    return local if task is None else f"{task}/{local}"


def split_task(name, node=None):
    """(task or None, local device name): 'worker:1/gpu:0' -> ('worker:1', 'gpu:0'); 'cpu:1' -> (None, 'cpu:1').

    A name without a task is the local (chief) process."""
    text = str(name).strip() if isinstance(name, str) else None
    task = None
    t = _TASK.match(text) if text is not None else None
    if t is not None:
        job, idx = (t.group(1), t.group(2)) if t.group(1) else (t.group(3), t.group(4) or "0")
        task, text = f"{job}:{int(idx)}", t.group(5)
    m = _NAME.match(text) if text is not None else None
    kind = m and m.group(1).lower()
    if kind not in KINDS:
        raise DfcGraphError(f"bad device name {name!r} (use cpu:N, gpu:N, accel:N or strict:N, optionally after a task: "
                            f"JOB:TASK/KIND:N such as worker:1/cpu:0)", node=node)
    return task, f"{kind}:{int(m.group(2) or 0)}"


def _base(a):
    """The array that owns a's memory (views share their base's buffer)."""
    while True:
        b = a.base
        if b is None or not hasattr(b, "nbytes") or not hasattr(b, "base"):
            return a
        a = b


def is_array(v):
    return isinstance(v, np.ndarray) or is_device_array(v)


def is_device_array(v):
    """A cupy array or a strict double's array: data in device memory, read on the host only by copying."""
    return hasattr(v, "__cuda_array_interface__") or getattr(type(v), "__dfc_device_array__", False)


def fed(v):
    """A device array a caller passes in, as a Sent ordered after the work queued on the caller's current
    stream: dfc's streams are non-blocking, so they would not wait for that work by themselves."""
    xp = _module_of(v)
    with xp.cuda.Device(v.device.id):
        ev = xp.cuda.Event(block=False, disable_timing=True)
        ev.record(xp.cuda.get_current_stream())
    return Sent(v, ev)


def on_host(v):
    """A host copy of a device value (a Sent, received or fed, or a device array); other values as they are."""
    if isinstance(v, Sent):
        if v.event is not None:
            v.event.synchronize()     # the host reads it: wait for the work that made it
        v = v.value
    return v.get() if is_device_array(v) else v


def _module_of(v):
    if getattr(type(v), "__dfc_device_array__", False):
        from dfc.runtime import strict
        return strict.xp
    return _cupy()


class Sent:
    """What a Send of a device value puts in the rendezvous: the value and an event recorded after the work
    that produces it; the receiving device waits on the event before it copies the value."""
    __slots__ = ("value", "event")

    def __init__(self, value, event):
        self.value, self.event = value, event

    @property
    def nbytes(self):
        return self.value.nbytes


class Predicates:
    """The truth of Switch predicates, one device-to-host copy per predicate value: every Switch of a loop
    (one per loop variable) and of a cond reads the same LoopCond / condition value, so its first Switch
    brings it to the host and the others reuse that. Keeps the last `size` values (and so their ids)."""

    def __init__(self, size=64):
        self.size, self.seen = size, {}

    def __call__(self, v):
        if not is_device_array(v):
            return bool(v)
        hit = self.seen.get(id(v))
        if hit is not None and hit[0] is v:
            return hit[1]
        if v.size != 1:         # as numpy's bool(); cupy's takes an empty array as False
            raise ValueError(f"the truth value of an array of {v.size} elements is ambiguous")
        b = bool(v.get())
        if len(self.seen) >= self.size:
            self.seen.pop(next(iter(self.seen)))
        self.seen[id(v)] = (v, b)
        return b


_DEFAULT_DEVICE = ["cpu:0"]


def default_device():
    """The device unplaced nodes of every new Session go to (unless it names its own): 'cpu:0'."""
    return _DEFAULT_DEVICE[0]


def set_default_device(name):
    """Make `name` the default device of Sessions created from now on (tests: DFC_TEST_DEVICE)."""
    _DEFAULT_DEVICE[0] = canonical_name(name)


class MemoryTracker:
    """Exact byte accounting of one device, thread-safe.

    acquire(v, n) adds n references to v's buffer (allocating it when new);
    release(v) drops one; hold/handoff let a stack keep a value between the
    executor's acquire and release. Values that are not arrays are ignored.
    """

    def __init__(self, device, capacity=None):
        self.device, self.capacity = device, capacity
        self.lock = threading.Lock()
        self.entries = {}          # id(base) -> [base, refs, pins, nbytes, handoffs]
        self.in_use = self.peak = 0
        self.pressure = None       # callable() -> bool: free memory (wait for swap-outs); True if it may help

    def _entry(self, v, create):
        if not is_array(v):
            return None
        b = _base(v)
        e = self.entries.get(id(b))
        if e is None and create:
            e = [b, 0, 0, int(b.nbytes), 0]
        return e

    def acquire(self, v, n=1, node=None):
        """Add n references to v (n may be 0: allocated and freed at once, for peak accounting)."""
        if not is_array(v):
            return
        with self.lock:
            if self._add(v, n, node, can_wait=self.pressure is not None):
                return
        self.pressure()      # wait for swap-outs in flight to free device memory, then try again
        with self.lock:
            self._add(v, n, node, can_wait=False)

    def _add(self, v, n, node, can_wait):
        e = self._entry(v, True)
        if id(e[0]) not in self.entries:
            if can_wait and self.capacity is not None and self.in_use + e[3] > self.capacity:
                return False
            self._allocate(e, node)
        e[1] += n - e[4]
        e[4] = 0
        if e[1] <= 0 and e[2] == 0:
            self._free(e)
        return True

    def _allocate(self, e, node):
        if self.capacity is not None and self.in_use + e[3] > self.capacity:
            raise DfcOutOfMemory(f"device {self.device} out of memory: {self.in_use} bytes in use + {e[3]} "
                                 f"> capacity {self.capacity}", node=node)
        self.entries[id(e[0])] = e
        self.in_use += e[3]
        if self.in_use > self.peak:
            self.peak = self.in_use

    def _free(self, e):
        if self.entries.pop(id(e[0]), None) is not None:
            self.in_use -= e[3]

    def release(self, v):
        if not is_array(v):
            return
        with self.lock:
            e = self._entry(v, False)
            if e is None:
                return
            e[1] -= 1
            if e[1] <= 0 and e[2] == 0 and e[4] == 0:
                self._free(e)

    def hold(self, v, node=None):
        self.acquire(v, 1, node)

    def handoff(self, v):
        """The caller's hold on v becomes one of the references the executor adds next (StackPop)."""
        if not is_array(v):
            return
        with self.lock:
            e = self._entry(v, False)
            if e is not None:
                e[4] += 1

    def pin(self, v, node=None):
        """A reference that survives the end of a run (variable values)."""
        if not is_array(v):
            return
        with self.lock:
            e = self._entry(v, True)
            if id(e[0]) not in self.entries:
                self._allocate(e, node)
            e[2] += 1

    def unpin(self, v):
        if not is_array(v):
            return
        with self.lock:
            e = self._entry(v, False)
            if e is not None:
                e[2] -= 1
                if e[2] <= 0 and e[1] <= 0:
                    self._free(e)

    def end_run(self):
        """Drop every reference a run left behind (values of unfinished nodes, TensorArrays, fetches)."""
        with self.lock:
            for key, e in list(self.entries.items()):
                e[1] = e[4] = 0
                if e[2] <= 0:
                    del self.entries[key]
                    self.in_use -= e[3]

    def nbytes(self, v):
        return int(_base(v).nbytes) if is_array(v) else 0

    def stats(self):
        return {"in_use": self.in_use, "peak": self.peak, "capacity": self.capacity}


class Device:
    """A device: its name, array module, capabilities and (optional) memory accounting."""
    kind = "cpu"
    accounts = False       # the executor refcounts values for memory accounting
    device_arrays = False  # values are numpy arrays in host memory
    fuses = False          # with memory accounting on, loops run unfused (exact per-value counts)
    speed = 1.0            # relative compute speed for the placement cost model

    def __init__(self, name, capacity=None, track=False):
        self.name = name
        self.task, local = split_task(name)
        self.index = int(local.split(":")[1])
        self.capacity = capacity
        self.memory = MemoryTracker(name, capacity) if (self.accounts or track) else None
        self.lock = threading.Lock()

    @property
    def xp(self):
        return np

    def supports(self, op):
        return True

    def check_op(self, node):
        if not self.supports(node.op):
            raise DfcGraphError(f"no kernel for op {node.op!r} on device {self.name}", node=node.name)

    def to_device(self, v):
        """A value received from another device (a Recv) or fed, as this device's array type: on the host."""
        return on_host(v)

    def outgoing(self, v):
        """What a Send of v puts in the rendezvous (gpu: v with an event recorded after its producer)."""
        return v

    def fetch(self, values):
        """Host copies of a run's fetched values, once the work that makes them is done."""
        return values

    def record_event(self):
        """A marker of the work queued so far on the compute stream (None where work is synchronous)."""
        return None

    def copy_to_host(self, v, after=None):
        """A host copy of a device value (device-to-host transfer for swapping), once `after` is done."""
        return np.array(v, copy=True)

    def copy_from_host(self, v):
        return np.array(v, copy=True)

    def used_bytes(self):
        """Bytes the device holds: the executor's count (and, on a GPU, its memory pool's, if larger)."""
        return self.memory.in_use if self.memory is not None else 0

    def memory_stats(self):
        return self.memory.stats()

    def run_context(self):
        return contextlib.nullcontext()

    def end_run(self):
        """After a run (finished or failed): its work on this device is done (values it left behind,
        Variables, may be read by the host or another Session's streams next)."""

    def __repr__(self):
        return f"<Device {self.name}>"


class CPUDevice(Device):
    kind = "cpu"


class AccelDevice(Device):
    """A memory-capped accelerator of numpy arrays: exact byte accounting, DfcOutOfMemory past capacity."""
    kind = "accel"
    accounts = True

    def supports(self, op):
        return op not in HOST_ONLY_OPS


class GPUDevice(Device):
    """A CUDA GPU through cupy (or the strict double: StrictDevice): compute on one stream, transfers on
    four more (to and from the host, swap-out, swap-in), ordered by events (see "Streams" above)."""
    kind = "gpu"
    accounts = True
    device_arrays = True   # values live in device memory: host reads are explicit copies
    fuses = True           # fused loops run here (the executor accounts their stack holds and exits)
    speed = 10.0

    @staticmethod
    def backend():
        return _cupy()

    def __init__(self, name, capacity=None, track=False):
        cp = self.backend()
        if cp is None:
            raise DfcError(f"device {name} needs cupy and a CUDA GPU, and cupy is not installed")
        index = int(split_task(name)[1].split(":")[1])
        if index >= cp.cuda.runtime.getDeviceCount():
            raise DfcError(f"device {name} does not exist ({cp.cuda.runtime.getDeviceCount()} GPU(s))")
        with cp.cuda.Device(index):
            total = cp.cuda.runtime.memGetInfo()[1]
            streams = _STREAMS.get((id(cp), index))
            if streams is None:
                new = lambda: cp.cuda.Stream(non_blocking=True)    # noqa: E731
                streams = _STREAMS.setdefault((id(cp), index), tuple(new() for _ in range(5)))
        # One set of streams per GPU in this process, shared by every Session (TensorFlow: one compute stream
        # per device): a Variable another Session's kernel is still writing is then read after that kernel,
        # in stream order; with streams per Session, concurrent Sessions raced on shared Variables.
        self.compute_stream, self.h2d_stream, self.d2h_stream, self.swap_out_stream, self.swap_in_stream = streams
        self._cp = cp
        super().__init__(name, capacity or total, track)

    @property
    def xp(self):
        return self._cp

    def supports(self, op):
        return op not in HOST_ONLY_OPS

    def _on(self, stream):
        return _Enter(self._cp.cuda.Device(self.index), stream)

    def _event(self, stream):
        ev = self._cp.cuda.Event(block=False, disable_timing=True)
        ev.record(stream)
        return ev

    def to_device(self, v):
        """A host value (or another GPU's, a peer copy) as an array of this GPU; the compute stream waits
        for the copy. The copy of a Sent value waits for the event recorded after its producer."""
        event = None
        if isinstance(v, Sent):
            v, event = v.value, v.event
        if is_device_array(v) and v.device.id == self.index:
            if event is not None:
                self.compute_stream.wait_event(event)
            return v
        if not isinstance(v, (np.ndarray, np.generic)) and not is_device_array(v):
            return v            # not an array (a resource handle)
        stream = self.h2d_stream       # incoming copies, from the host or a peer
        with self._on(stream):
            if event is not None:
                stream.wait_event(event)
            out = self._peer_copy(v, stream) if is_device_array(v) else self._from_host(v, stream)
            self.compute_stream.wait_event(self._event(stream))
        return out

    def _incoming(self, stream, shape, dtype, order="C"):
        """A new array that a copy on `stream` fills and the compute stream reads. cupy's pool hands a freed
        block to the next allocation on the stream that allocated it, knowing nothing of other streams: an
        array allocated on the copy stream and freed once the kernel reading it was queued (not run) could
        be overwritten by the next copy before that kernel ran. So the block comes from the compute stream's
        pool, and the copy waits for the compute work queued before it was taken (its last users)."""
        with self._on(self.compute_stream):
            out = self._cp.empty(shape, dtype, order=order)
            ready = self._event(self.compute_stream)
        stream.wait_event(ready)
        return out

    def _from_host(self, v, stream):
        v = np.asarray(v)
        if not v.flags.c_contiguous:
            v = np.ascontiguousarray(v)      # (never for 0-d: ascontiguousarray would make it 1-d)
        out = self._incoming(stream, v.shape, v.dtype)
        out.set(v, stream=stream)
        return out

    def _peer_copy(self, v, stream):
        cp = self._cp
        if not v.flags.c_contiguous and not v.flags.f_contiguous:
            with cp.cuda.Device(v.device.id):
                src_stream = cp.cuda.get_current_stream()
                src_stream.wait_event(self._event(stream))
                v = cp.ascontiguousarray(v)
                stream.wait_event(self._event(src_stream))
        # a byte copy into a buffer of the same layout: a transposed (Fortran-ordered) value stays so, as it
        # is on the host, and the kernels reading it (matmul) give the same bits as on the sending device
        out = self._incoming(stream, v.shape, v.dtype, order="C" if v.flags.c_contiguous else "F")
        out.data.copy_from_device_async(v.data, v.nbytes, stream)
        stream.synchronize()     # the source may be freed once its Recv is done
        return out

    def outgoing(self, v):
        return Sent(v, self._event(self.compute_stream)) if is_device_array(v) else v

    def fetch(self, values):
        """Host copies of device values; also the end of a run: its work is done when this returns (values
        a run leaves behind, Variables, may be read by another Session's streams next)."""
        if not any(is_device_array(v) for v in values):
            self.compute_stream.synchronize()
            return values
        with self._on(self.d2h_stream):
            self.d2h_stream.wait_event(self._event(self.compute_stream))
            return [v.get(stream=self.d2h_stream) if is_device_array(v) else v for v in values]

    def record_event(self):
        with self._cp.cuda.Device(self.index):
            return self._event(self.compute_stream)

    def copy_to_host(self, v, after=None):
        """A host copy of a swapped-out value, in page-locked memory from cupy's pinned pool: the copy runs
        at full bus speed without a staging copy, and so does the copy back (copy_from_host)."""
        with self._on(self.swap_out_stream):
            if after is not None:
                self.swap_out_stream.wait_event(after)     # the producer ran on the compute stream
            out = self._pinned(v) if v.flags.c_contiguous else None
            return v.get(stream=self.swap_out_stream, out=out)      # blocking: returns once the copy is done

    def copy_from_host(self, v):
        with self._on(self.swap_in_stream):
            out = self._from_host(v, self.swap_in_stream)
            self.compute_stream.wait_event(self._event(self.swap_in_stream))
            self.swap_in_stream.synchronize()   # from page-locked memory the copy is asynchronous: v is the
            #                                     caller's until it is done (the copy thread waits, not the GPU)
        return out

    def _pinned(self, v):
        try:
            import cupyx
        except ImportError:         # the strict double: get() makes its own host array
            return None
        return cupyx.empty_pinned(v.shape, v.dtype)

    def pool_bytes(self):
        """(bytes in use, bytes held) by the array module's memory pool on this device."""
        pool = self._cp.get_default_memory_pool()
        with self._cp.cuda.Device(self.index):
            return pool.used_bytes(), pool.total_bytes()

    def used_bytes(self):
        return max(self.memory.in_use, self.pool_bytes()[0])

    def memory_stats(self):
        used, held = self.pool_bytes()
        return dict(self.memory.stats(), pool_used=used, pool_held=held)

    def run_context(self):
        return self._on(self.compute_stream)

    def end_run(self):
        with self._cp.cuda.Device(self.index):
            for s in (self.h2d_stream, self.compute_stream, self.d2h_stream):
                s.synchronize()


_STREAMS = {}    # (id(array module), GPU index) -> its compute, h2d, d2h, swap-out and swap-in streams


class StrictDevice(GPUDevice):
    """`strict:N`: the GPU device's code on dfc.runtime.strict (a cupy double that refuses implicit
    host/device conversions and checks stream ordering), so CI runs every GPU code path."""
    kind = "strict"

    @staticmethod
    def backend():
        from dfc.runtime import strict
        return strict.xp


class _Enter:
    """Enter a cupy Device and one of its streams (in that order), leave both."""

    def __init__(self, device, stream):
        self.device, self.stream = device, stream

    def __enter__(self):
        self.device.__enter__()
        self.stream.__enter__()

    def __exit__(self, *exc):
        self.stream.__exit__(*exc)
        self.device.__exit__(*exc)
        return False


_CUPY = []


def _cupy():
    if not _CUPY:
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
            _CUPY.append(cupy)
        except Exception:   # noqa: BLE001 — no cupy, no driver or no GPU: gpu devices do not exist
            _CUPY.append(None)
    return _CUPY[0]


def gpu_available():
    return _cupy() is not None


class RemoteDevice(Device):
    """A device of another task (process), as the chief's placement sees it: its kind and what it runs.
    Its partitions run in that task's process, on that task's own Device objects."""

    def __init__(self, name, kind):
        self.kind = kind
        self.speed = _CLASSES[kind].speed
        super().__init__(name)

    def supports(self, op):
        return self.kind == "cpu" or op not in HOST_ONLY_OPS


_CLASSES = {"cpu": CPUDevice, "gpu": GPUDevice, "accel": AccelDevice, "strict": StrictDevice}


class DeviceSet:
    """The devices one Session may use, created on first use.

    memory_caps: {"accel:0": bytes, ...} capacities (accel default 256 MiB);
    track_memory: also account bytes on cpu devices (for peak reports).
    """

    def __init__(self, memory_caps=None, track_memory=False):
        self.caps = {}
        for k, v in (memory_caps or {}).items():
            self.caps[canonical_name(k)] = None if v is None else int(v)
        self.track = bool(track_memory)
        self.devices = {}
        self._refs = weakref.WeakValueDictionary()

    def exists(self, name):
        task, local = split_task(name)
        kind, idx = local.split(":")
        idx = int(idx)
        if task is not None:      # another process's device: that task checks it when the graph arrives
            return idx < (NUM_ACCELS if kind == "accel" else NUM_CPUS if kind == "cpu" else
                          NUM_STRICT if kind == "strict" else 64)
        if kind == "cpu":
            return idx < NUM_CPUS or name in self.caps
        if kind == "accel":
            return idx < NUM_ACCELS or name in self.caps
        if kind == "strict":
            return idx < NUM_STRICT
        cp = _cupy()
        return cp is not None and idx < cp.cuda.runtime.getDeviceCount()

    def get(self, name, node=None):
        name = canonical_name(name, node)
        d = self.devices.get(name)
        if d is None:
            if not self.exists(name):
                hint = " (gpu devices need cupy and a CUDA GPU)" if name.startswith("gpu") else ""
                raise DfcGraphError(f"device {name} does not exist{hint}; available: "
                                    f"cpu:0..cpu:{NUM_CPUS - 1}, accel:0..accel:{NUM_ACCELS - 1}, "
                                    f"strict:0..strict:{NUM_STRICT - 1}", node=node)
            task, local = split_task(name)
            kind = local.split(":")[0]
            cap = self.caps.get(name, DEFAULT_ACCEL_CAPACITY if kind == "accel" else None)
            if task is not None:
                d = self.devices[name] = RemoteDevice(name, kind)
            else:
                d = self.devices[name] = _CLASSES[kind](name, cap, self.track)
        return d

    def memory_stats(self):
        return {n: d.memory_stats() for n, d in sorted(self.devices.items()) if d.memory is not None}
