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


def test_lstm_hessian_vector_product_against_jax():
    """The LSTM training step's loss (concat + matmul by a loop-invariant weight, split, gates): H·v for
    the weights, through the first gradient's deferred weight-gradient matmul."""
    def lstm_loss(x, W, b, H):
        def body(t, h, c, acc):
            z = dfc.matmul(dfc.concat([x[t], h], 1), W) + b
            zi, zf, zo, zg = dfc.split(z, 4, axis=1)
            c = dfc.sigmoid(zf) * c + dfc.sigmoid(zi) * dfc.tanh(zg)
            h = dfc.sigmoid(zo) * dfc.tanh(c)
            return t + 1, h, c, acc + dfc.reduce_sum(h)
        h = dfc.zeros([B, H], "float64")
        _, h, c, acc = dfc.while_loop(lambda t, h, c, acc: t < T, body, (0, h, h, dfc.constant(0.0, "float64")))
        return acc + dfc.reduce_sum(h * h)
    rng = np.random.default_rng(3)
    H, B, T = 3, 2, 4
    x, W, b = rng.normal(size=(T, B, H)), rng.normal(size=(2 * H, 4 * H)) * 0.5, rng.normal(size=4 * H) * 0.1
    vW = rng.normal(size=W.shape)

    def hvp(x, W, b):
        return dfc.reduce_sum(dfc.gradients(lstm_loss(x, W, b, H), W) * vW)
    _, (got,) = check(hvp, x, W, b, wrt=[1])

    def jloss(W):
        h = c = jnp.zeros((B, H))
        acc = 0.0
        for t in range(T):
            z = jnp.concatenate([x[t], h], 1) @ W + b
            zi, zf, zo, zg = jnp.split(z, 4, axis=1)
            c = jax.nn.sigmoid(zf) * c + jax.nn.sigmoid(zi) * jnp.tanh(zg)
            h = jax.nn.sigmoid(zo) * jnp.tanh(c)
            acc = acc + jnp.sum(h)
        return acc + jnp.sum(h * h)
    np.testing.assert_allclose(got, jax.jvp(jax.grad(jloss), (W,), (vW,))[1], rtol=1e-9, atol=1e-12)


def test_tensor_array_written_in_a_loop():
    def f(x, n):
        ta = dfc.TensorArray("float64", size=0, dynamic_size=True)

        def body(i, s, ta):
            s = dfc.tanh(s * x + 0.3)
            return i + 1, s, ta.write(i, s * s)
        _, s, ta = dfc.while_loop(lambda i, s, ta: i < n, body, (0, x, ta))
        return dfc.gradients(dfc.reduce_sum(ta.stack() * dfc.constant([1.0, 2.0, 3.0])), x)
    check(f, np.float64(0.5), np.int32(3), wrt=[0])


def test_hessian_vector_product_of_a_converted_function():
    """The user's program: a dfc.function with a Python `while` on a tensor, its HVP as JAX would write it."""
    @dfc.function
    def hvp(x, v, n):
        def loss(x):
            s, i = x, 0
            while i < n:
                s = dfc.sin(s) * x + s * 0.5
                i += 1
            return dfc.reduce_sum(s * s)
        g = dfc.gradients(loss(x), x)
        return dfc.gradients(dfc.reduce_sum(g * v), x)
    x, v = np.array([0.3, -0.8]), np.array([1.0, 0.5])
    got = hvp(x, v, np.int32(4))

    def jloss(x):
        s = x
        for _ in range(4):
            s = jnp.sin(s) * x + s * 0.5
        return jnp.sum(s * s)
    np.testing.assert_allclose(got, jax.jvp(jax.grad(jloss), (x,), (v,))[1], rtol=1e-10)


def test_maml_whose_inner_loss_has_a_loop():
    """The first gradient's loop and its gradient loop both sit in the body of the outer loop that the
    second gradient differentiates: their gradients are built in one iteration of its gradient loop."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(3, 2))

    def inner_loss(w, k):
        def body(j, h):
            return j + 1, dfc.tanh(h * w + dfc.constant(X)[j])
        h = dfc.while_loop(lambda j, h: j < k, body, (0, dfc.zeros([2], "float64")))[1]
        return dfc.reduce_sum(h * h)

    def meta(w, steps, k):
        def body(i, u):
            return i + 1, u - 0.2 * dfc.gradients(inner_loss(u, k), u)
        u = dfc.while_loop(lambda i, u: i < steps, body, (0, w))[1]
        return inner_loss(u, k)
    w0 = rng.normal(size=2)
    _, (got,) = check(meta, w0, np.int32(2), np.int32(3), wrt=[0])

    def jinner(w):
        h = jnp.zeros(2)
        for j in range(3):
            h = jnp.tanh(h * w + X[j])
        return jnp.sum(h * h)

    def jmeta(w):
        u = w
        for _ in range(2):
            u = u - 0.2 * jax.grad(jinner)(u)
        return jinner(u)
    np.testing.assert_allclose(got, jax.grad(jmeta)(w0), rtol=1e-9)


def test_hessian_of_a_variable_through_a_loop():
    def f(x, n):
        v = dfc.Variable(np.array([0.5, -0.3]))
        s = dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, dfc.sin(s * v.read_value()) + x), (0, x))[1]
        g = dfc.gradients(dfc.reduce_sum(s * s), v)
        return dfc.gradients(dfc.reduce_sum(g * g), x)
    check(f, np.array([0.2, 0.7]), np.int32(3), wrt=[0])


def test_second_order_through_a_recomputed_block():
    """A loop body under dfc.recompute_grad: the first gradient rebuilds the block in its gradient loop,
    and the second gradient differentiates the rebuilt block."""
    def f(x, n):
        block = dfc.recompute_grad(lambda s: dfc.tanh(s * x) * dfc.sin(s) + s * 0.5)
        s = dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, block(s)), (0, x))[1]
        return dfc.gradients(dfc.reduce_sum(s * s), x)
    check(f, np.array([0.4, -0.9]), np.int32(4), wrt=[0])
