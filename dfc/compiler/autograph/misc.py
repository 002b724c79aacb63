"""Small runtime helpers: assert, list append, loads of attributes that may be missing."""
from dfc.compiler.autograph import core
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
        return core.dfc().Assert(test, data=data, message=str(message))
    if not test:
        if message_fn is None:
            raise AssertionError()
        raise AssertionError(message_fn())
    return None


def list_append(target, value):
    """`target.append(value)` that also works on lists carried through tensor loops."""
    if isinstance(target, TensorList):
        return target.append(value)
    target.append(value)
    return target


def ld_or_undefined(load, label):
    """load() (an attribute or item of a converted if/loop state), or Undefined if missing."""
    try:
        return load()
    except (AttributeError, KeyError, IndexError):
        return Undefined(label)
