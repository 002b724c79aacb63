"""Gradients of gradients through while loops, conds inside loops, nested loops, TensorArrays and scan.

Each second gradient is checked against central finite differences of the first gradient (the graph's
value is the first gradient, `check` differentiates it again) on every execution path, and, where JAX
can express the program with a static trip count, against JAX.
"""
import numpy as np
import pytest

import dfc
from _gradcheck import check

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def loop(x, n, body):
    """s <- body(s, x) n times, n a tensor (the trip count is data to the graph)."""
    return dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, body(s, x)), (dfc.constant(0), x))[1]


@pytest.mark.parametrize("body, second", [
    (lambda s, x: s * x, lambda x: 12 * x ** 2),                  # x^4
    (lambda s, x: s * s, lambda x: 56 * x ** 6),                  # x^8
])
def test_second_derivative_of_a_tensor_loop(body, second):
    def f(x, n):
        return dfc.gradients(loop(x, n, body), x)
    _, (g2,) = check(f, np.float64(0.7), np.int32(3), wrt=[0])
    np.testing.assert_allclose(g2, second(0.7), rtol=1e-10)


def test_loop_with_a_data_dependent_trip_count():
    def f(x):
        s = dfc.while_loop(lambda s: s < 20.0, lambda s: (dfc.sin(s) + 1.5) * s * x, (x,))
        return dfc.gradients(s, x)
    check(f, np.float64(1.3))


def test_hessian_vector_product_of_an_rnn_against_jax():
    rng = np.random.default_rng(0)
    W, U = rng.normal(size=(4, 4)) * 0.5, rng.normal(size=(3, 4))
    xs = rng.normal(size=(5, 3))
    v = rng.normal(size=(4, 4))

    def loss(W, xs, n):
        def body(i, h):
            return i + 1, dfc.tanh(h @ W + dfc.reshape(xs[i], [1, 3]) @ U)
        h = dfc.while_loop(lambda i, h: i < n, body, (dfc.constant(0), dfc.zeros([1, 4], "float64")))[1]
        return dfc.reduce_sum(h * h)

    def hvp(W, xs, n):
        return dfc.reduce_sum(dfc.gradients(loss(W, xs, n), W) * v)

    _, (got,) = check(hvp, W, xs, np.int32(5), wrt=[0])

    def jloss(W):
        h = jnp.zeros((1, 4))
        for t in range(5):
            h = jnp.tanh(h @ W + xs[t:t + 1] @ U)
        return jnp.sum(h * h)
    want = jax.jvp(jax.grad(jloss), (W,), (v,))[1]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_nested_loops():
    def f(x, n):
        def outer(i, s):
            t = dfc.while_loop(lambda j, t: j < i + 1, lambda j, t: (j + 1, dfc.sin(t) * x), (0, s))[1]
            return i + 1, t * 1.1
        s = dfc.while_loop(lambda i, s: i < n, outer, (0, x))[1]
        return dfc.gradients(s, x)
    check(f, np.float64(0.9), np.int32(3), wrt=[0])


def test_cond_inside_a_loop():
    def f(x, n):
        def body(i, s):
            s = dfc.cond(i % 2 == 0, lambda: s * dfc.cos(x), lambda: dfc.exp(s * 0.3) + x * s)
            return i + 1, s
        s = dfc.while_loop(lambda i, s: i < n, body, (0, x))[1]
        return dfc.gradients(s, x)
    check(f, np.float64(0.6), np.int32(5), wrt=[0])


def test_gradient_penalty_through_a_loop():
    """loss + |d loss / d w|^2, differentiated again (a WGAN-GP style penalty)."""
    rng = np.random.default_rng(1)
    data = rng.normal(size=(4, 3))

    def f(w, n):
        xs = dfc.constant(data)

        def body(i, s):
            return i + 1, s + dfc.reduce_sum(dfc.tanh(xs[i] * w) ** 2)
        loss = dfc.while_loop(lambda i, s: i < n, body, (0, dfc.constant(0.0, "float64")))[1]
        g = dfc.gradients(loss, w)
        return loss + dfc.reduce_sum(g * g)
    check(f, rng.normal(size=3), np.int32(4), wrt=[0])


def test_second_order_maml_with_a_tensor_number_of_inner_steps():
    rng = np.random.default_rng(2)
    X, Y = rng.normal(size=(6, 3)), rng.normal(size=(6,))

    def inner_loss(w):
        return dfc.reduce_mean((dfc.reshape(X @ dfc.reshape(w, [3, 1]), [6]) - Y) ** 2)

    def meta(w, steps):
        def body(i, u):
            return i + 1, u - 0.1 * dfc.gradients(inner_loss(u), u)
        u = dfc.while_loop(lambda i, u: i < steps, body, (0, w))[1]
        return inner_loss(u)
    w0 = rng.normal(size=3)
    _, (got,) = check(meta, w0, np.int32(3), wrt=[0])

    def jmeta(w):
        jl = lambda u: jnp.mean((X @ u - Y) ** 2)
        u = w
        for _ in range(3):
            u = u - 0.1 * jax.grad(jl)(u)
        return jl(u)
    np.testing.assert_allclose(got, jax.grad(jmeta)(w0), rtol=1e-9)


def test_tensor_array_and_scan():
    def f(x):
        ys = dfc.scan(lambda c, e: c * e + dfc.sin(c), dfc.stack([x, x * 2.0, x + 1.0]), initializer=x)
        return dfc.gradients(dfc.reduce_sum(ys * ys), x)
    check(f, np.float64(0.4))


def test_third_derivative_through_a_loop():
    def f(x, n):
        g = dfc.gradients(loop(x, n, lambda s, x: s * x), x)
        return dfc.gradients(g, x)
    _, (g3,) = check(f, np.float64(0.7), np.int32(3), wrt=[0])
    np.testing.assert_allclose(g3, 24 * 0.7, rtol=1e-10)


def test_swapped_stacks():
    def f(x, n):
        s = dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, dfc.sin(s) * x), (0, x),
                           swap_memory=True)[1]
        return dfc.gradients(s, x)
    check(f, np.float64(0.8), np.int32(4), wrt=[0])
