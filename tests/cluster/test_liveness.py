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


def slow_hand_over_task():
    """A Task class whose process takes HAND_OVER_DELAY s to decode each value another process sends it, as a
    large inline value takes to copy (made here, in a function, so Ray pickles it by value)."""
    from dfc.runtime.cluster import wire
    from dfc.runtime.cluster.task import Task

    class SlowHandOver(Task):
        def __init__(self, *args, **kw):
            import time
            super().__init__(*args, **kw)
            fast = wire.decode

            def slow(value, *a):
                time.sleep(HAND_OVER_DELAY)
                return fast(value, *a)
            wire.decode = slow          # this actor's own process only

    return SlowHandOver


def test_a_value_still_being_handed_over_is_not_a_deadlock(c):
    from dfc.runtime.cluster import Cluster, _ray

    class Slow(Cluster):
        def _actor_class(self):
            return _ray().remote(slow_hand_over_task())

    def f(x):
        with dfc.device("cpu:0"):
            y = x + 1.0             # on the chief: sent to worker:0, where it is handed over slowly
        with dfc.device("worker:0/cpu:0"):
            return y * 2.0

    slow = Slow(["worker:0"])
    try:
        s = dfc.Session(dfc.trace(f, F32), cluster=slow)
        for k in range(2):
            assert s.call(np.float32(k)) == 2.0 * (k + 1)
    finally:
        slow.shutdown()
