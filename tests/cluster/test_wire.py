"""The cluster's transport between processes (dfc/runtime/cluster/wire.py): ZeroMQ sockets with CURVE, large
values through Ray's object store, and the actor-call path the chief keeps under Ray Client."""
import threading
import time
from unittest import mock

import numpy as np
import pytest

import dfc
from tests.clustertools import cluster

pytestmark = pytest.mark.xdist_group("ray")
zmq = pytest.importorskip("zmq")


@pytest.fixture
def wires():
    """Make Wires on the loopback address (no Ray needed); all are closed after the test."""
    from dfc.runtime.cluster import wire
    made = []

    def make(name, keys, on_message=lambda *m: None, on_error=None):
        made.append(wire.Wire(name, keys, on_message, on_error))
        return made[-1]
    with mock.patch.object(wire, "_host", lambda: "127.0.0.1"):
        yield make
    for w in made:
        w.close()


class Inbox:
    def __init__(self, want):
        self.items, self.want, self.full = [], want, threading.Event()

    def __call__(self, step, key, value):
        self.items.append((step, key, value))
        if len(self.items) >= self.want:
            self.full.set()


def test_messages_from_one_process_arrive_in_order_per_step_and_key(wires):
    from dfc.runtime.cluster.wire import keypair
    keys = keypair()
    inbox = Inbox(2 * 500 + 1)
    a, b = wires("a", keys), wires("b", keys, inbox)
    a.connect({"b": b.address})
    for i in range(500):
        for step in ("s1", "s2"):
            a.send("b", step, ("t:0", "a/cpu:0", "b/cpu:0", (1, i)), np.full(3, i, np.float32))
    a.send("b", "s1", ("big:0", "a/cpu:0", "b/cpu:0", ()), np.arange(1 << 16, dtype=np.float64))
    assert inbox.full.wait(30)
    for step in ("s1", "s2"):
        got = [(key[3][1], int(v[0])) for s, key, v in inbox.items if s == step and key[0] == "t:0"]
        assert got == [(i, i) for i in range(500)]
    big = inbox.items[-1][2]
    np.testing.assert_array_equal(big, np.arange(1 << 16, dtype=np.float64))     # out-of-band frames


def test_a_process_without_the_clusters_key_cannot_deliver(wires):
    from dfc.runtime.cluster.wire import keypair
    keys = keypair()
    inbox = Inbox(1)
    b = wires("b", keys, inbox)
    stranger = wires("x", keypair())
    stranger.connect({"b": b.address})
    stranger.send("b", "s", ("t:0", "x", "b", ()), np.float32(1))
    friend = wires("a", keys)
    friend.connect({"b": b.address})
    friend.send("b", "s", ("t:0", "a", "b", ()), np.float32(2))
    assert inbox.full.wait(30)
    time.sleep(0.5)        # the stranger's handshake had time to complete, if it could
    assert [float(v) for _s, _k, v in inbox.items] == [2.0]


def test_a_value_that_does_not_pickle_fails_its_step_and_the_rest_still_go(wires):
    from dfc.runtime.cluster.wire import keypair
    keys = keypair()
    inbox, failed = Inbox(2), []
    b = wires("b", keys, inbox)
    a = wires("a", keys, on_error=lambda step, e: failed.append((step, e)))
    a.connect({"b": b.address})
    with a.cv:      # one batch: the bad value among good ones
        a.send("b", "s1", ("ok:0", "a", "b", ()), np.float32(1))
        a.send("b", "s2", ("bad:0", "a", "b", ()), np.array([lambda: 0], dtype=object))
        a.send("b", "s1", ("ok:1", "a", "b", ()), np.float32(2))
    assert inbox.full.wait(30)
    assert [k[0] for _s, k, _v in inbox.items] == ["ok:0", "ok:1"]
    assert len(failed) == 1 and failed[0][0] == "s2" and isinstance(failed[0][1], dfc.DfcRuntimeError)
    assert "bad:0" in str(failed[0][1]) and "could not be sent" in str(failed[0][1])


def test_a_send_to_a_peer_that_is_gone_does_not_block(wires):
    """The step's failure detection ends a step whose peer died; the sending threads must not hang meanwhile."""
    from dfc.runtime.cluster.wire import keypair
    keys = keypair()
    a, gone = wires("a", keys), wires("gone", keys)
    address = gone.address
    gone.close()
    a.connect({"gone": address})
    done = threading.Event()

    def flood():
        for i in range(5000):
            a.send("gone", "s", ("t:0", "a", "gone", (1, i)), np.float32(i))
        done.set()
    threading.Thread(target=flood, daemon=True).start()
    assert done.wait(60), "a Send to a dead peer blocked"
    with pytest.raises(dfc.DfcRuntimeError, match="no address for task nobody"):
        a.send("nobody", "s", ("t:0", "a", "nobody/cpu:0", ()), np.float32(0))


def test_without_pyzmq_a_cluster_says_what_to_install_before_ray_starts(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "zmq", None)        # import zmq raises ImportError
    with pytest.raises(dfc.DfcError, match=r"pyzmq.*dfc\[cluster\]"):
        dfc.cluster.connect(tasks={"worker": 1}, address="no-such-host:1")


# ------------------------------------------------------------------------------ on a cluster

def through_three_processes(x):
    with dfc.device("cpu:0"):
        a = x * 3.0                     # the chief's value, to worker:0
    with dfc.device("worker:0/cpu:0"):
        b = a + 1.0                     # to worker:1
    with dfc.device("worker:1/cpu:0"):
        c = b * 0.5                     # back to the chief
    with dfc.device("cpu:0"):
        return c - x


def loop_over_three_processes(x, n):
    def body(i, v):
        with dfc.device("worker:1/cpu:0"):
            v = dfc.tanh(v) * 1.5
        with dfc.device("cpu:0"):
            v = v + 0.25
        return i + 1, v
    with dfc.device("worker:0/cpu:0"):
        return dfc.while_loop(lambda i, v: i < n, body, (0, x))[1]


ARRAY = dfc.TensorSpec([None], "float32")


def one_process(fn, *args):
    return dfc.Session(dfc.trace(fn, *[dfc.TensorSpec(np.shape(a), np.asarray(a).dtype.name) for a in args]),
                       device_map={"worker:0/cpu:0": "cpu:1", "worker:1/cpu:0": "cpu:2"}).call(*args)


@pytest.mark.parametrize("compression", [None, "bfloat16"])
def test_large_values_cross_through_the_object_store_in_every_direction(compression):
    """object_store_bytes=1: every value between processes goes through Ray's object store (the chief's by
    reference in an actor call, a task's taken from it); the results equal one process's exactly."""
    c = cluster()
    x = np.linspace(-2, 2, 70_000).astype(np.float32)        # 280 kB: Ray keeps it in shared memory
    g = dfc.trace(through_three_processes, ARRAY)
    s = dfc.Session(g, cluster=c, object_store_bytes=1, wire_compression=compression)
    given = [c.ask(t, "held")["given"] for t in ("worker:0", "worker:1")]
    got = s.call(x)
    assert [c.ask(t, "held")["given"] - k for t, k in zip(("worker:0", "worker:1"), given)] == [1, 1]
    if compression is None:
        np.testing.assert_array_equal(got, one_process(through_three_processes, x))
    else:
        np.testing.assert_allclose(got, one_process(through_three_processes, x), atol=2 ** -5)
    loop = dfc.Session(dfc.trace(loop_over_three_processes, ARRAY, dfc.TensorSpec([], "int32")), cluster=c,
                       object_store_bytes=1)
    np.testing.assert_array_equal(loop.call(x, np.int32(4)), one_process(loop_over_three_processes, x, np.int32(4)))
    held = [c.ask(t, "held")["held"] for t in ("worker:0", "worker:1")]
    assert held == [0, 0]           # every value a task held was taken, or dropped with its step


def test_a_value_held_by_a_task_that_died_fails_the_step_naming_it():
    """The receiver takes a large value from the task that sent it; when that task is gone, the step fails with
    a DfcRuntimeError (no hang), and a restarted task serves the next step."""
    c = cluster()

    def f(x):
        with dfc.device("worker:0/cpu:0"):
            y = x + 1.0
        with dfc.device("cpu:0"):
            return y * 2.0              # the chief takes y from worker:0
    s = dfc.Session(dfc.trace(f, ARRAY), cluster=c, object_store_bytes=1)
    x = np.ones(1000, np.float32)
    np.testing.assert_array_equal(s.call(x), (x + 1) * 2)
    real, taken = c.take, []

    def take_after_death(task, step, n, timeout):
        import os
        import signal
        taken.append(task)
        os.kill(c.pid(task), signal.SIGKILL)
        return real(task, step, n, timeout)
    t0 = time.monotonic()
    with mock.patch.object(c, "take", take_after_death):
        with pytest.raises(dfc.DfcRuntimeError, match="worker:0") as e:
            s.call(x)
    assert time.monotonic() - t0 < 30 and taken == ["worker:0"], str(e.value)
    c.restart("worker:0")
    np.testing.assert_array_equal(s.call(x), (x + 1) * 2)


def test_without_a_socket_to_the_chief_its_messages_take_the_actor_call_path():
    """Under Ray Client the tasks may have no route to the chief: its Sends go in Task.deliver calls and the
    tasks' Sends to it wait in their chief box for its status poll (the tasks still use their sockets)."""
    from dfc.runtime import cluster as clusters
    cluster()               # the test process's Ray, which this second cluster joins
    with mock.patch.object(clusters, "_client_mode", lambda: True):
        c = clusters.Cluster(["worker:0", "worker:1"])
    try:
        assert c.wire is None
        x = np.linspace(-1, 1, 50).astype(np.float32)
        for fn, args in ((through_three_processes, (x,)), (loop_over_three_processes, (x, np.int32(5)))):
            g = dfc.trace(fn, *[dfc.TensorSpec(np.shape(a), np.asarray(a).dtype.name) for a in args])
            for store in (None, 1):
                got = dfc.Session(g, cluster=c, object_store_bytes=store).call(*args)
                np.testing.assert_array_equal(got, one_process(fn, *args))
    finally:
        c.shutdown()
