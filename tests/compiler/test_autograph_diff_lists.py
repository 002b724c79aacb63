"""Differential cases: Python lists appended to in tensor loops (carried as TensorArrays), len of such lists.

Each case runs as plain Python and through dfc.function on every execution path
(tests/compiler/_autograph.py); the results must match.
"""
import pytest

import dfc
from tests.compiler._autograph import Cases, arr, check_matches_python, f32, i32, stack

CASES = Cases()
case = CASES.case


@case((i32(4),), (i32(1),))
def list_append_in_tensor_loop(n):
    out = []
    for i in range(n):
        out.append(i * 2)
    return stack(out)


@case((arr(1, 2, 3),),)
def list_append_over_tensor(xs):
    out = []
    for x in xs:
        out.append(x + 1)
    return stack(out)


@case((f32(2.0),),)
def list_append_python_loop(x):
    out = []
    for i in range(3):
        out.append(x * i)
    return stack(out)


@case((i32(5),),)
def list_append_while(n):
    out = []
    i = 0
    while i < n:
        out.append(i * i)
        i += 1
    return stack(out)


@case((i32(5),),)
def list_nonempty_then_append(n):
    out = [100]
    for i in range(n):
        out.append(i * 1)
    return stack(out)


@case((i32(4),),)
def tensor_array_loop(n):
    ta = dfc.TensorArray("float32") if False else None
    out = []
    for i in range(n):
        out.append(i * 1.5)
    return stack(out)


@case((i32(5),),)
def list_len_after_loop(n):
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(i)
    return len(out)


@pytest.mark.parametrize("fn,arg_sets", CASES, ids=CASES.ids())
def test_matches_python(fn, arg_sets):
    check_matches_python(fn, arg_sets)
