"""A memory limit for one Session: DfcOutOfMemory instead of growing without bound.

`Session(graph, memory_limit="2GB")` (or `dfc run --memory-limit 2GB`) caps the
bytes of arrays the session's kernels hold at once, on every device. Accelerator
devices already account every tensor exactly (dfc/runtime/devices.py); doing
that on cpu devices would cost a reference count per edge and turn loop fusion
off. The limit is enforced more cheaply, by wrapping kernels when a limit is
set (no cost otherwise):

- before a kernel allocates an array that can outgrow its inputs (its size comes
  from input values or from how shapes combine: Fill, Range, OneHot, random,
  BroadcastTo, Pad, Einsum, MatMul, index arrays, a broadcasting binary op, ...),
  the size it will allocate is checked against the bytes still free;
- every array a kernel returns of at least TRACK_BYTES is counted until it is
  garbage collected (a weakref finalizer), so values held anywhere (loop
  variables, stacks, TensorArrays, Variables) add up;
- each push onto a stack or write into a TensorArray is counted until the end
  of the run (its KernelContext is collected), so a loop that keeps saving
  small values also hits the limit.

numpy's own MemoryError (and "array is too big") in any kernel also becomes
DfcOutOfMemory naming the node.
"""
import fractions
import math
import re
import threading
import weakref

import numpy as np

from dfc.errors import DfcError, DfcOutOfMemory, DfcRuntimeError
from dfc.ir import ops as opreg
from dfc.runtime.devices import is_device_array
from dfc.runtime.kernels.registry import host
from dfc.runtime.rendezvous import Aborted

TRACK_BYTES = 1024        # smaller arrays are not followed one by one (their count is bounded by the graph)
# What a run holds besides its arrays, by kind (named in DfcOutOfMemory), and what one entry of each costs
# besides its array
SAVED = "stack and TensorArray entries"
SENT = "values sent ahead of their Recv"
_OVERHEAD = {SAVED: 64,       # a stack or TensorArray entry
             SENT: 2048}      # the rendezvous entry and the iteration that made the value
_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_bytes(value):
    """2000000000, "2GB" (powers of 1000) or "2GiB" (powers of 1024) -> an int number of bytes."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        n = int(value)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*", value) if isinstance(value, str) else None
        if not m or m.group(2).lower() not in _UNITS:
            raise DfcError(f"memory_limit {value!r} is not a size; give bytes (2000000000) or a number with a "
                           f"unit KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), e.g. '2GB'")
        n = int(fractions.Fraction(m.group(1)) * _UNITS[m.group(2).lower()])
    if n <= 0:
        raise DfcError(f"memory_limit {value!r} must be at least one byte")
    return n


class MemoryLimit:
    """The bytes one Session's kernels hold, checked against `limit`; thread-safe."""

    def __init__(self, limit):
        self.limit = parse_bytes(limit)
        self.lock = threading.RLock()     # a finalizer may run while the lock is held
        self.counted = {}                 # id(array) -> bytes, while the array lives
        self.in_use = self.peak = 0
        self.run_bytes = 0          # stack and TensorArray entries and sent values of the runs in progress
        self.runs = {}              # id(kernel context of a run) -> {kind: its part of run_bytes}

    @staticmethod
    def of(limit):
        return None if limit is None else MemoryLimit(limit)

    def _over(self, node, op, nbytes):
        """The error for op passing the limit, with what holds the memory: which kernel trips it is chance when
        other threads fill it. Called with the lock held, at the check, so the figures are the ones that
        passed the limit (another thread may free some right after)."""
        held = {kind: sum(run.get(kind, 0) for run in self.runs.values()) for kind in _OVERHEAD}
        parts = [f"{self.in_use} in arrays"] + [f"{n} in {kind}" for kind, n in held.items() if n]
        total = f"{self.in_use + self.run_bytes} bytes in use: {', '.join(parts)}"
        need = f"needs {nbytes} bytes" if nbytes else "ran"
        return DfcOutOfMemory(f"{op} {need}, past the memory limit of {self.limit} bytes ({total})", node=node)

    def reserve(self, nbytes, node, op):
        """Raise DfcOutOfMemory if `nbytes` more would pass the limit (before allocating them)."""
        if self.in_use + self.run_bytes + nbytes > self.limit:
            with self.lock:     # the message's figures, as they are now
                over = self._over(node, op, nbytes)
            raise over

    def track(self, v, node, op):
        """Count array v (numpy, or a GPU's device array) until it is collected."""
        if type(v) is not np.ndarray and not is_device_array(v):
            return
        b = v
        while isinstance(b.base, np.ndarray) or is_device_array(b.base):
            b = b.base
        n = b.nbytes
        if n < TRACK_BYTES or id(b) in self.counted:     # an Identity passes on a counted array
            return
        with self.lock:
            if id(b) in self.counted:
                return
            self.counted[id(b)] = n
            self.in_use += n
            self.peak = max(self.peak, self.in_use)
            over = self._over(node, op, n) if self.in_use + self.run_bytes > self.limit else None
        try:
            weakref.finalize(b, self._free, id(b))
        except TypeError:       # an array type without weak references: count it for this call only
            self._free(id(b))
        if over is not None:
            raise over

    def _free(self, key):
        with self.lock:
            self.in_use -= self.counted.pop(key, 0)

    def add_entry(self, v, ctx, node, op, kind=SAVED):
        """A value saved on a stack or in a TensorArray (or sent and not yet received): counted until it is
        taken back or the run (`ctx`: its kernel context, or its partitions' coordinator) ends."""
        n, key = _entry_bytes(v, kind), id(ctx)
        with self.lock:
            new = key not in self.runs
            run = self.runs.setdefault(key, {})
            run[kind] = run.get(kind, 0) + n
            self.run_bytes += n
            over = self._over(node, op, n) if self.in_use + self.run_bytes > self.limit else None
        if new:
            weakref.finalize(ctx, self._end_run, key)
        if over is not None:
            raise over

    def drop_entry(self, v, ctx, kind=SAVED):
        n = _entry_bytes(v, kind)
        with self.lock:
            run = self.runs.get(id(ctx), {})
            if run.get(kind, 0) >= n:
                run[kind] -= n
                self.run_bytes -= n

    def _end_run(self, key):
        with self.lock:
            self.run_bytes -= sum(self.runs.pop(key, {}).values())


def _entry_bytes(v, kind):
    nbytes = getattr(v, "nbytes", 0)
    return _OVERHEAD[kind] + (nbytes if nbytes < TRACK_BYTES else 0)     # larger arrays are tracked already


# ------------------------------------------------------------------ what a kernel will allocate


# Kernel inputs may be device arrays (cupy refuses np.asarray of them): sizes come from .shape / .dtype,
# and values (a shape, a range's bounds) through an explicit copy, host().

def _prod(shape):
    return math.prod(int(d) for d in host(shape).reshape(-1))


def _itemsize(dtype):
    return np.dtype(dtype).itemsize


def _dtype(x):
    """The dtype of kernel input x (an array on any device, a numpy or a Python scalar), read without
    converting a device array to numpy (cupy refuses that)."""
    dtype = getattr(x, "dtype", None)
    return dtype if dtype is not None else np.asarray(x).dtype


def _isz(x):
    """Bytes per element of kernel input x."""
    return _dtype(x).itemsize


def _shape(x):
    return tuple(getattr(x, "shape", ()))


def _size(x):
    return math.prod(_shape(x))


def _broadcast(node, a):
    shapes = [_shape(x) for x in a]
    if all(s == shapes[0] for s in shapes):
        return 0      # no bigger than an input, which is already counted
    try:
        out = np.broadcast_shapes(*shapes)
    except ValueError:
        return 0      # the kernel reports it
    return math.prod(out) * max(_isz(x) for x in a)


def _matmul(node, a):
    x, y = _shape(a[0]), _shape(a[1])
    if len(x) < 2 or len(y) < 2:
        return 0
    at, bt = node.attrs["transpose_a"], node.attrs["transpose_b"]
    n, m = x[-1] if at else x[-2], y[-2] if bt else y[-1]
    try:
        batch = np.broadcast_shapes(x[:-2], y[:-2])
    except ValueError:
        return 0
    return math.prod(batch) * n * m * _isz(a[0])


def _gather(node, a):
    p = a[0]
    if not _shape(p):
        return 0
    axis = node.attrs["axis"] % len(p.shape)
    return _size(a[1]) * (p.nbytes // max(p.shape[axis], 1))


def _pad(node, a):
    p, shape = node.attrs["paddings"], _shape(a[0])
    if len(p) != 2 * len(shape):
        return 0      # the kernel reports it
    return math.prod(n + p[2 * i] + p[2 * i + 1] for i, n in enumerate(shape)) * _isz(a[0])


def _einsum(node, a):
    shape = opreg.einsum_shape(node.attrs["equation"], [_shape(x) for x in a])
    return math.prod(shape) * np.result_type(*[_dtype(x) for x in a]).itemsize


def _take_along_axis(node, a):
    shape = opreg.take_along_axis_shape(_shape(a[0]), _shape(a[1]), node.attrs["axis"])
    return math.prod(shape) * _isz(a[0])


def _solve(node, a):
    x, y = _shape(a[0]), _shape(a[1])
    batch = np.broadcast_shapes(x[:-2], y[:-2])
    return math.prod(batch) * (math.prod(x[-2:]) + math.prod(y[-2:])) * _isz(a[1])    # a's copy, the result


def _getitem(node, a):
    """An upper bound of what x[index] allocates: nothing for basic indexing (a view); with index arrays,
    their broadcast size (a boolean mask: its size) times the largest dimensions of x they and the ints
    leave (a slice keeps at most its dimension)."""
    spec, dyn, shape = node.attrs["spec"], a[1:], _shape(a[0])
    index = [dyn[item[1]] for item in spec if item[0] == "tensor"]
    if not any(_shape(x) for x in index):
        return 0
    is_mask = [getattr(x, "dtype", None) == np.bool_ for x in index]
    taken = sum(item[0] == "int" for item in spec) + sum(
        len(_shape(x)) if mask else 1 for x, mask in zip(index, is_mask) if _shape(x) or not mask)
    ints = [_shape(x) for x, mask in zip(index, is_mask) if not mask]
    fancy = math.prod(np.broadcast_shapes(*ints)) if ints else 1
    masks = math.prod(_size(x) for x, mask in zip(index, is_mask) if mask)
    return fancy * masks * math.prod(sorted(shape)[taken:]) * _isz(a[0])


_REQUESTS = {
    "Fill": lambda node, a: _prod(a[0]) * _isz(a[1]),
    "Range": lambda node, a: opreg.range_length(*[host(x).reshape(())[()] for x in a]) * _isz(a[0]),
    "OneHot": lambda node, a: _size(a[0]) * max(node.attrs["depth"], 1) * (1 + _itemsize(node.attrs["dtype"])),
    "RandomUniform": lambda node, a: _prod(a[0]) * (8 + _itemsize(node.attrs["dtype"])),
    "RandomNormal": lambda node, a: _prod(a[0]) * (8 + _itemsize(node.attrs["dtype"])),
    "BroadcastTo": lambda node, a: _prod(a[1]) * _isz(a[0]),   # its users materialize it
    "GetItemGrad": lambda node, a: _prod(a[1]) * _isz(a[0]),
    "ScatterAdd": lambda node, a: _prod(a[0]) * _isz(a[2]),
    "ZerosLike": lambda node, a: _size(a[0]) * _isz(a[0]),
    "OnesLike": lambda node, a: _size(a[0]) * _isz(a[0]),
    "Concat": lambda node, a: sum(getattr(x, "nbytes", 8) for x in a),
    "Stack": lambda node, a: sum(getattr(x, "nbytes", 8) for x in a),
    "MatMul": _matmul,
    "Pad": _pad,
    "Einsum": _einsum,
    "TakeAlongAxis": _take_along_axis,
    "TakeAlongAxisGrad": lambda node, a: _prod(a[1]) * _isz(a[0]),
    "MatrixSolve": _solve,
    "GetItem": _getitem,
    "Gather": _gather,
    "TensorArray": lambda node, a: int(a[0]) * 8,
    "TensorArrayWrite": lambda node, a: max(0, int(a[1]) - len(a[0].items)) * 8,
    "TensorArrayScatter": lambda node, a: max(0, int(np.max(host(a[1]), initial=-1)) - len(a[0].items)) * 8,
}
for _name, _op in opreg.REGISTRY.items():
    if _op.inputs in (("x", "y"), ("cond", "x", "y")):     # elementwise ops that broadcast
        _REQUESTS[_name] = _broadcast
_ENTRIES = {"StackPush": 1, "TensorArrayWrite": 2}


def request_bytes(node, a):
    """The bytes the kernel of `node` will allocate on inputs `a` beyond what they hold already (an upper bound
    for the ops whose output can outgrow their inputs; 0 for the others, and for inputs the kernel refuses)."""
    request = _REQUESTS.get(node.op)
    if request is None:
        return 0
    try:
        return request(node, a)
    except Exception:   # noqa: BLE001 — bad inputs: the kernel itself reports them
        return 0


def limit_kernel(node, kern, limit):
    """`kern` checked against `limit`: what it will allocate before, what it returns after."""
    request = _REQUESTS.get(node.op)
    entry = _ENTRIES.get(node.op)
    name, op = node.name, node.op

    def checked(ctx, a):
        if request is not None:
            limit.reserve(request_bytes(node, a), name, op)
        outs = kern(ctx, a)
        if entry is not None:
            limit.add_entry(a[entry], ctx, name, op)
        elif op == "StackPop":
            limit.drop_entry(outs[0], ctx)
        for v in outs:
            limit.track(v, name, op)
        return outs

    f = getattr(kern, "direct", None)
    if f is not None and request is None and entry is None:
        def direct(*a):
            v = f(*a)
            limit.track(v, name, op)
            return v
        checked.direct = direct
    return checked


# ------------------------------------------------------------------ kernel errors


def kernel_error(node, e):
    """The DfcError to raise for exception `e` from the kernel of `node` (a partition's Aborted stays)."""
    if isinstance(e, Aborted):
        return e
    if isinstance(e, DfcError):
        if e.node is None:
            return type(e)(e.message, node=node.name, loc=e.loc or node.loc)
        return e
    if isinstance(e, MemoryError) or (isinstance(e, ValueError) and _TOO_BIG.search(str(e))) or \
            _DEVICE_OOM.search(f"{type(e).__name__}: {e}"):
        # cupy.cuda.memory.OutOfMemoryError (a MemoryError) or a CUDA library's allocation failure. The
        # kernel's frames hold its inputs: drop them so the device memory is free for the next run.
        e.__traceback__ = None
        return DfcOutOfMemory(f"{node.op}: out of memory ({type(e).__name__}: {e})"[:500], node=node.name,
                              loc=node.loc)
    return DfcRuntimeError(f"{node.op} failed: {type(e).__name__}: {e}"[:2000], node=node.name, loc=node.loc)


_DEVICE_OOM = re.compile(r"OutOfMemoryError|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|"
                         r"CUDNN_STATUS_ALLOC_FAILED|CUSOLVER_STATUS_ALLOC_FAILED")
_TOO_BIG = re.compile(r"array is too big|maximum (allowed|supported) (size|dimension)|too large", re.I)
