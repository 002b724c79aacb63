"""while_loop's maximum_iterations and parallel_iterations: a value the graph cannot hold as int64 (2**64), a
negative, a float, a string or a bool is a DfcTypeError at the user's file:line (traced, autograph-converted
and eager), never a raw OverflowError or TypeError; valid values keep working."""
import numpy as np
import pytest

import dfc
from tests.compiler._autograph import line_of

HERE = __file__
BAD = [2 ** 64, 2 ** 63, -1, 2.5, 3.0, "3", True, None, np.array([3])]


def _loop(n, key, value):
    return dfc.while_loop(lambda i: i < n, lambda i: i + 1, (0,), **{key: value})  # MARK


def _assert_at_the_call(err, fn=_loop):
    assert isinstance(err, dfc.DfcTypeError), type(err)
    assert f"{HERE}:{line_of(fn, '# MARK')}" in str(err), str(err)


@pytest.mark.parametrize("key", ["maximum_iterations", "parallel_iterations"])
@pytest.mark.parametrize("value", BAD, ids=repr)
def test_a_bad_loop_option_is_a_dfc_error_at_the_users_line(key, value):
    if value is None and key == "maximum_iterations":
        return      # None: no limit
    with pytest.raises(dfc.DfcError) as info:
        dfc.trace(lambda n: _loop(n, key, value), dfc.TensorSpec([], "int64"))
    _assert_at_the_call(info.value)
    assert key in str(info.value)
    with pytest.raises(dfc.DfcError) as info:       # outside a graph (eager) too
        _loop(np.int64(5), key, value)
    _assert_at_the_call(info.value)


def test_a_bad_maximum_iterations_in_a_converted_function_names_its_line():
    def f(n):
        i = dfc.while_loop(lambda i: i < n, lambda i: i + 1, (0,), maximum_iterations=2 ** 64)  # MARK
        return i
    with pytest.raises(dfc.DfcError) as info:
        dfc.function(f)(np.int64(5))
    _assert_at_the_call(info.value, f)


def test_a_float_tensor_as_maximum_iterations_is_refused():
    def f(n, m):
        return _loop(n, "maximum_iterations", m)
    with pytest.raises(dfc.DfcTypeError) as info:
        dfc.trace(f, dfc.TensorSpec([], "int64"), dfc.TensorSpec([], "float64"))
    _assert_at_the_call(info.value)


@pytest.mark.parametrize("key, value, want", [("maximum_iterations", 0, 0), ("maximum_iterations", 3, 3),
                                              ("maximum_iterations", np.int32(2), 2),
                                              ("maximum_iterations", 2 ** 63 - 1, 5),
                                              ("parallel_iterations", 1, 5), ("parallel_iterations", np.int64(7), 5)])
def test_valid_loop_options_still_work(key, value, want):
    g = dfc.trace(lambda n: _loop(n, key, value), dfc.TensorSpec([], "int64"))
    assert int(dfc.Session(g).call(np.int64(5))[0]) == want
    assert int(np.asarray(_loop(np.int64(5), key, value)[0])) == want


def test_a_tensor_maximum_iterations_still_works():
    g = dfc.trace(lambda n, m: _loop(n, "maximum_iterations", m), dfc.TensorSpec([], "int64"),
                  dfc.TensorSpec([], "int32"))
    assert int(dfc.Session(g).call(np.int64(5), np.int32(2))[0]) == 2
