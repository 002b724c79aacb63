"""A Python float meeting an integer tensor computes in float64, as numpy does, and stays weakly typed:
float64 programs keep float64 precision, float32 tensors keep float32."""
import numpy as np

import dfc
from dfc.compiler.autograph import function
from tests.conftest import run_all_modes


def _trace(fn, *args):
    return function(fn).trace(*[dfc.TensorSpec(np.shape(a), np.asarray(a).dtype.name) for a in args])


def _numpy_sum(n):
    s = np.float64(0.0)
    for t in range(n):
        s = s + np.cos(1.2 * (np.int64(t) + 1))
    return s


def test_a_python_float_times_a_counter_computes_in_float64_like_numpy():
    def f(s, n):
        t = 0                                   # a weakly typed int64 counter
        while t < n:
            s = s + dfc.cos(1.2 * (t + 1))
            t += 1
        return s

    g = _trace(f, np.float64(0), np.int64(50))
    got = run_all_modes(g, np.float64(0), np.int64(50))
    assert got.dtype == np.float64
    assert got == _numpy_sum(50)                # float32 cosines were off by ~1e-5 relative


def test_the_scaled_counter_is_float64_and_weak():
    def f(n):
        t = 0
        while t < n:
            t += 1
        return 1.2 * (t + 1), 0.5 / (t + 1), -t

    g = _trace(f, np.int64(3))
    a, b, c = run_all_modes(g, np.int64(3))
    assert a.dtype == np.float64 and a == 1.2 * 4 and b.dtype == np.float64 and c.dtype == np.int64


def test_float32_tensors_stay_float32():
    def f(x, n):
        t = 0
        while t < n:
            x = x * dfc.cos(1.2 * t) + 0.5 * t - (t / 3) + 1.5  # every weak value meets float32 x
            t += 1
        return x, x * 2.5

    x = np.ones(3, np.float32)
    g = _trace(f, x, np.int64(4))
    got, scaled = run_all_modes(g, x, np.int64(4))
    assert got.dtype == np.float32 and scaled.dtype == np.float32
    want = x.copy()
    for t in range(4):
        want = want * np.float32(np.cos(1.2 * t)) + np.float32(0.5 * t) - np.float32(t / 3) + np.float32(1.5)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_an_int64_input_times_a_python_float_is_float64_as_in_numpy():
    def f(t):
        return dfc.cos(1.2 * (t + 1))

    t = np.arange(5, dtype=np.int64)
    got = run_all_modes(_trace(f, t), t)
    want = np.cos(1.2 * (t + 1))
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_array_equal(got, want)
