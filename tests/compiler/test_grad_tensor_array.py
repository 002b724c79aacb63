"""TensorArray gradients (§5.2) and differentiable scan / map_fn / foldl."""
import numpy as np
import pytest

import dfc
from _gradcheck import check

rng = np.random.default_rng(3)


def test_read_write_duality_and_repeated_reads_sum():
    def f(x):
        ta = dfc.TensorArray("float64", size=3)
        ta = ta.write(0, x[0] * 2.0).write(1, x[1] * x[2]).write(2, dfc.sin(x[0]))
        return ta.read(0) * ta.read(0) + ta.read(2) * ta.read(1) + ta.read(0)
    check(f, rng.normal(size=3))


def test_stack_unstack_gather_scatter():
    def f(x):
        ta = dfc.TensorArray("float64", size=4).unstack(x * x)
        tb = dfc.TensorArray("float64", size=4).scatter([3, 1, 0, 2], dfc.sin(x))
        return ta.gather([2, 2, 0]) * 1.5 + tb.stack()[:3] * ta.stack()[1:]
    check(f, rng.normal(size=(4, 2)))


def test_elements_never_read_get_zero_gradient():
    def f(x):
        ta = dfc.TensorArray("float64", size=3).unstack(x)
        return ta.read(1) * 4.0
    _, (g,) = check(f, rng.normal(size=(3, 2)))
    np.testing.assert_array_equal(g[[0, 2]], 0.0)


def test_tensor_array_written_in_loop_read_after():
    def f(x):
        def body(i, s, ta):
            s = dfc.tanh(s * x + 0.1)
            return i + 1, s, ta.write(i, s * s)
        _, _, ta = dfc.while_loop(lambda i, s, ta: i < 5, body, (0, x, dfc.TensorArray("float64")))
        return ta.stack() * dfc.reshape(dfc.range(1.0, 6.0, dtype="float64"), [5, 1])
    check(f, rng.normal(size=2))


def test_scan():
    def f(x, a0):
        return dfc.scan(lambda a, e: a * dfc.sin(e) + e, x, initializer=a0)
    x, a0 = rng.normal(size=(5, 2)), rng.normal(size=2)
    _, (gx, ga) = check(f, x, a0)
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def jf(x, a0):
        def step(a, e):
            a = a * jnp.sin(e) + e
            return a, a
        return jnp.sum(jax.lax.scan(step, a0, x)[1])
    np.testing.assert_allclose(gx, jax.grad(jf)(x, a0), rtol=1e-10)
    np.testing.assert_allclose(ga, jax.grad(jf, 1)(x, a0), rtol=1e-10)


def test_map_fn_and_foldl():
    check(lambda x: dfc.map_fn(lambda e: dfc.reduce_sum(e * e) * e, x), rng.normal(size=(4, 3)))
    check(lambda x: dfc.foldl(lambda a, e: a * e + 1.0, x), rng.normal(size=5))


def test_scan_inside_loop():
    def f(x):
        def body(i, s):
            return i + 1, dfc.scan(lambda a, e: a * 0.5 + e * s[0], s)
        return dfc.while_loop(lambda i, s: i < 3, body, (0, x))[1]
    check(f, rng.normal(size=4))
