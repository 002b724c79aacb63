"""dfc.function never silently changes a program's meaning (issue 9, section 2): tensor `if`
state, one-branch dict keys, implicit `return None`, branch dtypes, `del`, `try`, lazy `and`/`or`,
chained comparisons, functools.wraps decorators.

Valid programs are checked against running them as plain Python; invalid ones must raise a
DfcError naming this file's line.
"""
import functools

import numpy as np
import pytest

import dfc
from dfc.compiler.autograph import function
from dfc.compiler.autograph.errors import DfcUndefinedVariableError, DfcUnsupportedSyntaxError
from dfc.errors import DfcError, DfcRuntimeError, DfcTypeError
from tests.compiler._autograph import _py, expect, f32, i32, line_of

HERE = "test_autograph_semantics_if.py"


def matches_python(fn, *arg_sets):
    """fn through dfc.function (numpy arguments are graph inputs) equals fn as plain Python."""
    converted = function(fn)
    for args in arg_sets:
        expected = fn(*[_py(a) for a in args])
        actual = converted(*args)
        np.testing.assert_allclose(np.asarray(actual, np.float64), np.asarray(expected, np.float64),
                                   err_msg=f"{fn.__name__}{args}")


# ---------------------------------------- 1. each branch starts from the values before the `if`
def test_variable_modified_in_both_branches_and_dead_after_if():
    def g(c):
        i = 0
        if c:
            i += 1
            y = 0
        else:
            y = i
            i += 2
        i = 5
        return y
    matches_python(g, (np.bool_(False),), (np.bool_(True),))


def test_nested_ifs_do_not_leak_between_branches():
    def g(c, d):
        i = 0
        if c:
            if d:
                i += 1
                y = i
            else:
                y = i + 10
                i += 2
        else:
            y = i + 100
            i += 3
        i = 5
        return y
    matches_python(g, *[(np.bool_(c), np.bool_(d)) for c in (True, False) for d in (True, False)])


def test_if_in_tensor_loop_with_branch_local_variable():
    def g(n):
        s = 0
        k = 0
        while k < n:
            i = k
            if i % 2 == 0:
                i = i + 1
                y = i
            else:
                y = i * 10
                i = i + 2
            s = s + y
            k += 1
        return s
    matches_python(g, (i32(5),), (i32(0),))


def test_variable_modified_in_tensor_loop_and_dead_after_it():
    def g(n):
        j = 10
        i = 0
        while i < n:
            j = j - 1
            i += 1
        j = 0
        return i + j
    matches_python(g, (i32(3),), (i32(0),))


def test_tensor_ifs_in_unrolled_python_loop():
    def g(x):
        acc = 0
        tmp = 1
        for v in [1, 2, 3]:
            if x > v:
                tmp = tmp + v
                acc = acc + tmp
            else:
                acc = acc + tmp * 10
        return acc
    matches_python(g, (i32(0),), (i32(2),), (i32(5),))


def test_closure_in_other_branch_sees_value_before_if():
    def g(x):
        scale = 1.0

        def apply(v):
            return v * scale
        if x > 0:
            scale = 2.0
            y = apply(x)
        else:
            y = apply(x)
        return y
    matches_python(g, (f32(-1.0),), (f32(3.0),))


def test_closure_called_after_if_sees_branch_value():
    def g(x):
        scale = 1.0

        def apply(v):
            return v * scale
        if x > 0:
            scale = 2.0
        return apply(x)
    matches_python(g, (f32(-1.0),), (f32(3.0),))


def test_closure_called_in_tensor_loop_sees_each_iteration():
    def g(n):
        scale = 1.0
        s = 0.0
        get = lambda: scale  # noqa: E731
        i = 0
        while i < n:
            s = s + get()
            scale = 5.0
            i += 1
        return s
    matches_python(g, (i32(3),), (i32(0),))


# ---------------------------------------- 2. a dict key / attribute set in one branch
def test_dict_key_set_only_in_true_branch():
    def g(a):
        x = {"a": a}
        if x["a"] > 0:  # MARK
            x["b"] = 1
        return x
    expect(DfcUndefinedVariableError, g, (f32(1.0),), "# MARK", "x['b']", "one branch")


def test_dict_key_set_only_in_else_branch():
    def g(a):
        x = {"a": a}
        if x["a"] > 0:  # MARK
            pass
        else:
            x["b"] = 1
        return x
    expect(DfcUndefinedVariableError, g, (f32(1.0),), "# MARK", "x['b']", "one branch")


def test_attribute_set_only_in_true_branch():
    class Box:
        pass

    def g(a):
        box = Box()
        box.v = a
        if a > 0:  # MARK
            box.w = a * 2
        return box.v
    expect(DfcUndefinedVariableError, g, (f32(1.0),), "# MARK", "box.w", "one branch")


def test_dict_key_set_in_both_branches():
    def g(a):
        x = {"a": a}
        if x["a"] > 0:
            x["b"] = a * 2
        else:
            x["b"] = a - 1
        return x["b"] + x["a"]
    matches_python(g, (f32(1.0),), (f32(-3.0),))


# ---------------------------------------- 3. a tensor on one path, the end of the function on another
def test_tensor_return_on_one_path_and_falling_off_the_end():
    def g(x):
        if x > 0:  # MARK
            return x
    msg = expect(DfcError, g, (f32(-1.0),), "# MARK", "return")
    assert "None" in msg


def test_tensor_return_in_loop_and_falling_off_the_end():
    def g(x, n):
        i = 0
        while i < n:  # MARK: the end of the function follows this loop
            if x > i:
                return x
            i += 1
    expect(DfcError, g, (f32(5.0), i32(3)), "# MARK", "return")


def test_early_tensor_return_then_final_return():
    def g(x):
        if x > 0:
            return x * 2
        y = x - 1
        return y
    matches_python(g, (f32(1.5),), (f32(-2.0),))


def test_return_from_while_true():
    def g(x):
        while True:
            if x > 10:
                return x
            x = x * 2
    matches_python(g, (f32(1.5),), (f32(20.0),))


def test_return_in_every_branch():
    def g(x):
        if x > 0:
            return x
        else:
            return -x
    matches_python(g, (f32(1.5),), (f32(-2.0),))


# ---------------------------------------- 4. branch dtypes
def test_int32_and_float32_branches_are_an_error():
    def g(c, a, b):
        if c:  # MARK
            y = a
        else:
            y = b
        return y
    expect(DfcTypeError, g, (np.bool_(True), i32(1), f32(2.0)), "# MARK", "'y'", "int32",
           "float32")


def test_numpy_float64_and_float32_branches_are_an_error():
    def g(c, b):
        if c:  # MARK
            y = np.float64(0.5)
        else:
            y = b
        return y
    expect(DfcTypeError, g, (np.bool_(True), f32(2.0)), "# MARK", "'y'", "float64")


def test_weak_literal_takes_other_branch_dtype():
    def g(c, b):
        if c:
            y = 0
        else:
            y = b
        return y
    out = function(g)(np.bool_(True), f32(2.5))
    assert out.dtype == np.float32 and out == 0
    assert function(g)(np.bool_(False), f32(2.5)) == f32(2.5)


def test_python_float_against_int_tensor_keeps_its_value():
    def g(c, b):
        if c:
            y = 0.5
        else:
            y = b
        return y
    matches_python(g, (np.bool_(True), i32(3)), (np.bool_(False), i32(3)))


def test_python_float_against_int_tensor_in_conditional_expression():
    def g(c, b):
        return 0.5 if c else b

    def h(c, b):
        return dfc.cond(c, lambda: b, lambda: 0.5)
    matches_python(g, (np.bool_(True), i32(3)), (np.bool_(False), i32(3)))
    graph = dfc.trace(h, dfc.TensorSpec([], "bool"), dfc.TensorSpec([], "int32"))
    assert graph(np.bool_(False), i32(3)) == 0.5


def test_python_int_against_bool_tensor():
    def g(c, a):
        if c:
            y = 5
        else:
            y = a > 0
        return y

    def h(c, a):
        y = 0
        if c:
            y = a > 0
        return y
    matches_python(g, (np.bool_(True), f32(1.0)), (np.bool_(False), f32(1.0)))
    assert function(h)(np.bool_(True), f32(1.0)).dtype == np.bool_


# ---------------------------------------- 5. del in a tensor `if`
def test_del_in_both_branches():
    def g(c, a):
        x = a * 2
        y = a
        if c:
            y = x + 1
            del x
        else:
            del x
        return y
    matches_python(g, (np.bool_(True), f32(1.0)), (np.bool_(False), f32(1.0)))


def test_use_after_del_in_both_branches():
    def g(c, a):
        x = a
        if c:
            del x
        else:
            del x
        return x + 1  # MARK
    expect(DfcUndefinedVariableError, g, (np.bool_(True), f32(1.0)), "# MARK", "'x'")


def test_del_in_one_branch_then_used():
    def g(c, a):
        x = a
        if c:  # MARK
            del x
        return x
    expect(DfcUndefinedVariableError, g, (np.bool_(True), f32(1.0)), "# MARK", "'x'",
           "one branch")


def test_del_of_unbound_name_is_still_python_error():
    def g(a, flag):
        if flag:
            x = a
        del x
        return a
    with pytest.raises((NameError, DfcUndefinedVariableError)):
        function(g)(f32(1.0), False)


# ---------------------------------------- 6. try / except / finally
def test_try_with_python_loops_and_jumps():
    def g(x):
        try:
            for i in range(3):
                if i == 1:
                    continue
                x = x + i
        except ValueError:
            x = x - 100
        finally:
            x = x * 2
        return x
    matches_python(g, (f32(1.0),))


def test_break_inside_try_runs_finally():
    def g(x, k):
        for i in range(4):
            try:
                if i == k:
                    break
                x = x + 1
            finally:
                x = x * 2
        return x
    matches_python(g, (f32(1.0), 2), (f32(1.0), 7))


def test_return_inside_try_and_except():
    def g(x, d):
        try:
            return x + d["k"]
        except KeyError:
            pass
        return x - 1
    matches_python(g, (f32(1.0), {}), (f32(1.0), {"k": 2.0}))


def test_try_inside_tensor_branch():
    def g(x):
        if x > 0:
            try:
                y = x.no_such_attribute
            except AttributeError:
                y = x * 2
        else:
            y = x
        return y
    matches_python(g, (f32(3.0),), (f32(-3.0),))


def test_tensor_if_inside_try_is_an_error():
    def g(x):
        try:
            if x > 0:  # MARK
                x = x + 1
        except ValueError:
            pass
        return x
    expect(DfcUnsupportedSyntaxError, g, (f32(1.0),), "# MARK", "try", "`if`")


def test_tensor_loops_inside_try_are_errors():
    def w(x):
        try:
            while x < 10:  # MARK
                x = x + 1
        finally:
            pass
        return x

    def f(x, n):
        try:
            for _ in range(n):  # MARK
                x = x + 1
        except ValueError:
            pass
        return x
    expect(DfcUnsupportedSyntaxError, w, (f32(1.0),), "# MARK", "try", "`while`")
    expect(DfcUnsupportedSyntaxError, f, (f32(1.0), i32(2)), "# MARK", "try", "`for`")


# ---------------------------------------- 7. lazy and/or: the right side never fails while tracing
def linear_search(a, n, t):
    i = 0
    while i < n and a[i] != t:
        i += 1
    return i


def test_and_guarding_index_into_empty_array():
    empty = np.zeros(0, np.int32)
    assert function(linear_search)(empty, i32(0), i32(3)) == 0 == linear_search([], 0, 3)
    matches_python(linear_search, (np.arange(5, dtype=np.int32), i32(5), i32(3)),
                   (np.arange(5, dtype=np.int32), i32(5), i32(9)))


def test_and_guarded_index_fails_at_run_time_when_taken():
    with pytest.raises(DfcRuntimeError) as info:
        function(linear_search)(np.zeros(0, np.int32), i32(2), i32(3))
    assert f"{HERE}:{line_of(linear_search, 'while')}" in str(info.value)


def test_or_guarding_index_into_empty_array():
    def g(a, n):
        k = 0
        if n <= 0 or a[0] > 0:
            k = 1
        return k
    empty = np.zeros(0, np.float32)
    assert function(g)(empty, i32(0)) == 1 == g([], 0)
    with pytest.raises(DfcRuntimeError):
        function(g)(empty, i32(1))


def test_conditional_expression_guarding_index():
    def g(a, c):
        return a[0] if c else 1.5

    def h(a, c):
        return 1.5 if c else a[0]
    empty = np.zeros(0, np.float32)
    assert function(g)(empty, np.bool_(False)) == 1.5
    assert function(h)(empty, np.bool_(True)) == 1.5
    with pytest.raises(DfcRuntimeError) as info:
        function(g)(empty, np.bool_(True))
    assert f"{HERE}:{line_of(g, 'a[0]')}" in str(info.value)
    matches_python(h, (np.ones(2, np.float32), np.bool_(False)))


# ---------------------------------------- 8. chained comparisons
def test_chained_comparison_evaluates_each_operand_once():
    calls = []

    def mid(x):
        calls.append("mid")
        return x * 2

    def hi(x):
        calls.append("hi")
        return x + 10

    def g(x):
        return 0 < mid(x) < hi(x)
    function(g).trace(dfc.TensorSpec([], "float32"))
    assert sorted(calls) == ["hi", "mid"]
    matches_python(g, (f32(-1.0),), (f32(1.0),), (f32(20.0),))


def test_chained_comparison_short_circuits_like_python():
    seen = []

    def mid(x):
        seen.append("mid")
        return x

    def hi(x):
        seen.append("hi")
        return 10

    def g(x):
        return 0 < mid(x) < hi(x)
    for x in (-1, 5, 20):
        seen.clear()
        expected = g(x)
        python_calls = list(seen)
        seen.clear()
        assert function(g)(x) == expected   # Python scalars are static: Python semantics
        assert seen == python_calls


# ---------------------------------------- 9. functools.wraps decorators
def add_hundred(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) + 100
    return wrapper


def clamp_at_zero(fn):
    @functools.wraps(fn)
    def wrapper(x):
        y = fn(x)
        if y < 0:
            y = y * 0
        return y
    return wrapper


@add_hundred
def doubled(x):
    return x * 2


@clamp_at_zero
def shifted(x):
    return x - 3


def test_wraps_decorator_runs_the_wrapper():
    matches_python(doubled, (f32(1.5),))
    assert function(doubled)(x=f32(1.5)) == 103.0
    assert "wrapper" in function(doubled).code


def test_wraps_decorator_with_tensor_control_flow():
    matches_python(shifted, (f32(1.0),), (f32(5.0),))


def test_wraps_decorated_function_called_from_converted_code():
    def g(x):
        return doubled(x) + shifted(x)
    matches_python(g, (f32(1.0),), (f32(5.0),))
