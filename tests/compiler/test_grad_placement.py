"""Gradient ops run where their forward ops run (TensorFlow's colocate_gradients_with_ops), so a
model-parallel layer's gradient stays on its device or task; results match one device."""
import numpy as np

import dfc
from tests.conftest import run_all_modes


def two_layers(x, W1, W2, n):
    def body(i, h):
        with dfc.device("cpu:1"):
            h = dfc.tanh(h @ W1)
        with dfc.device("cpu:2"):
            h = dfc.sigmoid(h @ W2)
        return i + 1, h
    h = dfc.while_loop(lambda i, h: i < n, body, (0, x))[1]
    loss = dfc.reduce_sum(h * h)
    return (loss,) + tuple(dfc.gradients(loss, [W1, W2]))


def test_gradient_ops_take_their_forward_ops_device():
    M = dfc.TensorSpec([3, 3], "float64")
    g = dfc.trace(two_layers, dfc.TensorSpec([2, 3], "float64"), M, M, dfc.TensorSpec([], "int32"))
    devices = [n.device for n in g.nodes.values() if n.op == "MatMul"]
    # each layer's forward matmul and the two matmuls of its gradient (by h and by W) on its device
    assert sorted(devices) == ["cpu:1"] * 3 + ["cpu:2"] * 3
    saved = [n.device for n in g.nodes.values() if n.op in ("StackV2", "StackPush", "StackPop")]
    assert saved and set(saved) <= {"cpu:1", "cpu:2"}     # a saved value stays with its layer
    rng = np.random.default_rng(0)
    args = rng.normal(size=(2, 3)), rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), np.int32(4)
    got = run_all_modes(g, *args)
    one = dfc.Session(g, device_map={"cpu:1": "cpu:0", "cpu:2": "cpu:0"}).call(*args)
    for a, b in zip(got, one):
        np.testing.assert_array_equal(a, b)
