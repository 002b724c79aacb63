"""Lowerings of the gradient stacks (kernels: state_kernels.py StackPush / StackPop).

In compiled code a stack handle is a numba typed List of the stack's elements (dfc/runtime/compiled/
__init__.py makes it from the Python Stack before the frame and writes the pushes back, or drops the
popped entries, after it): a push appends, a pop takes the last element."""
from dfc.runtime.kernels.lowering import Unsupported, lowering


@lowering("StackPush")
def _push(e):
    h, x = e.ins
    if h.dtype != "resource" or x.dtype == "resource":
        raise Unsupported("StackPush of a resource handle")
    e.stmt(f"{e.args[0]}.append({e.args[1]})")
    return [e.args[1]]


@lowering("StackPop")
def _pop(e):
    if e.outs[0].dtype == "resource":
        raise Unsupported("StackPop of a resource handle")
    e.stmt(f"if len({e.args[0]}) == 0: raise IndexError('pop from an empty stack')")
    return [f"{e.args[0]}.pop()"]
