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

The same holds for an invariant on the left (`W @ x_t`, a column-vector
recurrence) and for transposed operands: each iteration adds P_t^T @ Q_t, with
P_t and Q_t the other operand or the output gradient (transposed as needed).
Applies to a weight of at least MIN_WEIGHT_ELEMENTS elements (smaller ones gain
nothing) used by a MatMul directly in the loop's body (not in a cond branch or
an inner loop, so it runs exactly once per iteration), both operands 2-D (a 1-D
operand of dfc.matmul is a 1-row or 1-column matrix in the graph).
"""

import numpy as np

from dfc import config
from dfc.ir.dtypes import FLOATS, TType
from dfc.ir.graph import parse_input
from dfc.compiler import ops_api
from dfc.compiler.tensor_array import TensorArray


# Below this many elements in the weight the per-iteration sum costs about what the rewrite's two TensorArray
# writes per iteration cost (measured: a 128x256 weight, the small LSTM, is 12% slower rewritten on the compiled
# path and even on the fused one; a 1024x2048 weight, the large LSTM, 20-25% faster), so small weights keep it.
MIN_WEIGHT_ELEMENTS = 1 << 16


def enabled():
    """Whether the rewrite applies (environment variable DFC_BATCH_LOOP_GRADS, default on)."""
    return config.env("DFC_BATCH_LOOP_GRADS")


class Deferred:
    """One forward MatMul whose invariant operand's gradient is one GEMM after the loop: every iteration adds
    P_t^T @ Q_t to it (P_t, Q_t: the other operand or the output gradient, maybe transposed; their columns are
    the invariant's two dimensions), so the sum is concat_t(P_t)^T @ concat_t(Q_t)."""

    def __init__(self, node, cap_index, k, factors, shape):
        self.node, self.cap_index, self.k = node, cap_index, k
        self.factors = factors   # ((source, transposed) of P, of Q); source "x": the other operand, "g": d output
        self.shape = shape       # the invariant's static shape
        self.tas = None          # (TensorArray of P_t, of Q_t), made in the gradient loop's context
        self.loop_flows = None   # their flows inside the gradient loop (its loop variables)
        self.index = None        # the forward iteration the gradient loop's iteration stands for
        self.flows = None        # their flows after this iteration's writes (None: the rule never ran)

    def init(self, dtype, size):
        """The two TensorArrays (in the current context, outside the gradient loop); their flows."""
        self.tas = tuple(TensorArray(dtype, size, dynamic_size=False, element_shape=[None, n]) for n in self.shape)
        return [ta.flow for ta in self.tas]

    def flow_types(self):
        return [TType(ta.flow.dtype, ta.flow.shape) for ta in self.tas]

    def backprop(self, op, g):
        """The MatMul's gradient rule inside the gradient loop: the other operand's gradient as usual; the
        invariant's factors written at this iteration's index of the TensorArrays instead of multiplied here."""
        from dfc.compiler.autodiff.op_grads import _matmul_grad
        need = [True, True]
        need[self.k] = False
        grads = _matmul_grad(op, g, need)
        x = op.x(1 - self.k)
        vals = [ops_api.transpose(v) if t else v for v, t in ((x if src == "x" else g, t) for src, t in self.factors)]
        self.flows = [ta._with_flow(f).write(self.index, v).flow for ta, f, v in zip(self.tas, self.loop_flows, vals)]
        return grads

    def total(self, exit_flows):
        """After the loop: the sum over iterations, one matmul."""
        p_all, q_all = (ta._with_flow(f).concat() for ta, f in zip(self.tas, exit_flows))
        return ops_api.matmul(p_all, q_all, transpose_a=True)


def _factors(k, ta, tb):
    """(P, Q) for invariant input k of a MatMul with these transposes, such that d(input k) = P^T Q summed.

    z = op(a) @ op(b), g = dz. Right invariant (k = 1): d op(b) = op(a)^T g, so d b = op(a)^T g (P = op(a),
    Q = g), or g^T op(a) when b is transposed (P = g, Q = op(a)). Left invariant (k = 0): d op(a) = g op(b)^T =
    (g^T)^T op(b)^T, so d a = P^T Q with P = g^T, Q = op(b)^T, or the two swapped when a is transposed."""
    if k == 1:
        opa = ("x", ta)
        return (("g", False), opa) if tb else (opa, ("g", False))
    opb_t = ("x", not tb)
    return (opb_t, ("g", True)) if ta else (("g", True), opb_t)


def find(gs, L, caps):
    """The MatMuls of loop L's body with an operand among the loop invariants `caps` (constant Enters whose
    gradient is wanted) that the rewrite applies to: {node name: Deferred}."""
    if not enabled() or L.swap_memory:
        return {}
    nodes = gs.graph.nodes
    cap_of = {f"{e.node}:0": k for k, e in enumerate(caps)}
    found = {}
    for name in gs.units.get(L, {}):
        if not isinstance(name, str):
            continue
        n = nodes[name]
        if n.op != "MatMul":
            continue
        refs = ["{}:{}".format(*parse_input(r)[:2]) for r in n.data_inputs]
        hits = [k for k in (1, 0) if refs[k] in cap_of]
        if len(hits) != 1 or refs[0] == refs[1] or gs.b.tensors[name][0].ctx is not L:
            continue
        k = hits[0]
        w, x = gs.tensor(refs[k]), gs.tensor(refs[1 - k])
        if x.ctx is not L or w.dtype not in FLOATS or x.shape is None or len(x.shape) != 2:
            continue
        if w.shape is None or len(w.shape) != 2 or None in w.shape or w.shape[0] * w.shape[1] < MIN_WEIGHT_ELEMENTS:
            continue
        found[name] = Deferred(name, cap_of[refs[k]], k, _factors(k, n.attrs.get("transpose_a"),
                                                                   n.attrs.get("transpose_b")),
                               tuple(int(d) for d in w.shape))
    return found


def index_of(counter):
    """The forward iteration a gradient-loop iteration stands for: its counter (n down to 1) minus one."""
    return ops_api.subtract(counter, np.ones((), np.int64))


__all__ = ["Deferred", "find", "enabled", "index_of"]
