"""The root frame as one generated function (dfc/runtime/fused_root.py): with every loop frame a program,
a fused run calls it instead of scheduling the root's nodes, and gives what the scheduler gives."""
import numpy as np
import pytest

import dfc
from dfc.errors import DfcError
from dfc.ir.graph import Node
from dfc.runtime.executor import HEAVY_ELEMENTS
from tests.runtime.test_compiled import _signature

# the root program runs host kernels (on a GPU, or DFC_TEST_DEVICE's strict double, the scheduler does):
# these tests of when it is used keep cpu:0 as the default device
pytestmark = pytest.mark.host_devices("the root frame's generated code runs on the host")


def _program(s, g):
    return s.plan(*_signature(g)).root_program


def _counted(s, g):
    """Count the calls of the graph's root program in Session s."""
    rp = _program(s, g)
    assert rp is not None
    calls = []
    fn = rp.fn
    rp.fn = lambda *a: calls.append(1) or fn(*a)
    return calls


def _model(x, n):
    """Straight-line code around two loops, one feeding the other, and a cond at the root."""
    y = dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 0.5 + x), (0, x))[1]
    z = dfc.cond(dfc.reduce_sum(y) > 0, lambda: y * 2.0, lambda: y - 1.0)
    w = dfc.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, dfc.tanh(s) + z), (0, z))[1]
    return dfc.reduce_sum(w * w), z


def test_a_fused_run_calls_the_root_program_and_agrees_with_every_path(all_modes):
    g = dfc.trace(_model, dfc.TensorSpec([4], "float64"), dfc.TensorSpec([], "int64"))
    for x in (np.arange(4.0), -np.arange(4.0) - 1):       # both branches of the root cond
        want = all_modes(g, x, np.int64(5))
        s = dfc.Session(g, num_threads=0, compile_loops=False)
        s.call(x, np.int64(5))
        calls = _counted(s, g)
        got = s.call(x, np.int64(5))
        assert calls == [1]
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def test_a_straight_line_graph_without_loops_has_one_too():
    g = dfc.trace(lambda a, b: (dfc.matmul(a, b) + 1.0, dfc.reduce_max(a)),
                  dfc.TensorSpec([2, 3], "float32"), dfc.TensorSpec([3, 2], "float32"))
    a, b = np.ones((2, 3), np.float32), np.full((3, 2), 2.0, np.float32)
    s = dfc.Session(g, num_threads=0)
    s.call(a, b)
    calls = _counted(s, g)
    got = s.call(a, b)
    assert calls == [1]
    np.testing.assert_array_equal(got[0], a @ b + 1.0)
    assert got[1] == 1.0


def test_an_error_at_the_root_names_the_node_and_the_line():
    def f(a, b):
        c = a + 1.0
        return dfc.matmul(c, b)            # shapes that do not fit: fails at run time
    g = dfc.trace(f, dfc.TensorSpec([None, None], "float64"), dfc.TensorSpec([None, None], "float64"))
    s = dfc.Session(g, num_threads=0)
    assert s.call(np.ones((2, 2)), np.ones((2, 2))).shape == (2, 2)
    assert _program(s, g) is not None
    with pytest.raises(DfcError) as e:
        s.call(np.ones((2, 3)), np.ones((2, 2)))
    unfused = dfc.Session(g, fuse_loops=False, num_threads=0)
    with pytest.raises(DfcError) as e2:
        unfused.call(np.ones((2, 3)), np.ones((2, 2)))
    assert e.value.node == e2.value.node and "matmul" in e.value.node
    assert e.value.loc is not None and "test_fused_root.py" in str(e.value)


def test_a_dead_fetch_is_an_error_naming_it():
    g = dfc.Graph()
    g.add_node(Node("x", "Placeholder", [], {"dtype": "float64", "shape": []}))
    g.add_node(Node("p", "Placeholder", [], {"dtype": "bool", "shape": []}))
    g.add_node(Node("sw", "Switch", ["x", "p"]))
    s = dfc.Session(g, num_threads=0)
    assert float(s.run("sw:0", {"x": 1.0, "p": False})) == 1.0
    assert s.plan(["sw:0"], ["p", "x"], ()).root_program is not None
    with pytest.raises(DfcError, match="dead") as e:
        s.run("sw:0", {"x": 1.0, "p": True})
    assert e.value.node == "sw"


def test_feeding_a_constant_overrides_it():
    g = dfc.Graph()
    g.add_node(Node("c", "Const", [], {"value": np.float64(2.0), "dtype": "float64"}))
    g.add_node(Node("sq", "Mul", ["c", "c"]))
    s = dfc.Session(g, num_threads=0)
    assert float(s.run("sq:0")) == 4.0
    assert float(s.run("sq:0", {"c": 3.0})) == 9.0
    assert s.plan(["sq:0"], ["c"], ()).root_program is not None


def test_variable_updates_at_the_root_keep_their_order():
    v = dfc.Variable(np.float64(1.0), name="root_prog_v")

    @dfc.function
    def step(x):
        v.assign(v.read_value() * x)
        v.assign_add(1.0)
        return v.read_value()

    x = np.float64(3.0)
    assert float(step(x)) == 4.0
    assert float(step(x)) == 13.0
    g, _ = step.concrete(x)
    assert dfc.Session(g).plan(*_signature(g)).root_program is not None


def test_heavy_root_kernels_stay_on_the_pool():
    """With a kernel pool, a run whose root has kernels big enough for it keeps scheduling the root (two
    independent big matmuls overlap); one whose root kernels ran inline calls the root program next."""
    g = dfc.trace(lambda a, b: (dfc.matmul(a, a), dfc.matmul(b, b)),
                  dfc.TensorSpec([None, None], "float32"), dfc.TensorSpec([None, None], "float32"))
    n = int(np.sqrt(HEAVY_ELEMENTS)) + 8
    big = np.ones((n, n), np.float32)
    s = dfc.Session(g, num_threads=2)
    s.call(big, big)
    assert _program(s, g) is not None and not s.plan(*_signature(g)).root_inline
    small = np.ones((4, 4), np.float32)
    s2 = dfc.Session(g, num_threads=2)
    s2.call(small, small)
    calls = _counted(s2, g)
    np.testing.assert_array_equal(s2.call(small, small)[0], small @ small)
    assert calls == [1]


def test_a_tagged_random_op_after_a_loop_draws_what_the_scheduler_draws():
    def f(x, n):
        y = dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + dfc.random_normal([3], seed=7)), (0, x))[1]
        return y + dfc.random_uniform([3], seed=3)
    g = dfc.trace(f, dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int64"))
    x = np.zeros(3)
    fused = dfc.Session(g, num_threads=0)
    unfused = dfc.Session(g, fuse_loops=False, num_threads=0)
    for _ in range(2):
        np.testing.assert_array_equal(fused.call(x, np.int64(4)), unfused.call(x, np.int64(4)))
    assert _program(fused, g) is not None
