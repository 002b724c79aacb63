"""Eager execution (issue 15 item 1): dfc ops outside any graph, and dfc.config.run_functions_eagerly.

The autograph differential suite (tests/compiler/_autograph.py) runs every one of its cases eagerly
too and compares with the graph; this file checks the rest: ops on numpy values against the same op
in a graph, the eager forms of cond / while_loop / TensorArray / Variable / print / Assert /
gradients, the DFC_EAGER environment variable, and that graphs come back when eager mode is off.
"""
import importlib
import inspect
import os
import subprocess
import sys

import numpy as np
import pytest

import dfc
from tests.compiler._autograph import EAGER_DTYPES_DIFFER, check_eager_matches, eager_mode, line_of
from tests.conftest import run_all_modes

f32, i32 = np.float32, np.int32
HERE = os.path.basename(__file__)


def graph_result(fn, *args):
    """fn traced with its numpy arguments as graph inputs, run on every execution path."""
    g = dfc.trace(fn, *[dfc.TensorSpec.from_value(a) for a in args])
    return run_all_modes(g, *args)


def same(got, want):
    """got is a numpy array equal to want, of its dtype and shape (lists: element by element)."""
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want)
        for a, b in zip(got, want):
            same(a, b)
        return
    assert isinstance(got, np.ndarray), type(got)
    assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- ops outside any graph

M = np.arange(6, dtype=f32).reshape(2, 3) - 2
V = np.array([3, 1, 2], i32)
OPS = {
    "add weak int": (lambda a: dfc.add(a, 1), (V,)),
    "add weak float to int": (lambda a: a + 1.5 if isinstance(a, dfc.Tensor) else dfc.add(a, 1.5), (V,)),
    "multiply promotes": (lambda a, b: dfc.multiply(a, b), (V, np.float64(2.5))),
    "divide ints": (lambda a, b: dfc.divide(a, b), (V, i32(2))),
    "floordiv": (lambda a: dfc.floordiv(a, 2), (V,)),
    "tanh": (lambda a: dfc.tanh(a), (M,)),
    "tanh of int": (lambda a: dfc.tanh(a), (V,)),
    "sigmoid exp log": (lambda a: dfc.log(dfc.exp(a) + dfc.sigmoid(a)), (M,)),
    "matmul": (lambda a, b: dfc.matmul(a, b), (M, M.T.copy())),
    "matmul vector": (lambda a, b: dfc.matmul(a, b), (M, np.ones(3, f32))),
    "reduce_sum axis 0": (lambda a: dfc.reduce_sum(a, axis=0), (M,)),
    "reduce_mean of ints": (lambda a: dfc.reduce_mean(a), (V,)),
    "reduce_max keepdims": (lambda a: dfc.reduce_max(a, axis=1, keepdims=True), (M,)),
    "argmax": (lambda a: dfc.argmax(a, axis=1), (M,)),
    "reshape transpose": (lambda a: dfc.transpose(dfc.reshape(a, [3, 2])), (M,)),
    "concat stack": (lambda a, b: dfc.concat([dfc.stack([a, a]), dfc.stack([b, b])], axis=1), (M, M * 2)),
    "where": (lambda a: dfc.where(a > 0, a, 0.0), (M,)),
    "cast": (lambda a: dfc.cast(a, "int32"), (M,)),
    "one_hot": (lambda a: dfc.one_hot(a, 4), (V,)),
    "softmax": (lambda a: dfc.softmax(a, axis=-1), (M,)),
    "gather": (lambda a, i: dfc.gather(a, i, axis=1), (M, np.array([2, 0], i32))),
    "fill zeros_like": (lambda a: dfc.fill(dfc.shape(a), 2.0) + dfc.zeros_like(a), (M,)),
    "range of a tensor": (lambda n: dfc.range(0, n), (i32(4),)),
    "clip maximum": (lambda a: dfc.maximum(dfc.clip(a, -1.0, 1.5), 0.5), (M,)),
    "expand squeeze": (lambda a: dfc.squeeze(dfc.expand_dims(a, 0), 0), (M,)),
    "split": (lambda a: dfc.split(a, 3, axis=1), (M,)),
    "unstack": (lambda a: dfc.unstack(a), (M,)),
    "shape size rank": (lambda a: dfc.stack([dfc.size(a), dfc.cast(dfc.rank(a), "int64")]), (M,)),
    "logical": (lambda a: dfc.logical_and(a > -1, dfc.logical_not(a > 2)), (M,)),
    "cumsum sort": (lambda a: dfc.sort(dfc.cumsum(a, axis=1), axis=0), (M,)),
    "einsum": (lambda a: dfc.einsum("ij,kj->ik", a, a), (M,)),
    "top_k": (lambda a: dfc.top_k(a, 2), (M,)),
    "linalg solve": (lambda a, b: dfc.linalg.solve(a, b), (np.array([[3, 1], [1, 2]], f32), np.ones(2, f32))),
    "random in a graph vs numpy shape": (lambda a: dfc.shape(dfc.random_uniform(dfc.shape(a))), (M,)),
}


@pytest.mark.parametrize("name", list(OPS))
def test_op_outside_a_graph_equals_the_graph(name):
    fn, args = OPS[name]
    got = fn(*args)
    same(got, graph_result(fn, *args))


def test_op_results_are_numpy_arrays_even_for_scalars():
    r = dfc.tanh(np.float32(1))
    assert type(r) is np.ndarray and r.shape == () and r.dtype == np.float32
    assert type(dfc.constant(1.5)) is np.ndarray and dfc.constant(1.5).dtype == np.float32
    assert type(dfc.cast(V, "int32")) is np.ndarray
    assert dfc.constant(3).dtype == np.int64
    np.testing.assert_allclose(dfc.reduce_sum(M, axis=0), M.sum(axis=0))


def test_eager_tensors_inside_the_op_functions_behave_like_their_values():
    from dfc.compiler.tracing import convert
    t = convert(np.float32(1.5))                 # what the op functions see for a numpy value
    assert isinstance(t, dfc.Tensor) and t.dtype == "float32" and not t.weak
    assert convert(t, "float64").dtype == "float64" and convert(3).dtype == "int64"
    assert bool(t) and float(t) == 1.5 and np.tanh(t) == np.tanh(np.float32(1.5)) and str(t) == "1.5"
    assert type(t + 1) is np.ndarray and (t + 1).dtype == np.float32       # its operators are ops
    assert int(convert(np.int32(4))) == 4 and list(range(convert(np.int64(2)))) == [0, 1]


def test_random_ops_outside_a_graph_draw_fresh_values():
    a, b = dfc.random_uniform([1000], 2.0, 3.0), dfc.random_uniform([1000], 2.0, 3.0)
    assert a.dtype == np.float32 and a.shape == (1000,)
    assert 2.0 <= a.min() and a.max() < 3.0 and not np.array_equal(a, b)
    n = dfc.random_normal([4000], mean=1.0, stddev=2.0, dtype="float64")
    assert n.dtype == np.float64 and abs(n.mean() - 1.0) < 0.2 and abs(n.std() - 2.0) < 0.2


def test_op_errors_outside_a_graph_are_dfc_errors_at_the_callers_line():
    with pytest.raises(dfc.DfcTypeError) as info:
        dfc.matmul(M, M)                                            # MARK matmul
    assert f"{HERE}:{line_of(test_op_errors_outside_a_graph_are_dfc_errors_at_the_callers_line, 'MARK matmul')}" \
        in str(info.value)
    with pytest.raises(dfc.DfcRuntimeError):
        dfc.gather(V, np.array([7], i32))
    g_tensor = []
    dfc.trace(lambda x: g_tensor.append(x) or x, dfc.TensorSpec([], "float32"))
    with pytest.raises(dfc.DfcError, match="outside the graph"):
        dfc.tanh(g_tensor[0])


# ---------------------------------------------------------------- dfc.function, eagerly

def collatz_steps(x, n):
    steps = 0
    trail = []
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
        trail.append(x * steps)
    dfc.print("steps:", steps, "last:", n)
    return {"steps": steps, "n": n, "trail": dfc.stack(trail), "pair": (x, 2.5)}


def test_eager_function_runs_the_python_itself(capsys):
    frames = []

    def f(x, n):
        frames.append((inspect.currentframe().f_code.co_filename, type(n)))
        return collatz_steps(x, n)

    fn = dfc.function(f)
    with eager_mode():
        out = fn(f32(1.5), i32(6))
    # the user's own code object (a debugger steps through this file), on numpy values
    assert frames == [(__file__, np.int32)]
    assert "steps: 8 last: 1" in capsys.readouterr().out
    assert fn._cache == {}                       # nothing was traced
    graph, inputs = fn.concrete(f32(1.5), i32(6))
    check_eager_matches(fn, (f32(1.5), i32(6)), run_all_modes(graph, *inputs), dfc.containers.get().snapshot())
    assert out["trail"].dtype == np.float32 and out["pair"][1].dtype == np.float32


def test_print_inside_an_eager_function_shows_the_values_when_they_are_computed(capsys):
    @dfc.function
    def f(x):
        y = x * 2
        dfc.print("y =", y)
        print("between")
        z = dfc.tanh(y)
        print("z is", z)
        return z

    with eager_mode():
        f(np.array([0.5, 1.0], f32))
    out = capsys.readouterr().out.splitlines()
    assert out == ["y = [1. 2.]", "between", f"z is {np.tanh(np.array([1.0, 2.0], f32))}"]


def test_pdb_steps_through_an_eager_function():
    import io
    import pdb
    out = io.StringIO()
    commands = "p float(s), type(n).__name__\nnext\np float(s)\ncontinue\n"
    debugger = pdb.Pdb(stdin=io.StringIO(commands), stdout=out, nosigint=True, readrc=False)

    @dfc.function
    def f(x, n):
        s = x * 2
        debugger.set_trace()
        s = s + n                                                  # MARK stop
        return s

    with eager_mode():
        r = f(f32(1.5), i32(2))
    debugger.set_continue()
    text = out.getvalue()
    assert f"{line_of(f.python_function, 'MARK stop')}" in text and HERE in text    # stopped at the user's line
    assert "(3.0, 'int32')" in text and "5.0" in text                            # on real values
    assert r == 5.0 and r.dtype == np.float64         # float32 + int32 promotes, as in numpy and the graph


def test_switching_eager_off_uses_graphs_again():
    calls = []

    @dfc.function
    def f(x):
        calls.append(type(x).__name__)
        return x * 2

    with eager_mode():
        for _ in range(3):
            assert f(f32(1.0)) == 2.0
    assert calls == ["float32"] * 3 and f._cache == {}
    with eager_mode(False):
        r1, r2 = f(f32(1.0)), f(f32(2.0))
    assert calls[3:] == ["Tensor"] and len(f._cache) == 1      # traced once, then the graph runs
    assert (r1, r2) == (2.0, 4.0) and r1.dtype == np.float32


def test_dfc_eager_environment_variable(tmp_path):
    script = tmp_path / "eager_env.py"
    script.write_text("import numpy as np, dfc\n"
                      "@dfc.function\n"
                      "def f(x):\n"
                      "    print(type(x).__name__, x * 2)\n"
                      "    return x\n"
                      "f(np.float32(3))\n"
                      "print(dfc.config.functions_run_eagerly())\n")
    from tests.clitools import environ
    env = environ({"DFC_EAGER": "1"})      # the checkout's dfc on the child's path, whether or not it is installed
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, str(script)], env=env, cwd=root, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["float32 6.0", "True"]
    env["DFC_EAGER"] = "0"
    out = subprocess.run([sys.executable, str(script)], env=env, cwd=root, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["Tensor 6.0", "False"]      # traced: the graph printed


def test_config_functions():
    old = dfc.config.functions_run_eagerly()
    try:
        dfc.config.run_functions_eagerly(True)
        assert dfc.config.functions_run_eagerly() is True
        dfc.config.run_functions_eagerly(0)
        assert dfc.config.functions_run_eagerly() is False
    finally:
        dfc.config.run_functions_eagerly(old)


def test_input_signature_converts_arguments_eagerly():
    @dfc.function(input_signature=[dfc.TensorSpec([None], "float32")])
    def f(x):
        seen.append(x.dtype)
        return x

    @dfc.function(input_signature=[dfc.TensorSpec([None], "int32")])
    def g(x):
        return x

    seen = []
    with eager_mode():
        assert f([1, 2]).dtype == np.float32 and seen == [np.float32]
        with pytest.raises(dfc.DfcInputError):
            g(np.array([1.5]))


def test_methods_and_nested_functions_run_eagerly():
    class Model:
        def __init__(self):
            self.w = f32(3.0)

        @dfc.function
        def __call__(self, x):
            return helper(x) * self.w

    @dfc.function
    def helper(x):
        return x + 1

    with eager_mode():
        r = Model()(f32(1.0))
    assert r == 6.0 and r.dtype == np.float32


# ---------------------------------------------------------------- control flow, state, effects

def loops_and_arrays(x, n):
    ta = dfc.TensorArray("float32")
    i, ta = dfc.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, x * dfc.cast(i, "float32"))),
                           (0, ta))
    capped = dfc.while_loop(lambda k: k < 100, lambda k: k * 2, n, maximum_iterations=3)
    both = dfc.cond(n > 2, lambda: (x, n), lambda: (-x, n + 1))
    tb = dfc.TensorArray("float32", size=3).unstack(dfc.stack([x, x + 1, x + 2]))
    return ta.stack(), ta.size(), capped, both, tb.read(1), tb.stack(), dfc.map_fn(lambda v: v * v, tb.stack()), \
        dfc.scan(lambda a, v: a + v, tb.stack())


@pytest.mark.parametrize("n", [4, 1])
def test_cond_while_loop_and_tensor_arrays_eagerly_equal_the_graph(n):
    fn = dfc.function(loops_and_arrays)
    args = (f32(1.5), i32(n))
    graph, inputs = fn.concrete(*args)
    same_dtypes = check_eager_matches(fn, args, run_all_modes(graph, *inputs), dfc.containers.get().snapshot())
    assert same_dtypes


def test_eager_control_flow_checks():
    with pytest.raises(dfc.DfcTypeError, match="scalar"):
        dfc.cond(np.array([True, False]), lambda: 1, lambda: 2)
    with pytest.raises(dfc.DfcTypeError, match="changes dtype"):
        dfc.while_loop(lambda v: v < 3, lambda v: dfc.cast(v + 1, "float32"), i32(0))
    with pytest.raises(dfc.DfcTypeError, match="returns"):
        dfc.while_loop(lambda a, b: a < 3, lambda a, b: a + 1, (i32(0), i32(0)))
    taken = []
    assert dfc.cond(np.bool_(False), lambda: taken.append("t"), lambda: 7) == 7 and taken == []
    ta = dfc.TensorArray("float32", size=1, dynamic_size=False)
    with pytest.raises(dfc.DfcRuntimeError, match="out of range"):
        ta.write(1, 1.0)
    with pytest.raises(dfc.DfcRuntimeError, match="before it was written"):
        ta.read(0)


def test_variables_read_and_assign_through_the_container_eagerly():
    v = dfc.Variable(np.zeros(2, f32), name="eager_v")

    @dfc.function
    def f(x):
        before = v.read_value()
        v.assign_add(x)
        after = v + 1.0
        v.assign(v.read_value() * 2)
        return before, after

    start = dfc.containers.get().snapshot()
    graph, inputs = f.concrete(np.ones(2, f32))
    check_eager_matches(f, (np.ones(2, f32),), run_all_modes(graph, *inputs), start)
    np.testing.assert_array_equal(v.numpy(), [2.0, 2.0])
    with eager_mode():
        before, after = f(np.ones(2, f32))
    np.testing.assert_array_equal(before, [2.0, 2.0])
    np.testing.assert_array_equal(after, [4.0, 4.0])
    np.testing.assert_array_equal(v.numpy(), [6.0, 6.0])


def test_assert_and_numpy_errors_in_an_eager_function_are_dfc_errors_at_the_users_line():
    def checked(x):
        dfc.Assert(x > 0, [x], "x must be positive")              # MARK assert
        return x

    def indexed(x, i):
        return x[i]                                                # MARK index

    for mode in (False, True):
        with eager_mode(mode), pytest.raises(dfc.DfcAssertionError) as info:
            dfc.function(checked)(f32(-1.0))
        assert f"{HERE}:{line_of(checked, 'MARK assert')}" in str(info.value)
        assert "x must be positive" in str(info.value)
    def asserted(x):
        assert x > 0, "x must be positive"                         # MARK python assert
        return x

    for mode in (False, True):
        with eager_mode(mode), pytest.raises(dfc.DfcAssertionError) as info:
            dfc.function(asserted)(f32(-1.0))
        assert f"{HERE}:{line_of(asserted, 'MARK python assert')}" in str(info.value)
        assert "x must be positive" in str(info.value)
    assert isinstance(info.value, AssertionError)
    with eager_mode(), pytest.raises(dfc.DfcRuntimeError) as info:
        dfc.function(indexed)(np.ones(3, f32), i32(5))
    assert isinstance(info.value, IndexError)        # `except IndexError` still catches it
    assert f"{HERE}:{line_of(indexed, 'MARK index')}" in str(info.value)


def test_gradients_eagerly():
    def loss(w, x):
        h = dfc.tanh(dfc.matmul(x, w))
        return dfc.reduce_sum(h * h)

    @dfc.function
    def step(w, x):
        value, grad = dfc.value_and_grad(loss)(w, x)
        return value, grad

    w = np.array([[0.1, -0.2], [0.3, 0.05], [-0.1, 0.2]], np.float64)
    x = np.arange(6, dtype=np.float64).reshape(2, 3) / 5
    with eager_mode():
        value, grad = step(w, x)
    want_value, want_grad = step(w, x)
    same(value, want_value)
    same(grad, want_grad)
    eps = 1e-6
    for idx in np.ndindex(w.shape):
        d = np.zeros_like(w)
        d[idx] = eps
        fd = (np.sum(np.tanh(x @ (w + d)) ** 2) - np.sum(np.tanh(x @ (w - d)) ** 2)) / (2 * eps)
        assert abs(grad[idx] - fd) < 1e-6

    @dfc.function
    def symbolic(x):
        return dfc.gradients(x * x, x)

    with eager_mode(), pytest.raises(dfc.DfcError, match="value_and_grad"):
        symbolic(f32(1.0))


# ---------------------------------------------------------------- the differential suite's exceptions

def squares_over_dfc_range(a, b):
    s = 0
    for i in dfc.range(a, b):
        s += i * i
    return s


def list_over_dfc_range(n):
    out = []
    for i in dfc.range(n):
        out.append(i * 1.5)
    return dfc.stack(out)


@pytest.mark.parametrize("fn,args", [(squares_over_dfc_range, (i32(2), i32(9))),
                                     (list_over_dfc_range, (i32(3),))])
def test_dfc_range_gives_the_graphs_dtypes_eagerly(fn, args):
    """The advice of docs/eager.md for the range(tensor) exception: dfc.range iterates numpy values of the
    graph's dtype, so eager and graph agree exactly."""
    converted = dfc.function(fn)
    graph, inputs = converted.concrete(*args)
    assert check_eager_matches(converted, args, run_all_modes(graph, *inputs), dfc.containers.get().snapshot())


def _diff_case(name):
    for feature in ("if", "logical", "while", "for", "break_continue", "returns", "lists", "calls"):
        module = importlib.import_module(f"tests.compiler.test_autograph_diff_{feature}")
        for fn, arg_sets in module.CASES:
            if fn.__name__ == name:
                return fn, arg_sets
    raise AssertionError(f"EAGER_DTYPES_DIFFER names {name}, which is no differential case")


@pytest.mark.parametrize("name", sorted(EAGER_DTYPES_DIFFER))
def test_eager_dtype_exceptions_are_needed(name):
    """Every case listed as differing in dtype eagerly really does (the list cannot go stale)."""
    fn, arg_sets = _diff_case(name)
    converted = dfc.function(fn)
    matches = []
    for args in arg_sets:
        graph, inputs = converted.concrete(*args)
        result = run_all_modes(graph, *inputs)
        matches.append(check_eager_matches(converted, args, result, dfc.containers.get().snapshot(),
                                           exact_dtypes=False))
    assert not all(matches)
