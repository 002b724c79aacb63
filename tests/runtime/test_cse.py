"""Common subexpression elimination (dfc/runtime/cse.py): a Session runs identical pure nodes once, on every
path but the reference interpreter, which runs the graph as written; every path still gives its bits."""
import numpy as np
import pytest

import dfc
from dfc.ir.graph import Node
from dfc.runtime import cse
from tests.conftest import run_all_modes

F32 = dfc.TensorSpec([3], "float32")


def _planned(session):
    """The ops of every node the session's plans run (each partition's plan included)."""
    ops = []
    for p in session._plans.values():
        for plan in (p.plans.values() if hasattr(p, "plans") else [p]):
            ops += [n.op for n in plan.nodes]
    return ops


def _count(graph, op):
    return sum(n.op == op for n in graph.nodes.values())


def test_two_identical_products_run_once_on_every_threads_path():
    def f(x):
        return x * 2.0 + x * 2.0
    g = dfc.trace(f, F32)
    assert _count(g, "Mul") == 2
    x = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(run_all_modes(g, x), 4 * x)
    for kw in (dict(fuse_loops=False, num_threads=0), dict(fuse_loops=True), dict(devices=["cpu:0"])):
        s = dfc.Session(g, **kw)
        s.call(x)
        assert _planned(s).count("Mul") == 1, kw
    ref = dfc.Session(g, mode="reference")
    np.testing.assert_array_equal(ref.call(x), 4 * x)


def test_merging_follows_chains_and_keeps_different_attributes_apart():
    def f(x):
        a = dfc.tanh(x * 2.0) + 1.0
        b = dfc.tanh(x * 2.0) + 1.0          # the whole chain is one subexpression
        c = dfc.reduce_sum(a, axis=0) + dfc.reduce_sum(b, axis=0)
        d = x * -0.0 + x * 0.0              # 0.0 and -0.0 are different constants
        return c, d, dfc.cast(x, "int32"), dfc.cast(x, "int64")
    g = dfc.trace(f, F32)
    out, removed = cse.eliminate(g, keep=(), fed={"x"})
    out.verify()
    assert _count(out, "Tanh") == 1 and _count(out, "Sum") == 1 and _count(out, "Mul") == 3
    assert _count(out, "Cast") == 2
    assert removed >= 6
    run_all_modes(g, np.array([1, -2, 3], np.float32))


def test_in_a_loop_body_duplicates_merge_but_two_loops_stay_apart():
    def f(x, n):
        def body(i, v):
            return i + 1, v * 0.5 + v * 0.5 + 1.0
        a = dfc.while_loop(lambda i, v: i < n, body, (0, x))[1]
        b = dfc.while_loop(lambda i, v: i < n, body, (0, x))[1]
        return a - b + a
    g = dfc.trace(f, F32, dfc.TensorSpec([], "int64"))
    out, _ = cse.eliminate(g, fed={"x", "n"})
    out.verify()
    frames = out.frames()[0]
    muls = [name for name, node in out.nodes.items() if node.op == "Mul"]
    assert len(muls) == 2 and len({frames[m] for m in muls}) == 2     # one per loop
    assert _count(out, "Enter") == _count(g, "Enter") and _count(out, "Merge") == _count(g, "Merge")
    run_all_modes(g, np.array([1, 2, 3], np.float32), np.int64(4))


def test_across_a_cond_branches_and_the_outside_stay_apart():
    def f(x, p):
        outside = x * 2.0
        inside = dfc.cond(p, lambda: x * 2.0 + x * 2.0, lambda: x * 2.0 - 1.0)
        return outside + inside
    g = dfc.trace(f, F32, dfc.TensorSpec([], "bool"))
    out, removed = cse.eliminate(g, fed={"x", "p"})
    out.verify()
    assert removed >= 1 and _count(out, "Mul") == 3       # outside, true branch (one of two), false branch
    assert _count(out, "Switch") == _count(g, "Switch")
    for p in (True, False):
        run_all_modes(g, np.array([1, 2, 3], np.float32), np.bool_(p))


def test_random_and_stateful_nodes_are_never_merged():
    v = dfc.Variable(np.zeros(3, np.float32), name="cse_v")

    def f(x):
        r1 = dfc.random_uniform([3], seed=5)
        r2 = dfc.random_uniform([3], seed=5)
        before = v.read_value()
        v.assign_add(x)
        after = v.read_value()
        return r1, r2, before, after
    g = dfc.trace(f, F32)
    out, _ = cse.eliminate(g, fed={"x"})
    assert _count(out, "RandomUniform") == 2 and _count(out, "ReadVariable") == 2
    r1, r2, before, after = run_all_modes(g, np.ones(3, np.float32))
    assert not np.array_equal(r1, r2)
    np.testing.assert_array_equal(after, before + 1)


def test_fed_and_fetched_nodes_stay_their_own_nodes():
    def f(x):
        a = x * 3.0
        b = x * 3.0
        return a, b, a + b
    g = dfc.trace(f, F32)
    a, b = g.signature["outputs"]["tuple"][0]["ref"], g.signature["outputs"]["tuple"][1]["ref"]
    x = np.ones(3, np.float32)
    s = dfc.Session(g)
    ra, rb, rsum = s.call(x)
    np.testing.assert_array_equal(ra, 3 * x)
    assert ra is not rb and _planned(s).count("Mul") == 2     # both fetched: neither is merged away
    # feeding one of two identical nodes: the other still computes its own value
    c = g.signature["outputs"]["tuple"][2]["ref"]
    for sess in (dfc.Session(g), dfc.Session(g, mode="reference")):
        got = sess.run(c, {"x": x, a.split(":")[0]: np.full(3, 10, np.float32)})
        np.testing.assert_array_equal(got, 13 * x)
    out, _ = cse.eliminate(g, keep=[c.split(":")[0]], fed=["x", a.split(":")[0]])
    assert _count(out, "Mul") == 2


def test_nodes_on_different_devices_are_not_merged():
    def f(x):
        with dfc.device("cpu:1"):
            a = x * 2.0
        with dfc.device("cpu:0"):
            b = x * 2.0
            c = x * 2.0
        return a + b + c
    g = dfc.trace(f, F32)
    s = dfc.Session(g)
    np.testing.assert_array_equal(s.call(np.ones(3, np.float32)), np.full(3, 6, np.float32))
    assert _planned(s).count("Mul") == 2
    run_all_modes(g, np.ones(3, np.float32))


def test_a_saved_graph_is_optimized_when_loaded(tmp_path):
    def f(x, n):
        def body(i, v):
            return i + 1, dfc.sin(v) * dfc.sin(v)
        return dfc.while_loop(lambda i, v: i < n, body, (0, x * 2.0 + x * 2.0))[1]
    g = dfc.trace(f, F32, dfc.TensorSpec([], "int64"))
    dfc.save(g, str(tmp_path / "g.json"))
    h = dfc.load(str(tmp_path / "g.json"))
    assert _count(h, "Sin") == 2 and _count(h, "Mul") == 3
    s = dfc.Session(h, fuse_loops=False)
    x = np.array([0.1, 0.2, 0.3], np.float32)
    s.call(x, np.int64(3))
    ops = _planned(s)
    assert ops.count("Sin") == 1 and ops.count("Mul") == 2
    np.testing.assert_array_equal(run_all_modes(h, x, np.int64(3)), run_all_modes(g, x, np.int64(3)))


def test_large_constants_merge_only_when_equal_bit_for_bit():
    big = np.arange(1000, dtype=np.float64)
    other = big.copy()
    other[-1] = -1.0
    g = dfc.Graph()
    for name, value in (("c1", big), ("c2", big.copy()), ("c3", other)):
        g.add_node(Node(name, "Const", [], {"value": value, "dtype": "float64"}))
    g.add_node(Node("s", "Stack", ["c1:0", "c2:0", "c3:0"]))
    out, removed = cse.eliminate(g, keep=["s"])
    assert removed == 1 and out.nodes["s"].inputs == ["c1:0", "c1:0", "c3:0"]


def test_constants_with_the_same_bytes_but_another_shape_or_dtype_stay_apart():
    g = dfc.Graph()
    values = {"scalar": np.int64(2), "vector": np.array([2]), "matrix": np.array([[2]]),
              "unsigned": np.uint64(2), "float": np.float64(1e-323), "row": np.zeros((1, 3)), "col": np.zeros((3, 1))}
    for name, value in values.items():
        g.add_node(Node(name, "Const", [], {"value": np.asarray(value), "dtype": np.asarray(value).dtype.name}))
    assert cse.eliminate(g)[1] == 0


def test_the_switch_turns_it_off(monkeypatch):
    g = dfc.trace(lambda x: x * 2.0 + x * 2.0, F32)
    monkeypatch.setattr(cse, "ENABLED", False)
    s = dfc.Session(g)
    s.call(np.ones(3, np.float32))
    assert _planned(s).count("Mul") == 2


@pytest.mark.parametrize("op", ["Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "Placeholder",
                                "RandomNormal", "Print", "Send", "Recv", "QueueDequeue"])
def test_control_flow_stateful_and_executor_ops_are_not_mergeable(op):
    assert not cse.mergeable(Node("n", op))
