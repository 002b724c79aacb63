"""A cluster step never hangs and never reports a false deadlock: a task that stops answering fails the step
within the liveness timeout, naming it, and restart brings it back; a message is counted as received only
once its value is handed over. Uses the test process's cluster (tests/clustertools.py)."""
import os
import signal
import threading

import numpy as np
import pytest

import dfc
from tests.clustertools import cluster

pytestmark = pytest.mark.xdist_group("ray")
F32, I32 = dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "int32")
HAND_OVER_DELAY = 0.6       # far longer than two rounds of the chief's status reports (POLL_SECONDS each)


@pytest.fixture(scope="module")
def c():
    return cluster()


def test_the_liveness_timeout_is_a_positive_number_of_seconds(monkeypatch):
    from dfc.runtime.cluster import DEFAULT_LIVENESS_TIMEOUT, LIVENESS_ENV, parse_liveness_timeout
    monkeypatch.delenv(LIVENESS_ENV, raising=False)
    assert parse_liveness_timeout() == DEFAULT_LIVENESS_TIMEOUT == 30.0
    assert parse_liveness_timeout(2) == 2.0
    monkeypatch.setenv(LIVENESS_ENV, "7.5")
    assert parse_liveness_timeout() == 7.5
    assert parse_liveness_timeout(1) == 1.0          # the keyword wins
    for bad in (0, -1, float("inf"), float("nan"), "soon", [3]):
        with pytest.raises(dfc.DfcError, match="liveness_timeout=.*positive number of seconds"):
            parse_liveness_timeout(bad)
    monkeypatch.setenv(LIVENESS_ENV, "0")
    with pytest.raises(dfc.DfcError, match=LIVENESS_ENV):
        parse_liveness_timeout()


def step_in_thread(fn):
    """Run fn() on a thread: (the thread, its outcome {"value"|"error": ...})."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:   # noqa: BLE001 — checked by the test
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def hand_over_task(fails):
    """A Task class whose process takes HAND_OVER_DELAY s to decode each value another process sends it, as a
    large inline value takes to copy, and then (fails=True) cannot decode it. Made here, in a function, so
    Ray pickles it by value."""
    from dfc.runtime.cluster import wire
    from dfc.runtime.cluster.task import Task

    class SlowHandOver(Task):
        def __init__(self, *args, **kw):
            import time
            super().__init__(*args, **kw)
            fast = wire.decode

            def slow(value, *a):
                time.sleep(HAND_OVER_DELAY)
                if fails:
                    raise wire.DfcRuntimeError("the value could not be decoded")
                return fast(value, *a)
            wire.decode = slow          # this actor's own process only

    return SlowHandOver


def chief_to_worker(x):
    with dfc.device("cpu:0"):
        y = x + 1.0             # on the chief: sent to worker:0, where it is handed over
    with dfc.device("worker:0/cpu:0"):
        return y * 2.0


def on_hand_over_cluster(fails, check):
    """check(session) on a one-task cluster (worker:0) whose task hands values over as hand_over_task says."""
    from dfc.runtime.cluster import Cluster, _ray

    class Slow(Cluster):
        def _actor_class(self):
            return _ray().remote(hand_over_task(fails))

    slow = Slow(["worker:0"])
    try:
        check(dfc.Session(dfc.trace(chief_to_worker, F32), cluster=slow))
    finally:
        slow.shutdown()


def test_a_value_still_being_handed_over_is_not_a_deadlock(c):
    def check(s):
        for k in range(2):
            assert s.call(np.float32(k)) == 2.0 * (k + 1)
    on_hand_over_cluster(False, check)


def test_a_value_that_cannot_be_handed_over_fails_the_step_naming_the_task(c):
    def check(s):
        t, out = step_in_thread(lambda: s.call(np.float32(1)))
        t.join(120)
        assert not t.is_alive(), "the step hung on a message that was never handed over"
        e = out.get("error")
        assert isinstance(e, dfc.DfcRuntimeError) and not isinstance(e, dfc.DfcDeadlockError), out
        assert "on task worker:0" in str(e) and "could not be decoded" in str(e)
    on_hand_over_cluster(True, check)


def spin(n):
    """A long loop: its predicate on worker:0, its body on worker:1 (both tasks busy all along)."""
    def body(i, a):
        with dfc.device("worker:1/cpu:0"):
            a = a + 1.0
        return i + 1, a
    with dfc.device("worker:0/cpu:0"):
        return dfc.while_loop(lambda i, a: i < n, body, (0, 0.0))[1]


def test_a_stopped_task_fails_the_step_naming_it_and_restart_brings_it_back(c, monkeypatch):
    monkeypatch.setattr(c, "liveness_timeout", 2.0)
    s = dfc.Session(dfc.trace(spin, I32), cluster=c)
    assert s.call(np.int32(3)) == 3.0
    pid = c.pid("worker:1")
    started = threading.Event()
    # stopped only after both tasks have been busy longer than the timeout: busy is not silent
    timer = threading.Timer(3.0, lambda: (os.kill(pid, signal.SIGSTOP), started.set()))
    timer.start()
    try:
        t, out = step_in_thread(lambda: s.call(np.int32(10 ** 9)))
        t.join(120)
        assert not t.is_alive(), "the step hung on a stopped task"
        assert started.is_set() and "error" in out, out
        e = out["error"]
        assert isinstance(e, dfc.DfcRuntimeError)
        assert "task worker:1 died or hangs: no reply for" in str(e) and "restart" in str(e)
        assert "worker:0" not in str(e).split(";")[0]
        assert e.node is not None
        with pytest.raises(dfc.DfcRuntimeError, match=r"task worker:1 died or hangs.*restart\('worker:1'\)"):
            c.pid("worker:1")           # a call to the task is bounded too
        c.restart("worker:1")           # the old process is still stopped: restart does not wait on it
        assert c.pid("worker:1") != pid
        assert s.call(np.int32(20)) == 20.0
    finally:
        timer.cancel()
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
