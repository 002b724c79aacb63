"""Feed/fetch execution of subgraphs, input conversion rules, and executor diagnostics."""
import json

import numpy as np
import pytest

import dfc
from dfc.ir import serialize


def graph_with_two_paths():
    def f(x):
        bad = dfc.log(x - 100.0)
        dfc.Assert(x > 0, [x], "x must be positive")
        return x * 2.0, bad
    return dfc.trace(f, dfc.TensorSpec([], "float32"))


def test_run_executes_only_the_fetched_subgraph():
    g = graph_with_two_paths()
    s = dfc.Session(g)
    mul = next(n for n in g.nodes if n.startswith("mul"))
    # The Assert is not needed for `mul`, so a negative x does not trip it.
    assert float(s.run(mul, {"x": np.float32(-3)})) == -6.0
    with pytest.raises(dfc.DfcAssertionError):
        g(np.float32(-3))             # a full call runs the side effects (targets)


def test_feeding_an_intermediate_tensor_overrides_it():
    def f(x):
        y = x + 1.0
        return y * 10.0
    g = dfc.trace(f, dfc.TensorSpec([], "float32"))
    add = next(n for n in g.nodes if n.startswith("add"))
    mul = next(n for n in g.nodes if n.startswith("mul"))
    assert float(dfc.Session(g).run(mul + ":0", {add: np.float32(5)})) == 50.0
    assert dfc.Session(g).run({"a": [mul]}, {"x": 1.0}) == {"a": [np.float32(20.0)]}


@pytest.mark.parametrize("value,dtype,ok", [
    (3, "float32", True), (np.int32(3), "float64", True), (2.5, "float32", True), (True, "int32", True),
    (2.5, "int32", False), (np.float32(1.0), "int64", False), (1, "bool", False), (2 ** 40, "int32", False),
    ("abc", "float32", False)])
def test_input_conversion_only_when_value_preserved(value, dtype, ok):
    g = dfc.trace(lambda x: dfc.identity(x), dfc.TensorSpec([], dtype))
    if ok:
        out = g(value)
        assert out.dtype == np.dtype(dtype) and out == np.asarray(value).astype(dtype)
    else:
        with pytest.raises(dfc.DfcInputError, match="'x'"):
            g(value)


def test_shape_checks_and_none_dims():
    g = dfc.trace(lambda x: dfc.reduce_sum(x), dfc.TensorSpec([None, 3], "float32"))
    assert float(g(np.ones((5, 3)))) == 15
    with pytest.raises(dfc.DfcInputError, match="dimension 1 must be 3"):
        g(np.ones((5, 4)))
    with pytest.raises(dfc.DfcInputError, match="rank 2"):
        g(np.ones(3))


def test_missing_and_unknown_arguments():
    g = dfc.trace(lambda x, y: x + y, dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "float32"))
    assert float(g(1.0, y=2.0)) == 3.0
    with pytest.raises(dfc.DfcInputError, match="missing input"):
        g(1.0)
    with pytest.raises(dfc.DfcInputError, match="no input 'z'"):
        g(1.0, z=2.0)
    with pytest.raises(dfc.DfcInputError, match="takes 2 inputs"):
        g(1.0, 2.0, 3.0)


def test_fetching_a_value_inside_a_loop_is_an_error():
    def f(n):
        return dfc.while_loop(lambda i: i < n, lambda i: i + 1, (0,))
    g = dfc.trace(f, dfc.TensorSpec([], "int64"))
    inner = next(n for n in g.nodes if n.startswith("add"))
    with pytest.raises(dfc.DfcError, match="inside a loop frame"):
        dfc.Session(g).run(inner, {"n": 3})


def test_fetching_a_dead_value_is_an_error():
    def f(x):
        return dfc.cond(x > 0, lambda: x * 3.0, lambda: x)
    g = dfc.trace(f, dfc.TensorSpec([], "float32"))
    mul = next(n for n in g.nodes if n.startswith("mul"))
    assert float(dfc.Session(g).run(mul, {"x": 2.0})) == 6.0
    with pytest.raises(dfc.DfcRuntimeError, match="dead"):
        dfc.Session(g).run(mul, {"x": -2.0})


def test_a_stuck_execution_raises_naming_the_waiting_nodes():
    # Simulate a value that never arrives (as a lost Recv would): the loop frame expects one more
    # Enter than it gets, so its first iteration can never finish. The executor must say so, not hang.
    from dfc.runtime.executor import Plan, Run, KernelContext

    def f(x, n):
        looped = lambda: dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * x), (0, x))[1] * 3.0
        return dfc.cond(n > 100, looped, lambda: x)
    g = dfc.trace(f, dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "int64"))
    mul = next(n for n in g.nodes if n.startswith("mul_"))   # the * 3.0 after the loop, in the branch
    feeds = {"x": np.float32(2), "n": np.int64(3)}
    with pytest.raises(dfc.DfcRuntimeError, match="dead"):      # untaken branch: a dead value
        Run(Plan(g, [mul], {"x", "n"}, ()), feeds, KernelContext(None, 1, print)).execute()
    plan = Plan(g, [mul], {"x", "n"}, ())
    plan.enter_count[1] += 1
    with pytest.raises(dfc.DfcDeadlockError, match="still waiting") as e:
        Run(plan, feeds, KernelContext(None, 1, print)).execute()
    assert e.value.node == mul and "while" in str(e.value)


def test_unknown_executor_mode():
    g = dfc.trace(lambda x: x, dfc.TensorSpec([], "float32"))
    with pytest.raises(dfc.DfcError, match="unknown executor mode"):
        dfc.Session(g, mode="turbo")
