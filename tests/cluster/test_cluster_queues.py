"""Queues and accumulators shared across cluster tasks by name (dfc/compiler/queues.py): a queue on ps:0,
steps placed on worker:0 enqueue into it and steps placed on worker:1 dequeue from it, each step its own
Session as separate workers would have; the ops on the queue's handle run in ps:0's process."""
import numpy as np
import pytest

import dfc
from tests.clustertools import cluster
from tests.threadtools import Background as _Background, until

pytestmark = pytest.mark.xdist_group("ray")
WAIT_S = 60


def Background(fn):
    return _Background(fn, WAIT_S)


@pytest.fixture(scope="module")
def c():
    return cluster()


def test_workers_on_two_tasks_share_a_queue_on_the_ps_by_name(c):
    with dfc.device("ps:0/cpu:0"):
        q = dfc.FIFOQueue(4, "float32", shapes=[2], shared_name="cluster_queue", timeout=WAIT_S)

    def produce(x):
        with dfc.device("worker:0/cpu:0"):
            q.enqueue(x * 2.0)

    def consume():
        xs = q.dequeue_many(2)
        with dfc.device("worker:1/cpu:0"):
            return dfc.reduce_sum(xs, axis=0) + 1.0

    put = dfc.Session(dfc.trace(produce, dfc.TensorSpec([2], "float32")), cluster=c)
    get = dfc.Session(dfc.trace(consume), cluster=c)
    assert {p.split("/")[0] for p in put.placement.values()} == {"worker:0", "ps:0"}
    assert {p.split("/")[0] for p in get.placement.values()} == {"worker:1", "ps:0"}
    assert {put.placement[n] for n, node in put.graph.nodes.items() if node.op.startswith("Queue")} == {"ps:0/cpu:0"}
    consumer = Background(get.call)          # waits on ps:0 for two elements (not a deadlock)
    put.call(np.array([1.0, 2.0], np.float32))
    put.call(np.array([3.0, 4.0], np.float32))
    np.testing.assert_array_equal(consumer.result(), [9.0, 13.0])
    assert int(q.size()) == 0                                  # asked on ps:0, outside any graph
    assert dfc.containers.get().lookup("cluster_queue") is None     # the chief holds no such queue


def test_a_closed_queue_on_a_task_fails_a_waiting_worker_step(c):
    with dfc.device("ps:0/cpu:0"):
        q = dfc.FIFOQueue(4, "int32", shapes=[], shared_name="cluster_closing", timeout=WAIT_S)
    q.enqueue(np.int32(5))      # outside any graph: runs on ps:0

    def consume():
        with dfc.device("worker:1/cpu:0"):
            return q.dequeue() * 2
    get = dfc.Session(dfc.trace(consume), cluster=c)
    assert int(get.call()) == 10
    waiting = Background(get.call)
    q.close()
    with pytest.raises(dfc.DfcError, match="closed"):
        waiting.result()


def test_an_accumulator_on_the_ps_averages_gradients_from_two_workers(c):
    with dfc.device("ps:0/cpu:0"):
        acc = dfc.ConditionalAccumulator("float32", [3], shared_name="cluster_accumulator", timeout=WAIT_S)

    def worker(task):
        def step(g):
            with dfc.device(f"{task}/cpu:0"):
                acc.apply_grad(g * 1.0, 0)
        return dfc.Session(dfc.trace(step, dfc.TensorSpec([3], "float32")), cluster=c)

    chief = dfc.Session(dfc.trace(lambda: acc.take_grad(2)), cluster=c)
    taken = Background(chief.call)
    worker("worker:0").call(np.array([1.0, 2.0, 3.0], np.float32))
    worker("worker:1").call(np.array([3.0, 4.0, 5.0], np.float32))
    np.testing.assert_allclose(taken.result(), [2.0, 3.0, 4.0])
    worker("worker:0").call(np.array([9.0, 9.0, 9.0], np.float32))      # step 0 < global step 1: stale
    assert int(acc.num_accumulated()) == 0


def test_session_cancel_ends_a_step_waiting_on_an_empty_queue_and_the_tasks_stay_usable(c):
    with dfc.device("ps:0/cpu:0"):
        q = dfc.FIFOQueue(4, "int32", shapes=[], shared_name="cluster_cancel")

    def consume():
        with dfc.device("worker:0/cpu:0"):
            return q.dequeue() + 1
    get = dfc.Session(dfc.trace(consume), cluster=c)
    waiting = Background(get.call)
    until(lambda: get._cluster_steps, WAIT_S)
    assert get.cancel("no producer any more") == 1
    with pytest.raises(dfc.DfcError, match="cancelled: no producer any more"):
        waiting.result()
    q.enqueue(np.int32(41))
    assert int(get.call()) == 42 and get.cancel() == 0
