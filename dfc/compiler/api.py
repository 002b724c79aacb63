"""dfc.trace and the device scope (entry points of the compiler half)."""
import contextlib

from dfc.compiler import tracing


def trace(fn, *args, **kwargs):
    """Build a Graph by calling fn: TensorSpec arguments become graph inputs, others are static."""
    return tracing.trace(fn, args, kwargs)


@contextlib.contextmanager
def device(name):
    """Place the ops built inside this scope on device `name` (e.g. "cpu:1")."""
    b = tracing.current_builder()
    b.devices.append(str(name))
    try:
        yield
    finally:
        b.devices.pop()
