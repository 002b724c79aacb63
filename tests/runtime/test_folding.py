"""Constant folding (dfc/runtime/folding.py): a fused run's graph has its constant subexpressions computed
once, by their own kernels, in the same frames; every path still gives the reference interpreter's bits."""
import numpy as np
import pytest

import dfc
from dfc.errors import DfcError
from dfc.ir.graph import Node
from dfc.runtime.folding import fold
from tests.conftest import run_all_modes


def _leapfrog(q, A, n):
    """HMC's inner loop: the gradient of a potential inside a while loop (its seed and broadcasts fold)."""
    def U(q):
        return 0.5 * dfc.reduce_sum(q * dfc.matmul(A, dfc.expand_dims(q, 1))[:, 0]) + 0.25 * dfc.reduce_sum(q ** 4)

    def body(i, q, p):
        p = p - 0.1 * dfc.gradients(U(q), q)[0]
        return i + 1, q + 0.1 * p, p
    return dfc.while_loop(lambda i, q, p: i < n, body, (0, q, dfc.zeros_like(q)))[1]


def test_a_gradient_loops_constants_fold_and_every_path_agrees():
    g = dfc.trace(_leapfrog, dfc.TensorSpec([4], "float64"), dfc.TensorSpec([4, 4], "float64"),
                  dfc.TensorSpec([], "int64"))
    folded, n = fold(g)
    assert n >= 4
    changed = [name for name, node in folded.nodes.items() if node.op == "Const" and g.nodes[name].op != "Const"]
    assert {g.nodes[name].op for name in changed} >= {"Fill", "BroadcastTo"}
    frames, folded_frames = g.frames()[0], folded.frames()[0]
    assert all(frames[name] == folded_frames[name] for name in changed)     # in the loop, still in the loop
    assert any(frames[name] for name in changed)
    q, A = np.linspace(-1, 1, 4), np.eye(4) + 0.1
    run_all_modes(g, q, A, np.int64(7))


def test_a_folded_value_in_an_untaken_branch_is_dead_like_the_branch():
    def f(x, p):
        return dfc.cond(p, lambda: x + dfc.fill([3], 2.0) * 3.0, lambda: x - dfc.fill([3], 1.0) * 5.0)
    g = dfc.trace(f, dfc.TensorSpec([3], "float32"), dfc.TensorSpec([], "bool"))
    assert fold(g)[1] >= 2
    for p in (True, False):
        run_all_modes(g, np.ones(3, np.float32), np.bool_(p))


def test_fed_fetched_stateful_and_failing_nodes_stay():
    g = dfc.Graph()
    g.add_node(Node("c", "Const", [], {"value": np.float64(2.0), "dtype": "float64"}))
    g.add_node(Node("sq", "Mul", ["c", "c"]))
    g.add_node(Node("s", "Const", [], {"value": np.array([3], np.int64), "dtype": "int64"}))
    g.add_node(Node("r", "RandomUniform", ["s"], {"dtype": "float64", "seed": 1}))
    g.add_node(Node("zero", "Const", [], {"value": np.int64(0), "dtype": "int64"}))
    g.add_node(Node("bad", "FloorDiv", ["s", "zero"]))      # integer division by zero: fails when it runs
    g.add_node(Node("out", "Add", ["sq", "sq"]))
    assert set(fold(g)[0].nodes["sq"].inputs) == {"^c"}
    assert fold(g, keep={"c"})[0].nodes["sq"].op == "Mul"                   # c is fed: not a constant
    assert fold(g)[0].nodes["r"].op == "RandomUniform"
    assert fold(g)[0].nodes["bad"].op == "FloorDiv"
    s = dfc.Session(g)
    assert float(s.run("out:0")) == 8.0 and float(s.run("out:0", {"c": 3.0})) == 18.0
    fetched = s.run("sq:0")
    fetched += 1.0                                                          # a fetch is the caller's to write
    assert float(s.run("sq:0")) == 4.0
    with pytest.raises(DfcError) as e:
        s.run("bad:0")
    assert e.value.node == "bad"
