"""dfc.function keeps Python's meaning where AutoGraph's own test suite found gaps: jumps in
`finally`, loops that could never end, globals written in control flow.

Valid programs are checked against running the same function as plain Python (on Python
scalars); invalid ones must raise a DfcError naming this file's line.
"""
import numpy as np
import pytest

import dfc
from dfc.compiler.autograph import function
from dfc.compiler.autograph.errors import DfcLoopVariableError
from dfc.errors import DfcConversionError
from tests.compiler._autograph import _check, _py, expect, i32


def same_as_python(fn, *arg_sets, all_modes=None):
    """fn through dfc.function gives what fn gives as plain Python; with all_modes (the fixture),
    the graph of array arguments gives it on every execution path."""
    converted = function(fn)
    for args in arg_sets:
        expected = fn(*[_py(a) for a in args])
        if all_modes is not None and all(isinstance(a, np.generic) for a in args):
            specs = [dfc.TensorSpec([], np.asarray(a).dtype.name) for a in args]
            _check(all_modes(converted.trace(*specs), *args), expected)
        else:
            _check(converted(*args), expected)


# ------------------------------------------------------------------ jumps in `finally`
def return_with_default_in_finally(x):
    try:
        return 2
    finally:
        if x > 0:
            return 1  # noqa: B012 (the case under test)
        return 0  # noqa: B012


def return_in_finally_after_return_in_if(x):
    r = 5
    try:
        if x > 3:
            r = 7
        return r * 2
    finally:
        if x > 1:
            return r  # noqa: B012
        r = r + 100


@pytest.mark.parametrize("fn", [return_with_default_in_finally, return_in_finally_after_return_in_if])
def test_return_in_finally_replaces_the_pending_return(fn):
    same_as_python(fn, (0,), (1,), (2,), (5,))


def test_return_in_finally_on_a_tensor_condition_replaces_the_pending_return(all_modes):
    def f(x):
        r = x * 3
        try:
            r = r + 1
            return r
        finally:
            if x > 1:
                return r * 10  # noqa: B012
            r = r + 40
            if x > 0:
                return r  # noqa: B012
    same_as_python(return_with_default_in_finally, (i32(0),), (i32(1),), all_modes=all_modes)
    same_as_python(f, (0,), (1,), (2,), (i32(0),), (i32(1),), (i32(2),), all_modes=all_modes)


def test_break_in_finally_with_a_break_pending():
    def f(n):
        s = 0
        i = 0
        while i < n:
            i += 1
            try:
                if i > 2:
                    break
                s += i
            finally:
                s += 10
                if s > 100:
                    break  # noqa: B012
                s += 1     # runs after the `try`'s break too
        return s
    same_as_python(f, (0,), (1,), (5,))


def test_return_in_finally_swallows_the_exception_of_the_try():
    def f(x, go):
        try:
            raise KeyError("k")
        finally:
            if go > 0:
                return x * 2  # noqa: B012
            x = x - 1
    same_as_python(f, (3, 1), (i32(3), 1))
    with pytest.raises(KeyError):
        function(f)(i32(3), 0)


def test_continue_in_finally_swallows_the_exception_of_the_try():
    def f(n):
        out = 0
        for k in range(4):
            try:
                if k % 2 == 0:
                    raise ValueError(k)
                out = out + k
            finally:
                continue  # noqa: B012
        return out + n
    same_as_python(f, (1,), (i32(1),))


def test_tensor_decided_return_in_finally_with_an_exception_is_an_error():
    def f(x):
        try:  # MARK
            raise KeyError("k")
        finally:
            if x > 0:
                return x  # noqa: B012
    expect(DfcConversionError, f, (i32(1),), "# MARK", "KeyError", "depends on a tensor")


def test_break_in_finally_that_cancels_a_return_is_an_error():
    def f(n):
        for i in range(n):
            try:
                return i
            finally:
                break  # MARK  # noqa: B012
        return -1
    expect(DfcConversionError, f, (3,), "# MARK", "`break`", "`return`")


def test_continue_in_finally_that_cancels_a_break_is_an_error():
    def f(n):
        i = 0
        while i < n:
            i += 1
            try:
                if i > 2:
                    break
            finally:
                continue  # MARK  # noqa: B012
        return i
    expect(DfcConversionError, f, (5,), "# MARK", "`continue`", "`break`")


# ------------------------------------------------------------------ loops that never end
# AutoGraph's loop_with_variable_type_illegal_cases: dfc lets a loop variable change Python type
# (a Python condition that becomes a tensor) and shape (it becomes unknown), so what is wrong with
# these programs is that they never end; Python would hang too.
def while_with_variable_py_type():
    n = dfc.constant(0, dtype="int32")
    c = True
    while c:  # MARK
        c = dfc.constant(True)
    return n


def while_with_variable_shape():
    t = dfc.constant([1])
    while dfc.constant(True):  # MARK
        t = dfc.constant([1, 1])
    return t


def while_with_shape_erasure():
    t = dfc.constant([1], dtype="int32")
    while dfc.constant(True):  # MARK
        t = dfc.range(dfc.random_uniform((), 2, 3, dtype="int32"))
    return t


@pytest.mark.parametrize("fn", [while_with_variable_py_type, while_with_variable_shape,
                                while_with_shape_erasure])
def test_a_loop_that_never_ends_is_an_error_while_tracing(fn):
    expect(DfcLoopVariableError, fn, (), "# MARK", "never ends")


def test_the_error_names_the_variable_that_keeps_the_loop_going():
    def f(x):
        go = dfc.constant(True)
        while go:  # MARK
            x = x + 1
            go = x > 0
            go = dfc.constant(True)
        return x
    expect(DfcLoopVariableError, f, (i32(1),), "# MARK", "'go'")


def test_loops_that_may_end_or_are_not_reached_still_run():
    def flag_set_by_the_body(x):
        c = True
        while c:
            x = x + 1
            c = x < 5
        return x

    def constant_condition_with_a_tensor_break(x):
        while dfc.constant(True):
            x = x + 2
            if x > 6:
                break
        return x

    def endless_loop_only_on_a_branch_not_taken(x):
        if x > 100:
            while dfc.constant(True):
                x = x + 1
        return x

    def constant_flag_beside_a_counter(n):
        keep, i = True, 0
        while keep and i < n:
            keep = True
            i += 1
        return i
    for fn in (flag_set_by_the_body, constant_condition_with_a_tensor_break,
               endless_loop_only_on_a_branch_not_taken):
        converted = function(fn)
        for x in (i32(0), i32(3), i32(9)):
            got = converted(x)
            want = fn(int(x)) if fn is not endless_loop_only_on_a_branch_not_taken else int(x)
            _check(got, want)
    same_as_python(constant_flag_beside_a_counter, (i32(0),), (i32(4),))


# ------------------------------------------------------------------ globals in control flow
G = None


def global_declared_in_an_if(n):          # AutoGraph's IfStatementTest.test_global_local
    if n > 0:
        global G
        if G is None:
            G = 1
        else:
            G += 1
        n += G
    return n


def global_in_nested_ifs(x):
    global G
    if x > 0:
        if x > 1:
            G = G + 10
        else:
            G = G - 1
    return x + G


def global_in_a_loop(n):                  # AutoGraph's test_mixed_globals_nonglobals
    global G
    i = 0
    j = 0
    G = 0
    while i < n:
        while j < i:
            j += 3
        u = i + j
        G += u
        i += 1
        j = 0
    return G, i, j, n


@pytest.mark.parametrize("fn, start, args", [
    (global_declared_in_an_if, None, [0, 1]), (global_declared_in_an_if, 4, [1]),
    (global_in_nested_ifs, 5, [0, 1, 2]), (global_in_a_loop, None, [0, 5])])
def test_global_written_in_python_control_flow(fn, start, args):
    global G
    for x in args:
        G = start
        want = fn(x)
        want_global = G
        G = start
        _check(function(fn)(x), want)
        assert G == want_global
    G = None


@pytest.mark.parametrize("fn, start", [(global_in_nested_ifs, 5), (global_in_a_loop, None)])
def test_global_written_in_tensor_control_flow(fn, start):
    global G
    for x in (0, 1, 2, 5):
        G = start
        want = fn(x)
        G = start
        _check(function(fn)(i32(x)), want)
    G = None


def test_nonlocal_written_in_a_tensor_loop_and_a_python_if():
    def make():
        total = 0

        def f(x, big):
            nonlocal total
            while x > 0:
                total += 1
                x -= 1
            if big:
                total = total * 10
            return x, total
        return f
    for args in ((i32(3), True), (i32(0), False)):
        _check(function(make())(*args), make()(*[_py(a) for a in args]))
    f = make()
    function(f)(2, True)
    assert f.__closure__[0].cell_contents == 20
