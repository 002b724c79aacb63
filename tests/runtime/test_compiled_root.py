"""A whole run as one numba function (dfc/runtime/compiled/root.py): the root frame, its loops inlined, the
gradient stacks local lists. It gives the reference interpreter's bits, its new lowerings (StackV2, OneHot,
Softmax, LogSoftmax) give the kernels' bits, a root it cannot compile says which node blocks it and runs
fused, and errors still name their node."""
import numpy as np
import pytest

import dfc
from dfc.errors import DfcError
from tests.compiledtools import _no_compile_budget, without_jax  # noqa: F401 (fixtures)
from tests.conftest import run_all_modes
from tests.runtime.test_compiled import _signature

pytestmark = pytest.mark.host_devices("numba-compiled code is CPU machine code")
pytest.importorskip("numba")


def _root(s, g):
    return s.plan(*_signature(g)).root_program


def _rnn_step(x, W, U, labels):
    """A small RNN classifier's loss and gradients: a loop whose gradient pops what the forward pushed."""
    def loss_of(W, U):
        h = dfc.zeros([2, 3], "float64")
        for t in range(dfc.shape(x)[0]):
            h = dfc.tanh(dfc.matmul(x[t], W) + dfc.matmul(h, U))
        return -dfc.reduce_sum(dfc.one_hot(labels, 3) * dfc.log_softmax(h)) + dfc.reduce_sum(dfc.softmax(h, axis=0))
    loss = loss_of(W, U)
    return loss, dfc.gradients(loss, [W, U])


def _rnn_inputs(T=5):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((T, 2, 4)), rng.standard_normal((4, 3)) * 0.5, rng.standard_normal((3, 3)) * 0.5,
            np.array([2, 0], np.int64))


def _rnn_graph():
    return dfc.function(_rnn_step).trace(dfc.TensorSpec([None, 2, 4], "float64"), dfc.TensorSpec([4, 3], "float64"),
                     dfc.TensorSpec([3, 3], "float64"), dfc.TensorSpec([2], "int64"))


def test_a_training_step_compiles_whole_and_gives_the_reference_bits():
    from dfc.runtime.compiled import CompiledFrame
    g = _rnn_graph()
    for T in (5, 1, 0):
        a = _rnn_inputs(T)
        want = run_all_modes(g, *a)
        s = dfc.Session(g, compile_loops=True, num_threads=0)
        got = s.call(*a)
        rp = _root(s, g)
        assert isinstance(rp, CompiledFrame) and rp.runs == {"compiled": 1, "fused": 0}
        assert "H.empty_list(" in rp.source    # the stacks (StackV2) live in the compiled code
        for x, y in zip(dfc.nest.flatten(got), dfc.nest.flatten(want)):
            np.testing.assert_array_equal(x, y)


def test_its_gradients_match_finite_differences():
    g = _rnn_graph()
    x, W, U, labels = _rnn_inputs()
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    _, (gW, _) = s.call(x, W, U, labels)
    eps, num = 1e-6, np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        d = np.zeros_like(W)
        d[idx] = eps
        num[idx] = (s.call(x, W + d, U, labels)[0] - s.call(x, W - d, U, labels)[0]) / (2 * eps)
    np.testing.assert_allclose(gW, num, rtol=1e-5, atol=1e-7)
    assert _root(s, g).runs["fused"] == 0


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
def test_one_hot_gives_the_kernels_values(dtype):
    g = dfc.trace(lambda i: dfc.one_hot(i, 4, dtype=dtype) if dtype != "bool" else dfc.one_hot(i, 4, dtype=dtype),
                  dfc.TensorSpec([None, None], "int64"))
    idx = np.array([[0, 3, -1], [4, 2, 1]], np.int64)         # out of range both ways: all "off"
    want = dfc.Session(g, mode="reference").call(idx)
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    got = s.call(idx)
    assert got.dtype == want.dtype and got.shape == (2, 3, 4)
    np.testing.assert_array_equal(got, want)
    assert _root(s, g).runs["compiled"] == 1


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_and_log_softmax_give_the_kernels_bits(axis, dtype):
    g = dfc.trace(lambda x: (dfc.softmax(x, axis=axis), dfc.log_softmax(x, axis=axis)),
                  dfc.TensorSpec([None, None], dtype))
    x = (np.random.default_rng(1).standard_normal((5, 7)) * 30).astype(dtype)
    want = dfc.Session(g, mode="reference").call(x)
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    got = s.call(x)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert _root(s, g).runs["compiled"] == 1


def _ta_graph(scalar=False):
    def f(x, n):
        ta = dfc.TensorArray("float64", size=n)
        val = (lambda i: dfc.reduce_sum(x) * dfc.cast(i, "float64")) if scalar else \
            (lambda i: x * dfc.cast(i, "float64"))
        ta = dfc.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, val(i))), (0, ta))[1]
        return ta.stack(), ta.read(n - 1) if not scalar else ta.size()
    return dfc.trace(f, dfc.TensorSpec([2], "float64"), dfc.TensorSpec([], "int64"))


@pytest.mark.parametrize("scalar", [False, True])
def test_a_tensor_array_made_at_the_root_lives_in_the_compiled_code(scalar):
    from dfc.runtime.compiled import CompiledFrame
    g = _ta_graph(scalar)
    for n in (3, 1):
        want = run_all_modes(g, np.ones(2), np.int64(n))
        s = dfc.Session(g, compile_loops=True, num_threads=0)
        got = s.call(np.ones(2), np.int64(n))
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        rp = _root(s, g)
        assert isinstance(rp, CompiledFrame) and rp.runs == {"compiled": 1, "fused": 0}
    s = dfc.Session(g, compile_loops=True, num_threads=0)      # size 0: the kernel's empty stack, replayed
    got = s.call(np.ones(2), np.int64(0))[0] if scalar else None
    if scalar:
        assert got.shape == (0,) and _root(s, g).runs == {"compiled": 0, "fused": 1}


def test_a_tensor_array_written_twice_in_compiled_code_names_the_write():
    def f(x, n):
        ta = dfc.TensorArray("float64", size=3, dynamic_size=False)
        ta = dfc.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i % 2, x)), (0, ta))[1]
        return ta.read(0)
    g = dfc.trace(f, dfc.TensorSpec([2], "float64"), dfc.TensorSpec([], "int64"))
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    np.testing.assert_array_equal(s.call(np.ones(2), np.int64(2)), np.ones(2))
    with pytest.raises(DfcError, match="written twice") as e:
        s.call(np.ones(2), np.int64(3))
    assert g.nodes[e.value.node].op == "TensorArrayWrite"


def test_a_root_with_a_tensor_array_gather_names_what_blocks_it_and_runs_fused():
    from dfc.runtime.fused_root import RootProgram

    def f(x, n):
        ta = dfc.TensorArray("float64", size=n)
        ta = dfc.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, x * dfc.cast(i, "float64"))),
                            (0, ta))[1]
        return ta.gather(dfc.constant(np.array([2, 0], np.int64)))
    g = dfc.trace(f, dfc.TensorSpec([2], "float64"), dfc.TensorSpec([], "int64"))
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    got = s.call(np.ones(2), np.int64(3))
    np.testing.assert_array_equal(got, [[2, 2], [0, 0]])
    plan = s.plan(*_signature(g))
    assert isinstance(plan.root_program, RootProgram)
    assert plan.root_blocked is not None and "TensorArrayGather" in str(plan.root_blocked)


def test_an_error_in_a_compiled_root_names_its_node():
    def f(a, b, n):
        c = dfc.while_loop(lambda i, c: i < n, lambda i, c: (i + 1, c * 2.0), (0, a))[1]
        return dfc.matmul(c, b)
    g = dfc.trace(f, dfc.TensorSpec([None, None], "float64"), dfc.TensorSpec([None, None], "float64"),
                  dfc.TensorSpec([], "int64"))
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    np.testing.assert_array_equal(s.call(np.ones((2, 2)), np.ones((2, 2)), np.int64(2)), np.full((2, 2), 8.0))
    with pytest.raises(DfcError) as e:
        s.call(np.ones((2, 3)), np.ones((2, 2)), np.int64(2))
    assert "matmul" in e.value.node
    assert _root(s, g).runs == {"compiled": 1, "fused": 1}    # the fused root replayed it to name the node


def test_a_run_with_assertions_compiles_whole_and_a_failed_one_is_the_kernels_error():
    from dfc.errors import DfcAssertionError

    @dfc.function
    def f(x, n):
        for _ in range(n):
            y = x * 2.0                 # used after a loop that may run zero times: checked (an Assert)
        dfc.Assert(dfc.reduce_all(x < 10.0), [x], "x too large")
        return y + 1.0

    g = f.trace(np.ones(3), np.int64(2))
    assert {"Assert"} <= {n.op for n in g.nodes.values()}
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    for x, n in ((np.arange(3.0), 2), (np.ones(3), 1)):
        np.testing.assert_array_equal(s.call(x, np.int64(n)), run_all_modes(g, x, np.int64(n)))
    assert _root(s, g).runs == {"compiled": 2, "fused": 0}
    with pytest.raises(DfcAssertionError, match="'y' is used but has no value") as e:
        s.call(np.ones(3), np.int64(0))
    assert g.nodes[e.value.node].op == "Assert"
    with pytest.raises(DfcAssertionError, match=r"x too large \[\[ 1\. 20\.  3\.\]\]"):
        s.call(np.array([1.0, 20.0, 3.0]), np.int64(1))
    assert _root(s, g).runs == {"compiled": 2, "fused": 2}      # each failure replayed fused for its message


def test_compiled_run_and_dfc_show_say_how_the_whole_run_goes(tmp_path):
    import os
    import subprocess
    import sys
    g = dfc.trace(lambda x, n: dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 0.375 + x), (0, x))[1],
                  dfc.TensorSpec([2], "float64"), dfc.TensorSpec([], "int64"))     # compiled by this test only
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    info = s.compiled_run()
    assert info["status"] == "compiled" and info["blocked_by"] is None and "def run(" in info["source"]
    assert info["compile_seconds"] == {}
    s.call(np.ones(2), np.int64(3))
    assert list(s.compiled_run()["compile_seconds"].values())[0] > 0

    def f(x, n):
        ta = dfc.TensorArray("float64", size=n)
        ta = dfc.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, x)), (0, ta))[1]
        return ta.gather(dfc.constant(np.array([0], np.int64)))
    g2 = dfc.trace(f, dfc.TensorSpec([2], "float64"), dfc.TensorSpec([], "int64"))
    info = dfc.Session(g2).compiled_run()
    assert info["status"] == "fused" and info["blocked_by"] in g2.nodes and "TensorArray" in info["reason"]
    assert info["source"].startswith("def run(ctx, kern, enters")

    dfc.save(g, str(tmp_path / "g.json"))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "dfc.cli", "show", "--fused", str(tmp_path / "g.json")],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=root), check=False)
    assert r.returncode == 0, r.stderr
    assert "# ---- the whole run (root frame)\n# compile_loops: compiled with numba as one function" in r.stdout


def test_auto_compiles_the_whole_run_in_a_child_process_and_not_its_frames_too(monkeypatch, tmp_path, without_jax):
    import time

    from dfc.runtime import compiled
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path))
    g = dfc.trace(lambda x, n: dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 0.625 - x), (0, x))[1],
                  dfc.TensorSpec([3], "float32"), dfc.TensorSpec([], "int64"))
    x = np.ones(3, np.float32)
    want = dfc.Session(g, mode="reference").call(x, np.int64(6))
    s = dfc.Session(g, compile_loops="auto", num_threads=0)
    s.call(x, np.int64(6))
    plan = s.plan(*_signature(g))
    whole, frame = plan.root_program, next(iter(plan.programs.values()))
    assert isinstance(whole, compiled.CompiledFrame) and frame.superseded_by is whole
    whole.fused_seconds = frame.fused_seconds = compiled.AUTO_SECONDS     # as if both had run long enough
    np.testing.assert_array_equal(s.call(x, np.int64(6)), want)            # starts the child, runs fused
    assert whole._job is not None and frame._job is None
    deadline = time.monotonic() + 240
    while whole._job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert whole._job.poll() is True, whole._job.error
    np.testing.assert_array_equal(s.call(x, np.int64(6)), want)
    assert whole.runs["compiled"] == 1 and frame._job is None


def test_with_a_kernel_pool_the_first_call_already_runs_the_whole_run_compiled():
    """A root with heavy kernels (matmuls) and a pool: compiled code runs them inline anyway, so the first
    call does not schedule the root (which would compile each loop frame as well)."""
    from dfc.runtime.compiled import CompiledFrame
    g = dfc.trace(lambda a, n: dfc.matmul(dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 0.75), (0, a))[1],
                                          a), dfc.TensorSpec([None, None], "float32"), dfc.TensorSpec([], "int64"))
    a = np.full((4, 4), 0.5, np.float32)
    s = dfc.Session(g, compile_loops=True, num_threads=2)
    np.testing.assert_array_equal(s.call(a, np.int64(3)), run_all_modes(g, a, np.int64(3)))
    plan = s.plan(*_signature(g))
    assert isinstance(plan.root_program, CompiledFrame) and plan.root_program.runs == {"compiled": 1, "fused": 0}
    assert all(not isinstance(f, CompiledFrame) or f.compile_seconds == {} for f in plan.programs.values())


@pytest.mark.parametrize("rank", [1, 2])
def test_scan_and_map_fn_compile_whole(rank):
    """dfc.scan and dfc.map_fn: their inputs unstacked into a TensorArray at the root, read in the loop, the
    outputs written and stacked (and concatenated) at the root, all in the compiled code."""
    from dfc.runtime.compiled import CompiledFrame

    def f(xs):
        s = dfc.scan(lambda acc, x: acc * 0.5 + x, xs, dfc.zeros_like(xs[0]))
        m = dfc.map_fn(lambda x: x * x + 1.0, xs)
        ta = dfc.TensorArray("float64", size=dfc.shape(xs)[0]).unstack(xs)
        return s, m, ta.concat() if rank == 2 else ta.stack()
    shape = [5] if rank == 1 else [5, 3]
    g = dfc.trace(f, dfc.TensorSpec(shape, "float64"))
    xs = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) / 7.0
    want = run_all_modes(g, xs)
    s = dfc.Session(g, compile_loops=True, num_threads=0)
    got = s.call(xs)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    rp = _root(s, g)
    assert isinstance(rp, CompiledFrame) and rp.runs == {"compiled": 1, "fused": 0}, s.compiled_run()["reason"]


def test_scalar_gradient_stacks_are_arrays_that_grow_and_give_the_reference_bits():
    """A loop whose gradient needs scalars of every iteration (an adaptive step, a branch taken or not) keeps
    them on stacks that are an array and a count in the compiled run (no typed List): they grow past their
    first 16 elements, pushes under a cond pop in the gradient's cond, and the results are the reference
    interpreter's and match finite differences."""
    from dfc.runtime.compiled import CompiledFrame

    def f(x, n):
        def body(i, y, h):
            h = dfc.minimum(h * 1.1, 0.5)
            y = dfc.cond(dfc.reduce_sum(y) > 0.0, lambda: y - h * dfc.sin(y), lambda: y + h * y * y)
            return i + 1, y, h
        _, y, _ = dfc.while_loop(lambda i, y, h: i < n, body, (0, x, dfc.constant(np.float64(0.01))))
        loss = dfc.reduce_sum(y * y)
        return loss, dfc.gradients(loss, x)
    g = dfc.trace(f, dfc.TensorSpec([3], "float64"), dfc.TensorSpec([], "int64"))
    x = np.array([0.3, -0.2, 0.4])
    for n in (0, 5, 40):
        want = run_all_modes(g, x, np.int64(n))
        s = dfc.Session(g, compile_loops=True, num_threads=0)
        got = s.call(x, np.int64(n))
        rp = _root(s, g)
        assert isinstance(rp, CompiledFrame) and rp.runs == {"compiled": 1, "fused": 0}
        assert "H.grow(S" in rp.source          # scalar stacks: an array and a count
        for a, b in zip(dfc.nest.flatten(got), dfc.nest.flatten(want)):
            np.testing.assert_array_equal(a, b)
    eps, s, fd = 1e-6, dfc.Session(g), np.zeros(3)
    for j in range(3):
        hi, lo = x.copy(), x.copy()
        hi[j] += eps
        lo[j] -= eps
        fd[j] = (s.call(hi, np.int64(40))[0] - s.call(lo, np.int64(40))[0]) / (2 * eps)
    np.testing.assert_allclose(got[1], fd, rtol=1e-5, atol=1e-8)
