"""Helpers shared by the autograph tests.

The differential suites test_autograph_diff_*.py run every case (1) as plain
Python on Python scalars / numpy arrays and (2) through dfc.function with numpy
inputs (tensor control flow in the graph), on every execution path of
tests/conftest.py; the results must match. `expect` checks that an invalid
program raises a given DfcError naming the user's file:line.
"""
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
        graph, inputs = converted.concrete(*args)
        actual = run_all_modes(graph, *inputs)          # every execution path, checked against the reference
        _check(actual, expected)


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
