"""Small runtime helpers: assert, in-place changes of containers, loads that may be missing."""
from dfc.compiler import ops_api
from dfc.compiler.autograph import core, loop_scope
from dfc.compiler.autograph.errors import DfcUnsupportedSyntaxError
from dfc.compiler.autograph.origin import user_location
from dfc.errors import DfcConversionError, DfcTypeError
from dfc.compiler.autograph.special_values import Undefined
from dfc.compiler.autograph.tensor_list import TensorList


def assert_stmt(test, message_fn):
    """`assert test, message_fn()`; an in-graph dfc.Assert on a tensor test."""
    if core.is_tensor(test):
        message = message_fn() if message_fn is not None else ""
        data = None
        if core.is_tensor(message):
            data, message = [message], ""
        elif isinstance(message, (tuple, list)) and any(core.is_tensor(m) for m in message):
            data, message = list(message), ""
        return ops_api.Assert(test, data=data, message=str(message))
    if not test:
        if message_fn is None:
            raise AssertionError()
        raise AssertionError(message_fn())
    return None


def list_append(target, value):
    """`target.append(value)` that also works on lists carried through tensor loops."""
    if isinstance(target, TensorList):
        return target.appended(value)
    loop_scope.check_mutation(target, "append")
    target.append(value)
    return target


def list_extend(target, values):
    """`target.extend(values)`."""
    if isinstance(target, TensorList):
        return target.extended(values)
    loop_scope.check_mutation(target, "extend")
    target.extend(values)
    return target


def list_pop(target, *index):
    """`(target, target.pop(*index))`."""
    if isinstance(target, TensorList):
        return target.popped(*index)
    loop_scope.check_mutation(target, "pop")
    value = target.pop(*index)
    return target, value


def setitem(target, index, value):
    """`target[index] = value`; a tensor index into a Python list selects with dfc.where."""
    if isinstance(target, TensorList):
        return target.with_item(index, value)
    loop_scope.check_mutation(target, "__setitem__")
    if isinstance(target, list) and core.is_tensor(index):
        return _select_assign(target, index, value)
    target[index] = value
    return target


def delitem(target, index):
    """`del target[index]`."""
    if isinstance(target, TensorList):
        return target.without_item(index)
    loop_scope.check_mutation(target, "__delitem__")
    del target[index]
    return target


def _select_assign(items, index, value):
    """`items[index] = value` for a tensor index: every element becomes where(index == k, value, it)."""
    if index.dtype not in ("int32", "int64") or index.shape not in ((), None):
        raise DfcTypeError(f"list indices must be integer scalars, not {index.dtype} tensors of "
                           f"shape {index.shape}", loc=user_location())
    n = len(items)
    ops_api.Assert(ops_api.logical_and(index >= -n, index < n),
               message="IndexError: list assignment index out of range")
    index = ops_api.where(index < 0, index + n, index)
    out = []
    for k, item in enumerate(items):
        new = ops_api.where(ops_api.equal(index, k), value, item)
        if core.is_tensor(item) and (new.dtype, new.shape) != (item.dtype, item.shape):
            raise DfcTypeError(f"xs[i] = value with a tensor index i: value is {new.dtype} "
                               f"{new.shape} but element {k} is {item.dtype} {item.shape}; with a "
                               f"tensor index every element must keep its dtype and shape",
                               loc=user_location())
        out.append(new)
    items[:] = out
    return items


def ld_or_undefined(load, label):
    """load() (an attribute or item of a converted if/loop state), or Undefined if missing."""
    try:
        return load()
    except (AttributeError, KeyError, IndexError):
        return Undefined(label)


def finally_exit(jumped, pending, error):
    """The jump flag after a `finally` that may return/break/continue. Its own jump replaces the
    `try`'s pending one and swallows the `try`'s exception (`error`), as in Python; without one,
    the pending jump or the exception goes on. dfc's own refusals to convert the `try`
    (DfcConversionError) always go on: its trace is incomplete."""
    if isinstance(error, DfcConversionError):
        raise error
    if core.is_tensor(jumped):
        if error is not None:
            raise DfcUnsupportedSyntaxError(
                f"the `try` raised {type(error).__name__} while tracing, and whether its `finally` "
                f"jumps (return/break/continue, which would swallow the exception) depends on a "
                f"tensor: decide that jump with a Python value, or let the exception out of the "
                f"`try`", loc=user_location()) from error
        return ops_api.logical_or(jumped, pending)
    if jumped:
        return True
    if error is not None:
        raise error
    return pending
