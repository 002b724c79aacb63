"""Gradients of gradients for programs without loops (conds included); loops: test_grad_higher_loops.py."""
import numpy as np
import pytest

import dfc
from _gradcheck import check


def test_second_derivative_of_elementwise_chain():
    check(lambda x: dfc.gradients(dfc.reduce_sum(dfc.sin(x) * x * x + dfc.tanh(x) ** 3.0), x),
          np.array([0.3, -0.7, 1.1]))


def test_hessian_vector_product_through_matmul_softmax():
    W = np.random.default_rng(0).normal(size=(3, 3))

    def f(x):
        y = dfc.reduce_sum(dfc.softmax(dfc.reshape(x, [1, 3]) @ W) * dfc.sigmoid(x))
        return dfc.gradients(y, x) * np.array([1.0, 2.0, 3.0])
    check(f, np.array([0.2, -0.4, 0.9]))


@pytest.mark.parametrize("x0", [0.7, -0.7])
def test_second_derivative_through_cond(x0):
    def f(x):
        y = dfc.cond(x > 0, lambda: x * x * x, lambda: dfc.sin(x) * x)
        return dfc.gradients(y, x)
    _, (g2,) = check(f, np.float64(x0))
    want = 6 * x0 if x0 > 0 else 2 * np.cos(x0) - x0 * np.sin(x0)
    np.testing.assert_allclose(g2, want, rtol=1e-10)


def test_third_derivative():
    def f(x):
        return dfc.gradients(dfc.gradients(dfc.exp(x) * x, x), x)
    _, (g3,) = check(f, np.float64(0.5))
    np.testing.assert_allclose(g3, np.exp(0.5) * 3.5, rtol=1e-10)
