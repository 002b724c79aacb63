"""The input gradient of a matmul whose left operand is a concatenation of pieces along its columns (an RNN
cell's concat([x_t, h]) @ W) is made piece by piece, d p_k = g @ W[rows of p_k]^T
(dfc/compiler/autodiff/op_grads.py _matmul_grad): the gradients are the finite differences', and a piece
whose gradient nobody asks for (x_t's) is never computed (its product is pruned from the plan)."""
import numpy as np
import pytest

import dfc
from _gradcheck import build, check
from dfc.runtime.executor import Plan

rng = np.random.default_rng(11)


def cell_loop(xs, W, h0, n):
    """h_{t+1} = tanh(concat([x_t, h_t]) @ W), n steps."""
    def body(t, h):
        return t + 1, dfc.tanh(dfc.matmul(dfc.concat([xs[t], h], 1), W))
    return dfc.reduce_sum(dfc.while_loop(lambda t, h: t < n, body, (0, h0))[1])


def three_pieces(a, b, c, W):
    """Straight-line, three pieces, the axis given as -1."""
    return dfc.reduce_sum(dfc.sin(dfc.matmul(dfc.concat([a, b, c], -1), W)))


def args(n, B=2, D=3, H=4, T=5):
    return (rng.normal(size=(T, B, D)), rng.normal(size=(D + H, H)) * 0.5, rng.normal(size=(B, H)),
            np.int64(n))


def specs(*a):
    return [dfc.TensorSpec(np.shape(x), np.asarray(x).dtype.name) for x in a]


def matmuls(nodes):
    return sum(n.op == "MatMul" for n in nodes)


@pytest.mark.parametrize("n", [0, 1, 4])
@pytest.mark.parametrize("wrt", [[1, 2], [0, 1, 2]])
def test_gradients_through_a_concatenated_operand_match_finite_differences(n, wrt):
    check(cell_loop, *args(n), wrt=wrt)


def test_straight_line_pieces_match_finite_differences_and_numpy():
    a, b, c, W = (rng.normal(size=(3, 2)), rng.normal(size=(3, 4)), rng.normal(size=(3, 1)),
                  rng.normal(size=(7, 5)))
    _, grads = check(three_pieces, a, b, c, W)
    g = np.cos(np.concatenate([a, b, c], 1) @ W)          # d sum(sin(z)) / dz
    for got, want in zip(grads, (g @ W[:2].T, g @ W[2:6].T, g @ W[6:].T, np.concatenate([a, b, c], 1).T @ g)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_the_unasked_piece_is_never_computed():
    a = args(3)
    g = build(cell_loop, *specs(*a), wrt=[1, 2])          # not x's gradient
    fetches = [leaf["ref"] for leaf in dfc.ir.structure.leaves(g.signature["outputs"])]
    plan = Plan(g, fetches, {i["node"] for i in g.signature["inputs"]}, ())
    # the graph has both pieces' products; the plan runs only h's (and the forward and W's)
    assert matmuls(plan.nodes) == matmuls(g.nodes.values()) - 1
    with_x = build(cell_loop, *specs(*a), wrt=[0, 1, 2])
    plan_x = Plan(with_x, [leaf["ref"] for leaf in dfc.ir.structure.leaves(with_x.signature["outputs"])],
                  {i["node"] for i in with_x.signature["inputs"]}, ())
    assert matmuls(plan_x.nodes) == matmuls(with_x.nodes.values())


def test_a_transposed_weight_takes_the_whole_product_and_slices_it():
    def transposed(xs, W, h0, n):
        def body(t, h):
            return t + 1, dfc.tanh(dfc.matmul(dfc.concat([xs[t], h], 1), W, transpose_b=True))
        return dfc.reduce_sum(dfc.while_loop(lambda t, h: t < n, body, (0, h0))[1])
    xs, W, h0, n = args(3)
    check(transposed, xs, np.ascontiguousarray(W.T), h0, n, wrt=[1, 2])
