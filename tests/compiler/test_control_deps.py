"""`with dfc.control_dependencies([...])` (dfc/compiler/control_deps.py): ops built inside wait for the listed
nodes, in traced and converted code, inside loops and branches (through a token carried into the frame) and
across devices; fetching such an op runs its dependencies on every execution path."""
import numpy as np
import pytest

import dfc
from dfc.errors import DfcError
from dfc.ir import structure
from tests.conftest import ELSEWHERE, PATHS, run_all_modes

F32 = dfc.TensorSpec([3], "float32")


def _fetch_only(g, var, x, *more):
    """On every path: reset `var` to 0, fetch the graph's first output without its targets (so only what
    the fetch needs runs); returns the results and the variable's value after each run."""
    fetch = structure.leaves(g.signature["outputs"])[0]["ref"]
    feeds = {i["node"]: a for i, a in zip(g.signature["inputs"], (x,) + more)}
    out = {}
    for where, make in PATHS.items():
        if where in ELSEWHERE:      # Variables live in the cluster tasks' processes there
            continue
        var.assign(np.zeros(var.shape, var.dtype))
        value = make(g).run(fetch, feeds)
        out[where] = (value, var.numpy())
    return out


def test_traced_code_an_assign_add_runs_before_the_ops_of_the_block():
    v = dfc.Variable(np.float32(0), name="cd_traced")

    def f(x):
        inc = v.assign_add(1.0)
        with dfc.control_dependencies([inc]):
            y = x * 2.0
            r = v.read_value()
        return y, r
    g = dfc.trace(f, F32)
    inc = next(n for n in g.nodes.values() if n.op == "AssignAdd").name
    mul = next(n for n in g.nodes.values() if n.op == "Mul")
    assert "^" + inc in mul.inputs
    for where, (y, after) in _fetch_only(g, v, np.ones(3, np.float32)).items():
        np.testing.assert_array_equal(y, np.full(3, 2, np.float32), err_msg=where)
        assert after == 1, where             # fetching y ran the assign_add it waits for
    v.assign(np.float32(5))
    y, r = run_all_modes(g, np.ones(3, np.float32))
    assert r == 6                             # the read sees the update on every path


def test_blocks_nest_and_none_clears_them():
    v = dfc.Variable(np.float32(0), name="cd_nest")

    def f(x):
        a = v.assign_add(1.0)
        b = v.assign_add(2.0)
        with dfc.control_dependencies([a]):
            with dfc.control_dependencies([b]):
                both = x + 1.0
            with dfc.control_dependencies(None):
                neither = x + 2.0
        return both, neither
    g = dfc.trace(f, F32)
    adds = [n.name for n in g.nodes.values() if n.op == "AssignAdd"]
    both, neither = (g.nodes[leaf["ref"].split(":")[0]] for leaf in structure.leaves(g.signature["outputs"]))
    assert set(both.control_inputs) >= set(adds)
    assert not neither.control_inputs


def test_a_variables_handle_made_in_a_block_does_not_wait_for_it():
    v = dfc.Variable(np.float32(0), name="cd_first")
    w = dfc.Variable(np.float32(3), name="cd_handle")

    def f(x):
        inc = v.assign_add(1.0)
        with dfc.control_dependencies([inc]):
            r = w.read_value()             # w's first use in the graph makes its handle here
        return r + x, w.assign_add(x)      # the handle serves this assign (outside the block) too
    g = dfc.trace(f, dfc.TensorSpec([], "float32"))
    handle = next(n for n in g.nodes.values() if n.op == "VarHandle" and n.attrs["shared_name"] == w.shared_name)
    init = g.nodes[handle.inputs[0].split(":")[0]]
    assert handle.control_inputs == [] and init.inputs == []
    read = next(n for n in g.nodes.values() if n.op == "ReadVariable" and n.inputs[0].startswith(handle.name))
    inc = next(n.name for n in g.nodes.values() if n.op == "AssignAdd" and n.inputs[0].startswith("cd_first"))
    assert inc in read.control_inputs


def test_converted_code_a_dependency_from_outside_a_loop_and_a_branch():
    v = dfc.Variable(np.float32(0), name="cd_loop")

    @dfc.function
    def f(x, n):
        inc = v.assign_add(1.0)
        s = x
        i = 0
        while i < n:
            with dfc.control_dependencies([inc]):       # opened inside the loop, waits for a node outside it
                s = s * 2.0
            i += 1
        with dfc.control_dependencies([inc]):
            if dfc.reduce_sum(s) > 0:
                s = s + 1.0
            else:
                s = s - 1.0
        return s

    g = f.trace(F32, dfc.TensorSpec([], "int64"))
    frames = g.frames()[0]
    mul = next(n for n in g.nodes.values() if n.op == "Mul" and frames[n.name])
    # the Mul waits for a node of its own frame (a control edge cannot cross into the loop)
    assert mul.control_inputs and all(frames[c] == frames[mul.name] for c in mul.control_inputs)
    x = np.array([1, -2, 3], np.float32)
    for n in (0, 3):
        for where, (s, after) in _fetch_only(g, v, x, np.int64(n)).items():
            np.testing.assert_array_equal(s, x * 2 ** n + 1, err_msg=where)
            assert after == 1, where
        v.assign(np.float32(0))
        run_all_modes(g, x, np.int64(n))


def test_a_loop_built_in_the_block_waits_even_with_no_iteration():
    v = dfc.Variable(np.float32(0), name="cd_loop0")

    def f(x, n):
        inc = v.assign_add(1.0)
        with dfc.control_dependencies([inc]):
            return dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 2.0), (0, x))[1]
    g = dfc.trace(f, F32, dfc.TensorSpec([], "int64"))
    for where, (s, after) in _fetch_only(g, v, np.ones(3, np.float32), np.int64(0)).items():
        assert after == 1, where


def test_across_devices_the_control_edge_becomes_a_send_and_recv():
    w = dfc.Variable(np.float32(0), name="cd_dev", device="cpu:1")

    def f(x, n):
        with dfc.device("cpu:1"):
            inc = w.assign_add(1.0)
        with dfc.device("cpu:0"):
            with dfc.control_dependencies([inc]):
                y = x * 3.0
                z = dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + y), (0, y))[1]
                r = w.read_value()
        return z, r
    g = dfc.trace(f, F32, dfc.TensorSpec([], "int64"))
    parts = dfc.Session(g).partitions()
    sends = [n for p in parts.values() for n in p.nodes.values() if n.op == "Send"]
    assert any(n.attrs["tensor_name"].startswith("^assignadd") for n in sends)
    x = np.ones(3, np.float32)
    for where, (z, after) in _fetch_only(g, w, x, np.int64(2)).items():
        np.testing.assert_array_equal(z, np.full(3, 9, np.float32), err_msg=where)
        assert after == 1, where
    w.assign(np.float32(0))
    z, r = run_all_modes(g, x, np.int64(2))
    assert r == 1


def test_bad_dependencies_are_errors_at_the_users_line():
    def not_a_tensor(x):
        with dfc.control_dependencies([1.0]):
            return x + 1.0
    with pytest.raises(DfcError, match="takes tensors") as e:
        dfc.trace(not_a_tensor, F32)
    assert "test_control_deps.py" in str(e.value)

    def from_inside_a_loop(x):
        inner = []

        def body(i, s):
            inner.append(s * 2.0)
            return i + 1, inner[-1]
        dfc.while_loop(lambda i, s: i < 2, body, (0, x))
        with dfc.control_dependencies(inner):
            return x + 1.0
    with pytest.raises(DfcError, match="created inside the body of loop"):
        dfc.trace(from_inside_a_loop, F32)


def test_eagerly_the_block_does_nothing():
    v = dfc.Variable(np.float32(0), name="cd_eager")
    with dfc.control_dependencies([v.assign_add(1.0)]):
        y = dfc.constant(2.0) * 3.0
    assert float(np.asarray(y)) == 6.0 and v.numpy() == 1
