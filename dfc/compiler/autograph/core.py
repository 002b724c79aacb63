"""The few things of the tracing core that the runtime helpers need.

Imported lazily so the converter can be used (and tested) on plain Python
values without the core.
"""
import numpy as np


def dfc():
    import dfc as _dfc
    return _dfc


def tensor_type():
    try:
        from dfc.compiler.tracing import Tensor
    except ImportError:
        return ()
    return Tensor


def tensor_array_type():
    try:
        from dfc.compiler.tracing import TensorArray
        return TensorArray
    except ImportError:
        pass
    try:
        return dfc().TensorArray
    except AttributeError:
        return ()


def is_tensor(x):
    t = tensor_type()
    return bool(t) and isinstance(x, t)


def is_tensor_array(x):
    t = tensor_array_type()
    return bool(t) and isinstance(x, t)


def is_number(x):
    return isinstance(x, (bool, int, float, complex, np.generic)) or (
        isinstance(x, np.ndarray))


def current_builder():
    """The graph builder of the trace in progress, or None."""
    try:
        from dfc.compiler import tracing
    except ImportError:
        return None
    return tracing.current_builder(required=False)


def trace(fn, args, kwargs, name):
    """tracing.trace; a Python error raised by the user's code gets a note naming the user's
    file:line (its traceback shows the converted code)."""
    from dfc.compiler import tracing
    from dfc.compiler.autograph import origin
    from dfc.errors import DfcError
    try:
        return tracing.trace(fn, tuple(args), kwargs, name=name)
    except DfcError:
        raise
    except Exception as e:
        where = origin.traceback_origin(e.__traceback__)
        if where is not None:
            e.add_note(f"dfc: raised while tracing dfc.function {name}, at {where[0]}:{where[1]} "
                       f"(the lines above marked <dfc:...> are its converted code)")
        raise
