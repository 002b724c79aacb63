"""The reference interpreter (dfc/runtime/reference.py) on its own: the rules of Figure 5."""
import numpy as np
import pytest

import dfc
from dfc.runtime import reference


def _branch_with_loop():
    def f(x, n):
        looped = lambda: dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * x), (0, x))[1] * 3.0
        return dfc.cond(n > 100, looped, lambda: x)
    g = dfc.trace(f, dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "int64"))
    mul = next(n for n in g.nodes if n.startswith("mul_"))   # the * 3.0 after the loop, in the branch
    return g, mul


def test_a_loop_on_an_untaken_branch_finishes_dead():
    g, mul = _branch_with_loop()
    feeds = {"x": np.float32(2), "n": np.int64(3)}
    with pytest.raises(dfc.DfcRuntimeError, match="dead"):
        reference.run(g, [mul], feeds)
    assert float(dfc.Session(g, mode="reference").call(np.float32(2), np.int64(3))) == 2.0   # the cond's result
    assert float(reference.run(g, [mul], {"x": np.float32(2), "n": np.int64(101)})[0]) == 2.0 ** 102 * 3


def test_nothing_can_progress_is_a_deadlock_error_naming_the_waiting_nodes():
    g, mul = _branch_with_loop()
    interp = reference.Interpreter(g, [mul], {"x": np.float32(2), "n": np.int64(3)})
    frame = next(f for f in interp.enters_of)
    interp.enters_of[frame].add("an Enter that never comes")   # as a lost value would
    with pytest.raises(dfc.DfcDeadlockError, match="still waiting") as e:
        interp.run()
    assert e.value.node == mul and frame in str(e.value)


def test_iterations_carry_their_own_tags():
    # a random draw per iteration differs (its seed includes the frame tag), and equals the executor's
    def f(n):
        ta = dfc.TensorArray("float32", size=0)
        def body(i, ta):
            return i + 1, ta.write(i, dfc.random_uniform([], seed=3))
        return dfc.while_loop(lambda i, ta: i < n, body, (np.int64(0), ta))[1].stack()
    g = dfc.trace(f, dfc.TensorSpec([], "int64"))
    ref = dfc.Session(g, mode="reference").call(np.int64(4))
    assert len(set(ref.tolist())) == 4
    np.testing.assert_array_equal(ref, dfc.Session(g, mode="threads").call(np.int64(4)))


def test_a_partition_is_not_a_whole_graph():
    from dfc.ir.graph import Graph, Node
    g = Graph("p")
    g.add_node(Node("r", "Recv", [], {"tensor_name": "x", "send_device": "cpu:0", "recv_device": "cpu:1",
                                       "dtype": "float32", "shape": []}))
    with pytest.raises(dfc.DfcGraphError, match="whole graphs"):
        reference.run(g, ["r"])
