"""Random programs of nested cond/while over small integers: executor vs direct Python."""
import numpy as np
from hypothesis import given, settings, strategies as st, HealthCheck

import dfc
from tests.conftest import run_all_modes

VARS = ("a", "b", "c")
M = 97   # every arithmetic result is reduced mod M so values stay small

exprs = st.recursive(
    st.one_of(st.tuples(st.just("var"), st.sampled_from(VARS)), st.tuples(st.just("const"), st.integers(-5, 5))),
    lambda sub: st.tuples(st.sampled_from(["add", "sub", "mul"]), sub, sub),
    max_leaves=4)


def stmts(depth):
    assign = st.tuples(st.just("assign"), st.sampled_from(VARS), exprs)
    if depth == 0:
        return st.lists(assign, min_size=1, max_size=3)
    inner = st.deferred(lambda: stmts(depth - 1))
    if_ = st.tuples(st.just("if"), st.sampled_from(["lt", "eq", "ge"]), exprs, exprs, inner, inner)
    while_ = st.tuples(st.just("while"), exprs, inner)
    return st.lists(st.one_of(assign, if_, while_), min_size=1, max_size=3)


def ev_py(e, env):
    if e[0] == "var":
        return env[e[1]]
    if e[0] == "const":
        return e[1]
    x, y = ev_py(e[1], env), ev_py(e[2], env)
    return {"add": x + y, "sub": x - y, "mul": x * y}[e[0]] % M


def run_py(prog, env):
    for s in prog:
        if s[0] == "assign":
            env[s[1]] = ev_py(s[2], env)
        elif s[0] == "if":
            x, y = ev_py(s[2], env), ev_py(s[3], env)
            taken = {"lt": x < y, "eq": x == y, "ge": x >= y}[s[1]]
            run_py(s[4] if taken else s[5], env)
        else:   # while: trip count = bound % 4, a counter k
            n = ev_py(s[1], env) % 4
            k = 0
            while k < n:
                run_py(s[2], env)
                k += 1
    return env


def ev_dfc(e, env):
    if e[0] == "var":
        return env[e[1]]
    if e[0] == "const":
        return dfc.constant(np.int64(e[1]))
    x, y = ev_dfc(e[1], env), ev_dfc(e[2], env)
    return {"add": x + y, "sub": x - y, "mul": x * y}[e[0]] % M


def run_dfc(prog, env):
    for s in prog:
        if s[0] == "assign":
            env = dict(env, **{s[1]: ev_dfc(s[2], env)})
        elif s[0] == "if":
            x, y = ev_dfc(s[2], env), ev_dfc(s[3], env)
            pred = {"lt": x < y, "eq": x == y, "ge": x >= y}[s[1]]
            env = dfc.cond(pred, lambda s=s, env=env: run_dfc(s[4], env), lambda s=s, env=env: run_dfc(s[5], env))
        else:
            n = ev_dfc(s[1], env) % 4

            def body(k, e, s=s):
                return k + 1, run_dfc(s[2], e)
            _, env = dfc.while_loop(lambda k, e, n=n: k < n, body, (dfc.constant(np.int64(0)), env))
    return env


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=stmts(3), init=st.tuples(*[st.integers(-20, 20)] * 3))
def test_random_program_matches_python(prog, init):
    want = run_py(prog, dict(zip(VARS, init)))

    def f(a, b, c):
        return run_dfc(prog, {"a": a, "b": b, "c": c})

    spec = dfc.TensorSpec([], "int64")
    g = dfc.trace(f, spec, spec, spec)
    got = run_all_modes(g, *[np.int64(v) for v in init])
    assert {k: int(v) for k, v in got.items()} == want
