"""dfc.gradients' default seed (ones shaped like y) does not read y when y's shape is static: a value whose only
use is its own gradient (the potential in an HMC leapfrog loop) is not computed at all."""
import numpy as np

import dfc
from tests.conftest import run_all_modes


def test_a_value_used_only_for_its_gradient_is_pruned_from_the_plan():
    made = {}

    def leapfrog(q, A, n):
        def body(i, q):
            y = 0.5 * dfc.reduce_sum(q * dfc.matmul(A, q)) + 0.25 * dfc.reduce_sum(q ** 4)
            made["y"] = y.node
            g, = dfc.gradients(y, [q])
            return i + 1, q - 0.01 * g
        return dfc.while_loop(lambda i, q: i < n, body, (0, q))[1]

    g = dfc.trace(leapfrog, dfc.TensorSpec([3], "float64"), dfc.TensorSpec([3, 3], "float64"),
                  dfc.TensorSpec([], "int64"))
    rng = np.random.default_rng(0)
    q, A = rng.normal(size=3), np.eye(3) + 0.1 * rng.normal(size=(3, 3))
    A = A + A.T
    got = run_all_modes(g, q, A, np.int64(5))
    want = q.copy()
    for _ in range(5):
        want = want - 0.01 * (A @ want + want ** 3)       # d/dq of 0.5 q.Aq + 0.25 sum q^4 (A symmetric)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    s = dfc.Session(g)
    s.call(q, A, np.int64(5))
    plan = next(iter(s._plans.values()))
    assert made["y"] in g.nodes and made["y"] not in {n.name for n in plan.nodes}


def test_a_seed_of_unknown_shape_still_follows_y():
    def f(x):
        y = dfc.reduce_sum(x * x, axis=0)            # shape [None]: the seed is ones_like(y)
        return dfc.gradients(y, [x])[0]
    g = dfc.trace(f, dfc.TensorSpec([2, None], "float64"))
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(run_all_modes(g, x), 2 * x)
