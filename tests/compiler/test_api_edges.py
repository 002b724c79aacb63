"""Edges of the public API that users hit: Variables as operands, 1-D matmul, unknown batch sizes,
gradients inside a branch, checkpoint paths without .npz."""
import numpy as np

import dfc


def test_tensor_op_variable_in_both_orders():
    w = dfc.Variable(np.full((2, 2), 2.0))
    g = dfc.trace(lambda x: (x @ w, w @ x, x + w, w * x), dfc.TensorSpec([2, 2], "float64"))
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    for got, want in zip(g(x), (x @ np.full((2, 2), 2.0), np.full((2, 2), 2.0) @ x, x + 2, 2 * x)):
        np.testing.assert_allclose(got, want)


def test_matmul_with_vectors_follows_numpy():
    g = dfc.trace(lambda m, v: (m @ v, v @ m.T, v @ v), dfc.TensorSpec([4, 3], "float64"),
                  dfc.TensorSpec([3], "float64"))
    m, v = np.arange(12.0).reshape(4, 3), np.array([1.0, -2.0, 0.5])
    got = g(m, v)
    for a, b in zip(got, (m @ v, v @ m.T, v @ v)):
        assert a.shape == np.shape(b)
        np.testing.assert_allclose(a, b)


def test_minimize_with_unknown_batch_size():
    w = dfc.Variable(np.zeros((3, 1)), name="w")

    def step(x, y):
        pred = dfc.reshape(x @ w.read_value(), [-1])
        loss = dfc.reduce_mean(dfc.square(pred - y))
        dfc.train.SGD(0.1).minimize(loss, [w])
        return loss

    g = dfc.trace(step, dfc.TensorSpec([None, 3], "float64"), dfc.TensorSpec([None], "float64"))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3))
    y = x @ np.array([1.0, -1.0, 2.0])
    losses = [float(g(x, y)) for _ in range(60)]
    assert losses[-1] < 0.01 * losses[0]


def test_gradient_inside_a_cond_branch():
    h = lambda x, p: dfc.cond(p, lambda: dfc.gradients(x * x * x, [x])[0], lambda: x * 0.0)  # noqa: E731
    g = dfc.trace(h, dfc.TensorSpec([], "float64"), dfc.TensorSpec([], "bool"))
    assert float(g(2.0, True)) == 12.0 and float(g(2.0, False)) == 0.0


def test_save_and_restore_agree_without_npz_suffix(tmp_path):
    path = str(tmp_path / "ckpt")

    def save(x):
        b = dfc.compiler.tracing.current_builder()
        b.make("Save", [x], {"path": path, "names": ["x"]})
        return x

    def restore():
        return dfc.compiler.tracing.current_builder().make1(
            "Restore", (), {"path": path, "names": ["x"], "dtypes": ["float64"], "shapes": [[2]]})

    dfc.trace(save, dfc.TensorSpec([2], "float64"))(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(dfc.trace(restore)(), [1.0, 2.0])
