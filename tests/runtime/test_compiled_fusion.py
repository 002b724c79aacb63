"""Elementwise groups in compiled loop frames (dfc/runtime/compiled/fusion.py): chains of elementwise ops run
as flat loops, numpy's loops on group buffers; the results are the reference interpreter's bits on every path
(run_all_modes), the same as compiling op by op (DFC_COMPILED_FUSION=0), deadness inside conds holds, and an
error inside a group names its node."""
import numpy as np
import pytest

import dfc
from dfc import nest
from tests.compiledtools import _no_compile_budget, frames_alone  # noqa: F401 (fixtures)
from tests.conftest import run_all_modes

# these test loop frames compiled one by one (tests/runtime/test_compiled_root.py: the whole run as one)
pytestmark = [pytest.mark.usefixtures("frames_alone"),
              pytest.mark.host_devices("numba-compiled loop frames are CPU machine code")]

pytest.importorskip("numba")


def _frames(g):
    return dfc.Session(g, compile_loops=True, num_threads=0).compiled_frames()


def _only_compiled(g, args):
    """Every frame runs compiled (no fused replay); the results."""
    from dfc.runtime.compiled import CompiledFrame
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    got = s.call(*args)
    runs = [p.runs for plan in s._plans.values() for p in plan.programs.values() if isinstance(p, CompiledFrame)]
    assert runs and all(r["fused"] == 0 and r["compiled"] >= 1 for r in runs), runs
    return got


def _without_grouping(monkeypatch, g, args):
    from dfc.runtime.compiled import fusion
    monkeypatch.setattr(fusion, "ENABLED", False)
    src = _frames(g)
    got = _only_compiled(g, args)
    monkeypatch.setattr(fusion, "ENABLED", True)
    return src, got


def _same(a, b):
    a, b = nest.flatten(a), nest.flatten(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def _mixed(x, b, c, k, n):
    """Every kind of group member: native arithmetic, comparisons and Where, casts, a bias of lower rank and a
    (1, m) row broadcast, scalars, numpy-loop ops (tanh, exp, sigmoid, relu, maximum, float pow), checked
    integer floor division and modulo, and a value used twice (a group root)."""
    def body(i, h, acc, q):
        z = h * 0.9 + b                                     # b: [m], broadcast over the rows
        a = dfc.sigmoid(z) * dfc.tanh(z * 0.5 - c)          # c: [1, m]
        u = dfc.relu(a - 0.1) + dfc.maximum(dfc.exp(-dfc.square(a)), a * 0.3)
        v = dfc.where(u > 0.2, dfc.pow(dfc.abs(u) + 1.0, 1.5), -u)
        h2 = v * dfc.cast(q % 3 + q // 2 > k, "float64") + v * 0.5
        # reductions to one value (reduced into a scalar: P.reduce_all), of one element too (q[:1])
        r = dfc.reduce_sum(h2 * h2) + dfc.reduce_max(h2) * dfc.reduce_min(dfc.reshape(h2, [-1])[:1]) \
            + dfc.reduce_prod(v[0]) + dfc.cast(dfc.reduce_any(q[:1] > 3), "float64") \
            + dfc.cast(dfc.reduce_all(q > 0), "float64")
        return i + 1, h2, acc + r, q + 1
    q0 = dfc.cast(dfc.reshape(x, [-1])[:4] * 10.0, "int64")
    return dfc.while_loop(lambda i, h, acc, q: i < n, body, (0, x, dfc.constant(np.float64(0.0)), q0))


def test_groups_give_the_reference_bits_and_the_op_by_op_bits(monkeypatch):
    g = dfc.trace(_mixed, dfc.TensorSpec([3, 4], "float64"), dfc.TensorSpec([4], "float64"),
                  dfc.TensorSpec([1, 4], "float64"), dfc.TensorSpec([], "int64"), dfc.TensorSpec([], "int64"))
    frames = _frames(g)
    assert frames["while"]["status"] == "compiled"
    src = frames["while"]["source"]
    assert src.count("for j") >= 3 and "H.spread(" in src and "P.run(LP" in src     # groups, a bias, loops
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal((1, 4)), np.int64(2),
            np.int64(6))
    want = run_all_modes(g, *args)
    _same(want, _only_compiled(g, args))
    plain, got = _without_grouping(monkeypatch, g, args)
    assert "for j" not in plain["while"]["source"]
    _same(want, got)


def test_float32_gate_math_and_its_gradient_loop(monkeypatch):
    """The LSTM cell's gate math in float32 (sigmoid, tanh buffers written in place) and the gradient loop's
    products of popped values: both frames compile with groups and give the reference's bits."""
    def f(x, w, n):
        def body(i, h, c):
            z = dfc.matmul(h, w)
            zi, zf, zg = dfc.split(z, 3, axis=1)
            c = dfc.sigmoid(zf) * c + dfc.sigmoid(zi) * dfc.tanh(zg)
            return i + 1, dfc.tanh(c) * 0.5 + x, c
        _, h, c = dfc.while_loop(lambda i, h, c: i < n, body, (0, x, x))
        loss = dfc.reduce_sum(h * c)
        return loss, dfc.gradients(loss, [x, w])
    g = dfc.trace(f, dfc.TensorSpec([2, 5], "float32"), dfc.TensorSpec([5, 15], "float32"),
                  dfc.TensorSpec([], "int64"))
    frames = _frames(g)
    assert {k: v["status"] for k, v in frames.items()} == {"while": "compiled", "while_grad": "compiled"}
    assert all("for j" in v["source"] for v in frames.values())
    rng = np.random.default_rng(1)
    args = (rng.standard_normal((2, 5)).astype(np.float32), (rng.standard_normal((5, 15)) * 0.3).astype(np.float32),
            np.int64(7))
    want = run_all_modes(g, *args)
    _same(want, _only_compiled(g, args))
    _same(want, _without_grouping(monkeypatch, g, args)[1])


def test_a_group_inside_a_cond_branch_is_dead_with_its_inputs():
    """A group whose inputs come from one branch of a cond: skipped (dead) when the other branch runs."""
    def f(x, n):
        def body(i, y):
            y = dfc.cond(dfc.reduce_sum(y) > 0.0, lambda: dfc.tanh(y * 0.5 + 0.1) * x - y, lambda: y * y + x * 0.25)
            return i + 1, y
        return dfc.while_loop(lambda i, y: i < n, body, (0, x))
    g = dfc.trace(f, dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int64"))
    assert "for j" in _frames(g)["while"]["source"]
    for x in ([0.5, -0.3, 1.2], [-2.0, 0.1, 0.2]):
        want = run_all_modes(g, np.array(x), np.int64(8))
        _same(want, _only_compiled(g, (np.array(x), np.int64(8))))


def test_errors_inside_a_group_name_their_node():
    def div(x, d, n):
        return dfc.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, (y + 1) // d * 2 + y), (0, x))
    g = dfc.trace(div, dfc.TensorSpec([3], "int64"), dfc.TensorSpec([3], "int64"), dfc.TensorSpec([], "int64"))
    assert "for j" in _frames(g)["while"]["source"]
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    np.testing.assert_array_equal(s.call(np.arange(3), np.array([1, 2, 3]), np.int64(2))[1],
                                  dfc.Session(g, mode="reference").call(np.arange(3), np.array([1, 2, 3]),
                                                                        np.int64(2))[1])
    node = [n.name for n in g.nodes.values() if n.op == "FloorDiv"][0]
    with pytest.raises(dfc.DfcError, match=node):
        s.call(np.arange(3), np.array([1, 0, 3]), np.int64(2))

    def mismatch(x, y, n):
        return dfc.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a * 0.5 + y * 2.0), (0, x))
    g = dfc.trace(mismatch, dfc.TensorSpec([None], "float64"), dfc.TensorSpec([None], "float64"),
                  dfc.TensorSpec([], "int64"))
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    muls = {n.name for n in g.nodes.values() if n.op == "Mul"}
    add = [n.name for n in g.nodes.values() if n.op == "Add" and {i.split(":")[0] for i in n.inputs} <= muls]
    assert len(add) == 1
    with pytest.raises(dfc.DfcError, match=add[0]):
        s.call(np.ones(3), np.ones(4), np.int64(2))
