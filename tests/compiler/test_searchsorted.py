"""dfc.searchsorted against numpy.searchsorted, on every execution path and in the XLA program."""
import numpy as np
import pytest

import dfc
from tests.conftest import run_all_modes

SORTED = np.array([-2.0, 0.0, 0.0, 1.5, 3.0, 3.0, 7.0])
VALUES = np.array([[-5.0, 0.0, 1.0], [3.0, 9.0, 1.5]])


@pytest.mark.parametrize("side", ["left", "right"])
def test_against_numpy_on_every_path(side):
    g = dfc.trace(lambda a, v: dfc.searchsorted(a, v, side=side),
                  dfc.TensorSpec([7], "float64"), dfc.TensorSpec([2, 3], "float64"))
    (got,) = [run_all_modes(g, SORTED, VALUES)]
    np.testing.assert_array_equal(got, np.searchsorted(SORTED, VALUES, side=side))
    assert got.dtype == np.int64


def test_in_a_loop_on_every_path_and_in_xla():
    """Systematic resampling's indices, a scalar value and integer arrays, inside a tensor loop."""
    @dfc.function
    def f(w, u, n):
        cdf = dfc.cumsum(w)
        total = dfc.constant(0, "int64")
        i = 0
        while i < n:
            pos = (dfc.arange(8, dtype="float64") + u) / 8.0
            total = total + dfc.reduce_sum(dfc.searchsorted(cdf, pos)) + dfc.searchsorted(cdf, u, side="right")
            u = u * 0.5
            i += 1
        ints = dfc.searchsorted(dfc.constant(np.array([1, 3, 3, 8])), dfc.constant(np.array([0, 3, 9])))
        return total, ints

    w = np.array([0.1, 0.3, 0.05, 0.2, 0.1, 0.05, 0.1, 0.1])
    args = (w, np.float64(0.4), np.int64(3))
    g = f.trace(*args)
    total, ints = run_all_modes(g, *args)
    cdf, u, want = np.cumsum(w), 0.4, 0
    for _ in range(3):
        want += np.searchsorted(cdf, (np.arange(8) + u) / 8.0).sum() + np.searchsorted(cdf, u, side="right")
        u *= 0.5
    assert total == want
    np.testing.assert_array_equal(ints, [0, 1, 4])
    pytest.importorskip("jax")
    from dfc.runtime.xla import to_jax
    xt, xi = to_jax(g)(*args)
    assert xt == want and list(xi) == [0, 1, 4]


def test_an_int_array_searched_for_floats_compares_in_the_common_type():
    got = dfc.trace(lambda v: dfc.searchsorted(dfc.constant(np.array([1, 2, 3])), v),
                    dfc.TensorSpec([2], "float64"))(np.array([1.5, 2.0]))
    np.testing.assert_array_equal(got, np.searchsorted(np.array([1, 2, 3]), np.array([1.5, 2.0])))


def test_bad_input_is_an_error_naming_the_line():
    with pytest.raises(dfc.DfcError, match="1-D sorted array"):
        dfc.trace(lambda a: dfc.searchsorted(a, 1.0), dfc.TensorSpec([2, 2], "float64"))
    with pytest.raises(dfc.DfcError, match="side must be 'left' or 'right'"):
        dfc.trace(lambda a: dfc.searchsorted(a, 1.0, side="middle"), dfc.TensorSpec([2], "float64"))
