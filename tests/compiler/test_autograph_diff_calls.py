"""Differential cases: calls into user functions, nested functions, lambdas, methods, callable objects and builtins (converted recursively); assert and print.

Each case runs as plain Python and through dfc.function on every execution path
(tests/compiler/_autograph.py); the results must match.
"""
import pytest

from tests.compiler._autograph import Cases, arr, check_matches_python, f32, i32

CASES = Cases()
case = CASES.case


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


@case((f32(2.0),),)
def assert_tensor(x):
    assert x > 0, "x must be positive"
    return x * 2


@case((f32(2.0),),)
def print_tensor(x):
    print("x is", x)
    return x + 1


@case((i32(4),),)
def abs_builtin_in_loop(n):
    s = 0
    for i in range(n):
        s += abs(i - 2)
    return s


@pytest.mark.parametrize("fn,arg_sets", CASES, ids=CASES.ids())
def test_matches_python(fn, arg_sets):
    check_matches_python(fn, arg_sets)
