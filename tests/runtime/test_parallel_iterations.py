"""Non-strict iterations on the fast path (§4.3): a loop with heavy work off its recurrence overlaps up to
parallel_iterations iterations on the kernel pool (dfc/runtime/overlap.py); everything else stays fused.
Checked by instrumentation (which frames are fused, how many kernels run at once), never by timing."""
import threading

import numpy as np
import pytest

import dfc
from dfc.ir import structure
from dfc.runtime import overlap
from dfc.runtime.session import default_num_threads

from tests.conftest import run_all_modes

# iterations overlap on the CPU thread pool; a GPU runs its kernels in order on one compute stream and its
# loops fused, so these tests of overlapping keep cpu:0 as the default device under DFC_TEST_DEVICE
pytestmark = pytest.mark.host_devices("iterations overlapping on the CPU thread pool")

REAL_OVERLAP_WORK = overlap.OVERLAP_WORK
N = 128          # matmuls big enough for the kernel pool (executor.HEAVY_ELEMENTS); the overlap threshold is
                 # lowered to one such matmul so the tests stay fast (the real one is ~400**3)


@pytest.fixture(autouse=True)
def _small_threshold(monkeypatch):
    monkeypatch.setattr(overlap, "OVERLAP_WORK", N ** 3)
    monkeypatch.setattr(overlap, "blas_threads", lambda: 1)     # as in benchmarks/parallel_iterations.py


def _independent(n_iter, pi=32):
    """Each iteration: a matmul of its own (not on the loop recurrence), summed into an accumulator."""
    def f(a):
        def body(i, acc):
            m = dfc.matmul(a * dfc.cast(i + 1, "float32"), a)
            return i + 1, acc + dfc.reduce_sum(dfc.tanh(m))
        return dfc.while_loop(lambda i, acc: i < n_iter, body, (0, dfc.constant(np.float32(0))),
                              parallel_iterations=pi)[1]
    return dfc.trace(f, dfc.TensorSpec([N, N], "float32"))


def _recurrent(n_iter):
    """h = tanh(h @ a): the matmul is on the recurrence, so iterations cannot overlap it."""
    def f(a):
        return dfc.while_loop(lambda i, h: i < n_iter, lambda i, h: (i + 1, dfc.tanh(dfc.matmul(h, a))),
                              (0, a))[1]
    return dfc.trace(f, dfc.TensorSpec([N, N], "float32"))


def _two_loops(n_iter):
    """Two independent heavy loops in one graph."""
    def f(a, b):
        def loop(x):
            def body(i, acc):
                return i + 1, acc + dfc.reduce_sum(dfc.matmul(x * dfc.cast(i + 1, "float32"), x))
            return dfc.while_loop(lambda i, acc: i < n_iter, body, (0, dfc.constant(np.float32(0))),
                                  parallel_iterations=2)[1]
        return loop(a), loop(b)
    spec = dfc.TensorSpec([N, N], "float32")
    return dfc.trace(f, spec, spec)


def _matrix(seed=0):
    return (np.random.default_rng(seed).standard_normal((N, N)) / N).astype(np.float32)


def _plan(s, g):
    """The Plan a Session runs for the graph's signature (built by running it once)."""
    fetches = [leaf["ref"] for leaf in structure.leaves(g.signature["outputs"])]
    return s.plan([f if ":" in f else f + ":0" for f in fetches], {i["node"] for i in g.signature["inputs"]},
                  tuple(g.signature.get("targets", [])))


def _numpy_independent(a, n_iter):
    acc = np.float32(0)
    for i in range(n_iter):
        acc = acc + np.tanh((a * np.float32(i + 1)) @ a).sum(dtype=np.float32)
    return acc


def _instrument(plan, op, parties):
    """Wrap every `op` kernel: count how many run at once, and hold each until `parties` are running
    together (a barrier with a timeout: if the iterations did not overlap it breaks, the run fails)."""
    lock, state = threading.Lock(), {"now": 0, "max": 0, "calls": 0, "frames": set(), "together": set()}
    barrier = threading.Barrier(parties, timeout=20)

    def wrap(kern, frame):
        def wrapped(ctx, args):
            with lock:
                state["now"] += 1
                state["calls"] += 1
                state["max"] = max(state["max"], state["now"])
                state["frames"].add(frame)
                state["together"].add(frozenset(state["frames"]))
            try:
                if parties > 1:
                    barrier.wait()
                return kern(ctx, args)
            finally:
                with lock:
                    state["now"] -= 1
                    state["frames"].discard(frame)
        return wrapped
    _replace_kernels(plan, op, wrap)
    return state


def _replace_kernels(plan, op, wrap):
    """Replace the kernel of every `op` node by wrap(kernel, frame name); a member of a chain runs inside
    its chain's kernel (dfc/runtime/chains.py), so it is replaced there."""
    in_chain = {m: (plan.kern[h], pos) for h, members in plan.chains.items() for pos, m in enumerate(members)}
    for i, node in enumerate(plan.nodes):
        if node.op != op:
            continue
        chain, pos = in_chain.get(i, (None, 0))
        kern, frame = plan.kern[i] if chain is None else chain.kernels[pos], plan.frame_names[plan.fid[i]]
        if chain is None:
            plan.kern[i] = wrap(kern, frame)
        else:
            chain.kernels[pos] = wrap(kern, frame)


def test_heavy_frame_overlaps_only_with_parallel_iterations_and_a_pool():
    g = _independent(4)
    a = _matrix()
    for kw, fused in ((dict(parallel_iterations=1), True), (dict(parallel_iterations=8), False),
                      (dict(parallel_iterations=8, num_threads=0), True), (dict(), False)):
        s = dfc.Session(g, **kw)
        s.call(a)
        assert bool(_plan(s, g).programs) == fused, kw


def test_recurrent_heavy_frame_stays_fused():
    g = _recurrent(3)
    s = dfc.Session(g, parallel_iterations=32)
    a = _matrix()
    np.testing.assert_array_equal(s.call(a), dfc.Session(g, mode="reference").call(a))
    assert _plan(s, g).programs


def test_real_threshold_between_a_256_and_a_512_cubed_matmul(monkeypatch):
    monkeypatch.setattr(overlap, "OVERLAP_WORK", REAL_OVERLAP_WORK)
    for n, fused in ((256, True), (512, False)):
        def f(a):
            return dfc.while_loop(lambda i, acc: i < 1, lambda i, acc: (i + 1, acc + dfc.reduce_sum(a @ a)),
                                  (0, dfc.constant(np.float32(0))))[1]
        g = dfc.trace(f, dfc.TensorSpec([n, n], "float32"))
        s = dfc.Session(g)
        s.call(np.ones((n, n), np.float32))
        assert bool(_plan(s, g).programs) == fused, n


def test_multithreaded_blas_matmuls_do_not_count(monkeypatch):
    g = _independent(2)
    monkeypatch.setattr(overlap, "blas_threads", lambda: 2)
    s = dfc.Session(g)
    s.call(_matrix())
    assert _plan(s, g).programs         # only the matmul was big enough, and BLAS already uses the cores


def test_blas_threads_from_the_environment(monkeypatch):
    monkeypatch.undo()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert overlap.blas_threads() == 1
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    assert overlap.blas_threads() == 3


def test_small_work_stays_fused():
    def f(a):
        return dfc.while_loop(lambda i, acc: i < 5, lambda i, acc: (i + 1, acc + dfc.reduce_sum(a @ a)),
                              (0, dfc.constant(np.float32(0))))[1]
    g = dfc.trace(f, dfc.TensorSpec([64, 64], "float32"))
    s = dfc.Session(g, parallel_iterations=32)
    s.call(np.ones((64, 64), np.float32))
    assert _plan(s, g).programs


@pytest.mark.parametrize("pi", [2, 3])
def test_at_most_parallel_iterations_in_flight_and_they_overlap(pi):
    n_iter = 2 * pi
    g = _independent(n_iter)
    a = _matrix()
    s = dfc.Session(g, parallel_iterations=pi, num_threads=pi + 3)    # more pool threads than the bound
    first = s.call(a)
    state = _instrument(_plan(s, g), "MatMul", pi)
    got = s.call(a)
    assert state["calls"] == n_iter
    assert state["max"] == pi           # pi matmuls of different iterations ran together, never more
    np.testing.assert_array_equal(got, first)
    np.testing.assert_allclose(got, _numpy_independent(a, n_iter), rtol=1e-4)


def test_iterations_in_flight_bounded_by_executor():
    """The frame's own bookkeeping: never more than parallel_iterations live iterations."""
    from dfc.runtime import executor
    g = _independent(12)
    a = _matrix()
    seen = []
    orig = executor.Run._new_iteration

    def spy(self, frame, ready):
        sub = orig(self, frame, ready)
        if frame.fid:
            seen.append(frame.next_num - frame.oldest)
        return sub
    s = dfc.Session(g, parallel_iterations=3)
    executor.Run._new_iteration = spy
    try:
        s.call(a)
    finally:
        executor.Run._new_iteration = orig
    assert seen and max(seen) == 3


def test_two_independent_loops_run_at_the_same_time():
    g = _two_loops(2)
    a, b = _matrix(0), _matrix(1)
    s = dfc.Session(g, num_threads=4)
    ref = s.call(a, b)
    plan = _plan(s, g)
    cond, active, state = threading.Condition(), {}, {"together": False}

    def wrap(kern, frame):
        def gate(ctx, args):
            # each matmul waits (at most 20 s) until a matmul of the other loop is running too
            with cond:
                active[frame] = active.get(frame, 0) + 1
                if sum(1 for c in active.values() if c) == 2:
                    state["together"] = True
                    cond.notify_all()
                cond.wait_for(lambda: state["together"], timeout=20)
            try:
                return kern(ctx, args)
            finally:
                with cond:
                    active[frame] -= 1
        return gate
    _replace_kernels(plan, "MatMul", wrap)
    got = s.call(a, b)
    assert len(active) == 2 and state["together"]       # a matmul of each loop ran at once
    for x, y in zip(got, ref):
        np.testing.assert_array_equal(x, y)


def test_overlapped_results_agree_on_every_path():
    a = _matrix()
    got = run_all_modes(_independent(4), a)
    np.testing.assert_allclose(got, _numpy_independent(a, 4), rtol=1e-4)
    run_all_modes(_two_loops(2), a, _matrix(1))


def test_nested_heavy_loop_unfuses_its_parent():
    def f(a):
        def outer(j, tot):
            def body(i, acc):
                return i + 1, acc + dfc.reduce_sum(dfc.matmul(a * dfc.cast(i + j, "float32"), a))
            inner = dfc.while_loop(lambda i, acc: i < 2, body, (0, dfc.constant(np.float32(0))))[1]
            return j + 1, tot + inner
        return dfc.while_loop(lambda j, tot: j < 2, outer, (0, dfc.constant(np.float32(0))))[1]
    g = dfc.trace(f, dfc.TensorSpec([N, N], "float32"))
    s = dfc.Session(g)
    a = _matrix()
    run_all_modes(g, a)
    s.call(a)
    assert not _plan(s, g).programs
    frames = s.fused_frames()
    assert len(frames) == 2 and all(src.startswith("# not fused: runs on the general path") for src in frames.values())
    assert any("overlaps" in src for src in frames.values()) and any("matmul" in src.lower() for src in frames.values())
    assert all(src.startswith("def ") for src in dfc.Session(g, parallel_iterations=1).fused_frames().values())


def test_reasons_name_the_heavy_node():
    g = _independent(2)
    s = dfc.Session(g)
    s.call(_matrix())
    reasons = {}
    assert overlap.overlapping_frames(_plan(s, g), reasons)
    (why,) = reasons.values()
    assert "matmul" in why.lower() and "parallel_iterations=32" in why


def test_pool_size_follows_the_machine_and_the_environment(monkeypatch):
    monkeypatch.delenv("DFC_NUM_THREADS", raising=False)
    assert default_num_threads() >= 1
    monkeypatch.setenv("DFC_NUM_THREADS", "3")
    assert default_num_threads() == 3
    assert dfc.Session(_recurrent(1))._num_threads == 3
    assert dfc.Session(_recurrent(1), num_threads=1)._num_threads == 1
    monkeypatch.setenv("DFC_NUM_THREADS", "many")
    with pytest.raises(dfc.DfcError, match="DFC_NUM_THREADS"):
        dfc.Session(_recurrent(1))
