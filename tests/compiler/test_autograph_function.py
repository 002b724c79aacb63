"""dfc.function: caching, input_signature, methods, f.code, compile_file."""
import ast
import os
import textwrap
import warnings

import numpy as np
import pytest

import dfc
from dfc.errors import DfcInputError
from dfc.compiler.autograph import compile_file, function

f32, i32 = np.float32, np.int32


def collatz_steps(n):
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


def test_code_is_readable_valid_python():
    f = function(collatz_steps)
    code = f.code
    compile(code, "<f.code>", "exec")
    ast.parse(code)
    assert "def collatz_steps(n):" in code
    assert "ag__.while_stmt(" in code and "ag__.if_stmt(" in code
    assert "nonlocal" in code
    assert f.python_function is collatz_steps


def test_trace_returns_graph_and_caches():
    f = function(collatz_steps)
    g1 = f.trace(dfc.TensorSpec([], "int32"))
    g2 = f.trace(dfc.TensorSpec([], "int32"))
    assert g1 is g2
    summary = g1.summary()
    assert summary["loops"] == 1
    assert g1(np.int32(6)) == 8
    assert f.trace(dfc.TensorSpec([], "int64")) is not g1


def test_trace_cache_per_signature_and_static():
    calls = []

    def g(x, k):
        calls.append(k)
        return x * k
    f = function(g)
    f(f32(1.0), 2)
    f(f32(3.0), 2)
    assert len(calls) == 1
    f(f32(1.0), 3)
    assert len(calls) == 2
    f(np.ones([2], np.float32), 3)
    assert len(calls) == 3
    f(f32(1.0), [1, 2]) if False else None
    np.testing.assert_allclose(f(np.ones([2], np.float32), 3), [3.0, 3.0])


def test_python_scalars_are_static():
    f = function(collatz_steps)
    assert f(6) == 8  # plain Python control flow, constant graph
    g = f.trace(6)
    assert g.summary()["loops"] == 0


def test_numpy_float64_is_an_input():
    def g(x):
        return x * 2
    f = function(g)
    graph = f.trace(dfc.TensorSpec.from_value(np.float64(1.5)))
    assert graph.signature["inputs"][0]["dtype"] == "float64"
    np.testing.assert_allclose(f(np.float64(1.5)), 3.0)


def test_results_keep_nesting():
    def g(x):
        if x > 0:
            r = {"a": x, "b": (x, [x * 2])}
        else:
            r = {"a": -x, "b": (x, [x * 3])}
        return r
    out = function(g)(f32(1.0))
    assert isinstance(out, dict) and isinstance(out["b"], tuple) and isinstance(out["b"][1], list)
    assert out["b"][1][0] == 2.0


def test_input_signature_one_trace_any_size():
    calls = []

    @function(input_signature=[dfc.TensorSpec([None], "float32")])
    def total(xs):
        calls.append(1)
        s = 0.0
        for x in xs:
            s += x
        return s
    assert total(np.ones([3], np.float32)) == 3.0
    assert total(np.ones([5], np.float32)) == 5.0
    assert total(np.arange(4, dtype=np.int32)) == 6.0  # int -> float is lossless
    assert total([1.0, 2.0]) == 3.0
    assert len(calls) == 1
    with pytest.raises(DfcInputError):
        total(np.ones([2, 2], np.float32))


def test_input_signature_rejects_lossy_dtype():
    @function(input_signature=[dfc.TensorSpec([], "int32")])
    def g(n):
        return n + 1
    assert g(np.int64(4)) == 5
    with pytest.raises(DfcInputError):
        g(np.float32(1.5))
    with pytest.raises(DfcInputError):
        g(np.int64(2 ** 40))


def test_input_signature_fixed_dimension():
    @function(input_signature=[dfc.TensorSpec([2], "float32")])
    def g(x):
        return x * 2
    with pytest.raises(DfcInputError):
        g(np.ones([3], np.float32))


class Model:
    def __init__(self, scale):
        self.scale = scale
        self.total = 0.0

    @function
    def run(self, xs):
        self.total = 0.0
        for x in xs:
            if x > 0:
                self.total += x * self.scale
        return self.total


def test_decorated_method_self_is_static():
    m = Model(2.0)
    np.testing.assert_allclose(m.run(np.array([1, -2, 3], np.float32)), 8.0)
    m2 = Model(10.0)
    np.testing.assert_allclose(m2.run(np.array([1, -2, 3], np.float32)), 40.0)
    graph = Model.run.__get__(m).trace(dfc.TensorSpec([None], "float32"))
    assert graph.signature["inputs"][0]["name"] == "xs"


def test_nested_dfc_function_call_is_inlined():
    @function
    def inner(x):
        if x > 0:
            return x
        return -x

    @function
    def outer(x):
        return inner(x) + inner(-x * 2)
    assert outer(f32(3.0)) == 9.0
    assert outer.trace(dfc.TensorSpec([], "float32")).summary()["loops"] == 0


def test_unrolled_python_loop_warns():
    def g(x):
        for i in range(10005):
            pass
        return x
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        function(g)(f32(1.0))
    assert any("unrolled" in str(w.message) for w in caught)


def test_source_map_points_at_user_lines():
    from dfc.compiler import tracing
    from dfc.compiler.autograph import conversion
    converted = conversion.convert_code(collatz_steps)
    line_map = tracing.SOURCE_MAPS[converted.filename]
    user_lines = {line for _, line in line_map.values()}
    first = collatz_steps.__code__.co_firstlineno
    assert {first + 2, first + 3, first + 4} <= user_lines


SAMPLE = '''
import dfc


@dfc.compiler.autograph.function(input_signature=[dfc.TensorSpec([], "int32")])
def steps(n):
    count = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        count += 1
    return count


@dfc.compiler.autograph.function(input_signature=[dfc.TensorSpec([None], "float32")])
def positive_sum(xs):
    s = 0.0
    for x in xs:
        if x < 0:
            continue
        s += x
    return s


@dfc.compiler.autograph.function
def no_signature(x):
    return x
'''


def test_compile_file_writes_deterministic_graphs(tmp_path):
    src = tmp_path / "prog.py"
    src.write_text(textwrap.dedent(SAMPLE))
    out1, out2 = tmp_path / "a", tmp_path / "b"
    runs = [compile_file(str(src), out_dir=str(out)) for out in (out1, out2)]
    assert [r[0] for r in runs[0]] == ["steps", "positive_sum"]
    for name in ("steps", "positive_sum"):
        assert (out1 / f"{name}.json").read_bytes() == (out2 / f"{name}.json").read_bytes()
    loaded = dfc.load(str(out1 / "steps.json"))
    assert loaded(np.int32(27)) == 111
    loaded = dfc.load(str(out1 / "positive_sum.json"))
    np.testing.assert_allclose(loaded(np.array([1, -2, 3], np.float32)), 4.0)


def test_compile_file_named_functions(tmp_path):
    src = tmp_path / "prog.py"
    src.write_text(textwrap.dedent(SAMPLE))
    results = compile_file(str(src), names=["steps"], out_dir=str(tmp_path))
    assert [r[0] for r in results] == ["steps"]
    assert os.path.exists(tmp_path / "steps.json")
    with pytest.raises(DfcInputError):
        compile_file(str(src), names=["missing"], out_dir=str(tmp_path))
    with pytest.raises(DfcInputError):
        compile_file(str(src), names=["no_signature"], out_dir=str(tmp_path))
    with pytest.raises(DfcInputError):
        compile_file(str(tmp_path / "nope.py"), out_dir=str(tmp_path))


@dfc.compiler.autograph.function(input_signature=[dfc.TensorSpec([2, 4], "float64")])
def _multi_axis_slices(z):
    h = 1
    return z[:, 1:3] + z[:, h:2 * h + 1], z[0, ::2], z[..., -1]


def test_multi_axis_slices_convert():
    """x[:, a:b] must survive conversion (an unparser that writes it as a tuple gives a syntax error)."""
    z = np.arange(8.0).reshape(2, 4)
    a, b, c = _multi_axis_slices(z)
    np.testing.assert_array_equal(a, z[:, 1:3] + z[:, 1:3])
    np.testing.assert_array_equal(b, z[0, ::2])
    np.testing.assert_array_equal(c, z[..., -1])
    compile(_multi_axis_slices.code, "<code>", "exec")
