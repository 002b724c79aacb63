"""dfc.trace and the device scope (entry points of the compiler half)."""
import contextlib
import threading

from dfc.errors import DfcError

from dfc.compiler import tracing
from dfc.traceback_filter import api_boundary


@api_boundary
def trace(fn, *args, **kwargs):
    """Build a Graph by calling fn: TensorSpec arguments become graph inputs, others are static."""
    return tracing.trace(fn, args, kwargs)


_python = threading.local()      # device scopes entered outside any graph (where Variables are made)


@contextlib.contextmanager
def device(name):
    """Place the ops built inside this scope on device `name`: "cpu:1", "gpu:0", or a device of a cluster
    task, "JOB:TASK/KIND:N" such as "ps:0/cpu:0". Outside any graph it places the Variables made in it."""
    b = tracing.current_builder(required=False)
    if b is None:       # in a graph, a bad name is an error naming the node when a Session places it
        from dfc.runtime.devices import canonical_name
        try:
            canonical_name(str(name))
        except DfcError as e:
            raise type(e)(e.message, loc=tracing.user_location()) from None
    stack = b.devices if b is not None else _python.__dict__.setdefault("stack", [])
    stack.append(str(name))
    try:
        yield
    finally:
        stack.pop()


def python_device():
    """The device of the innermost `dfc.device` scope entered outside any graph, or None."""
    stack = getattr(_python, "stack", None)
    return stack[-1] if stack else None
