"""`[0.0] * n` with a tensor n is list repetition in Python: a graph cannot repeat by a run-time count, so
it is an error at the user's line, never a silently different one-element product."""
import numpy as np
import pytest

import dfc


def test_list_times_an_integer_tensor_is_an_error_at_the_users_line():
    @dfc.function
    def f(n):
        return dfc.stack([0.0] * n)     # the line the error names
    with pytest.raises(dfc.DfcError, match="repeats the list") as e:
        f(np.int32(3))
    assert "test_list_repeat.py" in str(e.value)


def test_a_list_times_a_float_tensor_still_broadcasts_like_numpy():
    @dfc.function
    def g(x):
        return [1.0, 2.0] * x
    np.testing.assert_array_equal(g(np.float32(2)), [2.0, 4.0])
