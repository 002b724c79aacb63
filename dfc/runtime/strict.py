"""A strict stand-in for cupy: device `strict:N` catches host/device mix-ups on a machine without a GPU.

It mirrors the parts of cupy that dfc relies on, and is as strict as cupy where cupy is strict:

- `StrictArray` keeps its data in a private numpy array ("device memory"). `np.asarray(a)` raises
  TypeError like cupy (`__array__`), and so does any numpy function or ufunc applied to it
  (`__array_function__` / `__array_ufunc__`; cupy would dispatch those, the double refuses so that
  kernels use `xp`). `a.get()`, `xp.asnumpy(a)` are explicit device-to-host copies; `bool()`, `int()`,
  `float()`, `operator.index()`, `item()`, `tolist()` and `repr()` of an array work and count as a
  device-to-host synchronisation (cupy synchronises for them too).
- The module `xp` (this module's `xp`) wraps numpy's functions and ufuncs: device arrays in, device
  arrays out (0-d arrays where numpy gives scalars, as cupy does). A numpy array argument is a
  TypeError (cupy: "Unsupported type"); `xp.asarray(numpy_array)` is the explicit host-to-device copy.
  An array of another device is a ValueError, as in cupy.
- Streams and events (`xp.cuda.Stream`, `Event`, `Device`, `get_current_stream`) model ordering: every
  array remembers the stream position that produced it. Using it in a kernel, copying it to host or
  to another device on a stream that neither is its producer's stream nor has waited on an event
  recorded after it (nor seen it synchronised) raises `StreamOrderError`. Non-blocking streams are
  ordered only by events; the null stream and blocking streams are ordered with each other.
- Memory: every buffer counts against its device's pool (`xp.get_default_memory_pool()`: used_bytes,
  set_limit...) until garbage collected; past the limit allocation raises
  `xp.cuda.memory.OutOfMemoryError` (a MemoryError, like cupy's).

`stats` counts transfers per device: "d2h" (explicit copies to host), "sync" (implicit ones: bool,
int, float, item...), "h2d", "peer". `reset_stats()` zeroes them.
"""
import operator
import threading
import types
import weakref

import numpy as np

NUM_DEVICES = 4
DEFAULT_CAPACITY = 1 << 30


class StreamOrderError(RuntimeError):
    """A device array was read on a stream that is not ordered after the work that produced it."""


class OutOfMemoryError(MemoryError):
    """Allocation past a device's pool limit (cupy.cuda.memory.OutOfMemoryError)."""


_local = threading.local()
_lock = threading.Lock()
stats = {}


def reset_stats():
    with _lock:
        for d in range(NUM_DEVICES):
            stats[d] = {"d2h": 0, "sync": 0, "h2d": 0, "peer": 0}


reset_stats()


def _count(dev, what):
    with _lock:
        stats[dev][what] += 1


# ---------------------------------------------------------------------------------- devices, streams, events

class Device:
    """cupy.cuda.Device: a context manager making device `id` current in this thread."""

    def __init__(self, device=None):
        self.id = _current() if device is None else int(device)
        if not 0 <= self.id < NUM_DEVICES:
            raise ValueError(f"invalid device {self.id}")

    def __enter__(self):
        _local.__dict__.setdefault("devices", []).append(self.id)
        return self

    def __exit__(self, *exc):
        _local.devices.pop()
        return False

    def synchronize(self):
        for s in list(_streams[self.id]):
            s.synchronize()


def _current():
    devs = getattr(_local, "devices", None)
    return devs[-1] if devs else 0


_streams = {d: weakref.WeakSet() for d in range(NUM_DEVICES)}


class Stream:
    """cupy.cuda.Stream: work queued in order; `seq` counts the operations queued so far."""

    def __init__(self, null=False, non_blocking=False, device=None):
        self.device = _current() if device is None else device
        self.non_blocking = bool(non_blocking) and not null
        self.seq = self.completed = 0
        self.waited = {}          # stream -> the last of its positions this stream is ordered after
        self.reuse_hazards = []   # (stream, position): reads pending on blocks freed back to this stream's pool
        _streams[self.device].add(self)

    def __hash__(self):
        return id(self)

    def __reduce__(self):       # cupy's streams do not pickle: one cannot be sent to another process
        raise TypeError("a cupy.cuda.Stream cannot be pickled")

    def launch(self):
        self.seq += 1
        return self.seq

    def __enter__(self):
        _local.__dict__.setdefault("streams", []).append(self)
        return self

    def __exit__(self, *exc):
        _local.streams.pop()
        return False

    def wait_event(self, event):
        if event.stream is not None:
            for s, n in event.covers.items():
                if self.waited.get(s, 0) < n:
                    self.waited[s] = n

    def record(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def synchronize(self):
        _complete(self, self.seq, dict(self.waited))


def _complete(stream, seq, waited):
    stream.completed = max(stream.completed, seq)
    for s, n in waited.items():
        s.completed = max(s.completed, n)


class Event:
    """cupy.cuda.Event: a position in a stream (and everything that stream was ordered after)."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.stream, self.covers = None, {}

    def __reduce__(self):       # cupy's events do not pickle either (a Sent must cross processes as host data)
        raise TypeError("a cupy.cuda.Event cannot be pickled")

    def record(self, stream=None):
        stream = stream or get_current_stream()
        self.stream = stream
        self.covers = dict(stream.waited)
        self.covers[stream] = stream.seq

    def synchronize(self):
        if self.stream is not None:
            _complete(self.stream, self.covers[self.stream], self.covers)

    @property
    def done(self):
        return True


_null = {}


def get_current_stream():
    """This thread's current stream on the current device (its null stream unless one is entered)."""
    dev = _current()
    for s in reversed(getattr(_local, "streams", ())):
        if s.device == dev:
            return s
    s = _null.get(dev)
    if s is None:
        s = _null[dev] = Stream(null=True, device=dev)
    return s


def _ready(a, stream):
    p = a._stream
    if p is stream or a._seq <= p.completed:
        return True
    if not p.non_blocking and not stream.non_blocking:
        return True
    return stream.waited.get(p, 0) >= a._seq


def _check_ready(a, stream, what):
    if not _ready(a, stream):
        p = a._stream
        raise StreamOrderError(f"{what} reads an array of device {a._dev} produced on another stream with no "
                               f"event waited on after it (a race on a real GPU): {a.dtype}{list(a.shape)}, "
                               f"operation {a._seq} of a {'non-' if p.non_blocking else ''}blocking stream "
                               f"done up to {p.completed}")


# ---------------------------------------------------------------------------------- memory
# cupy's pool hands a freed block to the next allocation on the stream that allocated it, knowing nothing of
# other streams: a block freed while another stream's queued work may still read it can be overwritten by
# the allocating stream's next array (PyTorch's record_stream exists for this); and an array allocated on one
# stream but written by another may be a block the allocating stream's queued work still uses. The double
# records the reads of each block by other streams and refuses both orders a real GPU would race on.

def _block(a):
    return a if a._owner is None else a._owner


def _note_read(a, stream):
    b = _block(a)
    if stream is not b._pool_stream:
        b._reads[stream] = stream.seq + 1         # the read is the stream's next operation


def _unsafe(alloc, reader, pos):
    return reader.completed < pos and alloc.waited.get(reader, 0) < pos


def _release(dev, n, alloc, reads):
    _pool._free(dev, n)
    pending = [(t, pos) for t, pos in reads.items() if _unsafe(alloc, t, pos)]
    if pending:
        alloc.reuse_hazards += pending


def _allocate(arr, stream, born):
    """arr's block, from `stream`'s pool: refused if it may be a block another stream may still read; arr's
    reads by other streams are recorded, and checked when it is freed. `born`: the allocating stream's work
    before it (other streams write into arr only after that)."""
    _check_reuse(stream)
    arr._pool_stream, arr._born, arr._reads = stream, born, {}
    weakref.finalize(arr, _release, arr._dev, _pool._malloc(arr._dev, arr._a.nbytes), stream, arr._reads)


def _check_reuse(stream):
    if stream.reuse_hazards:
        hazards, stream.reuse_hazards = stream.reuse_hazards, []
        bad = [(t, pos) for t, pos in hazards if _unsafe(stream, t, pos)]
        if bad:
            t, pos = bad[0]
            raise StreamOrderError(f"an array allocated on a stream may reuse the memory of an array freed while "
                                   f"another stream's operation {pos} (done up to {t.completed}) may still read "
                                   f"it (a race on a real GPU: cupy's pool reuses freed blocks per stream)")


def _check_write(a, stream):
    b = _block(a)
    alloc = b._pool_stream
    if stream is not alloc and alloc.completed < b._born and stream.waited.get(alloc, 0) < b._born:
        raise StreamOrderError("a stream writes an array allocated on another stream without waiting for the "
                               "work that stream queued before the allocation (a race on a real GPU: the block "
                               "may be one that work still uses)")


class MemoryPool:
    """cupy's default memory pool, per device: bytes in use, and a limit (the device's capacity)."""

    def __init__(self):
        self.used = [0] * NUM_DEVICES
        self.limit = [DEFAULT_CAPACITY] * NUM_DEVICES

    def used_bytes(self):
        return self.used[_current()]

    def total_bytes(self):
        return self.used[_current()]

    def free_bytes(self):
        return 0

    def get_limit(self):
        return self.limit[_current()]

    def set_limit(self, size=None, fraction=None):
        self.limit[_current()] = DEFAULT_CAPACITY if not size else int(size)

    def free_all_blocks(self, stream=None):
        pass

    def _malloc(self, dev, n):
        n = (n + 511) // 512 * 512
        with _lock:
            if self.used[dev] + n > self.limit[dev]:
                raise OutOfMemoryError(f"Out of memory allocating {n:,} bytes (allocated so far: "
                                       f"{self.used[dev]:,} bytes, limit set to: {self.limit[dev]:,} bytes).")
            self.used[dev] += n
        return n

    def _free(self, dev, n):
        with _lock:
            self.used[dev] -= n


_pool = MemoryPool()


def get_default_memory_pool():
    return _pool


class _MemoryPointer:
    """ndarray.data: enough of cupy's MemoryPointer for device-to-device copies."""

    def __init__(self, arr):
        self.arr = arr
        self.device_id = arr._dev

    def copy_from_device_async(self, src, size, stream=None):
        dst, src = self.arr, src.arr
        stream = stream or get_current_stream()
        _check_ready(src, stream, "a device-to-device copy")
        _check_write(dst, stream)
        _note_read(src, stream)
        same = ((src._a.flags.c_contiguous and dst._a.flags.c_contiguous)
                or (src._a.flags.f_contiguous and dst._a.flags.f_contiguous))
        if size != src.nbytes or size != dst.nbytes or not same or src.shape != dst.shape:
            raise ValueError("copy_from_device_async of a whole contiguous buffer into one of the same layout only")
        dst._a[...] = src._a
        dst._stream, dst._seq = stream, stream.launch()
        if src._dev != dst._dev:
            _count(dst._dev, "peer")


# ---------------------------------------------------------------------------------- arrays

_IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a NumPy "
             "array explicitly.")


class StrictArray:
    """A device array of the strict double (see the module docstring)."""
    __slots__ = ("_a", "_dev", "_stream", "_seq", "_owner", "_pool_stream", "_born", "_reads", "__weakref__")
    __array_priority__ = 100
    __array_ufunc__ = None      # numpy ufuncs refuse device arrays (use xp.<ufunc>)
    __hash__ = None
    __dfc_device_array__ = True

    def __init__(self, a, dev, stream, owner=None):
        self._a, self._dev, self._owner = a, dev, owner
        if owner is not None:       # a view: no work queued, ready when its owner's last writer is
            self._stream, self._seq = owner._stream, owner._seq
        else:
            _allocate(self, stream, stream.seq)
            self._stream, self._seq = stream, stream.launch()

    def __array__(self, *args, **kwargs):
        raise TypeError(_IMPLICIT)

    def __array_function__(self, func, types, args, kwargs):
        raise TypeError(f"numpy.{func.__name__} called on a device array (use the kernel's array module `xp`)")

    # attributes
    shape = property(lambda self: self._a.shape)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    dtype = property(lambda self: self._a.dtype)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    base = property(lambda self: self._owner)
    data = property(lambda self: _MemoryPointer(self))
    device = property(lambda self: Device(self._dev))
    T = property(lambda self: self.transpose())

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    # transfers
    def get(self, stream=None, order="C", out=None, blocking=True):
        stream = stream or _on(self._dev, get_current_stream)
        _check_ready(self, stream, "a device-to-host copy")
        _count(self._dev, "d2h")
        if blocking:        # cupy synchronizes the stream it copied on
            stream.synchronize()
        return np.array(self._a, copy=True)

    def __reduce__(self):       # as cupy's: the data pickles as a host copy, and unpickles onto the current device
        return asarray, (self.get(),)

    def set(self, arr, stream=None):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, got {type(arr)}")
        stream = stream or _on(self._dev, get_current_stream)
        _check_write(self, stream)
        self._a[...] = arr
        self._stream, self._seq = stream, stream.launch()
        _count(self._dev, "h2d")

    def _sync(self):
        _check_ready(self, _on(self._dev, get_current_stream), "an implicit device-to-host transfer")
        _count(self._dev, "sync")
        return self._a

    def __bool__(self):
        a = self._sync()
        return False if a.size == 0 else bool(a)     # as cupy's: an empty array is False (numpy raises)

    def __int__(self):
        return int(self._sync())

    def __float__(self):
        return float(self._sync())

    def __complex__(self):
        return complex(self._sync())

    def __index__(self):
        return operator.index(self._sync())

    def item(self, *args):
        return self._sync().item(*args)

    def tolist(self):
        return self._sync().tolist()

    def __repr__(self):     # for debuggers and test reports: reads the data without ordering checks
        return f"array({np.array2string(self._a, separator=', ')}, device=strict:{self._dev})"

    __str__ = __repr__

    # indexing
    def __getitem__(self, idx):
        r = self._a[_unwrap_index(idx, self._dev)]
        return _wrap(r, self._dev, get_current_stream(), self)

    def __setitem__(self, idx, value):
        dev, s = _use(self)
        self._a[_unwrap_index(idx, dev)] = _unwrap(value, dev, s)
        self._stream, self._seq = s, s.launch()

    # methods
    def astype(self, dtype, copy=True, **kw):
        return _call(lambda a: a.astype(dtype, copy=True), (self,), {})

    def copy(self, order="C"):
        """A copy on the *current* device (cupy: copies between devices too)."""
        s = get_current_stream()
        _check_ready(self, s, "copy")
        if self._dev != _current():
            _count(_current(), "peer")
        return StrictArray(self._a.copy(order=order), _current(), s)

    def fill(self, value):
        self[...] = value


def _on(dev, fn):
    with Device(dev):
        return fn()


def _method(name):
    return lambda self, *a, **k: _call(lambda x, *a2, **k2: getattr(x, name)(*a2, **k2), (self,) + a, k,
                                       view_of=self)


for _m in ("reshape", "transpose", "swapaxes", "ravel", "squeeze", "view", "flatten", "sum", "prod", "mean",
           "max", "min", "all", "any", "argmax", "argmin", "cumsum", "clip", "round", "dot", "nonzero"):
    setattr(StrictArray, _m, _method(_m))
_BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide", "floordiv": "floor_divide",
           "mod": "remainder", "pow": "power", "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or",
           "xor": "bitwise_xor", "lshift": "left_shift", "rshift": "right_shift"}
for _d, _f in _BINARY.items():
    setattr(StrictArray, f"__{_d}__", (lambda f: lambda s, o: _call(getattr(np, f), (s, o), {}))(_f))
    setattr(StrictArray, f"__r{_d}__", (lambda f: lambda s, o: _call(getattr(np, f), (o, s), {}))(_f))
    setattr(StrictArray, f"__i{_d}__", (lambda f: lambda s, o: _call(getattr(np, f), (s, o), {"out": s}))(_f))
for _d, _f in {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
               "ge": "greater_equal"}.items():
    setattr(StrictArray, f"__{_d}__", (lambda f: lambda s, o: _call(getattr(np, f), (s, o), {}))(_f))
for _d, _f in {"neg": "negative", "pos": "positive", "abs": "absolute", "invert": "invert"}.items():
    setattr(StrictArray, f"__{_d}__", (lambda f: lambda s: _call(getattr(np, f), (s,), {}))(_f))


# ---------------------------------------------------------------------------------- calling numpy

def _use(a):
    """(device, stream) for an operation on `a`, which must live on the current device."""
    dev = _current()
    if a._dev != dev:
        raise ValueError(f"Array device must be same as the current device: array device = {a._dev} while "
                         f"current = {dev}")
    s = get_current_stream()
    _check_ready(a, s, "a kernel")
    _note_read(a, s)
    return dev, s


def _unwrap(x, dev, s):
    if isinstance(x, StrictArray):
        _use(x)
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(f"Unsupported type {type(x)}")
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v, dev, s) for v in x)
    return x


def _unwrap_index(idx, dev):
    s = get_current_stream()
    if isinstance(idx, tuple):
        return tuple(_unwrap_index(i, dev) for i in idx)
    if isinstance(idx, StrictArray):
        return _unwrap(idx, dev, s)
    return idx          # ints, slices, None, Ellipsis; numpy index arrays are accepted, as by cupy


def _wrap(r, dev, s, view_of=None):
    if isinstance(r, np.ndarray):
        owner = None
        if view_of is not None and r.base is not None and np.may_share_memory(r, view_of._a):
            owner = view_of if view_of._owner is None else view_of._owner
        return StrictArray(r, dev, s, owner)
    if isinstance(r, np.generic):
        return StrictArray(np.asarray(r), dev, s)
    if isinstance(r, (list, tuple)):     # numpy's named tuples (slogdet, eigh, qr) are plain ones in cupy
        return (list if isinstance(r, list) else tuple)(_wrap(v, dev, s, view_of) for v in r)
    return r


def _call(fn, args, kwargs, view_of=None):
    dev, s = _current(), get_current_stream()
    out = kwargs.get("out")
    a = _unwrap(args, dev, s)
    k = {key: _unwrap(v, dev, s) for key, v in kwargs.items()}
    r = fn(*a, **k)
    if isinstance(out, StrictArray):
        out._stream, out._seq = s, s.launch()
        return out
    if view_of is None:     # functions that may return views of an argument (reshape, transpose, ...)
        view_of = next((x for x in args if isinstance(x, StrictArray)), None)
    return _wrap(r, dev, s, view_of)


class _Ufunc:
    def __init__(self, uf):
        self.uf, self.__name__ = uf, uf.__name__

    def __call__(self, *args, **kwargs):
        return _call(self.uf, args, kwargs)

    def at(self, a, indices, b=None):
        dev, s = _use(a)
        self.uf.at(a._a, _unwrap_index(indices, dev), *(() if b is None else (_unwrap(b, dev, s),)))
        a._stream, a._seq = s, s.launch()

    def reduce(self, *args, **kwargs):
        return _call(self.uf.reduce, args, kwargs)


def asarray(a, dtype=None, order=None):
    """Device array of `a`: a host value is copied to the current device (an explicit transfer)."""
    if isinstance(a, StrictArray):
        _use(a)
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    if _has_device_array(a):
        raise TypeError("a sequence of device arrays (stack them with xp.stack)")
    s = get_current_stream()
    _count(_current(), "h2d")
    return StrictArray(np.array(a, dtype=dtype, copy=True), _current(), s)


def _has_device_array(a):
    return isinstance(a, (list, tuple)) and any(isinstance(v, StrictArray) or _has_device_array(v) for v in a)


def array(a, dtype=None, copy=True, order="K", ndmin=0):
    if isinstance(a, StrictArray):
        return a.astype(dtype or a.dtype)
    return asarray(a, dtype)


def ascontiguousarray(a, dtype=None):
    return _call(lambda x: np.ascontiguousarray(x, dtype), (a,), {})


def asnumpy(a, stream=None):
    return a.get(stream=stream) if isinstance(a, StrictArray) else np.asarray(a)


class _Broadcast:
    """cupy.broadcast: the broadcast shape (and size, ndim) of device arrays; no iteration."""

    def __init__(self, *arrays):
        self.shape = np.broadcast_shapes(*(tuple(getattr(a, "shape", ())) for a in arrays))
        self.nd = self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))


_PASS = {"ndarray": StrictArray, "newaxis": None, "asarray": asarray, "array": array, "asnumpy": asnumpy,
         "ascontiguousarray": ascontiguousarray, "get_default_memory_pool": get_default_memory_pool,
         "broadcast": _Broadcast}
# numpy's submodules that cupy mirrors with device-array functions (cupy.linalg, cupy.fft)
_SUBMODULES = ("linalg", "fft")


class _Module(types.ModuleType):
    """The array module of a strict device: numpy's API on device arrays (attributes made on first use);
    `np_module` is the numpy module it mirrors (numpy, or numpy.linalg for `xp.linalg`)."""

    def __init__(self, name, np_module=np):
        super().__init__(name)
        self._np = np_module

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _PASS and self._np is np:
            return _PASS[name]
        if name in _SUBMODULES and self._np is np:
            v = _Module(f"{self.__name__}.{name}", getattr(np, name))
        else:
            v = getattr(self._np, name)
            if isinstance(v, np.ufunc):
                v = _Ufunc(v)
            elif callable(v) and not isinstance(v, type):
                v = (lambda f: lambda *a, **k: _call(f, a, k))(v)
        setattr(self, name, v)
        return v


xp = _Module("dfc.runtime.strict.xp")
xp.cuda = types.SimpleNamespace(
    Device=Device, Stream=Stream, Event=Event, get_current_stream=get_current_stream,
    memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
    runtime=types.SimpleNamespace(getDeviceCount=lambda: NUM_DEVICES,
                                  memGetInfo=lambda: (_pool.limit[_current()] - _pool.used[_current()],
                                                      _pool.limit[_current()])))


# ---------------------------------------------------------------------------------- fuse (one kernel per call)

class _FuseVar:
    """A value inside a function `fuse` runs: the data of one CUDA local, as numpy. Only what cupy.fuse
    accepts works on it: ufunc calls (`xp.add(a, b)`; Python scalars weak, as outside fuse), `xp.where`,
    `astype`, `dtype`/`shape`/`ndim`; anything else (other numpy functions, `out=`, `bool()`, indexing)
    raises like cupy's fusion, so code that runs here also fuses on cupy."""
    __slots__ = ("a",)
    __hash__ = None

    def __init__(self, a):
        self.a = np.asarray(a)

    dtype = property(lambda self: self.a.dtype)
    shape = property(lambda self: self.a.shape)
    ndim = property(lambda self: self.a.ndim)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise TypeError(f"fuse: only plain ufunc calls are supported, not {ufunc.__name__}.{method}"
                            f"({', '.join(kwargs)})")
        r = ufunc(*[_fuse_value(x) for x in inputs])
        return tuple(_FuseVar(v) for v in r) if isinstance(r, tuple) else _FuseVar(r)

    def __array_function__(self, func, types, args, kwargs):
        if func is not np.where or kwargs or len(args) != 3:
            raise TypeError(f"fuse: numpy.{func.__name__} is not supported in a fused function")
        return _FuseVar(np.where(*[_fuse_value(x) for x in args]))

    def astype(self, dtype, copy=True):
        return _FuseVar(self.a.astype(dtype))

    def __bool__(self):
        raise TypeError("Can't cast to bool")     # cupy's fusion: no branching on values

    def __array__(self, *args, **kwargs):
        raise TypeError("fuse: a fused value cannot become a numpy array")


def _fuse_value(x):
    if isinstance(x, _FuseVar):
        return x.a
    if isinstance(x, (bool, int, float, complex, np.generic)):
        return x
    raise TypeError(f"Unsupported type {type(x)} in a fused function")


fuse_stats = {"kernels": 0}       # fused kernels launched (all devices), for tests


class Fused:
    """cupy.fuse(func): calling it runs `func`'s elementwise ops as ONE kernel on the current stream: one
    launch (one stream position, `fuse_stats["kernels"]` + 1), outputs allocated in the pool, every
    output broadcast to the shape of all array arguments (as cupy's ElementwiseKernel does). Arguments:
    arrays of the current device (checked like any kernel's: device, stream order), Python or numpy
    scalars; a host numpy array is a TypeError. Without any device array, `func` is called as is (cupy
    too)."""

    def __init__(self, func, name=None):
        self.func, self.name = func, name or getattr(func, "__name__", "fused")

    def __call__(self, *args):
        if not any(isinstance(a, StrictArray) for a in args):
            return self.func(*args)
        dev, s = _current(), get_current_stream()
        vals, shapes = [], []
        for a in args:
            if isinstance(a, StrictArray):
                _use(a)
                vals.append(_FuseVar(a._a))
                shapes.append(a.shape)
            elif isinstance(a, (bool, int, float, complex, np.generic)) or a is None:
                vals.append(a)
            else:
                raise TypeError(f"Invalid argument type for '{self.name}': {type(a)}")
        r = self.func(*vals)
        outs = r if isinstance(r, tuple) else (r,)
        if not all(isinstance(o, _FuseVar) for o in outs):
            raise TypeError(f"Fusion function can't return {[type(o) for o in outs]}")
        full = np.broadcast_shapes(*shapes)
        seq = s.launch()
        res = []
        for o in outs:
            data = np.array(np.broadcast_to(o.a, full), copy=True)
            arr = StrictArray.__new__(StrictArray)      # all outputs of the one launch
            arr._a, arr._dev, arr._owner, arr._stream, arr._seq = data, dev, None, s, seq
            _allocate(arr, s, seq - 1)
            res.append(arr)
        with _lock:
            fuse_stats["kernels"] += 1
        return tuple(res) if isinstance(r, tuple) else res[0]


def fuse(*args, kernel_name=None):
    """cupy.fuse: `fuse(f)` or `@fuse()` / `@fuse(kernel_name=...)`."""
    if len(args) == 1 and callable(args[0]):
        return Fused(args[0], kernel_name)
    return lambda f: Fused(f, kernel_name)


xp.fuse = fuse
