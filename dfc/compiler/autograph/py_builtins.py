"""min, max, sum, any, all, abs in converted code: dfc ops when an argument is a tensor.

As in AutoGraph's py_builtins, each keeps Python's meaning: `max(a, b)` is
the elementwise maximum of two tensors, `max(t)` iterates t's first axis, so
it is the maximum of a 1-D tensor (of a 2-D tensor Python would compare
rows, which has no truth value: that is an error naming the dfc op to use).
Without tensors they are the Python builtins.
"""
import builtins

from dfc.compiler import ops_api
from dfc.compiler.autograph import core
from dfc.compiler.autograph.origin import user_location
from dfc.compiler.autograph.tensor_list import TensorList
from dfc.errors import DfcTypeError


def _has_tensor(values):
    return any(core.is_tensor(v) or isinstance(v, TensorList) for v in values)


def _iterated(name, t, reduce_name):
    """A tensor that `name(t)` iterates: it must be 1-D (its elements are scalars)."""
    if isinstance(t, TensorList):
        t = t.stack()
    if t.ndim == 1:
        return t
    if t.ndim == 0:
        why = "a 0-d tensor is not iterable"
    elif t.ndim is None:
        why = "the tensor's rank is unknown"
    else:
        why = (f"it iterates the first axis of this rank-{t.ndim} tensor and compares rows, "
               f"whose truth value is ambiguous")
    raise DfcTypeError(f"{name}() of a tensor: {why}; use dfc.{reduce_name}(x, axis=...)",
                       loc=user_location())


def _extreme(name, pick, reduce_name, args, kwargs):
    one_iterable = len(args) == 1
    values = args[0] if one_iterable and isinstance(args[0], (list, tuple)) else args
    if not _has_tensor(values):
        return getattr(builtins, name)(*args, **kwargs)
    if kwargs:
        raise DfcTypeError(f"{name}() with {', '.join(kwargs)}= is not supported on tensors; "
                           f"use dfc.{reduce_name} or dfc.where", loc=user_location())
    if one_iterable and values is args:        # max(t): the largest element of a 1-D tensor
        return getattr(ops_api, reduce_name)(_iterated(name, args[0], reduce_name))
    out = values[0]
    for v in values[1:]:
        out = pick(out, v)
    return out


def max_(*args, **kwargs):
    return _extreme("max", ops_api.maximum, "reduce_max", args, kwargs)


def min_(*args, **kwargs):
    return _extreme("min", ops_api.minimum, "reduce_min", args, kwargs)


def sum_(iterable, start=0):
    if isinstance(iterable, TensorList) or core.is_tensor(iterable):
        t = iterable.stack() if isinstance(iterable, TensorList) else iterable
        if t.ndim == 0:
            raise DfcTypeError("sum() of a 0-d tensor: it is not iterable; use it directly",
                               loc=user_location())
        if t.dtype == "bool":
            t = ops_api.cast(t, "int64")       # Python: True + True == 2
        return ops_api.reduce_sum(t, axis=0) + start
    return builtins.sum(iterable, start)


def any_(iterable):
    if isinstance(iterable, TensorList) or core.is_tensor(iterable):
        return ops_api.reduce_any(_iterated("any", iterable, "reduce_any"))
    return builtins.any(iterable)


def all_(iterable):
    if isinstance(iterable, TensorList) or core.is_tensor(iterable):
        return ops_api.reduce_all(_iterated("all", iterable, "reduce_all"))
    return builtins.all(iterable)


def abs_(x):
    if isinstance(x, TensorList):
        x = x.stack()
    return builtins.abs(x)
