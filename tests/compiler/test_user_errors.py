"""Python mistakes made while a dfc.function is traced are DfcErrors at the user's file:line, with a hint."""
import json
import warnings

import numpy as np
import pytest

import dfc
from dfc.compiler.autograph.errors import DfcUnrolledLoopWarning
from dfc.compiler.autograph.user_errors import DfcTracingError
from tests.compiler._autograph import f32, i32, line_of

HERE = __file__
TABLE = np.arange(5.0)


def raises_at(exc_type, fn, args, marker, *words):
    """dfc.function(fn)(*args) raises a DfcError of exc_type whose message names this file and the
    line of fn holding `marker` (never the converted <dfc:...> source) and each of `words`."""
    with pytest.raises(exc_type) as info:
        dfc.function(fn)(*args)
    err = info.value
    assert isinstance(err, dfc.DfcError), type(err)
    message = str(err)
    assert f"{HERE}:{line_of(fn, marker)}" in message, message
    assert "<dfc:" not in message, message
    for word in words:
        assert word in message, message
    return err


def test_unknown_attribute_of_a_tensor():
    def f(x):
        return x.foo  # MARK
    raises_at(AttributeError, f, (f32(1.0),), "# MARK", "'foo'", "dfc.foo")


def test_numpy_ufunc_on_a_tensor_says_use_the_dfc_function():
    def f(x):
        y = x * 2
        return np.tanh(y)  # MARK
    raises_at(dfc.DfcError, f, (np.ones(3, np.float32),), "# MARK", "use dfc.tanh")


def test_item_assignment_says_tensors_are_immutable():
    def f(x):
        x[0] = 1  # MARK
        return x
    raises_at(dfc.DfcError, f, (np.ones(3, np.float32),), "# MARK",
              "tensors are immutable: use dfc.where / a TensorArray")


def test_numpy_indexing_with_a_tensor_says_use_gather():
    def f(i):
        return TABLE[i] * 2  # MARK
    raises_at(dfc.DfcError, f, (i32(2),), "# MARK", "use dfc.gather")


def test_numpy_conversion_of_a_tensor_fails_fast():
    def f(x):
        a = np.asarray(x)  # MARK
        return a
    raises_at(dfc.DfcError, f, (f32(1.0),), "# MARK", "numpy needs the value")
    with pytest.raises(dfc.DfcError):
        dfc.trace(lambda x: np.array([x, x]), dfc.TensorSpec([], "float32"))


def test_a_python_error_in_user_code_is_a_dfc_error_and_keeps_its_type():
    def f(x):
        table = {"a": 1}
        return x + table["b"]  # MARK
    err = raises_at(KeyError, f, (f32(1.0),), "# MARK", "KeyError", "'b'")
    assert isinstance(err, DfcTracingError)
    assert isinstance(err.original, KeyError) and not isinstance(err.original, dfc.DfcError)
    assert err.__suppress_context__        # the converted code's traceback is not shown


def test_a_library_type_error_on_a_tensor_gets_a_hint():
    def f(x):
        return json.dumps(x)  # MARK
    raises_at(TypeError, f, (f32(1.0),), "# MARK", "not JSON serializable",
              "use the dfc function of the same name")


def test_calling_a_tensor():
    def f(x):
        return x(3)  # MARK
    raises_at(TypeError, f, (f32(1.0),), "# MARK", "not callable", "called like a function")


def _helper(x):
    return x + {}["missing"]  # MARK helper


def test_an_error_in_a_converted_callee_names_the_callee_line():
    def f(x):
        if x > 0:
            x = _helper(x)
        return x
    with pytest.raises(KeyError) as info:
        dfc.function(f)(f32(1.0))
    assert f"{HERE}:{line_of(_helper, '# MARK helper')}" in str(info.value)


def test_recursion_on_a_tensor_condition_is_a_dfc_error():
    @dfc.function
    def fact(n):
        if n <= 1:
            return n * 0 + 1
        return n * fact(n - 1)  # MARK
    with pytest.raises(dfc.DfcError) as info:
        fact(i32(4))
    message = str(info.value)
    assert f"{HERE}:{line_of(fact.python_function, '# MARK')}" in message, message
    assert "recursion" in message and "loop" in message, message


def test_recursion_on_a_python_value_still_works():
    @dfc.function
    def power(x, k):
        if k == 0:
            return x * 0 + 1
        return x * power(x, k - 1)
    assert power(f32(2.0), 5) == 32.0


def test_break_on_a_tensor_in_a_python_range_loop_warns_that_it_was_unrolled():
    def f(x):
        s = x * 0
        for i in range(6):  # MARK
            if s > x:
                break
            s = s + i
        return s

    def plain(x):
        s = x * 0
        for i in range(6):
            if s > x:
                break
            s = s + i
        return s
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = dfc.function(f)(f32(2.5))
    assert got == plain(2.5)
    unrolled = [w for w in caught if issubclass(w.category, DfcUnrolledLoopWarning)]
    assert len(unrolled) == 1, [str(w.message) for w in caught]
    w = unrolled[0]
    assert (w.filename, w.lineno) == (HERE, line_of(f, "# MARK"))
    assert "unrolled" in str(w.message) and "use dfc.range" in str(w.message)


def test_a_tensor_range_loop_with_break_does_not_warn():
    def f(x, n):
        s = x * 0
        for i in range(n):
            if s > x:
                break
            s = s + 1.0
        return s
    with warnings.catch_warnings():
        warnings.simplefilter("error", DfcUnrolledLoopWarning)
        assert dfc.function(f)(f32(2.5), i32(6)) == 3.0


def _plain_loss(x):
    """Plain Python control flow on tensors: converted by value_and_grad."""
    if x > 0:
        y = x * x
    else:
        y = -3.0 * x
    k = 0
    while y < 10.0:
        y = y * 1.5
        k += 1
    return y


def _plain_loss_python(x):
    y = x * x if x > 0 else -3.0 * x
    while y < 10.0:
        y = y * 1.5
    return y


@pytest.mark.parametrize("x", [0.7, 2.0, -0.4])
def test_value_and_grad_converts_a_plain_function(x):
    value, grad = dfc.value_and_grad(_plain_loss)(np.float64(x))
    assert np.isclose(value, _plain_loss_python(x))
    eps = 1e-6
    fd = (_plain_loss_python(x + eps) - _plain_loss_python(x - eps)) / (2 * eps)
    assert np.isclose(grad, fd, rtol=1e-5), (grad, fd)


def test_value_and_grad_converts_inside_a_trace():
    def f(x):
        return dfc.value_and_grad(_plain_loss)(x)
    g = dfc.trace(f, dfc.TensorSpec([], "float64"))
    value, grad = g(np.float64(2.0))
    assert np.isclose(value, _plain_loss_python(2.0))
    assert np.isclose(grad, 2 * 2.0 * 1.5 ** 3)      # y = 4 -> 6 -> 9 -> 13.5


class ConfigError(ValueError):
    """A user's own exception type."""


def test_a_users_own_exception_type_still_catches_the_translation():
    def f(x):
        if x.shape != (2,):
            raise ConfigError(f"x must have shape (2,), not {x.shape}")  # MARK
        return x
    err = raises_at(ConfigError, f, (np.ones(3, np.float32),), "# MARK", "ConfigError",
                    "x must have shape (2,), not (3,)")
    assert type(err.original) is ConfigError


def _bad_loss(x):
    if x > 0:
        x = x * {"scale": 2.0}["scael"]  # MARK
    return x


def test_a_python_error_in_a_value_and_grad_function_names_its_line():
    with pytest.raises(KeyError) as info:
        dfc.value_and_grad(_bad_loss)(np.float64(1.0))
    assert isinstance(info.value, dfc.DfcError)
    assert f"{HERE}:{line_of(_bad_loss, '# MARK')}" in str(info.value), str(info.value)
