"""The strict cupy double (dfc/runtime/strict.py) and the `strict:N` devices built on it."""
import gc

import numpy as np
import pytest

import dfc
from dfc.runtime import strict
from dfc.runtime.strict import xp


def test_device_arrays_refuse_implicit_conversion_like_cupy():
    a = xp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(a)
    with pytest.raises(TypeError):
        np.tanh(a)                          # a numpy ufunc on a device array
    with pytest.raises(TypeError):
        np.sum(a)                           # a numpy function on a device array
    with pytest.raises(TypeError, match="Unsupported type"):
        xp.add(a, np.ones(3, np.float32))   # a host array in a device kernel
    with pytest.raises(TypeError, match="Unsupported type"):
        a + np.ones(3, np.float32)
    np.testing.assert_array_equal(a.get(), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(xp.asnumpy(xp.tanh(a) * np.float32(2)), np.tanh(a.get()) * 2)


def test_scalar_conversions_work_and_count_as_syncs():
    strict.reset_stats()
    s = xp.sum(xp.asarray([1, 2, 3]))
    assert isinstance(s, xp.ndarray) and s.shape == ()          # cupy reductions give 0-d arrays
    assert int(s) == 6 and float(s) == 6.0 and bool(s) and [0, 1, 2, 3, 4, 5, 6][s] == 6 and s.item() == 6
    assert strict.stats[0]["sync"] == 5 and strict.stats[0]["h2d"] == 1


def test_arrays_of_another_device_are_refused_and_copied_explicitly():
    with xp.cuda.Device(1):
        b = xp.asarray(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="array device = 1 while current = 0"):
        xp.add(b, b)
    c = b.copy()                            # cupy's copy() copies to the current device
    assert c.device.id == 0 and (c + c).get().tolist() == [2.0] * 4


def test_views_share_their_owner_buffer_in_the_pool():
    pool = xp.get_default_memory_pool()
    before = pool.used_bytes()
    a = xp.zeros((256, 256), np.float32)
    assert pool.used_bytes() - before == a.nbytes
    v = a.reshape(-1)[:10]
    assert v.base is a and pool.used_bytes() - before == a.nbytes
    del a, v
    assert pool.used_bytes() == before


def test_strict_devices_exist_and_run_programs_like_numpy():
    def f(x, n):
        with dfc.device("strict:1"):
            def body(i, s):
                return i + 1, dfc.cond(i % 2 == 0, lambda: s + dfc.reshape(x, [-1]), lambda: s * 0.5)
            out = dfc.while_loop(lambda i, s: i < n, body, (0, dfc.zeros([4], "float32")))[1]
            return out, dfc.gradients(dfc.reduce_sum(out * out), [x])[0]
    g = dfc.trace(f, dfc.TensorSpec([2, 2], "float32"), dfc.TensorSpec([], "int32"))
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    want = dfc.Session(g, device_map={"strict:1": "cpu:0"}).call(x, np.int32(5))
    for fuse in (False, True):
        s = dfc.Session(g, fuse_loops=fuse)
        assert s.placement and set(s.placement.values()) == {"strict:1"}
        got = s.call(x, np.int32(5))
        for a, w in zip(got, want):
            assert isinstance(a, np.ndarray)
            np.testing.assert_array_equal(a, w)
    with pytest.raises(dfc.DfcError, match="strict:7, which does not exist"):
        dfc.Session(g, device_map={"strict:1": "strict:7"})


def test_a_loop_predicate_reaches_the_host_once_per_iteration():
    """k loop variables mean k Switches per iteration; the predicate is copied to the host once."""
    k, n = 5, 20

    def f(x):
        def body(i, *vs):
            return (i + 1,) + tuple(v * 1.5 + 1.0 for v in vs)
        return dfc.while_loop(lambda i, *vs: i < n, body, (0,) + tuple(x + j for j in range(k)))[1:]
    g = dfc.trace(f, dfc.TensorSpec([3], "float32"))
    x = np.ones(3, np.float32)
    want = dfc.Session(g).call(x)
    for fuse in (False, True):
        s = dfc.Session(g, default_device="strict:0", fuse_loops=fuse, num_threads=0)
        strict.reset_stats()
        got = s.call(x)
        for a, w in zip(got, want):
            np.testing.assert_array_equal(a, w)
        st = strict.stats[0]
        # n + 1 predicate values, k fetched values; no implicit syncs at all
        assert (st["d2h"], st["sync"]) == (n + 1 + k, 0), (fuse, st)


def test_a_gpu_out_of_memory_is_a_dfc_error_and_the_session_stays_usable():
    def f(n):
        return dfc.reduce_sum(dfc.ones(dfc.stack([n, n]), "float32"))
    g = dfc.trace(f, dfc.TensorSpec([], "int32"))
    pool = xp.get_default_memory_pool()
    limit = pool.get_limit()
    try:
        # the device's real memory: 1 MiB more than earlier tests' Variables hold; dfc's own count allows more
        pool.set_limit(size=pool.used_bytes() + (1 << 20))
        s = dfc.Session(g, default_device="strict:0", memory_caps={"strict:0": 1 << 30})
        assert s.call(np.int32(100)) == 10000.0
        before = pool.used_bytes()          # the plan's constants
        with pytest.raises(dfc.DfcOutOfMemory, match="Out of memory allocating"):
            s.call(np.int32(2048))          # 16 MiB
        assert pool.used_bytes() == before
        assert s.call(np.int32(200)) == 40000.0
        assert s.memory_stats()["strict:0"]["in_use"] == 0
    finally:
        pool.set_limit(size=limit)


def test_memory_stats_include_the_device_pool():
    g = dfc.trace(lambda x: x * 2.0, dfc.TensorSpec([1000], "float32"))
    s = dfc.Session(g, default_device="strict:2")
    s.call(np.ones(1000, np.float32))
    st = s.memory_stats()["strict:2"]
    assert st["peak"] >= 4000 and {"pool_used", "pool_held"} <= st.keys()


def test_linalg_and_broadcast_run_on_device_arrays_like_cupy():
    """xp.linalg and xp.broadcast take device arrays (cupy.linalg, cupy.broadcast); numpy.linalg refuses them."""
    a = np.array([[4.0, 1.0], [1.0, 3.0]])
    d = xp.asarray(a)
    with pytest.raises(TypeError):
        np.linalg.inv(d)
    np.testing.assert_array_equal(xp.linalg.inv(d).get(), np.linalg.inv(a))
    sign, logdet = xp.linalg.slogdet(d)
    assert isinstance(logdet, xp.ndarray) and float(logdet) == np.linalg.slogdet(a)[1]
    assert xp.broadcast(d, xp.asarray([1.0, 2.0])).shape == (2, 2)


def test_linalg_and_take_along_axis_gradients_run_on_a_strict_device():
    def f(x, i):
        return dfc.linalg.inv(x), dfc.gradients(dfc.reduce_sum(dfc.take_along_axis(x, i, axis=1) ** 2), [x])[0]
    g = dfc.trace(f, dfc.TensorSpec([2, 2], "float64"), dfc.TensorSpec([2, 1], "int64"))
    x, i = np.array([[4.0, 1.0], [1.0, 3.0]]), np.array([[1], [0]])
    want = dfc.Session(g, default_device="cpu:0").call(x, i)
    got = dfc.Session(g, default_device="strict:0").call(x, i)
    for a, w in zip(got, want):
        np.testing.assert_array_equal(a, w)


def test_a_transposed_value_copied_between_devices_keeps_its_layout_and_bits():
    def f(t):
        with dfc.device("strict:0"):
            u = t[0].T                  # a Fortran-ordered view
        with dfc.device("strict:1"):
            return t.dot(u)             # numpy's dot of a 3-d and a 2-d array: its bits depend on u's layout
    g = dfc.trace(f, dfc.TensorSpec([2, 3, 4], "float64"))
    x = np.random.default_rng(0).normal(size=(2, 3, 4))
    got = dfc.Session(g).call(x)
    np.testing.assert_array_equal(got, dfc.Session(g, device_map={"strict:0": "cpu:0", "strict:1": "cpu:0"}).call(x))


def test_sessions_on_one_gpu_update_a_shared_variable_in_stream_order():
    """Sessions share each GPU's streams: with a compute stream per Session, a Session read a Variable that
    another Session's run had written on its own stream and not yet finished (lost updates on a GPU;
    StreamOrderError here)."""
    import threading
    import time
    from dfc.runtime import containers
    total = dfc.Variable(np.int64(0), name="strict_total")
    q = dfc.FIFOQueue(1, "int64", shapes=[])

    held = dfc.Session(dfc.trace(lambda: (total.assign_add(np.int64(1)), q.dequeue())), default_device="strict:0")
    add = dfc.Session(dfc.trace(lambda: total.assign_add(np.int64(10))), default_device="strict:0")
    assert int(add.call()) == 10
    var = total._resource()
    before = var.value
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("out", held.call()), daemon=True)
    t.start()
    r = containers.get(q.container).lookup(q.shared_name)
    deadline = time.monotonic() + 60
    while not r.getters or var.value is before:     # assigned, and the run waits (its stream not finished)
        assert time.monotonic() < deadline and t.is_alive()
        time.sleep(0.005)
    assert int(add.call()) == 21
    q.enqueue(np.int64(7))
    t.join(60)
    assert int(box["out"][1]) == 7 and int(total.numpy()) == 21


def test_queue_and_accumulator_elements_cross_sessions_and_devices():
    """Queues and accumulators hold host copies: an element enqueued by one Session on strict:0 is dequeued
    by another on strict:1 (before, the dequeuer read the other device's array: ValueError, or another
    stream's array unordered), and gradients applied from a device are averaged on the host."""
    q = dfc.FIFOQueue(4, "float32", shapes=[2])
    acc = dfc.ConditionalAccumulator("float32", [2])
    put = dfc.trace(lambda x: (q.enqueue(x * 2.0), acc.apply_grad(x, 0)), dfc.TensorSpec([2], "float32"))
    for v in (1.0, 3.0):
        dfc.Session(put, default_device="strict:0").call(np.full(2, v, np.float32))
    got = dfc.Session(dfc.trace(lambda: (q.dequeue() + 1.0, q.dequeue_many(1) + 1.0, acc.take_grad(2) * 10.0)),
                      default_device="strict:1").call()
    np.testing.assert_array_equal(got[0], [3.0, 3.0])
    np.testing.assert_array_equal(got[1], [[7.0, 7.0]])
    np.testing.assert_array_equal(got[2], [20.0, 20.0])


def test_a_memory_limit_counts_device_arrays():
    """Session(memory_limit=) counts the arrays kernels return on a GPU too (it followed numpy arrays only:
    16 MB of device arrays passed a 4 MB limit)."""
    def f(n):
        ta = dfc.TensorArray("float64")
        body = lambda i, ta: (i + 1, ta.write(i, dfc.zeros([1000], "float64")))   # noqa: E731
        return dfc.while_loop(lambda i, ta: i < n, body, (0, ta))[1].stack()
    g = dfc.trace(f, dfc.TensorSpec([], "int64"))
    s = dfc.Session(g, memory_limit="4MB", default_device="strict:0")
    assert s.call(np.int64(10)).shape == (10, 1000)
    try:
        s.call(np.int64(2000))
        raise AssertionError("DfcOutOfMemory not raised")
    except dfc.DfcOutOfMemory as e:
        assert "memory limit of 4000000 bytes" in str(e)
        e.__traceback__ = None          # its frames would keep the failed run's arrays alive
    gc.collect()
    assert s.call(np.int64(10)).shape == (10, 1000)     # the limit counts what is held now


def test_arrays_pickle_as_host_data_and_streams_and_events_do_not_pickle_like_cupys():
    import pickle
    a = xp.asarray(np.arange(3.0))
    b = pickle.loads(pickle.dumps(a))
    assert isinstance(b, xp.ndarray) and b.get().tolist() == [0.0, 1.0, 2.0]
    event = xp.cuda.Event()
    event.record(xp.cuda.get_current_stream())
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(event)             # a value sent to another process must travel as host data
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(xp.cuda.Stream(non_blocking=True))
