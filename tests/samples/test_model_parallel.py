"""The model-parallel LSTM sample: layers on devices of one process give bit-identical values to one
device (training step and inference), the gradients match JAX, and SGD on them lowers the loss. The same
on Ray tasks is tests/cluster/test_model_parallel.py."""
import numpy as np
import pytest

import dfc
from tests.samples.test_sample_programs import load

H, B, T = 8, 4, 6


def test_layers_on_devices_match_one_device_and_the_gradients_are_right():
    m = load("model_parallel_lstm")
    train, predict = m.build(2, H=H, B=B)
    args = m.inputs(2, H=H, B=B, T=T)
    devices = {"worker:0/cpu:0": "cpu:1", "worker:1/cpu:0": "cpu:2"}
    for g in (train, predict):
        got = dfc.Session(g, device_map=devices).call(*args)
        want = dfc.Session(g, device_map=m.one_process(2)).call(*args)
        for a, b in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
            np.testing.assert_array_equal(a, b)
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def jloss(params, xs, target):
        h = [jnp.zeros((B, H)) for _ in range(4)]
        acc = jnp.zeros((B, H))
        for t in range(T):
            inp = xs[t]
            for k in range(2):
                W, b = params[2 * k], params[2 * k + 1]
                z = jnp.concatenate([inp, h[2 * k]], 1) @ W + b
                zi, zf, zo, zg = jnp.split(z, 4, axis=1)
                h[2 * k + 1] = jax.nn.sigmoid(zf) * h[2 * k + 1] + jax.nn.sigmoid(zi) * jnp.tanh(zg)
                h[2 * k] = jax.nn.sigmoid(zo) * jnp.tanh(h[2 * k + 1])
                inp = h[2 * k]
            acc = acc + inp
        return jnp.mean((acc - target) ** 2)
    loss, *grads = dfc.Session(train, device_map=devices).call(*args)
    want = jax.grad(jloss)(args[2:], args[0], args[1])
    np.testing.assert_allclose(loss, jloss(args[2:], args[0], args[1]), rtol=1e-5)
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=1e-6)


def test_sgd_on_the_pipelined_step_lowers_the_loss():
    m = load("model_parallel_lstm")
    train, _ = m.build(2, H=H, B=B)
    args = m.inputs(2, H=H, B=B, T=T)
    s = dfc.Session(train, device_map={"worker:0/cpu:0": "cpu:1", "worker:1/cpu:0": "cpu:2"})
    first = None
    for _ in range(15):
        loss, *grads = s.call(*args)
        first = loss if first is None else first
        args = args[:2] + [w - 0.5 * g for w, g in zip(args[2:], grads)]
    assert loss < 0.7 * first
