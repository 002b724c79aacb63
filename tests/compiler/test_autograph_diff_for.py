"""Differential cases: `for` over range(tensor), tensors, enumerate/zip and Python lists (and `for ... else`).

Each case runs as plain Python and through dfc.function on every execution path
(tests/compiler/_autograph.py); the results must match.
"""
import numpy as np
import pytest

from tests.compiler._autograph import Cases, arr, check_matches_python, f32, i32

CASES = Cases()
case = CASES.case


@case((i32(5),), (i32(0),), (i32(-2),))
def for_range_tensor(n):
    s = 0
    for i in range(n):
        s += i
    return s


@case((i32(2), i32(9)), (i32(5), i32(5)))
def for_range_start_stop(a, b):
    s = 0
    for i in range(a, b):
        s += i * i
    return s


@case((i32(1), i32(10), i32(3)), (i32(10), i32(1), i32(-2)), (i32(5), i32(1), i32(1)))
def for_range_step(a, b, c):
    s = 0
    for i in range(a, b, c):
        s = s * 2 + i
    return s


@case((arr(1, 2, 3, 4),), (np.zeros([0], np.float32),))
def for_over_tensor(xs):
    s = 0.0
    for x in xs:
        s += x * x
    return s


@case((np.arange(6, dtype=np.float32).reshape(2, 3),), (np.ones([3, 2], np.float32),))
def for_over_2d(m):
    total = 0.0
    for row in m:
        for v in row:
            total += v
    return total


@case((np.arange(6, dtype=np.float32).reshape(3, 2),),)
def for_rows_sum(m):
    acc = m[0] * 0
    for row in m:
        acc = acc + row
    return acc


@case((arr(3, 1, 2),),)
def for_enumerate_tensor(xs):
    s = 0.0
    for i, x in enumerate(xs):
        s += i * x
    return s


@case((arr(3, 1, 2), arr(1, 1, 2)),)
def for_zip_tensors(xs, ys):
    s = 0.0
    for x, y in zip(xs, ys):
        s += x * y
    return s


@case((f32(2.0),),)
def for_python_list_unrolled(x):
    s = x
    for w in [1.0, 2.0, 3.0]:
        s = s * w
    return s


@case((f32(2.0),), (f32(-2.0),))
def for_python_range_with_tensor_if(x):
    for i in range(4):
        if x > 0:
            x = x + i
        else:
            x = x - i
    return x


@case((i32(4),),)
def for_dfc_range(n):
    s = 0
    for i in range(n):
        s += i
    return s


@case((arr(1, 2, 3, 4),), (arr(9, 9),))
def for_else(xs):
    s = 0.0
    for x in xs:
        if x > 5:
            s = -1.0
            break
        s += x
    else:
        s = s * 10
    return s


@case((i32(4),), (i32(0),))
def for_nested_tensor(n):
    s = 0
    for i in range(n):
        for j in range(i):
            s += j
    return s


@case((f32(2.0), i32(3)),)
def for_python_list_of_tensors(x, n):
    parts = [x, x * 2, x * 3]
    s = 0.0
    for p in parts:
        s += p
    return s


@case((i32(3),), (i32(0),))
def for_target_defined_before(n):
    i = -1
    for i in range(n):
        pass
    return i


@case((arr(1, 2, 3),),)
def for_len(xs):
    s = 0.0
    for i in range(len(xs)):
        s += xs[i]
    return s


@case((i32(10),), (i32(3),))
def deep_nesting(n):
    s = 0
    for i in range(n):
        if i % 2 == 0:
            j = 0
            while j < i:
                if j % 3 == 0:
                    s += j
                else:
                    s -= 1
                j += 1
        else:
            s += 100
    return s


@case((arr(1, 2, 3), i32(2)),)
def slicing_in_loop(xs, n):
    s = 0.0
    for i in range(n):
        s += xs[i:i + 2][0]
    return s


@case((f32(2.0), i32(3)), (f32(2.0), i32(0)))
def for_range_len_python(x, n):
    vals = [1.0, 2.0, 3.0]
    s = 0.0
    for i in range(len(vals)):
        if i < n:
            s += vals[i] * x
    return s


@pytest.mark.parametrize("fn,arg_sets", CASES, ids=CASES.ids())
def test_matches_python(fn, arg_sets):
    check_matches_python(fn, arg_sets)
