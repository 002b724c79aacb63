"""Differential cases: `break` and `continue` in tensor loops, at one to three levels of nesting.

Each case runs as plain Python and through dfc.function on every execution path
(tests/compiler/_autograph.py); the results must match.
"""
import pytest

from tests.compiler._autograph import Cases, arr, check_matches_python, f32, i32

CASES = Cases()
case = CASES.case


@case((i32(10),), (i32(2),))
def while_else_break(n):
    i = 0
    found = -1
    while i < n:
        if i == 5:
            found = i
            break
        i += 1
    else:
        found = 100
    return found


@case((i32(20),), (i32(3),))
def while_true_break(n):
    i = 0
    while True:
        i += 3
        if i > n:
            break
    return i


@case((i32(10),), (i32(1),))
def while_continue(n):
    i = 0
    s = 0
    while i < n:
        i += 1
        if i % 3 == 0:
            continue
        s += i
    return s


@case((arr(1, 2, 3, 4, 5),), (arr(-1, 2),))
def for_break(xs):
    s = 0.0
    for x in xs:
        if x < 0:
            break
        s += x
    return s


@case((arr(1, -2, 3, -4, 5),),)
def for_continue(xs):
    s = 0.0
    for x in xs:
        if x < 0:
            continue
        s += x
    return s


@case((i32(5),), (i32(2),))
def for_nested_break_inner(n):
    s = 0
    for i in range(n):
        for j in range(n):
            if j > i:
                break
            s += 1
    return s


@case((i32(5),), (i32(3),))
def for_nested_break_outer(n):
    s = 0
    stop = False
    for i in range(n):
        for j in range(n):
            if i * j > 4:
                stop = True
                break
            s += 1
        if stop:
            break
    return s


@case((i32(6),),)
def for_nested_continue(n):
    s = 0
    for i in range(n):
        if i % 2 == 0:
            continue
        for j in range(n):
            if j % 3 == 0:
                continue
            s += i * j
    return s


@case((f32(5.0),), (f32(-5.0),))
def for_python_break_on_tensor(x):
    s = 0.0
    for w in [1.0, 2.0, 3.0, 4.0]:
        if x < w:
            break
        s += w
    return s


@case((i32(8),), (i32(1),))
def break_continue_same_loop(n):
    s = 0
    for i in range(20):
        if i >= n:
            break
        if i % 2 == 1:
            continue
        s += i
    return s


@case((i32(8),),)
def break_at_three_levels(n):
    s = 0
    for i in range(n):
        if i > 5:
            break
        for j in range(n):
            if j > i:
                break
            k = 0
            while True:
                k += 1
                if k > j:
                    break
                s += 1
    return s


@case((i32(6),),)
def continue_at_three_levels(n):
    s = 0
    for i in range(n):
        if i == 1:
            continue
        for j in range(n):
            if j == 2:
                continue
            k = 0
            while k < 3:
                k += 1
                if k == 2:
                    continue
                s += i + j + k
    return s


@pytest.mark.parametrize("fn,arg_sets", CASES, ids=CASES.ids())
def test_matches_python(fn, arg_sets):
    check_matches_python(fn, arg_sets)
