"""Differential cases: `while` loops (and `while ... else`) with tensor conditions, and what they carry.

Each case runs as plain Python and through dfc.function on every execution path
(tests/compiler/_autograph.py); the results must match.
"""
import pytest

from tests.compiler._autograph import Cases, arr, check_matches_python, f32, i32

CASES = Cases()
case = CASES.case


@case((f32(2.0), i32(5)), (f32(1.5), i32(0)))
def while_basic(x, n):
    s = 0.0
    while n > 0:
        if n % 2 == 0:
            s += x
        n -= 1
    return s


@case((i32(27),), (i32(1),), (i32(6),))
def collatz(n):
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


@case((i32(3), i32(4)), (i32(0), i32(4)))
def while_nested(a, b):
    total = 0
    i = 0
    while i < a:
        j = 0
        while j < b:
            total += i * j
            j += 1
        i += 1
    return total


@case((i32(10),), (i32(0),))
def while_else(n):
    i = 0
    while i < n:
        i += 2
    else:
        i = i * 10
    return i


@case((f32(100.0),), (f32(0.5),))
def while_data_dependent(x):
    count = 0
    while x > 1:
        x = x / 2
        count += 1
    return x, count


@case((i32(5),), (i32(0),))
def while_zero_trip(n):
    s = 7
    while n > 100:
        s += 1
    return s + n


@case((i32(5), i32(3)), (i32(2), i32(0)))
def while_mixed_python_tensor_cond(n, m):
    i = 0
    limit = 4  # Python
    while i < limit and i < n:
        i += 1
    j = 0
    while j < m and j < 10:
        j += 2
    return i, j


@case((f32(3.0),), (f32(-3.0),))
def cond_in_while_in_cond(x):
    r = 0.0
    if x > 0:
        i = 0
        while i < 5:
            if i % 2 == 0:
                r += x
            else:
                r -= 1
            i += 1
    else:
        r = -x
    return r


@case((i32(4),), (i32(0),))
def while_tuple_state(n):
    a, b = 0, 1
    while n > 0:
        a, b = b, a + b
        n -= 1
    return a, b


@case((i32(7),), (i32(0),))
def while_dict_state(n):
    d = {"even": 0, "odd": 0}
    i = 0
    while i < n:
        if i % 2 == 0:
            d["even"] += 1
        else:
            d["odd"] += 1
        i += 1
    return d["even"], d["odd"]


@case((f32(1.0), i32(3)), (f32(2.0), i32(0)))
def while_weak_python_scalar(x, n):
    s = 0
    while n > 0:
        s += x
        n -= 1
    return s


@case((f32(2.0), i32(3)),)
def attribute_loop_var(x, n):
    class State:
        pass
    st = State()
    st.value = x
    i = 0
    while i < n:
        st.value = st.value * 2
        i += 1
    return st.value


@case((f32(1.0), i32(3)), (f32(1.0), i32(0)))
def mixed_loop_types(x, n):
    i = 0
    y = x
    while i < n:
        y = y * 2 + 1.0
        i += 1
    return y, i


@case((arr(1, 2, 3, 4),),)
def indexing_in_loop(xs):
    s = 0.0
    i = 0
    while i < 4:
        s += xs[i] * (i + 1)
        i += 1
    return s


@case((i32(3),), (i32(0),))
def while_list_index_tuple(n):
    pair = (0, 1)
    while n > 0:
        pair = (pair[1], pair[0] + pair[1])
        n -= 1
    return pair


@pytest.mark.parametrize("fn,arg_sets", CASES, ids=CASES.ids())
def test_matches_python(fn, arg_sets):
    check_matches_python(fn, arg_sets)
