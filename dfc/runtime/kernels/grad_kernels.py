"""Kernels of the ops only gradients use (the gradient TensorArray of §5.2)."""
import numpy as np

from dfc.errors import DfcRuntimeError
from dfc.runtime.kernels.registry import host, kernel
from dfc.runtime.kernels.state_kernels import FLOW, TensorArrayStore


class GradTensorArrayStore(TensorArrayStore):
    """Holds d(loss)/d(element) for each element of `forward`; writes to one index add up."""
    __slots__ = ("forward",)

    def __init__(self, forward, dtype, element_shape, xp=np):
        super().__init__(dtype, 0, True, element_shape, True, xp)
        self.forward = forward

    def __len__(self):
        return max(len(self.items), len(self.forward.items))

    def read(self, i):
        i = int(i)
        if i < 0:
            raise DfcRuntimeError(f"TensorArray index {i} is negative")
        if i < len(self.items) and self.items[i] is not None:
            return self.items[i].value()
        if i < len(self.forward.items) and self.forward.items[i] is not None:
            return self.xp.zeros_like(self.forward.read(i), dtype=self.dtype)
        es = self.element_shape
        if es is not None and None not in es:
            return self.xp.zeros(es, self.dtype)
        raise DfcRuntimeError(f"gradient of TensorArray element {i}, which was never written")

    def stack(self, xp, indices=None, learned=None):
        if indices is None:
            indices = range(len(self))
        idx = list(indices) if isinstance(indices, range) else [int(i) for i in host(indices).reshape(-1)]
        vals = [self.read(i) for i in idx]
        if not vals:
            return self.zero_rows(xp, learned)
        return xp.stack(vals)


@kernel("TensorArrayGrad")
def _ta_grad(node, xp):
    at = node.attrs

    def f(ctx, a):
        es = at.get("element_shape")
        return (GradTensorArrayStore(a[0], at["dtype"], None if es is None else tuple(es), xp), FLOW)
    return f
