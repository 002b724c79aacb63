"""One GEMM after the gradient loop for a loop-invariant weight's matmul gradient.

In a loop body `z_t = a_t @ W` with W captured from outside the loop (an RNN's
weights), the gradient of W is sum_t a_t^T @ g_t. Computed inside the gradient
loop that is one thin matmul (inner dimension = the batch) plus one full-size
add into the accumulator per iteration. Instead, the gradient loop writes a_t
(popped from its stack anyway) and g_t into two TensorArrays, and after the
loop one matmul of their row-wise concatenations gives the sum — one large
GEMM that BLAS runs near peak, with no per-iteration accumulator traffic. The
price is memory: every g_t (and every a_t, which the stack would have freed
one by one) stays alive until the gradient loop ends, so a loop that swaps
(swap_memory=True) keeps the per-iteration sum, and `DFC_BATCH_LOOP_GRADS=0`
turns the rewrite off everywhere.

Applies to a MatMul directly in the loop's body (not in a cond branch or an
inner loop, so it runs exactly once per iteration), both operands of static
rank 2, the invariant as its right operand, the left one not transposed.
"""
import os

import numpy as np

from dfc.ir.dtypes import FLOATS, TType
from dfc.ir.graph import parse_input
from dfc.compiler import ops_api
from dfc.compiler.tensor_array import TensorArray


def enabled():
    """Whether the rewrite applies (environment variable DFC_BATCH_LOOP_GRADS, default on)."""
    return os.environ.get("DFC_BATCH_LOOP_GRADS", "1").strip().lower() not in ("0", "false", "no", "off")


class Deferred:
    """One forward MatMul whose invariant-operand gradient is summed by a single GEMM after the loop."""

    def __init__(self, node, cap_index, K, N):
        self.node, self.cap_index, self.K, self.N = node, cap_index, K, N
        self.tas = None          # (TensorArray of a_t, TensorArray of g_t), made in the gradient loop's context
        self.flows = None        # their flows after this iteration's writes (None: the rule never ran)

    def init(self, dtype, size):
        """The two TensorArrays (in the current context, outside the gradient loop); their flows."""
        self.tas = (TensorArray(dtype, size, dynamic_size=False, element_shape=[None, self.K]),
                    TensorArray(dtype, size, dynamic_size=False, element_shape=[None, self.N]))
        return [ta.flow for ta in self.tas]

    def flow_types(self):
        return [TType(ta.flow.dtype, ta.flow.shape) for ta in self.tas]

    def backprop(self, op, g, flows, index):
        """The MatMul's gradient rule inside the gradient loop: the left operand's gradient as usual; the
        right one's factors written at `index` of the TensorArrays instead of multiplied here."""
        tb = op.attrs["transpose_b"]
        a, w = op.x(0), op.x(1)
        ga = ops_api.matmul(g, w) if tb else ops_api.matmul(g, w, transpose_b=True)
        self.flows = [ta._with_flow(f).write(index, v).flow for ta, f, v in zip(self.tas, flows, (a, g))]
        return [ga, None]

    def total(self, exit_flows, transpose_b):
        """After the loop: sum_t a_t^T g_t (or its transpose for a transposed right operand), one matmul."""
        a_all, g_all = (ta._with_flow(f).concat() for ta, f in zip(self.tas, exit_flows))
        if transpose_b:
            return ops_api.matmul(g_all, a_all, transpose_a=True)
        return ops_api.matmul(a_all, g_all, transpose_a=True)


def find(gs, L, caps):
    """The MatMuls of loop L's body whose right operand is one of the loop invariants `caps` (constant Enters
    whose gradient is wanted) and that the rewrite applies to: {node name: Deferred}."""
    if not enabled() or L.swap_memory:
        return {}
    nodes = gs.graph.nodes
    cap_of = {f"{e.node}:0": k for k, e in enumerate(caps)}
    found = {}
    for name in gs.units.get(L, {}):
        if not isinstance(name, str):
            continue
        n = nodes[name]
        if n.op != "MatMul" or n.attrs.get("transpose_a"):
            continue
        refs = ["{}:{}".format(*parse_input(r)[:2]) for r in n.data_inputs]
        k = cap_of.get(refs[1])
        if k is None or refs[0] == refs[1]:
            continue
        a, w = gs.tensor(refs[0]), gs.tensor(refs[1])
        if a.ctx is not L or gs.b.tensors[name][0].ctx is not L or w.dtype not in FLOATS:
            continue
        if a.shape is None or len(a.shape) != 2 or w.shape is None or len(w.shape) != 2 or None in w.shape:
            continue
        K, N = (w.shape[1], w.shape[0]) if n.attrs.get("transpose_b") else (w.shape[0], w.shape[1])
        found[name] = Deferred(name, k, int(K), int(N))
    return found


def index_of(counter):
    """The forward iteration a gradient-loop iteration stands for: its counter (n down to 1) minus one."""
    return ops_api.subtract(counter, np.ones((), np.int64))


__all__ = ["Deferred", "find", "enabled", "index_of"]
