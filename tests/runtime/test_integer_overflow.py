"""Integer arithmetic wraps exactly as numpy's does on every execution path, compiled loops included: numba
marks signed +, -, * and negation as never overflowing, so LLVM could drop a loop test that depends on a
wrapped value (`while i >= 0: i = i + 2**62` ran five times compiled, twice in numpy). Each program's
loop condition reads the wrapped value; run_all_modes compares every path with the reference interpreter
and the test compares that with plain numpy."""
import numpy as np
import pytest

import dfc
from tests.compiledtools import _no_compile_budget  # noqa: F401 (fixture)
from tests.conftest import run_all_modes

pytestmark = pytest.mark.host_devices("numba-compiled loop frames are CPU machine code")
pytest.importorskip("numba")

MIN64, MIN32 = np.iinfo(np.int64).min, np.iinfo(np.int32).min


def _loop(cond, body, dtype, *init):
    """The graph of while_loop(cond, body) over scalars of dtype."""
    def f(*xs):
        return dfc.while_loop(cond, body, xs)
    g = dfc.trace(f, *[dfc.TensorSpec([], dtype)] * len(init))
    return g


def _numpy(cond, body, dtype, *init):
    xs = tuple(np.array(v, dtype) for v in init)
    with np.errstate(over="ignore"):
        while cond(*xs):
            xs = tuple(np.asarray(v, dtype) for v in body(*xs))
    return xs


def _check(cond, body, np_cond, np_body, dtype, *init):
    g = _loop(cond, body, dtype, *init)
    args = [np.array(v, dtype)[()] for v in init]
    got = run_all_modes(g, *args)
    want = _numpy(np_cond, np_body, dtype, *init)
    assert [np.asarray(v).dtype for v in got] == [np.dtype(dtype)] * len(init)
    assert [int(v) for v in got] == [int(v) for v in want]
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    s.call(*args)
    assert {v["status"] for v in s.compiled_frames().values()} == {"compiled"}, s.compiled_frames()
    return want


@pytest.mark.parametrize("dtype, step", [("int64", 2 ** 62), ("int32", 2 ** 30)])
def test_an_addition_that_wraps_ends_the_loop(dtype, step):
    want = _check(lambda i, k: dfc.logical_and(i >= 0, k < 5), lambda i, k: (i + step, k + 1),
                  lambda i, k: i >= 0 and k < 5, lambda i, k: (i + np.array(step, dtype), k + 1), dtype, 0, 0)
    assert [int(v) for v in want] == [np.iinfo(dtype).min, 2]


@pytest.mark.parametrize("dtype, step", [("int64", 2 ** 62), ("int32", 2 ** 30)])
def test_a_subtraction_that_wraps_ends_the_loop(dtype, step):
    want = _check(lambda j, k: dfc.logical_and(j <= 0, k < 5), lambda j, k: (j - step, k + 1),
                  lambda j, k: j <= 0 and k < 5, lambda j, k: (j - np.array(step, dtype), k + 1), dtype, 0, 0)
    assert int(want[1]) == 3 and int(want[0]) > 0


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_a_product_that_wraps_ends_the_loop(dtype):
    want = _check(lambda m, k: dfc.logical_and(m > 0, k < 100), lambda m, k: (m * 3, k + 1),
                  lambda m, k: m > 0 and k < 100, lambda m, k: (m * np.array(3, dtype), k + 1), dtype, 1, 0)
    assert int(want[1]) < 100 and int(want[0]) <= 0


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_negation_abs_and_square_of_the_extremes_wrap(dtype):
    """-MIN and abs(MIN) are MIN (still negative); (2**(bits/2))**2 is 0: each keeps the loop going."""
    half = 2 ** (np.iinfo(dtype).bits // 2)
    want = _check(
        lambda x, h, k: dfc.logical_and(dfc.logical_and(-x < 0, dfc.abs(x) < 0),
                                        dfc.logical_and(dfc.square(h) == 0, k < 4)),
        lambda x, h, k: (x, h, k + 1),
        lambda x, h, k: -x < 0 and abs(x) < 0 and h * h == 0 and k < 4,
        lambda x, h, k: (x, h, k + 1), dtype, np.iinfo(dtype).min, half, 0)
    assert int(want[2]) == 4


def test_min_floordiv_minus_one_is_min():
    want = _check(lambda x, d, k: dfc.logical_and(dfc.floordiv(x, d) < 0, k < 3),
                  lambda x, d, k: (x, d, k + 1),
                  lambda x, d, k: x // d < 0 and k < 3, lambda x, d, k: (x, d, k + 1), "int64", MIN64, -1, 0)
    assert int(want[2]) == 3


@pytest.mark.parametrize("dtype, step", [("int64", 2 ** 62), ("int32", 2 ** 30)])
def test_integer_arrays_and_variables_wrap_in_compiled_loops(dtype, step):
    """An array stepped past the maximum, and a Variable's assign_add: the loop stops on the wrapped values."""
    counter = dfc.Variable(np.array(0, dtype), name=f"overflow_counter_{dtype}")

    def f(v, n):
        def body(v, k):
            counter.assign_add(np.array(step, dtype))
            return v + np.array(step, dtype), k + 1
        def cond(v, k):
            return dfc.logical_and(dfc.logical_and(dfc.reduce_min(v) >= 0, counter.read_value() >= 0), k < n)
        return dfc.while_loop(cond, body, (v, dfc.constant(np.array(0, dtype))))
    g = dfc.trace(f, dfc.TensorSpec([3], dtype), dfc.TensorSpec([], dtype))
    v0 = np.array([0, 1, 2], dtype)
    got_v, got_k = run_all_modes(g, v0, np.array(10, dtype)[()])
    with np.errstate(over="ignore"):
        want_v = v0 + np.array(step, dtype) + np.array(step, dtype)
    np.testing.assert_array_equal(got_v, want_v)
    assert int(got_k) == 2 and int(counter.numpy()) == np.iinfo(dtype).min
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    s.call(v0, np.array(10, dtype)[()])
    assert {v["status"] for v in s.compiled_frames().values()} == {"compiled"}, s.compiled_frames()
