"""Every conversion error names the variable and the user's file:line."""
import numpy as np
import pytest

import dfc
from dfc.errors import DfcError, DfcConversionError, DfcTypeError
from dfc.compiler.autograph import function
from dfc.compiler.autograph.errors import DfcUndefinedVariableError, DfcUnsupportedSyntaxError
from tests.compiler._autograph import expect, f32, i32, line_of


def test_defined_in_one_branch():
    def f(x):
        if x > 0:  # MARK
            y = x * 2
        return y
    msg = expect(DfcUndefinedVariableError, f, (f32(1.0),), "# MARK", "'y'")
    assert "only one branch" in msg


def test_defined_in_one_branch_python_condition_is_fine():
    def f(x, flag):
        if flag:
            y = x * 2
        return y
    assert function(f)(f32(1.0), True) == 2.0


def test_loop_variable_dtype_change():
    def f(x, n):
        s = n * 0
        while n > 0:  # MARK
            s = s + x
            n -= 1
        return s
    expect(DfcTypeError, f, (f32(1.5), i32(3)), "# MARK", "s")


def test_loop_variable_structure_change():
    def f(n):
        pair = (n, n)
        while n > 0:  # MARK
            pair = (n, n, n)
            n -= 1
        return pair
    msg = expect(DfcTypeError, f, (i32(3),), "# MARK", "'pair'")
    assert "structure" in msg


def test_variable_first_created_in_tensor_loop():
    def f(n):
        i = 0
        while i < n:  # MARK
            last = "a Python value"     # (a tensor is checked at run time instead)
            i += 1
        return last
    msg = expect(DfcUndefinedVariableError, f, (i32(3),), "# MARK", "'last'")
    assert "zero times" in msg


def test_for_target_used_after_tensor_loop():
    def f(n):
        for i in range(n):  # MARK
            pass
        return i
    assert function(f)(i32(3)) == 2     # valid when the loop runs at least once, as in TF
    msg = expect(dfc.DfcAssertionError, f, (i32(0),), "# MARK", "'i'")
    assert "zero times" in msg


def test_yield():
    def f(x):
        yield x  # MARK
    expect(DfcConversionError, f, (f32(1.0),), "# MARK", "yield")


def test_yield_in_nested_position():
    def f(x):
        for i in range(3):
            x = yield x  # MARK
    expect(DfcUnsupportedSyntaxError, f, (f32(1.0),), "# MARK", "yield")


def test_bool_of_tensor():
    def f(x):
        flag = bool(x > 0)  # MARK
        return flag
    with pytest.raises(DfcConversionError) as info:
        function(f)(f32(1.0))
    assert f"test_autograph_errors.py:{line_of(f, '# MARK')}" in str(info.value)
    assert "bool()" in str(info.value)


def test_bool_of_tensor_in_comprehension():
    def f(xs):
        return [v for v in [xs[0], xs[1]] if v > 0]  # MARK
    with pytest.raises(DfcError) as info:
        function(f)(np.array([1.0, 2.0], np.float32))
    assert f"test_autograph_errors.py:{line_of(f, '# MARK')}" in str(info.value)


def test_error_in_loop_body_points_at_user_line():
    def f(a, n):
        i = 0
        while i < n:
            a = dfc.matmul(a, np.ones([3, 3], np.float32))  # MARK
            i += 1
        return a
    with pytest.raises(DfcError) as info:
        function(f)(np.ones([2, 2], np.float32), i32(2))
    assert f"test_autograph_errors.py:{line_of(f, '# MARK')}" in str(info.value)


def test_undefined_in_python_code_names_variable():
    def f(x, flag):
        if flag:
            y = 1
        return x + y  # MARK
    with pytest.raises(DfcUndefinedVariableError) as info:
        function(f)(f32(1.0), False)
    assert "'y'" in str(info.value)
    assert f"test_autograph_errors.py:{line_of(f, '# MARK')}" in str(info.value)


def test_python_value_changes_in_tensor_branch():
    def f(x):
        mode = "a"
        if x > 0:  # MARK
            mode = "b"
        return x, mode
    expect(DfcTypeError, f, (f32(1.0),), "# MARK", "'mode'")


def test_cond_branch_dtype_mismatch_bool():
    def f(x):
        if x > 0:  # MARK
            y = x > 1
        else:
            y = x
        return y
    expect(DfcTypeError, f, (f32(1.0),), "# MARK", "y")


def test_list_length_differs_between_branches():
    def f(x):
        out = []
        if x > 0:  # MARK
            out.append(x)
        return out
    msg = expect(DfcTypeError, f, (f32(1.0),), "# MARK", "'out'")
    assert "TensorArray" in msg
