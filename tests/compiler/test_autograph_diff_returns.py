"""Differential cases: `return` inside tensor `if`s and loops, several returns, code after an early return.

Each case runs as plain Python and through dfc.function on every execution path
(tests/compiler/_autograph.py); the results must match.
"""
import pytest

from tests.compiler._autograph import Cases, arr, check_matches_python, f32, i32

CASES = Cases()
case = CASES.case


@case((f32(2.0),), (f32(-2.0),))
def return_in_if(x):
    if x > 0:
        return x * 10
    return x


@case((f32(2.0),), (f32(-2.0),))
def return_in_both_branches(x):
    if x > 0:
        return x + 1
    else:
        return x - 1


@case((arr(1, 2, -3, 4),), (arr(1, 2),))
def return_in_loop(xs):
    for x in xs:
        if x < 0:
            return x
    return 0.0


@case((i32(12),), (i32(1000),))
def return_in_nested_loops(n):
    for i in range(10):
        for j in range(10):
            if i * j > n:
                return i * 100 + j
    return -1


@case((i32(5),), (i32(50),))
def return_in_while(n):
    i = 0
    while i < 10:
        if i * i > n:
            return i
        i += 1
    return -1


@case((f32(3.0),), (f32(-3.0),), (f32(0.0),))
def multiple_returns(x):
    if x > 0:
        return 1.0
    if x < 0:
        return -1.0
    return 0.0


@case((f32(2.0),), (f32(-2.0),))
def return_tuple_early(x):
    if x > 0:
        return x, x * 2
    return -x, x


@case((i32(3),), (i32(30),))
def return_in_while_true(n):
    i = 0
    while True:
        i += 1
        if i * i > n:
            return i


@case((f32(2.0),), (f32(-2.0),))
def code_after_early_return(x):
    y = x * 2
    if y < 0:
        return y
    y = y + 100
    z = y * 2
    return z


@case((i32(3), i32(3)),)
def early_return_three_levels(a, b):
    for i in range(a):
        for j in range(b):
            k = 0
            while k < 5:
                if i + j + k == 4:
                    return i * 100 + j * 10 + k
                k += 1
    return -1


@case((f32(2.0),), (f32(-2.0),))
def return_none_branch(x):
    y = x
    if x > 0:
        y = x * 2
    return y, None


@case((f32(3.0),),)
def docstring_function(x):
    """A docstring stays a docstring."""
    if x > 0:
        return x
    return -x


@pytest.mark.parametrize("fn,arg_sets", CASES, ids=CASES.ids())
def test_matches_python(fn, arg_sets):
    check_matches_python(fn, arg_sets)
