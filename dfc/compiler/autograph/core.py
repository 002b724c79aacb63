"""The few things of the tracing core that the runtime helpers of converted code need."""
from dfc.compiler import tracing
from dfc.compiler.autograph import origin
from dfc.compiler.tensor_array import TensorArray
from dfc.compiler.tracing import Tensor
from dfc.errors import DfcError


def is_tensor(x):
    return isinstance(x, Tensor)


def is_tensor_array(x):
    return isinstance(x, TensorArray)


def current_builder():
    """The graph builder of the trace in progress, or None."""
    return tracing.current_builder(required=False)


def trace(fn, args, kwargs, name):
    """tracing.trace; a Python error raised by the user's code gets a note naming the user's
    file:line (its traceback shows the converted code)."""
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
