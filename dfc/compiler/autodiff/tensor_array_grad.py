"""TensorArray gradients (§5.2): each forward TensorArray gets one gradient TensorArray.

The ops are duals: read <-> write, stack <-> unstack, gather <-> scatter. The
gradient TensorArray accumulates (several reads of one element sum their
gradients) and reads an element never written as zeros. The "gradient" of a
flow value is the flow of the gradient TensorArray, which orders gradient
reads after every gradient write they depend on.
"""
from dfc.compiler.tracing import current_builder
from dfc.errors import DfcError


def _gta(op):
    handle = op.input(0)
    return op.gs.grad_ta(handle, op.attrs.get("dtype") or _dtype_of(op), op.attrs.get("element_shape"))


def _dtype_of(op):
    """Element dtype of the TensorArray behind a write/unstack/scatter (from its value input)."""
    return op.input(2 if op.type in ("TensorArrayWrite", "TensorArrayScatter") else 1).dtype


def _attrs(op, value):
    es = value.shape[1:] if op.type in ("TensorArrayUnstack", "TensorArrayScatter") and value.shape else \
        value.shape
    return {"dtype": value.dtype, "element_shape": None if es is None else list(es)}


def _make(op, inputs, attrs=None):
    return current_builder().make1(op, inputs, attrs)


def read_grad(op, g):
    """TensorArrayRead(handle, index, flow): write g into the gradient array."""
    gh, gflow = _gta(op)
    return [None, None, _make("TensorArrayWrite", (gh, op.x(1), g, gflow))]


def write_grad(op, gflow):
    """TensorArrayWrite(handle, index, value, flow) -> flow: read the value's gradient back."""
    gh, _ = _gta(op)
    v = _make("TensorArrayRead", (gh, op.x(1), gflow), _attrs(op, op.input(2)))
    return [None, None, v, gflow]


def stack_grad(op, g):
    """TensorArrayStack(handle, flow): unstack g into the gradient array."""
    gh, gflow = _gta(op)
    return [None, _make("TensorArrayUnstack", (gh, g, gflow))]


def unstack_grad(op, gflow):
    """TensorArrayUnstack(handle, value, flow) -> flow: stack the gradient array."""
    gh, _ = _gta(op)
    return [None, _make("TensorArrayStack", (gh, gflow), _attrs(op, op.input(1))), gflow]


def gather_grad(op, g):
    """TensorArrayGather(handle, indices, flow): scatter g into the gradient array."""
    gh, gflow = _gta(op)
    return [None, None, _make("TensorArrayScatter", (gh, op.x(1), g, gflow))]


def scatter_grad(op, gflow):
    """TensorArrayScatter(handle, indices, value, flow) -> flow: gather from the gradient array."""
    gh, _ = _gta(op)
    v = _make("TensorArrayGather", (gh, op.x(1), gflow), _attrs(op, op.input(2)))
    return [None, None, v, gflow]


def concat_grad(op, g):
    raise DfcError("the gradient of TensorArray.concat is not supported: use TensorArray.stack() and "
                   "dfc.reshape its first two axes into one (for elements of one shape)", node=op.node.name,
                   loc=op.node.loc)
