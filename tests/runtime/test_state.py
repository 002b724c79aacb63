"""Variables persist across runs; TensorArray, scan, map_fn and foldl match numpy; side effects in order."""
import numpy as np
import pytest

import dfc
from tests.conftest import run_all_modes


def test_variable_persists_across_calls_and_sessions_share_it_unless_given_a_container():
    v = dfc.Variable(np.zeros(2, np.float32), name="acc")

    def step(x):
        v.assign_add(x)
        return v.read_value()

    g = dfc.trace(step, dfc.TensorSpec([2], "float32"))
    np.testing.assert_array_equal(g(np.ones(2, np.float32)), [1, 1])
    np.testing.assert_array_equal(g(np.ones(2, np.float32)), [2, 2])
    other = dfc.Session(g)                                   # the default container: the same Variable
    np.testing.assert_array_equal(other.call(np.ones(2, np.float32) * 5), [7, 7])
    np.testing.assert_array_equal(g(np.ones(2, np.float32)), [8, 8])
    own = dfc.Session(g, container="test_state_own")         # a named container: its own state
    np.testing.assert_array_equal(own.call(np.ones(2, np.float32) * 5), [5, 5])
    np.testing.assert_array_equal(v.numpy(), [8, 8])
    assert "test_state_own" in dfc.containers.names()
    dfc.containers.reset("test_state_own")
    assert "test_state_own" not in dfc.containers.names()
    np.testing.assert_array_equal(own.call(np.ones(2, np.float32)), [1, 1])    # made again from its init


def test_assign_runs_even_when_not_returned():
    v = dfc.Variable(0, name="counter")

    def f(n):
        def body(i):
            v.assign_add(i)
            return i + 1
        dfc.while_loop(lambda i: i < n, body, (dfc.constant(np.int64(0)),))
        return dfc.constant(1)

    g = dfc.trace(f, dfc.TensorSpec([], "int64"))
    s = dfc.Session(g)
    s.call(np.int64(4))
    assert int(s.variables()[v.shared_name]) == 6 == int(v.numpy())
    s.call(np.int64(2))
    assert int(s.variables()[v.shared_name]) == 7 == int(v.numpy())


def test_variable_updates_inside_loop_in_order():
    w = dfc.Variable(np.float64(1.0), name="w")

    def f(n):
        def body(i):
            w.assign(w.read_value() * 2.0 + 1.0)
            return i + 1
        dfc.while_loop(lambda i: i < n, body, (0,))
        return w.read_value()

    g = dfc.trace(f, dfc.TensorSpec([], "int64"))
    x = 1.0
    for _ in range(5):
        x = 2 * x + 1
    assert float(g(np.int64(5))) == x
    for mode in ("reference", "threads"):       # each in a fresh container, so each starts from w = 1
        s = dfc.Session(g, mode=mode, parallel_iterations=32, container=f"in_order_{mode}")
        assert float(s.call(np.int64(5))) == x


def test_print_runs_in_program_order():
    out = []

    def f(x, n):
        dfc.print("start", x)

        def body(i):
            dfc.print("step", i)
            return i + 1
        dfc.while_loop(lambda i: i < n, body, (0,))
        dfc.cond(x > 0, lambda: dfc.print("positive") or x, lambda: x)
        dfc.print("end")
        return x

    g = dfc.trace(f, dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "int64"))
    for mode in ("reference", "threads"):
        out.clear()
        dfc.Session(g, mode=mode, printer=out.append).call(np.float32(2), np.int64(3))
        assert "".join(out) == "start 2.0\nstep 0\nstep 1\nstep 2\npositive\nend\n"


def test_assert_failure_is_a_dfc_error_naming_the_node():
    def f(x):
        dfc.Assert(x > 0, [x], "x must be positive")
        return x * 2

    g = dfc.trace(f, dfc.TensorSpec([], "float32"))
    assert float(g(np.float32(1))) == 2
    with pytest.raises(dfc.DfcAssertionError, match="x must be positive") as e:
        g(np.float32(-1))
    assert e.value.node and "test_state.py" in e.value.loc


def test_tensor_array_in_loop_matches_numpy():
    def f(x):
        n = dfc.shape(x)[0]
        ta = dfc.TensorArray("float32", size=0)

        def body(i, ta):
            return i + 1, ta.write(i, x[i] * x[i] + dfc.cast(i, "float32"))
        _, ta = dfc.while_loop(lambda i, ta: i < n, body, (0, ta))
        return ta.stack(), ta.size(), ta.read(1), ta.gather([2, 0]), ta.concat()

    g = dfc.trace(f, dfc.TensorSpec([None, 2], "float32"))
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    stacked, size, one, gathered, cat = run_all_modes(g, x)
    want = x * x + np.arange(4, dtype=np.float32)[:, None]
    np.testing.assert_allclose(stacked, want)
    assert int(size) == 4
    np.testing.assert_allclose(one, want[1])
    np.testing.assert_allclose(gathered, want[[2, 0]])
    np.testing.assert_allclose(cat, want.reshape(-1))



def test_a_tensor_array_written_by_a_loop_that_ran_zero_times_stacks_to_zero_rows_of_the_element_shape():
    # made without element_shape: the shape the traced writes give the elements is what an empty stack has
    # (it used to give shape (0,) and the run failed: "the graph declares float32[?,2]")
    def f(x):
        ta = dfc.TensorArray("float32", size=0)
        for i in range(dfc.shape(x)[0]):
            ta = ta.write(i, x[i] * 2.0)
        return ta.stack(), ta.gather(dfc.zeros([0], "int64")), ta.concat()

    g = dfc.function(f).trace(dfc.TensorSpec([None, 2], "float32"))
    for n in (3, 0):
        x = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
        stacked, gathered, cat = run_all_modes(g, x)
        assert stacked.shape == (n, 2) and gathered.shape == (0, 2) and cat.shape == (2 * n,)
        np.testing.assert_array_equal(stacked, x * 2.0)

def test_tensor_array_in_cond_and_unstack():
    def f(x, flag):
        ta = dfc.TensorArray("float32", size=3).unstack(x)
        ta = dfc.cond(flag, lambda: ta.write(3, x[0] * 10), lambda: ta.write(3, x[1]))
        return ta.stack()

    g = dfc.trace(f, dfc.TensorSpec([3, 2], "float32"), dfc.TensorSpec([], "bool"))
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_allclose(run_all_modes(g, x, True), np.concatenate([x, x[:1] * 10]))
    np.testing.assert_allclose(run_all_modes(g, x, False), np.concatenate([x, x[1:2]]))


def test_tensor_array_read_out_of_range_is_an_error():
    def f(i):
        return dfc.TensorArray("float32", size=2, dynamic_size=False).write(0, 1.0).read(i)

    g = dfc.trace(f, dfc.TensorSpec([], "int64"))
    with pytest.raises(dfc.DfcRuntimeError, match="out of range|before it was written"):
        g(np.int64(5))


def test_scan_map_fn_foldl_match_numpy():
    def f(x):
        cs = dfc.scan(lambda acc, v: acc + v, x, initializer=dfc.zeros([3]))
        cp = dfc.scan(lambda acc, v: acc * v, x)
        sq = dfc.map_fn(lambda v: v * v, x)
        total = dfc.foldl(lambda acc, v: acc + dfc.reduce_sum(v), x, initializer=dfc.constant(0.0))
        return cs, cp, sq, total

    g = dfc.trace(f, dfc.TensorSpec([None, 3], "float32"))
    x = np.random.default_rng(0).uniform(0.5, 1.5, (5, 3)).astype(np.float32)
    cs, cp, sq, total = run_all_modes(g, x)
    np.testing.assert_allclose(cs, np.cumsum(x, 0), rtol=1e-6)
    np.testing.assert_allclose(cp, np.cumprod(x, 0), rtol=1e-6)
    np.testing.assert_allclose(sq, x * x, rtol=1e-6)
    np.testing.assert_allclose(total, x.sum(), rtol=1e-5)


def test_tensor_array_write_of_another_element_shape_is_refused_at_the_write():
    def f(x):
        ta = dfc.TensorArray("float32", size=2, element_shape=[2])
        return ta.write(0, x).read(0)
    g = dfc.trace(f, dfc.TensorSpec([None], "float32"))
    np.testing.assert_array_equal(g(np.ones(2, np.float32)), [1, 1])
    for mode in ("reference", "threads"):
        with pytest.raises(dfc.DfcRuntimeError, match=r"elements \[2\] cannot hold a value of shape \[3\]") as e:
            dfc.Session(g, mode=mode).call(np.ones(3, np.float32))
        assert e.value.node.startswith("tensorarraywrite")
