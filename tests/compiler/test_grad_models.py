"""Gradients of small models with loops: an RNN over a variable number of steps, an LSTM over
variable-length sequences; memory: saved values grow linearly with the trip count, nothing leaks."""
import gc

import numpy as np
import pytest

import dfc
from dfc.runtime.kernels import KERNELS
from _gradcheck import build, check

rng = np.random.default_rng(11)
T, B, H = 6, 2, 3


def rnn(xs, W, h0, n):
    def body(t, h):
        return t + 1, dfc.tanh(h @ W + xs[t])
    return dfc.while_loop(lambda t, h: t < n, body, (0, h0))[1]


@pytest.mark.parametrize("n", [0, 1, 4, 6])
def test_rnn_over_a_variable_number_of_steps(n):
    xs, W, h0 = rng.normal(size=(T, B, H)) * 0.5, rng.normal(size=(H, H)) * 0.5, rng.normal(size=(B, H))
    _, grads = check(rnn, xs, W, h0, np.int64(n), wrt=[0, 1, 2])
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def jrnn(xs, W, h0):
        return jnp.sum(jax.lax.fori_loop(0, n, lambda t, h: jnp.tanh(h @ W + jnp.asarray(xs)[t]), h0))
    for k, g in enumerate(grads):
        np.testing.assert_allclose(g, jax.grad(jrnn, k)(xs, W, h0), rtol=1e-9, atol=1e-12)


def lstm_loss(xs, Wx, Wh, bias, lengths):
    n_steps = dfc.shape(xs)[0]
    ta = dfc.TensorArray("float64", size=n_steps).unstack(xs)

    def body(t, h, c):
        z = ta.read(t) @ Wx + h @ Wh + bias
        i, f, o, u = (dfc.sigmoid(z[:, :H]), dfc.sigmoid(z[:, H:2 * H]), dfc.sigmoid(z[:, 2 * H:3 * H]),
                      dfc.tanh(z[:, 3 * H:]))
        c2 = f * c + i * u
        h2 = o * dfc.tanh(c2)
        alive = dfc.expand_dims(dfc.cast(t < lengths, "float64"), 1)
        return t + 1, alive * h2 + (1 - alive) * h, alive * c2 + (1 - alive) * c
    zero = dfc.zeros([xs.shape[1], H], "float64")
    _, h, _ = dfc.while_loop(lambda t, h, c: t < dfc.reduce_max(lengths), body, (0, zero, zero))
    return dfc.reduce_sum(h * h)


def lstm_params():
    return (rng.normal(size=(T, B, H)) * 0.5, rng.normal(size=(H, 4 * H)) * 0.5,
            rng.normal(size=(H, 4 * H)) * 0.5, rng.normal(size=(4 * H,)) * 0.1)


def test_lstm_over_variable_length_sequences():
    xs, Wx, Wh, bias = lstm_params()
    lengths = np.array([3, 5])
    _, grads = check(lstm_loss, xs, Wx, Wh, bias, lengths, wrt=[0, 1, 2, 3])
    assert np.all(grads[0][5:] == 0) and np.all(grads[0][3:, 0] == 0)   # padding gets no gradient
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def jloss(xs, Wx, Wh, bias):
        h = c = jnp.zeros((B, H))
        for t in range(int(lengths.max())):
            z = xs[t] @ Wx + h @ Wh + bias
            i, f, o, u = (jax.nn.sigmoid(z[:, :H]), jax.nn.sigmoid(z[:, H:2 * H]),
                          jax.nn.sigmoid(z[:, 2 * H:3 * H]), jnp.tanh(z[:, 3 * H:]))
            c2 = f * c + i * u
            alive = (t < lengths).astype(jnp.float64)[:, None]
            h, c = alive * (o * jnp.tanh(c2)) + (1 - alive) * h, alive * c2 + (1 - alive) * c
        return jnp.sum(h * h)
    for k, g in enumerate(grads):
        np.testing.assert_allclose(g, jax.grad(jloss, k)(xs, Wx, Wh, bias), rtol=1e-9, atol=1e-12)


def test_saved_values_grow_linearly_with_the_trip_count(monkeypatch):
    counts = {"push": 0, "pop": 0}

    def counting(kind, factory):
        def make(node, xp):
            k = factory(node, xp)

            def f(ctx, a):
                counts[kind] += 1
                return k(ctx, a)
            return f
        return make
    monkeypatch.setitem(KERNELS, "StackPush", counting("push", KERNELS["StackPush"]))
    monkeypatch.setitem(KERNELS, "StackPop", counting("pop", KERNELS["StackPop"]))
    g = build(rnn, dfc.TensorSpec([None, B, H], "float64"), dfc.TensorSpec([H, H], "float64"),
              dfc.TensorSpec([B, H], "float64"), dfc.TensorSpec([], "int64"), wrt=[1])
    per_step = sum(1 for n in g.nodes.values() if n.op == "StackPush")
    seen = []
    for n in (5, 10, 20):
        counts.update(push=0, pop=0)
        dfc.Session(g, default_device="cpu:0").call(rng.normal(size=(n, B, H)), np.eye(H), np.ones((B, H)),
                                                    np.int64(n))   # one run, counting host kernels
        assert counts["push"] == counts["pop"]
        seen.append(counts["push"])
    assert seen == [5 * per_step, 10 * per_step, 20 * per_step]


def test_training_steps_do_not_leak_arrays():
    w = dfc.Variable(rng.normal(size=(H, H)) * 0.3)
    opt = dfc.train.SGD(0.01)

    def step(xs, n):
        loss = dfc.reduce_sum(dfc.square(rnn(xs, w.read_value(), dfc.ones([B, H], "float64"), n)))
        opt.minimize(loss, [w])
        return loss
    g = dfc.trace(step, dfc.TensorSpec([T, B, H], "float64"), dfc.TensorSpec([], "int64"))
    xs = rng.normal(size=(T, B, H))

    def live():
        gc.collect()
        # type(), not isinstance(): isinstance reads __class__, which raises on a dead weakref.proxy (numba
        # keeps some once compiled frames exist in the process)
        return sum(1 for o in gc.get_objects() if issubclass(type(o), np.ndarray))
    for _ in range(20):
        g(xs, np.int64(T))
    before = live()
    for _ in range(200):
        g(xs, np.int64(T))
    assert live() <= before + 5
