"""Differential cases: lazy `and` / `or` / `not` and chained comparisons.

Each case runs as plain Python and through dfc.function on every execution path
(tests/compiler/_autograph.py); the results must match.
"""
import pytest

from tests.compiler._autograph import Cases, arr, check_matches_python, f32, i32

CASES = Cases()
case = CASES.case


@case((f32(1.0), f32(2.0)), (f32(-1.0), f32(2.0)), (f32(1.0), f32(-2.0)))
def logical_and(x, y):
    if x > 0 and y > 0:
        r = x + y
    else:
        r = x - y
    return r


@case((f32(1.0), f32(2.0)), (f32(-1.0), f32(-2.0)), (f32(-1.0), f32(2.0)))
def logical_or(x, y):
    if x > 0 or y > 0:
        r = 1.0
    else:
        r = 0.0
    return r


@case((f32(1.0),), (f32(-1.0),))
def logical_not(x):
    if not x > 0:
        x = -x
    return x


@case((arr(1, 2, 3), i32(1)), (arr(1, 2, 3), i32(5)))
def and_short_circuit(xs, i):
    # the right side would index out of range if evaluated
    if i < 3 and xs[i] > 1:
        r = xs[i]
    else:
        r = 0.0
    return r


@case((arr(1, 2, 3), i32(1)), (arr(1, 2, 3), i32(7)))
def or_short_circuit(xs, i):
    if i >= 3 or xs[i] < 0:
        r = -1.0
    else:
        r = xs[i]
    return r


@case((f32(0.5),), (f32(3.0),), (f32(-1.0),))
def chained_comparison(x):
    if 0 < x < 1:
        r = 1.0
    else:
        r = 0.0
    return r


@case((f32(1.0), f32(2.0), f32(3.0)), (f32(3.0), f32(2.0), f32(1.0)))
def multi_and(a, b, c):
    if a < b and b < c and a < c:
        r = a + b + c
    else:
        r = a - b - c
    return r


@case((f32(1.0),), (f32(-1.0),))
def not_in_ifexp(x):
    return 1.0 if not x > 0 else 2.0


@pytest.mark.parametrize("fn,arg_sets", CASES, ids=CASES.ids())
def test_matches_python(fn, arg_sets):
    check_matches_python(fn, arg_sets)
