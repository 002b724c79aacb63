"""The gradient of x ** c for a constant whole c in 1..4 is c * x * ... * x (as JAX's integer_pow), not a
general power: numpy's pow takes a slow path on negative bases (HMC's q ** 4 spent a fifth of its time
there). Other exponents keep the general rule."""
import numpy as np
import pytest

import dfc


def _grad_graph(c):
    return dfc.trace(lambda x: dfc.gradients(dfc.reduce_sum(x ** c), x), dfc.TensorSpec([5], "float64"))


@pytest.mark.parametrize("c", [1.0, 2.0, 3.0, 4.0, 2.5, 5.0])
def test_pow_gradient_is_right_and_multiplies_for_small_whole_exponents(c):
    g = _grad_graph(c)
    x = np.array([-1.7, -0.3, 0.4, 1.1, 2.0]) if c in (1.0, 2.0, 3.0, 4.0, 5.0) else np.array([0.2, 0.4, 1.1, 2.0, 3.0])
    got = dfc.Session(g).call(x)
    np.testing.assert_allclose(got, c * x ** (c - 1), rtol=1e-14)
    eps = 1e-6
    fd = [(np.sum((x + eps * e) ** c) - np.sum((x - eps * e) ** c)) / (2 * eps) for e in np.eye(5)]
    np.testing.assert_allclose(got, fd, rtol=1e-7)
    pows = [n for n in g.nodes.values() if n.op == "Pow"]
    assert len(pows) == (1 if c in (1.0, 2.0, 3.0, 4.0) else 2)     # the forward's, and the general rule's
