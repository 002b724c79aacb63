"""The typed stand-ins compiled code gets for the resource handles entering a frame, and their effects.

numba cannot hold dfc's resource objects (a Stack, a TensorArrayStore with its keyed gradient sums, a
VariableResource behind its container's lock). For each handle the frame takes (codegen.RESOURCE_USES),
`Resources.args` builds what the compiled code works on, and `Resources.effects`, once the compiled code
has returned, checks and then applies what it did to the real objects: pushes and pops on stacks, the
logged TensorArray writes (with the keys the fused path gives them: writer node, frame tag, 0), a
Variable's final value. Nothing changes before the compiled code succeeded, so on any failure the fused
path can replay the frame from its Enter values and raise its error naming the node.
"""
import copy

import numpy as np

from dfc.errors import DfcRuntimeError
from dfc.runtime.values import DEAD


class Replay(Exception):
    """The compiled frame's effects cannot be applied as they are: run the frame on the fused path."""


def arg(v, dtype, ndim):
    """v as compiled code takes a value of this dtype and rank (a numpy scalar for rank 0, else a writable
    C-contiguous array), or None if v is dead or of another type."""
    if v is DEAD or getattr(v, "dtype", None) != dtype or getattr(v, "ndim", -1) != ndim:
        return None
    if ndim == 0:
        return v[()]
    if not (v.flags.c_contiguous and v.flags.writeable):
        return np.array(v, order="C")
    return v


# An element of at least this many bytes crosses on its own (boxed or appended, ~2-3 us each) instead of
# being copied into or out of one array with the others (~0.1 ms per MiB, and a fresh array's page faults).
BIG = 32 * 1024


def _empty(dtype, ndim):
    """An empty typed List for values of this dtype and rank (as compiled code holds them)."""
    from dfc.runtime.compiled import helpers as H
    return H.empty_list(dtype.type(0) if ndim == 0 else np.empty((0,) * ndim, dtype))


def _typed_list(items, dtype, ndim):
    """A numba typed List of items, or None if one is not of this dtype and rank. Small elements go over
    in bulk (one array, split into the List by compiled code): appending one by one from Python costs
    microseconds per element, which a gradient loop's stacks multiply by their lengths; elements of BIG
    bytes or more are appended (copying them costs more)."""
    from dfc.runtime.compiled import helpers as H
    base = _rows_of(items) if items and ndim else None
    if base is not None and base.dtype == dtype:        # the rows of one array, as _from_list left them
        return H.to_list(base)
    if items and not (ndim == 0 and set(map(type, items)) == {dtype.type}):     # (numpy scalars: quick)
        try:        # host values of this dtype and rank only (a device array stays on the fused path)
            if {(isinstance(v, (np.ndarray, np.generic)), v.dtype, v.ndim) for v in items} != {(True, dtype, ndim)}:
                return None
        except AttributeError:
            return None
    if items:
        if ndim == 0:
            return H.to_list(np.array(items, dtype))
        if items[0].nbytes < BIG:
            try:
                return H.to_list(np.stack(items))
            except ValueError:          # elements of several shapes: one by one
                pass
    from dfc.runtime.compiled import lists as L
    lst = _empty(dtype, ndim)
    for v in items:
        L.append(lst, arg(v, dtype, ndim))
    return lst


def _rows_of(items):
    """The array whose rows, in order, are `items`, or None: a stack that _from_list filled with the rows of
    one array holds them in order (pushes append, pops take from the end), so the rows of an array as long as
    the stack, all of them views of it, are its items (first and last checked by address)."""
    base = getattr(items[0], "base", None)
    if not isinstance(base, np.ndarray) or len(base) != len(items) or base.ndim != items[0].ndim + 1 \
            or not base.flags.c_contiguous or any(v.base is not base for v in items):
        return None
    at = lambda v: v.__array_interface__["data"][0]     # noqa: E731
    if at(items[0]) != at(base) or at(items[-1]) != at(base) + (len(base) - 1) * base.strides[0]:
        return None
    return base


def _from_list(lst, dtype, ndim):
    """The elements of a typed List from compiled code, as the kernels hold them (numpy scalars, arrays)."""
    from dfc.runtime.compiled import helpers as H, lists as L
    if not L.length(lst):
        return []
    if ndim == 0:
        return list(H.list_to_scalars(lst, np.empty(0, dtype)))
    if L.item(lst, 0).nbytes >= BIG:
        return L.items(lst)
    rows, ok = H.list_to_rows(lst)
    return list(rows) if ok else L.items(lst)


def _back(x, dtype, ndim):
    """A value from compiled code as the kernels hold it (rank 0: a 0-d array of its dtype)."""
    return np.asarray(dtype.type(x)) if ndim == 0 else x


class Resources:
    """The resource Enters of one compiled frame: position -> (use, dtype, ndim)."""

    def __init__(self, src, name):
        self.uses = {k: (use, np.dtype(t.dtype), t.ndim) for k, (use, t) in src.resources.items()}
        self.writers = list(src.ta_writers)
        self.name = name

    def args(self, vals):
        """position -> the compiled code's argument for each resource Enter, or None (run fused)."""
        objs = [vals[k] for k in self.uses]
        if len({id(o) for o in objs}) != len(objs):
            return None         # one resource through two handles: stand-ins could not see each other
        out = {}
        for k, (use, dtype, ndim) in self.uses.items():
            a = self._arg(use, vals[k], dtype, ndim)
            if a is None:
                return None
            out[k] = a
        return out

    def _arg(self, use, obj, dtype, ndim):
        if use in ("push", "pop"):
            if not isinstance(obj, list):
                return None
            return _typed_list(obj if use == "pop" else [], dtype, ndim)
        if use == "ta_write":
            if not hasattr(obj, "write") or getattr(obj, "dtype", None) != dtype.name:
                return None
            return (_empty(np.dtype(np.int64), 0), _empty(dtype, ndim))
        if use == "ta_read":
            if not hasattr(obj, "read") or getattr(obj, "dtype", None) != dtype.name:
                return None
            n = len(obj) if hasattr(type(obj), "__len__") else len(obj.items)
            items, ok = [], np.zeros(n, np.bool_)
            hole = dtype.type(0) if ndim == 0 else np.zeros((0,) * ndim, dtype)
            for i in range(n):
                try:
                    items.append(obj.read(i))
                    ok[i] = True
                except DfcRuntimeError:
                    items.append(hole)
            lst = _typed_list(items, dtype, ndim)
            return None if lst is None else (lst, ok, np.int64(len(obj.items)))
        if use == "ta_rw":
            # not an accumulating (gradient) TensorArray: its reads are sums keyed by writer and iteration
            if not hasattr(obj, "read") or getattr(obj, "dtype", None) != dtype.name or \
                    getattr(obj, "accumulate", True):
                return None
            hole = dtype.type(0) if ndim == 0 else np.zeros((0,) * ndim, dtype)
            lst = _typed_list([hole if v is None else v for v in obj.items], dtype, ndim)
            if lst is None:
                return None
            written = np.array([v is not None for v in obj.items], np.bool_)
            return (lst, _bools(written) if written.size else _empty(written.dtype, 0), _empty(np.dtype(np.int64), 0),
                    _empty(dtype, ndim))
        if use in ("var", "var_rw"):
            if not hasattr(obj, "assign"):
                return None
            return _typed_list([obj.read()], dtype, ndim)
        return None

    def effects(self, vals, args, tag):
        """Check what the compiled code did to each resource and return the function that applies it;
        raises Replay if it cannot be applied (e.g. a TensorArray index written twice), leaving every
        resource as it was. (TensorArray writes are made here, and undone if any check fails.)"""
        todo, undo = [], []
        try:
            for k, (use, dtype, ndim) in self.uses.items():
                obj, a = vals[k], args[k]
                if use == "push":
                    todo.append(lambda obj=obj, a=a, dtype=dtype, ndim=ndim: obj.extend(_from_list(a, dtype, ndim)))
                elif use == "pop":
                    todo.append(lambda obj=obj, n=_length(a): obj.__delitem__(slice(n, None)))
                elif use == "ta_write":
                    undo.append(_write_all(obj, self._writes(a, dtype, ndim, tag)))
                elif use == "ta_rw":
                    undo.append(_write_all(obj, self._writes(a[2:], dtype, ndim, tag)))
                elif use == "var_rw":
                    value = _back(_item0(a), dtype, ndim)
                    todo.append(lambda obj=obj, value=value: obj.assign(value, "Assign", self.name))
        except Exception:   # noqa: BLE001 — Replay, or anything else: the fused path replays the frame
            for u in reversed(undo):
                u()
            raise

        def apply():
            for f in todo:
                f()
        return apply

    def _writes(self, log, dtype, ndim, tag):
        """[(index, value, key)] of a TensorArray write log, keys as the fused path's kernels make them."""
        ints, values = log
        ints = _ints(ints)
        out, pos, tag = [], 0, tuple(tag)
        for v in _from_list(values, dtype, ndim):
            name, chain = self.writers[ints[pos]]
            t = tag
            for k, fid in enumerate(chain):
                t = t + (fid, ints[pos + 2 + k])
            out.append((ints[pos + 1], _back(v, dtype, ndim), (name, t, 0)))
            pos += 2 + len(chain)
        return out


def _bools(a):
    """A typed List of the bools of a non-empty 1-D array (which TensorArray elements are written)."""
    from dfc.runtime.compiled import helpers as H
    return H.to_list(a)


def _ints(lst):
    """The int64s of a typed List as Python ints."""
    from dfc.runtime.compiled import helpers as H
    return H.list_to_scalars(lst, np.empty(0, np.int64)).tolist() if _length(lst) else []


# (a typed List's own len() and [] from Python compile anew in every process: lists.py)
def _length(lst):
    from dfc.runtime.compiled import lists as L
    return L.length(lst)


def _item0(lst):
    from dfc.runtime.compiled import lists as L
    return L.item(lst, 0)


def _write_all(store, writes):
    """Make the (index, value, key) writes on a TensorArrayStore; raises Replay, with the store as it was, if
    one fails. Returns the function that undoes them (for a later resource's failed check)."""
    items = list(store.items)
    sums = {}           # index -> a copy of the gradient sum it held before (its parts change in place)
    try:
        for i, v, key in writes:
            j = int(i)
            if 0 <= j < len(store.items) and j not in sums and hasattr(store.items[j], "parts"):
                sums[j] = _copy_item(store.items[j])
            store.write(i, v, key)
    except DfcRuntimeError:
        _restore(store, items, sums)
        raise Replay() from None
    return lambda: _restore(store, items, sums)


def _restore(store, items, sums):
    store.items = items
    for j, c in sums.items():
        items[j] = c


def _copy_item(x):
    """A copy of a gradient sum (state_kernels._Sum) as it is now."""
    c = copy.copy(x)
    c.parts = dict(x.parts)
    return c
