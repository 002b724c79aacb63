"""Differential cases: `if` / `elif` / `else` and `x if c else y` on tensor conditions.

Each case runs as plain Python and through dfc.function on every execution path
(tests/compiler/_autograph.py); the results must match.
"""
import pytest

from tests.compiler._autograph import Cases, arr, check_matches_python, f32, i32

CASES = Cases()
case = CASES.case


@case((f32(2.0),), (f32(-3.0),))
def if_simple(x):
    if x > 0:
        y = x * 2
    else:
        y = -x
    return y


@case((f32(5.0),), (f32(0.5),), (f32(-2.0),))
def if_elif_else(x):
    if x > 1:
        r = 1.0
    elif x > 0:
        r = 2.0
    else:
        r = 3.0
    return r * x


@case((f32(1.0), f32(2.0)), (f32(-1.0), f32(2.0)))
def if_no_else(x, y):
    z = y
    if x > 0:
        z = z + x
    return z


@case((f32(1.0), f32(2.0)), (f32(3.0), f32(-2.0)), (f32(-1.0), f32(-2.0)))
def if_nested(x, y):
    if x > 0:
        if y > 0:
            r = x + y
        else:
            r = x - y
    else:
        if y > 0:
            r = y
        else:
            r = x * y
    return r


@case((f32(1.0),), (f32(-1.0),))
def if_many_vars(x):
    a, b, c, d = x, x + 1, x + 2, x + 3
    if x > 0:
        a = a * 2
        b = b * 3
        c = -c
        e = a + b
    else:
        d = d * 10
        e = c + d
    return a, b, c, d, e


@case((f32(1.0),), (f32(-1.0),))
def if_tuple_unpack(x):
    if x > 0:
        a, b = x, x * 2
    else:
        a, b = x * 3, x * 4
    return a + b


@case((f32(1.0),), (f32(-1.0),))
def if_aug_assign(x):
    s = x
    if x > 0:
        s += 1
        s *= 3
    else:
        s -= 1
    return s


@case((f32(2.0),), (f32(-2.0),))
def ifexp(x):
    return x * 2 if x > 0 else x * -3


@case((f32(2.0),), (f32(-2.0),), (f32(0.5),))
def ifexp_nested(x):
    return 1.0 if x > 1 else (2.0 if x > 0 else 3.0)


@case((f32(1.0), i32(3)), (f32(1.0), i32(-3)))
def if_mixed_python_tensor(x, n):
    k = 10
    if k > 5:  # Python condition: stays Python
        x = x + 1
    if n > 0:
        x = x * k
    return x


@case((f32(3.0),), (f32(-3.0),))
def if_python_scalar_branches(x):
    if x > 0:
        sign = 1
    else:
        sign = -1
    return x * sign


@case((f32(1.0),), (f32(-1.0),))
def if_returns_dict(x):
    if x > 0:
        d = {"a": x, "b": x + 1}
    else:
        d = {"a": -x, "b": x - 1}
    return d


@case((arr(1, 2, 3),), (arr(-1, -2, -3),))
def if_array_condition_sum(xs):
    total = xs[0] + xs[1] + xs[2]
    if total > 0:
        out = xs * 2
    else:
        out = xs * -1
    return out


@case((f32(2.0),), (f32(-2.0),))
def subscript_branch_output(x):
    d = {"k": x}
    if x > 0:
        d["k"] = d["k"] * 5
    return d["k"]


@case((f32(2.0),),)
def unused_branch_local(x):
    if x > 0:
        tmp = x * 2
        x = tmp + 1
    else:
        x = x - 1
    return x


@case((f32(1.0),), (f32(-1.0),))
def bool_var_flag(x):
    flag = x > 0
    if flag:
        r = 1.0
    else:
        r = -1.0
    return r


@case((f32(2.0),),)
def static_string_state(x):
    mode = "double"
    if mode == "double":
        x = x * 2
    return x


@pytest.mark.parametrize("fn,arg_sets", CASES, ids=CASES.ids())
def test_matches_python(fn, arg_sets):
    check_matches_python(fn, arg_sets)
