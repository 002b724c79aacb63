"""Integer-array indexing (x[idx] with an index tensor) has numpy's static result shape, so stack,
concat's gradient and the compiled paths see a known rank."""
import numpy as np
import pytest

import dfc
from dfc.compiler.autograph import function
from dfc.errors import DfcTypeError
from tests.conftest import run_all_modes

X = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)
I = np.array([[0, 1, 0]])           # shape (1, 3)
J = np.array([1, 0, 1])             # shape (3,)

# name: (index function of x, i, j) — numpy's rules: index arrays (and ints among them) broadcast;
# their shape stands in place when they are adjacent, else it comes first.
CASES = {
    "one array": lambda x, i, j: x[j],
    "array then slice": lambda x, i, j: x[i, 1:],
    "slice then array": lambda x, i, j: x[:, j],
    "two adjacent arrays": lambda x, i, j: x[:, i, j],
    "arrays apart": lambda x, i, j: x[i, :, j],
    "int among arrays": lambda x, i, j: x[1, :, j],
    "int next to array": lambda x, i, j: x[:, 1, j],
    "newaxis between": lambda x, i, j: x[i, None, j],
    "ellipsis between, no dims": lambda x, i, j: x[i, :, ..., j],
    "ellipsis first": lambda x, i, j: x[..., j],
    "newaxis and slice": lambda x, i, j: x[None, j, ::-1],
    "scalar tensor index with array": lambda x, i, j: x[i[0, 1], j],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_static_shape_is_numpys(name):
    index = CASES[name]
    shapes = []

    def f(x, i, j):
        y = index(x, i, j)
        shapes.append(y.shape)
        return y

    g = function(f).trace(dfc.TensorSpec(X.shape, "float64"), dfc.TensorSpec(I.shape, "int64"),
                          dfc.TensorSpec(J.shape, "int64"))
    want = index(X, I, J)
    assert shapes == [want.shape]
    got = run_all_modes(g, X, I, J)
    np.testing.assert_array_equal(got, want)


def test_an_index_of_unknown_length_keeps_the_rank():
    shapes = []

    def f(x, j):
        y = x[j]
        shapes.append(y.shape)
        return y

    g = function(f).trace(dfc.TensorSpec([2, 3, 4], "float64"), dfc.TensorSpec([None], "int64"))
    assert shapes == [(None, 3, 4)]
    assert run_all_modes(g, X, J).shape == (3, 3, 4)


def test_stack_and_concat_gradient_of_gathered_rows():
    def f(x, idx):
        y = x[idx]
        z = dfc.concat([y, x], axis=0)
        s = dfc.stack([y, y], axis=1)
        return dfc.gradients(dfc.reduce_sum(z * z), [x])[0], s

    x = np.arange(12, dtype=np.float64).reshape(4, 3)
    idx = np.array([0, 2, 0])
    g = function(f).trace(dfc.TensorSpec([4, 3], "float64"), dfc.TensorSpec([None], "int64"))
    grad, s = run_all_modes(g, x, idx)
    want = 2 * x
    np.add.at(want, idx, 2 * x[idx])
    np.testing.assert_array_equal(grad, want)
    np.testing.assert_array_equal(s, np.stack([x[idx], x[idx]], axis=1))


def test_index_arrays_that_cannot_broadcast_name_the_line():
    def f(x, i, j):
        return x[i, j]  # MARK

    with pytest.raises(DfcTypeError, match=r"test_integer_indexing.py:\d+: .*do not broadcast"):
        function(f).trace(dfc.TensorSpec([4, 4], "float64"), dfc.TensorSpec([2], "int64"),
                          dfc.TensorSpec([3], "int64"))
