"""range/enumerate/zip/len that also work on tensors, and how to iterate them.

A tensor iteration is (length, get(i), counter dtype): for_stmt turns it
into a dfc.while_loop over a counter i < length.
"""
import builtins

import numpy as np

from dfc.compiler import ops_api
from dfc.compiler.autograph import core
from dfc.compiler.autograph.errors import DfcConversionError
from dfc.compiler.autograph.origin import user_location
from dfc.compiler.autograph.tensor_list import TensorList
from dfc.errors import DfcTypeError


class TensorRange:
    """range(start, limit, delta) where some bound is a tensor."""

    def __init__(self, start, limit, delta):
        self.start, self.limit, self.delta = start, limit, delta

    def length(self):
        if isinstance(self.delta, int) and self.delta == 1:
            return self.limit - self.start
        return -((self.start - self.limit) // self.delta)

    def get(self, i):
        v = self.start + i * self.delta
        if isinstance(self.start, int) and isinstance(self.delta, int) and core.is_tensor(v):
            v.weak = True   # like the Python int it stands for: x * i keeps x's dtype
        return v


class TensorEnumerate:
    def __init__(self, iterable, start):
        self.iterable, self.start = iterable, start


class TensorZip:
    def __init__(self, iterables):
        self.iterables = iterables


class Iteration:
    def __init__(self, length, get, counter_dtype):
        self.length, self.get, self.counter_dtype = length, get, counter_dtype


def is_tensor_iterable(x):
    return (core.is_tensor(x) or core.is_tensor_array(x)
            or (isinstance(x, TensorList) and x.typed)
            or isinstance(x, (TensorRange, TensorEnumerate, TensorZip)))


def _counter_dtype(length):
    return length.dtype if core.is_tensor(length) else "int64"


def tensor_iteration(x):
    """The Iteration for a tensor-like iterable, else None (iterate in Python)."""
    if isinstance(x, TensorRange):
        n = x.length()
        dtype = _counter_dtype(n)
        return Iteration(n, x.get, dtype)
    if core.is_tensor(x):
        n = x.shape[0] if x.shape and x.shape[0] is not None else ops_api.shape(x)[0]
        return Iteration(n, lambda i: x[i], _counter_dtype(n))
    if core.is_tensor_array(x):
        n = x.size()
        return Iteration(n, x.read, _counter_dtype(n))
    if isinstance(x, TensorList) and x.typed:
        return tensor_iteration(x.ta)
    if isinstance(x, TensorEnumerate):
        inner = tensor_iteration(_as_tensor_iterable(x.iterable))
        return Iteration(inner.length, lambda i: (_weak_index(x.start + i), inner.get(i)), inner.counter_dtype)
    if isinstance(x, TensorZip):
        inners = [tensor_iteration(_as_tensor_iterable(it)) for it in x.iterables]
        n = inners[0].length
        for other in inners[1:]:
            n = _minimum(n, other.length)
        return Iteration(n, lambda i: tuple(it.get(i) for it in inners), _counter_dtype(n))
    return None


def _weak_index(v):
    if core.is_tensor(v):
        v.weak = True
    return v


def _as_tensor_iterable(x):
    if is_tensor_iterable(x):
        return x
    if isinstance(x, builtins.range):
        return TensorRange(x.start, x.stop, x.step)
    return ops_api.constant(list(x)) if not any(core.is_tensor(v) for v in x) \
        else ops_api.stack(list(x))


def _minimum(a, b):
    if not core.is_tensor(a) and not core.is_tensor(b):
        return min(a, b)
    return ops_api.where(a < b, a, b)


# ---------------------------------------------------------------- builtins
def range_(*args):
    if not any(core.is_tensor(a) for a in args):
        return builtins.range(*args)
    if not 1 <= len(args) <= 3:
        raise DfcTypeError(f"range expected 1 to 3 arguments, got {len(args)}", loc=user_location())
    for a in args:
        if not _is_integer(a):
            what = f"a {a.dtype} tensor" if core.is_tensor(a) else f"a {type(a).__name__}"
            raise DfcTypeError(
                f"range() needs integers but got {what} (Python raises TypeError here); cast it "
                f"with dfc.cast(x, 'int32'), or use dfc.range(start, limit, delta) for a range "
                f"of floats", loc=user_location())
    start, limit, delta = (0, args[0], 1) if len(args) == 1 else (tuple(args) + (1,))[:3]
    return TensorRange(start, limit, delta)


def _is_integer(x):
    if core.is_tensor(x):
        return x.dtype in ("int32", "int64", "bool")
    return isinstance(x, (int, np.integer, np.bool_)) or hasattr(x, "__index__")


def enumerate_(iterable, start=0):
    if is_tensor_iterable(iterable):
        return TensorEnumerate(iterable, start)
    return builtins.enumerate(iterable, start)


def zip_(*iterables):
    if any(is_tensor_iterable(x) for x in iterables):
        return TensorZip(iterables)
    return builtins.zip(*iterables)


def len_(x):
    if core.is_tensor(x):
        if x.shape and x.shape[0] is not None:
            return x.shape[0]
        if not x.shape:
            raise DfcConversionError("len() of a 0-d tensor (Python raises TypeError: it has no "
                                     "length); use dfc.size(x) or dfc.shape(x)",
                                     loc=user_location())
        return ops_api.shape(x)[0]
    if core.is_tensor_array(x):
        return x.size()
    if isinstance(x, TensorList):
        return x.size()
    if isinstance(x, TensorRange):
        n = x.length()
        return ops_api.where(n > 0, n, 0) if core.is_tensor(n) else max(n, 0)
    return builtins.len(x)
