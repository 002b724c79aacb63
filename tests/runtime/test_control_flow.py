"""cond / while_loop programs compared with the same computation in plain Python."""
import numpy as np
import pytest

import dfc
from tests.conftest import run_all_modes

F32, I32, I64 = (lambda *s: dfc.TensorSpec(s, "float32")), (lambda *s: dfc.TensorSpec(s, "int32")), \
    (lambda *s: dfc.TensorSpec(s, "int64"))


def test_simple_loop_and_cond():
    def f(x, n):
        i, s = dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + x), (0, 0.0))
        return s, dfc.cond(s > 3.0, lambda: s * 2.0, lambda: s - 1.0), i

    g = dfc.trace(f, F32(), I32())
    for x, n in [(1.5, 3), (1.0, 0), (0.5, 10)]:
        s = x * n
        want = (s, s * 2 if s > 3 else s - 1, n)
        got = run_all_modes(g, np.float32(x), np.int32(n))
        np.testing.assert_allclose([float(v) for v in got], want, rtol=1e-6)


def test_zero_trip_loop_returns_initial_values():
    g = dfc.trace(lambda n: dfc.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a * 2), (0, 1)), I64())
    assert [int(v) for v in run_all_modes(g, np.int64(0))] == [0, 1]
    assert [int(v) for v in run_all_modes(g, np.int64(-5))] == [0, 1]
    assert [int(v) for v in run_all_modes(g, np.int64(6))] == [6, 64]


def collatz_py(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def test_cond_inside_loop_collatz():
    def f(n):
        def body(n, steps):
            n = dfc.cond(n % 2 == 0, lambda: n // 2, lambda: 3 * n + 1)
            return n, steps + 1
        return dfc.while_loop(lambda n, s: n != 1, body, (n, 0))[1]

    g = dfc.trace(f, I64())
    for n in [1, 2, 3, 7, 27]:
        assert int(run_all_modes(g, np.int64(n))) == collatz_py(n)


def nested_py(a, b, c):
    total = 0
    i = 0
    while i < a:
        j = 0
        while j < b + i:
            if (i + j) % 2 == 0:
                k = 0
                while k < c:
                    total += i * j + k
                    k += 1
            else:
                total -= 1
            j += 1
        i += 1
    return total


def test_loops_nested_three_deep_with_cond():
    def f(a, b, c):
        def inner_k(i, j, total):
            def body(k, t):
                return k + 1, t + i * j + k
            return dfc.while_loop(lambda k, t: k < c, body, (0, total))[1]

        def mid(i, total):
            def body(j, t):
                t = dfc.cond((i + j) % 2 == 0, lambda: inner_k(i, j, t), lambda: t - 1)
                return j + 1, t
            return dfc.while_loop(lambda j, t: j < b + i, body, (0, total))[1]

        def outer(i, total):
            return i + 1, mid(i, total)
        return dfc.while_loop(lambda i, t: i < a, outer, (0, 0))[1]

    g = dfc.trace(f, I64(), I64(), I64())
    for a, b, c in [(3, 2, 2), (0, 1, 1), (4, 0, 3), (2, 3, 0)]:
        assert int(run_all_modes(g, np.int64(a), np.int64(b), np.int64(c))) == nested_py(a, b, c)


def test_loop_inside_untaken_branch_finishes():
    def f(x, n):
        def looped():
            return dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 2.0), (0, x))[1]
        return dfc.cond(n > 100, looped, lambda: x - 1.0)

    g = dfc.trace(f, F32(), I64())
    assert float(run_all_modes(g, np.float32(3.0), np.int64(5))) == 2.0
    assert float(run_all_modes(g, np.float32(1.0), np.int64(101))) == 2.0 ** 101


def test_nested_loop_inside_untaken_branch_inside_loop():
    def f(n):
        def body(i, s):
            def inner():
                return dfc.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + j), (0, s))[1]
            return i + 1, dfc.cond(i % 3 == 0, inner, lambda: s + 100)
        return dfc.while_loop(lambda i, s: i < n, body, (0, 0))[1]

    def py(n):
        s = 0
        for i in range(n):
            s = s + sum(range(i)) if i % 3 == 0 else s + 100
        return s

    g = dfc.trace(f, I64())
    for n in [0, 1, 4, 9]:
        assert int(run_all_modes(g, np.int64(n))) == py(n)


def test_nested_structure_loop_vars():
    def f(x):
        init = {"acc": (x, [x * 0.0]), "n": 0}

        def body(state):
            (a, (b,)) = state["acc"]
            return {"acc": (a * 2.0, [b + a]), "n": state["n"] + 1}
        out = dfc.while_loop(lambda s: s["n"] < 4, body, init)
        return out["acc"][0], out["acc"][1][0], out["n"]

    g = dfc.trace(f, F32(3))
    x = np.array([1, 2, 3], np.float32)
    a, b, n = run_all_modes(g, x)
    np.testing.assert_allclose(a, x * 16)
    np.testing.assert_allclose(b, x * (1 + 2 + 4 + 8))
    assert int(n) == 4


def test_cond_returns_structures_and_python_scalars():
    def f(x):
        return dfc.cond(dfc.reduce_sum(x) > 0, lambda: {"a": x, "b": 1}, lambda: {"a": -x, "b": 2.5})

    g = dfc.trace(f, F32(2))
    out = run_all_modes(g, np.array([1, 2], np.float32))
    np.testing.assert_allclose(out["a"], [1, 2])
    assert out["b"].dtype == np.float32 and float(out["b"]) == 1.0
    out = run_all_modes(g, np.array([-1, -2], np.float32))
    np.testing.assert_allclose(out["a"], [1, 2])
    assert float(out["b"]) == 2.5


def test_weak_python_scalar_loop_var_takes_body_dtype():
    def f(x, n):
        return dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + x), (0, 0))[1]

    g = dfc.trace(f, dfc.TensorSpec([], "float64"), I32())
    out = run_all_modes(g, np.float64(0.25), np.int32(3))
    assert out.dtype == np.float64 and float(out) == 0.75


def test_loop_var_dtype_change_is_an_error():
    x = np.zeros((), np.float32)

    def f(x):
        return dfc.while_loop(lambda a: a < 3.0, lambda a: dfc.cast(a, "float64") + 1.0, (x,))

    with pytest.raises(dfc.DfcTypeError, match="changes dtype from float32 to float64"):
        dfc.trace(f, dfc.TensorSpec.from_value(x))


def test_loop_var_changing_shape_becomes_unknown_dim():
    def f(n):
        return dfc.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, dfc.concat([v, dfc.reshape(i, [1])], 0)),
                              (0, dfc.zeros([1], "int64")))[1]

    g = dfc.trace(f, I64())
    np.testing.assert_array_equal(run_all_modes(g, np.int64(3)), [0, 0, 1, 2])


def test_maximum_iterations_and_captured_tensors():
    def f(x, limit):
        scale = x * 2.0
        return dfc.while_loop(lambda i, s: s < limit, lambda i, s: (i + 1, s + scale), (0, 0.0),
                              maximum_iterations=5)

    g = dfc.trace(f, F32(), F32())
    i, s = run_all_modes(g, np.float32(1.0), np.float32(1000.0))
    assert int(i) == 5 and float(s) == 10.0
    i, s = run_all_modes(g, np.float32(1.0), np.float32(3.0))
    assert int(i) == 2 and float(s) == 4.0


def test_one_switch_per_captured_tensor_and_one_enter_per_loop_capture():
    def f(x, y):
        r = dfc.cond(x > 0.0, lambda: x + y + y, lambda: x * y * x)
        return dfc.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s + x + x + y), (0, r))[1]

    g = dfc.trace(f, F32(), F32())
    counts = g.count_ops()
    assert counts["Switch"] == 3 + 2      # pred, x, y for the cond; one per loop variable
    assert counts["Merge"] == 1 + 2
    assert counts["Enter"] == 2 + 2       # x, y captured; two loop variables
    assert counts["Exit"] == 2 and counts["NextIteration"] == 2 and counts["LoopCond"] == 1


def test_many_iterations_in_flight_give_same_answer():
    def f(n):
        def body(i, acc):
            return i + 1, acc + dfc.reduce_sum(dfc.range(0, i + 1))
        return dfc.while_loop(lambda i, a: i < n, body, (0, 0))[1]

    g = dfc.trace(f, I64())
    assert int(run_all_modes(g, np.int64(200))) == sum(i * (i + 1) // 2 for i in range(200))


def test_loop_fusion_covers_nested_loops_and_conds():
    """The fused fast path is really taken for loops with conds and nested loops (and agrees: see
    run_all_modes in every test above)."""
    def f(n):
        def outer(i, s):
            inner = dfc.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, dfc.cond(j % 2 == 0, lambda: t + j,
                                                                                       lambda: t - 1)), (0, s))
            return i + 1, inner[1]
        return dfc.while_loop(lambda i, s: i < n, outer, (0, 0))[1]

    g = dfc.trace(f, I64())
    s = dfc.Session(g, mode="threads")
    out = s.call(np.int64(6))
    plan = next(iter(s._plans.values()))
    assert len(plan.programs) == 2          # both frames have a fused program
    want = 0
    for i in range(6):
        for j in range(i):
            want = want + j if j % 2 == 0 else want - 1
    assert int(out) == want == int(run_all_modes(g, np.int64(6)))


def test_fused_in_place_accumulation_never_touches_shared_buffers():
    """acc = acc + x reuses acc's buffer after the first iteration; the initial value (which the
    caller still sees) and values saved elsewhere must never change."""
    def f(x, n):
        init = x * 1.0
        def body(i, acc, firsts):
            acc = acc + x
            return i + 1, acc, firsts.write(i, acc)
        _, acc, firsts = dfc.while_loop(lambda i, a, f: i < n, body, (0, init, dfc.TensorArray("float32")))
        return acc, init, firsts.stack()

    g = dfc.trace(f, F32(3), I64())
    x = np.array([1.0, 2.0, 3.0], np.float32)
    acc, init, hist = run_all_modes(g, x, np.int64(4))
    np.testing.assert_array_equal(acc, x * 5)
    np.testing.assert_array_equal(init, x)
    np.testing.assert_array_equal(hist, [x * k for k in range(2, 6)])
    s = dfc.Session(g, mode="threads")
    s.call(x, np.int64(4))
    prog = next(iter(next(iter(s._plans.values())).programs.values()))
    assert "out=" not in prog.source     # acc is also written to a TensorArray: no in-place add


def test_fused_in_place_accumulation_is_used_for_plain_accumulators():
    def f(x, n):
        return dfc.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a + x), (0, x * 0.0))[1]

    g = dfc.trace(f, F32(3), I64())
    x = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(run_all_modes(g, x, np.int64(7)), x * 7)
    s = dfc.Session(g, mode="threads")
    s.call(x, np.int64(7))
    prog = next(iter(next(iter(s._plans.values())).programs.values()))
    assert "out=" in prog.source
