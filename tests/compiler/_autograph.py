"""Helpers shared by the autograph tests.

The differential suites test_autograph_diff_*.py run every case (1) as plain
Python on Python scalars / numpy arrays and (2) through dfc.function with numpy
inputs (tensor control flow in the graph), on every execution path of
tests/conftest.py; the results must match. (3) The same dfc.function run eagerly
(dfc.config.run_functions_eagerly) must give the graph's results exactly: the
same nesting, dtypes and shapes (EAGER_DTYPES_DIFFER lists the documented
exceptions), and leave the same Variable values. `expect` checks that an invalid
program raises a given DfcError naming the user's file:line.
"""
import contextlib
import inspect
import os

import numpy as np
import pytest

import dfc
from dfc.compiler.autograph import function
from tests.conftest import run_all_modes

f32, i32 = np.float32, np.int32


class Cases(list):
    """The (function, argument sets) of one file, registered with @CASES.case(args, args, ...)."""

    def case(self, *arg_sets):
        def register(fn):
            self.append((fn, arg_sets))
            return fn
        return register

    def ids(self):
        return [fn.__name__ for fn, _ in self]


def arr(*values, dtype=np.float32):
    return np.array(values, dtype=dtype)


def stack(xs, axis=0):
    """np.stack in plain Python, dfc.stack when tracing (xs is then a list carried as tensors)."""
    if isinstance(xs, list) and not any(isinstance(x, dfc.Tensor) for x in xs):
        return np.stack(xs, axis=axis) if xs else np.zeros([0], np.float32)
    return dfc.stack(xs, axis=axis)


def check_matches_python(fn, arg_sets):
    converted = function(fn)
    for args in arg_sets:
        expected = fn(*[_py(a) for a in args])
        store = dfc.containers.get()
        before = store.snapshot()
        graph, inputs = converted.concrete(*args)
        actual = run_all_modes(graph, *inputs)          # every execution path, checked against the reference
        _check(actual, expected)
        check_eager_matches(converted, args, actual, before, exact_dtypes=fn.__name__ not in EAGER_DTYPES_DIFFER)


# Cases whose eager results differ from the graph's in dtype only, for a documented reason (docs/eager.md,
# "Where eager differs from the graph"): eagerly `for i in range(n)` gives Python ints, which numpy types as int64
# (float64 once a Python float meets them), where the graph's counter is a weakly typed tensor of n's
# dtype; and a loop that runs zero times leaves `s = 0` a Python int, where the graph gives it the
# dtype the loop body would. Their values and shapes are still checked, and
# test_eager_dtype_exceptions_are_needed checks every entry still differs.
EAGER_DTYPES_DIFFER = {
    "calls_in_loop": "range(tensor) counter",
    "for_range_start_stop": "range(tensor) counter", "for_range_step": "range(tensor) counter",
    "for_target_defined_before": "range(tensor) counter",
    "list_append_in_tensor_loop": "range(tensor) counter", "while_weak_python_scalar": "zero-trip weak scalar",
}


@contextlib.contextmanager
def eager_mode(enable=True):
    """dfc.config.run_functions_eagerly(enable) inside the block (restored afterwards)."""
    old = dfc.config.functions_run_eagerly()
    dfc.config.run_functions_eagerly(enable)
    try:
        yield
    finally:
        dfc.config.run_functions_eagerly(old)


def check_eager_matches(converted, args, graph_result, state_before, exact_dtypes=True):
    """converted(*args) run eagerly, from the Variable state `state_before`, gives `graph_result`
    (same nesting, dtypes, shapes, values) and leaves the Variables as the graph run did.
    Returns whether every dtype matched (with exact_dtypes=False only values and shapes must)."""
    store = dfc.containers.get()
    graph_state = store.snapshot()
    store.restore(state_before)
    with eager_mode():
        got = converted(*args)
    same_dtypes = _check_same(got, graph_result, exact_dtypes)
    eager_state = store.snapshot()
    assert eager_state.keys() == graph_state.keys()
    for name, value in graph_state.items():
        host = [v.get() if hasattr(v, "get") and not isinstance(v, np.ndarray) else v    # DFC_TEST_DEVICE=strict:
                for v in (eager_state[name], value)]                                  # on the device
        np.testing.assert_allclose(*host, rtol=1e-6, err_msg=f"variable {name} (eager)")
    return same_dtypes


def _check_same(got, want, exact_dtypes=True, where="result"):
    """An eager result is the graph's: the same containers, and arrays of the same dtype and shape.
    Returns whether all dtypes matched."""
    same = True
    if isinstance(want, (dict, tuple, list)):
        assert type(got) is type(want), (where, got, want)
        assert len(got) == len(want), (where, got, want)
        keys = list(want) if isinstance(want, dict) else range(len(want))
        if isinstance(want, dict):
            assert list(got) == list(want), (where, got, want)
        for k in keys:
            same = _check_same(got[k], want[k], exact_dtypes, f"{where}[{k!r}]") and same
    elif want is None:
        assert got is None, (where, got)
    else:
        assert isinstance(got, np.ndarray), (where, type(got), got)
        assert got.shape == want.shape, (where, got, want)
        same = got.dtype == want.dtype
        assert same or not exact_dtypes, (where, got, want)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=f"{where} (eager)")
    return same


def _py(v):
    if isinstance(v, np.generic):
        return v.item()
    return v


def _check(actual, expected, rtol=1e-5, atol=1e-6):
    """dfc's result equals Python's: the same nesting, numbers close."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected)
        for k in expected:
            _check(actual[k], expected[k], rtol, atol)
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), (actual, expected)
        for a, e in zip(actual, expected):
            _check(a, e, rtol, atol)
    elif expected is None:
        assert actual is None or (isinstance(actual, np.ndarray) and actual.size == 0), actual
    else:
        np.testing.assert_allclose(np.asarray(actual, dtype=np.float64),
                                   np.asarray(expected, dtype=np.float64), rtol=rtol, atol=atol)


def line_of(fn, marker):
    """The file line number of the first source line of fn containing marker."""
    lines, first = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if marker in line:
            return first + i
    raise AssertionError(marker)


def expect(exc_type, fn, args, marker, *words):
    """fn(*args) through dfc.function raises exc_type naming fn's file and the line with `marker`, and
    every one of `words`; the message."""
    with pytest.raises(exc_type) as info:
        function(fn)(*args)
    message = str(info.value)
    assert f"{os.path.basename(fn.__code__.co_filename)}:{line_of(fn, marker)}" in message, message
    for word in words:
        assert word in message, message
    return message
