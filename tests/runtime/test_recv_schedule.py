"""Scheduling of Recvs (dfc/runtime/recv_schedule.py): a Recv waits for what its consumers wait for anyway,
so a large value sent early but used late is not held by the receiving device meanwhile; no schedule makes a
cycle, and every path still gives the reference interpreter's bits."""
import numpy as np
import pytest

import dfc
from dfc.runtime import partition
from tests.conftest import run_all_modes

pytestmark = pytest.mark.host_devices("the test places nodes on two cpu devices and reads their byte accounting")
N = 256
MAT = dfc.TensorSpec([N, N], "float32")


def _recvs(session):
    return {n.name: n for p in session.partitions().values() for n in p.nodes.values() if n.op == "Recv"}


def _model_parallel_step(x, w):
    """cpu:0 makes `big` at once; cpu:1 works on its own for a while and uses `big` only at the end."""
    with dfc.device("cpu:0"):
        big = dfc.tanh(w) * 2.0
        ready = dfc.reduce_sum(big) * 0.0        # sent after big: cpu:1's work starts after big was sent
    with dfc.device("cpu:1"):
        h = x + ready
        for _ in range(4):
            h = dfc.tanh(h @ x)
        return dfc.reduce_sum(h * big)


def _peak(g, args, alap, monkeypatch, **kw):
    monkeypatch.setattr(partition, "ALAP_RECVS", alap)
    s = dfc.Session(g, track_memory=True, **kw)
    out = s.call(*args)
    return out, s.peak_bytes()["cpu:1"], s


@pytest.mark.parametrize("kw", [{}, {"num_threads": 0}, {"fuse_loops": False}])
def test_a_late_used_transfer_no_longer_raises_the_receivers_peak(monkeypatch, kw):
    g = dfc.trace(_model_parallel_step, MAT, MAT)
    x = (np.random.default_rng(0).standard_normal((N, N)) / N).astype(np.float32)
    args = (x, np.ones((N, N), np.float32))
    asap, asap_peak, _ = _peak(g, args, False, monkeypatch, **kw)
    alap, alap_peak, s = _peak(g, args, True, monkeypatch, **kw)
    np.testing.assert_array_equal(alap, asap)
    big = N * N * 4
    # as soon as possible: big, x, h and the matmul's result at once; as late as possible: big arrives when
    # h is ready (x is released by then): one tensor of N x N less on cpu:1
    assert asap_peak == 4 * big and alap_peak == 3 * big
    recv = next(r for r in _recvs(s).values() if r.attrs["tensor_name"] == "mul:0")    # big
    assert recv.control_inputs and all(s.graph.nodes[c].op == "Tanh" for c in recv.control_inputs)


def test_two_recvs_that_wait_for_each_other_would_deadlock_so_only_one_waits():
    def f(x):
        with dfc.device("cpu:0"):
            a = x * 2.0
        with dfc.device("cpu:2"):
            e = a + 1.0                    # a reaches cpu:1 directly and, as e, through cpu:2
        with dfc.device("cpu:1"):
            return a * e                   # each Recv's consumer waits for the other Recv
    g = dfc.trace(f, dfc.TensorSpec([3], "float32"))
    s = dfc.Session(g)
    on1 = [r for r in _recvs(s).values() if r.device == "cpu:1"]
    assert len(on1) == 2
    waits = [(r.name, c) for r in on1 for c in r.control_inputs]
    assert len(waits) == 1 and waits[0][1] in {r.name for r in on1}
    for p in s.partitions().values():
        p.verify()
    np.testing.assert_array_equal(run_all_modes(g, np.array([1, 2, 3], np.float32)), [6, 20, 42])


def test_recvs_in_loops_and_branches_and_into_merges_stay_correct():
    def f(x, n, p):
        with dfc.device("cpu:0"):
            y = x * 3.0
        with dfc.device("cpu:1"):
            def body(i, v):
                with dfc.device("cpu:0"):
                    u = v * 0.5
                with dfc.device("cpu:1"):
                    return i + 1, dfc.tanh(v) + u * y
            z = dfc.while_loop(lambda i, v: i < n, body, (0, x))[1]
            w = dfc.cond(p, lambda: y, lambda: z * 2.0)       # y straight into a Merge
        return w + y
    g = dfc.trace(f, dfc.TensorSpec([3], "float32"), dfc.TensorSpec([], "int64"), dfc.TensorSpec([], "bool"))
    s = dfc.Session(g)
    assert any(not c.startswith("_cl/") for r in _recvs(s).values() for c in r.control_inputs)
    for p in s.partitions().values():
        p.verify()
    for n, p in ((0, True), (3, False), (2, True)):
        run_all_modes(g, np.array([1, -2, 3], np.float32), np.int64(n), np.bool_(p))
