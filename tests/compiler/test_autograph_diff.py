"""Differential suite: each function runs as plain Python and through dfc.function.

Every case is run (1) as plain Python on Python scalars / numpy arrays and
(2) through dfc.function with numpy inputs (tensor control flow in the
graph); the results must match.
"""
import numpy as np
import pytest

import dfc
from dfc.compiler.autograph import function
from tests.conftest import run_all_modes

CASES = []

f32, i32, i64 = np.float32, np.int32, np.int64


def case(*arg_sets):
    def register(fn):
        CASES.append((fn, arg_sets))
        return fn
    return register


def arr(*values, dtype=np.float32):
    return np.array(values, dtype=dtype)


def stack(xs):
    """np.stack in plain Python, dfc.stack when tracing."""
    if isinstance(xs, list) and not any(isinstance(x, dfc.Tensor) for x in xs):
        return np.stack(xs) if xs else np.zeros([0], np.float32)
    return dfc.stack(xs)


# ------------------------------------------------------------------ if / elif / else
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


# ------------------------------------------------------------------ logical
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


# ------------------------------------------------------------------ while
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


# ------------------------------------------------------------------ for
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


@case((f32(2.0), i32(3)),)
def for_python_list_of_tensors(x, n):
    parts = [x, x * 2, x * 3]
    s = 0.0
    for p in parts:
        s += p
    return s


@case((f32(5.0),), (f32(-5.0),))
def for_python_break_on_tensor(x):
    s = 0.0
    for w in [1.0, 2.0, 3.0, 4.0]:
        if x < w:
            break
        s += w
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


# ------------------------------------------------------------------ returns
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


# ------------------------------------------------------------------ lists / TensorArray
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


# ------------------------------------------------------------------ calls
def helper_abs(v):
    if v < 0:
        return -v
    return v


def helper_clip(v, lo, hi):
    if v < lo:
        v = lo
    elif v > hi:
        v = hi
    return v


@case((f32(-3.0),), (f32(3.0),))
def calls_user_function(x):
    return helper_abs(x) + 1


@case((f32(-3.0),), (f32(0.5),), (f32(9.0),))
def calls_with_kwargs(x):
    return helper_clip(x, hi=2.0, lo=0.0)


@case((f32(2.0),), (f32(-2.0),))
def calls_nested_function(x):
    def inner(v):
        if v > 0:
            return v * 3
        return v
    return inner(x) + inner(-x)


@case((f32(2.0),), (f32(-2.0),))
def calls_lambda(x):
    f = lambda v: v * 2 if v > 0 else v * 3  # noqa: E731
    return f(x)


@case((i32(6),), (i32(0),))
def calls_in_loop(n):
    s = 0.0
    for i in range(n):
        s += helper_abs(i - 3)
    return s


def recursive_sum(n):
    if n <= 0:
        return 0
    return n + recursive_sum(n - 1)


@case((f32(2.0),),)
def calls_python_recursion(x):
    return x * recursive_sum(4)


class Accumulator:
    def __init__(self, scale):
        self.scale = scale
        self.total = 0.0

    def add_all(self, xs):
        for x in xs:
            if x > 0:
                self.total += x * self.scale
        return self.total


@case((arr(1, -2, 3),),)
def calls_method_updating_self(xs):
    acc = Accumulator(2.0)
    return acc.add_all(xs)


class Counter:
    def __init__(self):
        self.count = 0

    def __call__(self, x):
        if x > 0:
            self.count += 1
        return self.count


@case((arr(1, -2, 3),),)
def calls_callable_object(xs):
    c = Counter()
    r = 0
    for x in [xs[0], xs[1], xs[2]]:  # a method call hides its writes: Python loop
        r = c(x)
    return r


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


@case((f32(2.0),), (f32(-2.0),))
def subscript_branch_output(x):
    d = {"k": x}
    if x > 0:
        d["k"] = d["k"] * 5
    return d["k"]


# ------------------------------------------------------------------ assert / print
@case((f32(2.0),),)
def assert_tensor(x):
    assert x > 0, "x must be positive"
    return x * 2


@case((f32(2.0),),)
def print_tensor(x):
    print("x is", x)
    return x + 1


# ------------------------------------------------------------------ misc
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


@case((f32(2.0),),)
def unused_branch_local(x):
    if x > 0:
        tmp = x * 2
        x = tmp + 1
    else:
        x = x - 1
    return x


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


@case((i32(3),), (i32(0),))
def while_list_index_tuple(n):
    pair = (0, 1)
    while n > 0:
        pair = (pair[1], pair[0] + pair[1])
        n -= 1
    return pair


@case((f32(1.0),), (f32(-1.0),))
def bool_var_flag(x):
    flag = x > 0
    if flag:
        r = 1.0
    else:
        r = -1.0
    return r


@case((i32(4),),)
def abs_builtin_in_loop(n):
    s = 0
    for i in range(n):
        s += abs(i - 2)
    return s


@case((f32(2.0),),)
def static_string_state(x):
    mode = "double"
    if mode == "double":
        x = x * 2
    return x


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


# ------------------------------------------------------------------ the test
def _py(v):
    if isinstance(v, np.generic):
        return v.item()
    return v


def _check(actual, expected):
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected)
        for k in expected:
            _check(actual[k], expected[k])
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), (actual, expected)
        for a, e in zip(actual, expected):
            _check(a, e)
    elif expected is None:
        assert actual is None or (isinstance(actual, np.ndarray) and actual.size == 0), actual
    else:
        np.testing.assert_allclose(np.asarray(actual, dtype=np.float64),
                                   np.asarray(expected, dtype=np.float64), rtol=1e-5, atol=1e-6)


def _ids():
    return [fn.__name__ for fn, _ in CASES]


def test_case_count():
    assert len(CASES) >= 80


@pytest.mark.parametrize("fn,arg_sets", CASES, ids=_ids())
def test_matches_python(fn, arg_sets, capsys):
    converted = function(fn)
    for args in arg_sets:
        expected = fn(*[_py(a) for a in args])
        graph, inputs = converted.concrete(*args)
        actual = run_all_modes(graph, *inputs)          # every execution path, checked against the reference
        _check(actual, expected)
