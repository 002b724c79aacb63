"""Device arrays (cupy on a GPU; here the strict double) as inputs: taken without a host round trip,
ordered after the caller's own work on its stream, copied to the host for host devices and the reference
interpreter, and refused with a clear error where a conversion would be needed."""
import numpy as np
import pytest

import dfc
from dfc.runtime import strict

xp = strict.xp


def _graph():
    def f(x, y):
        return dfc.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * y + 1.0), (0, x))[1]
    spec = dfc.TensorSpec([4], "float32")
    return dfc.trace(f, spec, spec)


def _inputs():
    return np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)


@pytest.mark.parametrize("device", ["strict:0", "strict:1", "cpu:0"])
@pytest.mark.parametrize("mode", ["threads", "reference"])
def test_device_array_inputs_give_the_host_inputs_results(device, mode):
    g = _graph()
    x, y = _inputs()
    want = dfc.Session(g, default_device="cpu:0").call(x, y)
    got = dfc.Session(g, default_device=device, mode=mode).call(xp.asarray(x), xp.asarray(y))
    assert isinstance(got, np.ndarray) and np.array_equal(got, want)


def test_an_input_made_on_the_callers_stream_is_read_after_that_work():
    """The caller's array is still being written on its own non-blocking stream: dfc's compute stream
    must wait for it (the strict double raises StreamOrderError on an unordered read, a race on a GPU)."""
    g = _graph()
    x, y = _inputs()
    with xp.cuda.Device(0):
        stream = xp.cuda.Stream(non_blocking=True)
        with stream:
            dx = xp.asarray(x) * 1.0          # queued on the caller's stream, not yet waited on by dfc
            dy = xp.asarray(y) * 1.0
            got = dfc.Session(g, default_device="strict:0").call(dx, dy)
    assert np.array_equal(got, dfc.Session(g, default_device="cpu:0").call(x, y))


def test_partitioned_graph_takes_a_device_input_on_both_kinds_of_device():
    def f(x):
        with dfc.device("strict:0"):
            a = x * 2.0
        with dfc.device("cpu:0"):
            b = x + 1.0
        return a + b
    g = dfc.trace(f, dfc.TensorSpec([3], "float32"))
    x = np.array([1, 2, 3], np.float32)
    assert np.array_equal(dfc.Session(g).call(xp.asarray(x)), x * 2 + x + 1)


def test_a_device_input_of_another_dtype_is_refused_by_name():
    g = _graph()
    x, y = _inputs()
    with pytest.raises(dfc.DfcInputError, match=r"input 'x': expected float32, got a device array of float64.*astype"):
        dfc.Session(g, default_device="strict:0").call(xp.asarray(x.astype(np.float64)), xp.asarray(y))


def test_a_device_input_of_the_wrong_shape_is_refused_by_name():
    g = _graph()
    x, y = _inputs()
    with pytest.raises(dfc.DfcInputError, match=r"input 'y': dimension 0 must be 4, got 5"):
        dfc.Session(g, default_device="strict:0").call(xp.asarray(x), xp.asarray(np.zeros(5, np.float32)))
