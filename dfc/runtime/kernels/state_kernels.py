"""Stateful kernels: variables, stacks, TensorArrays, print, assert, checkpoints."""
import time

import numpy as np

from dfc.errors import DfcAssertionError, DfcRuntimeError
from dfc.runtime import checkpoints, containers
from dfc.runtime.kernels.registry import host, kernel

FLOW = np.float32(0.0)


@kernel("VarHandle")
def _var_handle(node, xp):
    """The Variable resource named by the node, found in (or added to) the run's container."""
    name, container = node.attrs["shared_name"], node.attrs.get("container", "")

    def f(ctx, a):
        return (ctx.container(container).variable(name, lambda: xp.asarray(a[0]), node=node.name).place(xp),)
    return f


@kernel("ReadVariable")
def _read(node, xp):
    return lambda ctx, a: (a[0].read(),)


@kernel("Assign", "AssignAdd", "AssignSub")
def _assign(node, xp):
    op = node.op
    return lambda ctx, a: (a[0].assign(xp.asarray(a[1]), op, node.name),)


@kernel("ApplyOnce")
def _apply_once(node, xp):
    """All of one step's updates of the Variables on one device, or none: one kernel, so no abort of the
    step (a dead worker) can fall between them (see ApplyOnce in dfc/ir/ops.py)."""
    ops = node.attrs["ops"]
    n, n_snap = len(ops), len(node.attrs.get("dtypes") or ())

    def f(ctx, a):
        record, step, rest = a[0], int(host(a[1])), a[2:]
        handles, values, snapshot = rest[:n], rest[n:2 * n], rest[2 * n:2 * n + n_snap]
        indices = iter(rest[2 * n + n_snap:])
        rows = [next(indices) if op.startswith("ResourceScatter") else None for op in ops]
        held = {id(r): r for r in [record, *handles, *snapshot]}
        locks = [held[k].lock for k in sorted(held)]      # one global order: no deadlock between two of them
        for lock in locks:
            lock.acquire()
        try:
            applied = int(host(record.value)) <= step
            if applied:
                for h, v, i in zip(handles, values, rows):
                    want = tuple(h.value.shape) if i is None else tuple(xp.shape(i)) + tuple(h.value.shape[1:])
                    if tuple(xp.shape(v)) != want:
                        raise DfcRuntimeError(f"cannot update variable {h.name!r} of shape {list(h.value.shape)} "
                                              f"with a value of shape {list(xp.shape(v))}", node=node.name)
                news = [containers.updated(h, xp.asarray(v), op, node.name) if i is None else
                        scattered(xp, h, xp.asarray(i), xp.asarray(v), op, node.name)
                        for h, v, op, i in zip(handles, values, ops, rows)]
                for h, v in zip(handles, news):        # every value checked before any is set
                    h.value = v
                record.value = containers.updated(record, xp.asarray(step + 1, record.value.dtype), "Assign",
                                                  node.name)
            return (np.bool_(applied),) + tuple(r.value for r in snapshot)
        finally:
            for lock in reversed(locks):
                lock.release()
    return f


def scattered(xp, h, idx, rows, op, where):
    """Variable h's value with `rows` added (ResourceScatterAdd) or subtracted at idx (in order, duplicates
    adding up): a new read-only array (whoever fetched the old value keeps it). The caller holds h's lock."""
    from dfc.runtime.kernels.array_kernels import check_indices
    if h.value.ndim == 0 or rows.dtype != h.value.dtype:
        raise DfcRuntimeError(f"cannot scatter {rows.dtype} rows to variable {h.name!r} of "
                              f"{h.value.dtype}{list(h.value.shape)}", node=where)
    check_indices(xp, idx, h.value.shape[0], op)
    new = h.value.copy()
    xp.add.at(new, idx, -rows if op == "ResourceScatterSub" else rows)     # a - b is a + (-b) exactly (IEEE)
    if isinstance(new, np.ndarray):
        new.flags.writeable = False
    return new


class Stack(list):
    """A gradient stack: forward pushes, backward pops (§5.1)."""
    __slots__ = ("swap",)


@kernel("StackV2")
def _stack_new(node, xp):
    swap = node.attrs.get("swap_memory", False)

    def f(ctx, a):
        s = Stack()
        s.swap = swap
        return (s,)
    return f


@kernel("StackPush")
def _push(node, xp):
    def f(ctx, a):
        a[0].append(a[1])
        return (a[1],)
    return f


@kernel("StackPop")
def _pop(node, xp):
    def f(ctx, a):
        if not a[0]:
            raise DfcRuntimeError("pop from an empty stack", node=node.name)
        return (a[0].pop(),)
    return f


class _Sum:
    """The contributions written to one element of an accumulating (gradient) TensorArray, summed in
    the order of their keys (writer node, frame tag, position): floating-point sums do not depend on
    the order in which the executor, fused loops or partitions happened to run the writes."""
    __slots__ = ("parts", "total")

    def __init__(self):
        self.parts, self.total = {}, None

    def add(self, key, v):
        if key in self.parts:
            v = self.parts[key] + v
        self.parts[key] = v
        self.total = None

    def value(self):
        if self.total is None:
            vals = [self.parts[k] for k in sorted(self.parts)]
            total = vals[0]
            for v in vals[1:]:
                total = total + v
            self.total = total
        return self.total


class TensorArrayStore:
    """The storage behind a TensorArray handle."""
    __slots__ = ("dtype", "items", "dynamic", "element_shape", "accumulate", "xp", "_np_dtype")

    def __init__(self, dtype, size, dynamic, element_shape, accumulate, xp=np):
        """xp: the array module of the device the array lives on (zeros of unwritten gradient elements)."""
        self.dtype, self.items, self.dynamic = dtype, [None] * size, dynamic
        self.element_shape, self.accumulate, self.xp = element_shape, accumulate, xp
        self._np_dtype = np.dtype(dtype)    # compared with each written value's (dtype.name is slow)

    def _check_index(self, i, grow=False):
        i = int(i)
        if i < 0:
            raise DfcRuntimeError(f"TensorArray index {i} is negative")
        if i >= len(self.items):
            if grow and self.dynamic:
                self.items.extend([None] * (i + 1 - len(self.items)))
            else:
                raise DfcRuntimeError(f"TensorArray index {i} out of range (size {len(self.items)})")
        return i

    def write(self, i, v, key=()):
        """Set element i; an accumulating array adds `v` to it under `key` (see _Sum)."""
        i = self._check_index(i, grow=True)
        if v.dtype != self._np_dtype:
            raise DfcRuntimeError(f"TensorArray of {self.dtype} cannot hold {v.dtype.name}")
        es = self.element_shape
        if es is not None and (len(es) != v.ndim or any(d is not None and d != n for d, n in zip(es, v.shape))):
            raise DfcRuntimeError(f"TensorArray of elements {list(es)} cannot hold a value of shape {list(v.shape)}")
        if self.accumulate:
            if self.items[i] is None:
                self.items[i] = _Sum()
            self.items[i].add(key, v)
            return
        if self.items[i] is not None:
            raise DfcRuntimeError(f"TensorArray index {i} written twice")
        self.items[i] = v

    def read(self, i):
        i = self._check_index(i)
        v = self.items[i]
        if v is None:
            if self.accumulate and self.element_shape is not None and None not in self.element_shape:
                return self.xp.zeros(self.element_shape, self.dtype)
            raise DfcRuntimeError(f"TensorArray index {i} read before it was written")
        return v.value() if self.accumulate else v

    def zero_rows(self, xp, learned=None, skip=0):
        """Zeros of shape (0, *element shape[skip:]): the shape the array was made with, or else the one
        `learned` from the writes traced (the reading op's attr); unknown sizes are 0."""
        es = self.element_shape if self.element_shape is not None else learned
        return xp.zeros((0,) + tuple(0 if d is None else d for d in (es or ()))[skip:], self.dtype)

    def stack(self, xp, indices=None, learned=None):
        """The elements (those at `indices`) stacked; none: zeros of shape (0, *element shape), the shape
        the array was made with, or else the one `learned` from the writes traced (the stacking op's attr)."""
        idx = range(len(self.items)) if indices is None else [int(i) for i in host(indices).reshape(-1)]
        vals = [self.read(i) for i in idx]
        if not vals:
            return self.zero_rows(xp, learned)
        try:
            return xp.stack(vals)
        except ValueError as e:
            raise DfcRuntimeError(f"TensorArray elements have different shapes: {e}") from None


@kernel("TensorArray")
def _ta_new(node, xp):
    at = node.attrs

    def f(ctx, a):
        es = at.get("element_shape")
        return (TensorArrayStore(at["dtype"], int(a[0]), at.get("dynamic_size", True),
                                 None if es is None else tuple(es), at.get("accumulate", False), xp), FLOW)
    return f


@kernel("TensorArrayWrite")
def _ta_write(node, xp):
    name = node.name

    def f(ctx, a):
        a[0].write(a[1], a[2], (name, ctx.tag, 0))
        return (FLOW,)
    return f


@kernel("TensorArrayRead")
def _ta_read(node, xp):
    return lambda ctx, a: (a[0].read(a[1]),)


@kernel("TensorArraySize")
def _ta_size(node, xp):
    return lambda ctx, a: (xp.asarray(np.array(len(a[0].items), np.int64)),)


@kernel("TensorArrayStack")
def _ta_stack(node, xp):
    es = node.attrs.get("element_shape")
    return lambda ctx, a: (a[0].stack(xp, None, es),)


@kernel("TensorArrayGather")
def _ta_gather(node, xp):
    es = node.attrs.get("element_shape")
    return lambda ctx, a: (a[0].stack(xp, a[1], es),)


@kernel("TensorArrayConcat")
def _ta_concat(node, xp):
    def f(ctx, a):
        ta = a[0]
        if not ta.accumulate and all(v is not None for v in ta.items):
            vals = ta.items                  # every element written: no per-element read checks
        else:
            vals = [ta.read(i) for i in range(len(ta.items))]
        if not vals:
            return (ta.zero_rows(xp, node.attrs.get("element_shape"), 1),)
        return (xp.concatenate(vals, axis=0),)
    return f


@kernel("TensorArrayUnstack")
def _ta_unstack(node, xp):
    name = node.name

    def f(ctx, a):
        for i, v in enumerate(a[1]):
            a[0].write(i, v, (name, ctx.tag, i))
        return (FLOW,)
    return f


@kernel("TensorArrayScatter")
def _ta_scatter(node, xp):
    name = node.name

    def f(ctx, a):
        for k, (i, v) in enumerate(zip(host(a[1]).reshape(-1), a[2])):
            a[0].write(i, v, (name, ctx.tag, k))
        return (FLOW,)
    return f


@kernel("Print")
def _print(node, xp):
    template = node.attrs["template"]

    def f(ctx, a):
        parts = [template[0]]
        for v, t in zip(a, template[1:]):
            parts.append(str(host(v)))
            parts.append(t)
        ctx.print("".join(parts))
        return ()
    return f


@kernel("Timestamp")
def _timestamp(node, xp):
    def f(ctx, a):
        return (np.asarray(time.time(), np.float64),)
    return f


@kernel("Assert")
def _assert(node, xp):
    msg = node.attrs.get("message", "")

    def f(ctx, a):
        if not bool(xp.all(a[0])):
            data = ", ".join(str(host(v)) for v in a[1:])
            raise DfcAssertionError(f"assertion failed: {msg}" + (f" [{data}]" if data else ""),
                                    node=node.name, loc=node.loc)
        return ()
    return f


@kernel("Save")
def _save(node, xp):
    path, names = _npz(node.attrs["path"]), node.attrs["names"]

    def f(ctx, a):
        full = ctx.files.resolve(path, node.name)
        try:
            checkpoints.save_npz(full, {n: host(v) for n, v in zip(names, a)})
        except OSError as e:
            raise DfcRuntimeError(f"cannot save checkpoint {path!r}: {e}", node=node.name) from None
        return ()
    return f


@kernel("Restore")
def _restore(node, xp):
    at = node.attrs
    path = _npz(at["path"])
    entries = list(zip(at["names"], at["dtypes"], at["shapes"] or [None] * len(at["names"])))

    def f(ctx, a):
        # one node reads every variable, so the Assigns that take its outputs run only once all are good
        values = checkpoints.load_npz(ctx.files.resolve(path, node.name), entries, node.name)
        return tuple(xp.asarray(v) for v in values)
    return f


def _npz(path):
    return path if path.endswith(".npz") else path + ".npz"    # as numpy.savez names a file

