"""Queues, gradient accumulators and the counter barrier (whitepaper §4.6; dfc/compiler/queues.py,
dfc/runtime/kernels/queue_kernels.py): FIFO order, capacity, close, sharing by name, asynchronous waits,
timeouts, in the reference interpreter and on the executor's paths. Waits are checked by instrumentation
(what the queue has pending), never by timing."""
import numpy as np
import pytest

import dfc
from dfc.compiler.tracing import convert, current_builder
from dfc.runtime import containers
from tests.conftest import PATHS, run_all_modes
from tests.threadtools import Background, until

F32 = dfc.TensorSpec([], "float32")
MODES = {"reference": lambda g: dfc.Session(g, mode="reference"),
         "inline": lambda g: dfc.Session(g, mode="threads", num_threads=0),
         "pool": lambda g: dfc.Session(g, mode="threads", num_threads=2),
         "partition": PATHS["random 3-device partition"]}
WAIT_S = 30     # how long a test waits for another thread to reach a state before it fails (never reached)


def resource(q):
    return containers.get(q.container).lookup(q.shared_name)


# ------------------------------------------------------------------------------ order and sizes

def test_fifo_order_and_sizes_on_every_path():
    q = dfc.FIFOQueue(8, "float32", shapes=[])

    def f(x):
        q.enqueue_many(dfc.stack([x, x + 1, x + 2, x + 3, x + 4]))
        n0 = q.size()
        a = q.dequeue()
        b = q.dequeue()
        rest = q.dequeue_many(3)
        return a, b, rest, n0, q.size()

    g = dfc.trace(f, F32)
    a, b, rest, n0, n1 = run_all_modes(g, 10.0)
    assert (a, b) == (10.0, 11.0)
    np.testing.assert_array_equal(rest, [12.0, 13.0, 14.0])
    assert (int(n0), int(n1)) == (5, 0)


def test_a_queue_in_a_loop_and_a_cond_on_every_path():
    q = dfc.FIFOQueue(4, ["int32", "float32"], shapes=[[], [2]])

    def f(n):
        i = dfc.constant(0)
        total = dfc.zeros([2])
        while i < n:
            q.enqueue([i, dfc.ones([2]) * dfc.cast(i, "float32")])
            if i % 2 == 0:
                k, v = q.dequeue()
                total = total + v * dfc.cast(k, "float32")
            else:
                k, v = q.dequeue()
                total = total - v
            i += 1
        return total

    g = dfc.function(f).trace(dfc.TensorSpec([], "int32"))
    want = np.zeros(2, np.float32)
    for i in range(5):
        want = want + (np.float32(i * i) if i % 2 == 0 else -np.float32(i))
    np.testing.assert_array_equal(run_all_modes(g, 5), want)
    assert resource(q).size() == 0
    s = dfc.Session(g, mode="threads")
    assert any(v.startswith("# not fused") for v in s.fused_frames().values())   # an async kernel may wait


def test_eager_ops_outside_a_graph():
    q = dfc.FIFOQueue(3, ["float32", "int64"], shapes=[[2], []])
    q.enqueue([np.ones(2), 7])
    q.enqueue_many([np.arange(4.0).reshape(2, 2), np.array([8, 9])])
    assert int(q.size()) == 3
    x, k = q.dequeue()
    np.testing.assert_array_equal(x, [1, 1])
    assert x.dtype == np.float32 and int(k) == 7
    xs, ks = q.dequeue_many(2)
    np.testing.assert_array_equal(xs, [[0, 1], [2, 3]])
    np.testing.assert_array_equal(ks, [8, 9])
    mine = np.zeros(2, np.float32)
    q.enqueue([mine, 1])
    mine[:] = 5.0           # the queue holds its own copy
    np.testing.assert_array_equal(q.dequeue()[0], [0, 0])


# ------------------------------------------------------------------------------ waiting

@pytest.mark.parametrize("mode", ["reference", "inline", "pool", "partition"])
def test_a_full_queue_makes_the_producer_wait_for_the_consumer(mode):
    q = dfc.FIFOQueue(2, "int64", shapes=[])
    g = dfc.trace(lambda: q.enqueue_many(dfc.range(0, 5, dtype="int64")))
    producer = Background(lambda: MODES[mode](g).call())
    r = resource(q)
    until(lambda: r.size() == 2 and len(r.putters) == 1)    # the step waits for room, holding 3 elements
    assert not producer.done()
    got = [int(q.dequeue())]                                 # room for one more: the producer goes on
    until(lambda: r.size() == 2)
    assert not producer.done()
    got += [int(x) for x in q.dequeue_many(4)]
    producer.result()
    assert got == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("mode", ["reference", "inline", "pool", "partition"])
def test_dequeue_many_waits_until_enough_elements_arrived(mode):
    q = dfc.FIFOQueue(10, "float32", shapes=[2])
    g = dfc.trace(lambda: q.dequeue_many(3) * 2)
    consumer = Background(lambda: MODES[mode](g).call())
    r = resource(q)
    until(lambda: len(r.getters) == 1)
    q.enqueue_many(np.ones((2, 2)))
    until(lambda: len(r.getters[0].items) == 2 if r.getters else False)
    assert not consumer.done()
    q.enqueue(np.full(2, 3.0))
    np.testing.assert_array_equal(consumer.result(), [[2, 2], [2, 2], [6, 6]])
    assert r.size() == 0


def _dequeue_before_enqueue_graph(q):
    """One step: a dequeue that only an enqueue elsewhere in the same step can satisfy, built out of program
    order, so the dequeue is ready (and starts) first."""
    def f(x):
        b = current_builder()
        h = q.handle()
        attrs = {"dtypes": ["float32"], "shapes": [[]], "timeout": float(WAIT_S)}
        d = b.make("QueueDequeue", (h,), attrs, name="early_dequeue", ordered=False)[0]
        b.make("QueueEnqueue", (h, convert(x * 3.0, "float32")), {}, name="late_enqueue", ordered=False)
        return d + 1.0
    g = dfc.trace(f, F32)
    g.signature["targets"] = ["late_enqueue"]
    return g


@pytest.mark.parametrize("path", list(PATHS))
def test_a_waiting_dequeue_does_not_block_the_rest_of_its_step(path):
    q = dfc.FIFOQueue(4, "float32", shapes=[])
    g = _dequeue_before_enqueue_graph(q)
    nodes = list(g.nodes)
    assert nodes.index("early_dequeue") < nodes.index("late_enqueue")
    assert float(PATHS[path](g).call(2.0)) == 7.0
    assert resource(q).size() == 0


@pytest.mark.parametrize("mode", ["reference", "inline", "pool", "partition"])
def test_a_dequeue_nothing_fills_times_out_naming_its_node(mode):
    q = dfc.FIFOQueue(4, "float32", shapes=[], timeout=0.05, name="lonely")
    g = dfc.trace(lambda: q.dequeue() + 1.0)
    with pytest.raises(dfc.DfcQueueTimeout, match="QueueDequeue waited") as e:
        MODES[mode](g).call()
    assert isinstance(e.value, dfc.DfcDeadlockError) and e.value.node == "lonely_dequeue"
    r = resource(q)
    assert not r.getters        # the timed-out dequeue took nothing: a later element stays in the queue
    q.enqueue(1.0)
    assert r.size() == 1


@pytest.mark.parametrize("mode", ["reference", "inline", "pool", "partition"])
def test_an_error_elsewhere_in_the_step_withdraws_a_waiting_dequeue(mode):
    q = dfc.FIFOQueue(4, "float32", shapes=[])

    def f(x):
        b = current_builder()
        attrs = {"dtypes": ["float32"], "shapes": [[]], "timeout": float(WAIT_S)}
        d = b.make("QueueDequeue", (q.handle(),), attrs, ordered=False)[0]
        dfc.Assert(x > 0.0, [x], "x must be positive")
        return d
    with pytest.raises(dfc.DfcAssertionError, match="x must be positive"):
        MODES[mode](dfc.trace(f, F32)).call(-1.0)
    r = resource(q)
    assert not r.getters        # the step is over: its dequeue no longer waits (it would take an element)
    q.enqueue(1.0)
    assert r.size() == 1


# ------------------------------------------------------------------------------ close

@pytest.mark.parametrize("mode", ["reference", "inline", "partition"])
def test_close_keeps_pending_elements_then_fails_naming_the_node(mode):
    q = dfc.FIFOQueue(4, "int32", shapes=[], name="closing")
    q.enqueue_many(np.array([1, 2], np.int32))
    q.close()
    with pytest.raises(dfc.DfcQueueClosed, match="closed") as e:
        q.enqueue(3)
    g = dfc.trace(lambda: q.dequeue())
    s = MODES[mode](g)
    assert int(s.call()) == 1 and int(s.call()) == 2
    with pytest.raises(dfc.DfcQueueClosed, match="is closed and has only 0") as e:
        s.call()
    assert e.value.node == "closing_dequeue" and isinstance(e.value, dfc.DfcRuntimeError)


def test_dequeue_many_on_a_closed_queue_with_too_few_fails_and_keeps_them():
    q = dfc.FIFOQueue(4, "int32", shapes=[])
    q.enqueue_many(np.array([1, 2], np.int32))
    q.close()
    with pytest.raises(dfc.DfcQueueClosed, match="cannot dequeue 3 elements"):
        q.dequeue_many(3)
    np.testing.assert_array_equal(q.dequeue_many(2), [1, 2])


@pytest.mark.parametrize("mode", ["reference", "pool"])
def test_closing_wakes_a_waiting_dequeue_with_an_error(mode):
    q = dfc.FIFOQueue(4, "float32", shapes=[])
    consumer = Background(lambda: MODES[mode](dfc.trace(lambda: q.dequeue_many(2))).call())
    r = resource(q)
    until(lambda: len(r.getters) == 1)
    q.enqueue(1.0)
    q.close()
    with pytest.raises(dfc.DfcQueueClosed):
        consumer.result()
    assert r.size() == 1        # the element the failed dequeue_many had taken is back


def test_close_with_cancel_pending_enqueues_fails_the_waiting_producer():
    q = dfc.FIFOQueue(1, "float32", shapes=[])
    q.enqueue(1.0)
    producer = Background(lambda: dfc.Session(dfc.trace(lambda: q.enqueue(2.0))).call())
    r = resource(q)
    until(lambda: len(r.putters) == 1)
    q.close(cancel_pending_enqueues=True)
    with pytest.raises(dfc.DfcQueueClosed, match="cancelled"):
        producer.result()
    assert float(q.dequeue()) == 1.0


# ------------------------------------------------------------------------------ sharing by name

@pytest.mark.parametrize("mode", ["reference", "threads"])
def test_two_graphs_and_sessions_share_a_queue_by_name(mode):
    name = f"shared_by_name_{mode}"
    q1 = dfc.FIFOQueue(4, "float32", shapes=[2], shared_name=name)
    q2 = dfc.FIFOQueue(4, "float32", shapes=[2], shared_name=name)
    put = dfc.Session(dfc.trace(lambda x: q1.enqueue(x * 2.0), dfc.TensorSpec([2], "float32")), mode=mode)
    get = dfc.Session(dfc.trace(lambda: q2.dequeue()), mode=mode)
    put.call(np.array([1.0, 2.0], np.float32))
    put.call(np.array([3.0, 4.0], np.float32))
    np.testing.assert_array_equal(get.call(), [2.0, 4.0])
    np.testing.assert_array_equal(q1.dequeue(), [6.0, 8.0])
    with pytest.raises(dfc.DfcError, match="declares it"):
        dfc.FIFOQueue(5, "float32", shapes=[2], shared_name=name)
    g = dfc.Graph()     # a graph loaded from JSON names the queue too
    loaded = dfc.loads(dfc.ir.serialize.to_json(put.graph))
    dfc.Session(loaded, mode=mode).call(np.array([5.0, 6.0], np.float32))
    np.testing.assert_array_equal(get.call(), [10.0, 12.0])
    del g


def test_queues_in_named_containers_are_separate_and_survive_variable_restores():
    a = dfc.FIFOQueue(2, "int64", shapes=[], shared_name="same_name", container="queues_a")
    b = dfc.FIFOQueue(2, "int64", shapes=[], shared_name="same_name", container="queues_b")
    a.enqueue(1)
    assert int(b.size()) == 0
    store = containers.get("queues_a")
    store.restore(store.snapshot())
    assert int(a.dequeue()) == 1


def test_bad_elements_are_errors_at_the_users_line():
    q = dfc.FIFOQueue(2, ["float32", "int32"], shapes=[[2], []])
    with pytest.raises(dfc.DfcError, match="holds 2 component"):
        dfc.trace(lambda: q.enqueue(dfc.ones([2])))
    with pytest.raises(dfc.DfcError, match=r"component 0 has shape \[2\], got \[3\]"):
        dfc.trace(lambda: q.enqueue([dfc.ones([3]), 1]))
    with pytest.raises(dfc.DfcError, match="capacity"):
        dfc.FIFOQueue(0, "float32")
    with pytest.raises(dfc.DfcError, match="one shape per dtype"):
        dfc.FIFOQueue(2, ["float32", "int32"], shapes=[[2]])


# ------------------------------------------------------------------------------ accumulators

@pytest.mark.parametrize("mode", ["reference", "threads"])
def test_accumulator_averages_drops_stale_gradients_and_counts_steps(mode):
    acc = dfc.ConditionalAccumulator("float32", [2])
    apply = dfc.Session(dfc.trace(lambda g, s: acc.apply_grad(g, s), dfc.TensorSpec([2], "float32"),
                                  dfc.TensorSpec([], "int64")), mode=mode)
    take = dfc.Session(dfc.trace(lambda: (acc.take_grad(3), acc.num_accumulated())), mode=mode)
    grads = [np.array([1.0, 2.0], np.float32), np.array([3.0, 5.0], np.float32), np.array([2.0, 2.0], np.float32)]
    for gr in grads:
        apply.call(gr, 0)
    avg, n = take.call()
    np.testing.assert_allclose(avg, np.mean(grads, axis=0), rtol=1e-6)
    assert int(n) == 0
    apply.call(np.array([100.0, 100.0], np.float32), 0)      # computed at step 0 < the global step 1: dropped
    assert int(acc.num_accumulated()) == 0
    apply.call(np.array([1.0, 1.0], np.float32), 1)
    assert int(acc.num_accumulated()) == 1
    acc.set_global_step(5)
    apply.call(np.array([9.0, 9.0], np.float32), 4)          # stale now
    assert int(acc.num_accumulated()) == 1
    acc.set_global_step(3)      # moved back (parameters restored from an older shard): the sum is dropped
    assert int(acc.num_accumulated()) == 0
    apply.call(np.array([4.0, 6.0], np.float32), 3)
    take = dfc.Session(dfc.trace(lambda: acc.take_grad(1)), mode=mode)
    np.testing.assert_allclose(take.call(), [4.0, 6.0])


@pytest.mark.parametrize("mode", ["reference", "inline", "partition"])
def test_take_grad_waits_for_the_required_gradients(mode):
    acc = dfc.ConditionalAccumulator("float64", [])
    chief = Background(lambda: MODES[mode](dfc.trace(lambda: acc.take_grad(2) * 10.0)).call())
    r = containers.get("").lookup(acc.shared_name)
    until(lambda: len(r.takers) == 1)
    acc.apply_grad(1.0, 0)
    assert len(r.takers) == 1 and not chief.done()
    acc.apply_grad(2.0, 0)
    assert float(chief.result()) == 15.0
    assert r.global_step == 1


def test_counter_barrier_holds_workers_until_the_chief_releases_them():
    barrier = dfc.CounterBarrier(2, timeout=WAIT_S)
    log = []
    step = dfc.trace(lambda k: (barrier.arrive(k), barrier.wait_release())[1], dfc.TensorSpec([], "int64"))
    # one Session each: a Session runs one step at a time
    workers = [Background(lambda k=k: dfc.Session(step).call(k)) for k in (1, 2)]
    arrived = barrier.wait_all()                 # both workers have arrived...
    log.append(sorted(int(x) for x in arrived))
    assert not any(w.done() for w in workers)    # ...and wait for the release
    barrier.release(7)
    assert [int(w.result()) for w in workers] == [7, 7]
    assert log == [[1, 2]]


def test_an_accumulator_takes_one_gradient_per_worker_and_update_on_every_path():
    """A worker's second gradient for the same update (a restarted worker running its step again) is
    dropped like a stale one: the average is the mean of distinct workers' gradients. Gradients applied
    without a worker (graph files from before workers were named) all count, as before."""
    acc = dfc.ConditionalAccumulator("float32", [2])
    g0, g1, g1_again = np.float32([1, 2]), np.float32([3, 6]), np.float32([100, 100])

    def step(a, b, c):
        acc.set_global_step(0)
        acc.apply_grad(b, 0, worker="worker:1")
        acc.apply_grad(c, 0, worker="worker:1")     # the same worker again: dropped
        acc.apply_grad(a, 0, worker="worker:0")
        return acc.take_grad(2), acc.num_accumulated()
    spec = dfc.TensorSpec([2], "float32")
    avg, left = run_all_modes(dfc.trace(step, spec, spec, spec), g0, g1, g1_again)
    np.testing.assert_array_equal(avg, (g0 + g1) / 2)
    assert int(left) == 0
    # the next update starts a new set of workers: worker:1 counts again
    acc.apply_grad(g1_again, 1, worker="worker:1")
    acc.apply_grad(g0, 1)
    acc.apply_grad(g0, 1)              # anonymous gradients: never taken as duplicates
    np.testing.assert_allclose(acc.take_grad(3), (g1_again + 2 * g0) / 3)


def test_a_graph_file_from_before_named_workers_counts_every_gradient():
    import json
    from dfc.ir import serialize
    acc = dfc.ConditionalAccumulator("float32", [2])

    def step(a, b):
        acc.set_global_step(0)
        acc.apply_grad(a, 0, worker="worker:1")
        acc.apply_grad(b, 0, worker="worker:1")
        return acc.take_grad(2)
    spec = dfc.TensorSpec([2], "float32")
    doc = json.loads(serialize.to_json(dfc.trace(step, spec, spec)))
    applies = [n for n in doc["nodes"] if n["op"] == "AccumulatorApplyGradient"]
    assert [n["attrs"].pop("worker") for n in applies] == ["worker:1", "worker:1"]
    old = serialize.loads(json.dumps(doc))        # no worker attribute: the default, anonymous
    np.testing.assert_array_equal(dfc.Session(old).call(np.float32([1, 2]), np.float32([3, 4])), [2, 3])
    with pytest.raises(dfc.DfcError, match="worker must be a non-empty str"):
        acc.apply_grad(np.float32([1, 2]), 0, worker=3)
