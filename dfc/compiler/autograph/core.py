"""The few things of the tracing core that the runtime helpers of converted code need."""
from dfc.compiler import tracing
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
    """tracing.trace; a Python error raised by the user's code is re-raised as a DfcError naming
    the user's file:line, with a hint (user_errors.translate); the converted code's traceback is
    kept as the error's `original`. The graph's nodes are labelled with the user's variable names
    (var_names.label)."""
    from dfc.compiler.autograph import user_errors, var_names
    try:
        graph = tracing.trace(fn, tuple(args), kwargs, name=name)
        var_names.label(graph)
        return graph
    except DfcError:
        raise
    except Exception as e:
        err = user_errors.translate(e, name)
        if err is None:
            raise
    raise err from None
