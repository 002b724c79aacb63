"""Devices: names, the memory-capped accelerator's byte accounting, placement and device maps."""
import numpy as np
import pytest

import dfc
from dfc.runtime.devices import DeviceSet, MemoryTracker, canonical_name, gpu_available

F32, I64 = dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "int64")
V1000 = dfc.TensorSpec([1000], "float32")


def test_device_names():
    assert canonical_name("cpu:3") == "cpu:3"
    assert canonical_name("CPU:3") == "cpu:3"
    assert canonical_name("/device:GPU:1") == "gpu:1"
    assert canonical_name("accel") == "accel:0"
    for bad in ("tpu:0", "cpu:x", "", "cpu:-1", None):
        with pytest.raises(dfc.DfcError, match="bad device name"):
            canonical_name(bad)
    ds = DeviceSet({"accel:0": 1000})
    assert [ds.get(f"cpu:{i}").name for i in range(8)] == [f"cpu:{i}" for i in range(8)]
    assert ds.get("accel:0").capacity == 1000 and ds.get("accel:0").memory is not None
    assert ds.get("cpu:0").memory is None
    with pytest.raises(dfc.DfcError, match="cpu:8 does not exist"):
        ds.get("cpu:8", node="n")


def test_tracker_counts_buffers_once_views_included():
    m = MemoryTracker("accel:0", capacity=12_000)
    a = np.zeros(1000, np.float32)              # 4000 bytes
    m.acquire(a, 2)
    m.acquire(a[10:20], 1)                      # a view: same buffer, one more reference
    m.acquire(a.reshape(10, 100), 0)
    assert m.in_use == 4000
    m.release(a)
    m.release(a[:5])
    assert m.in_use == 4000
    m.release(a)
    assert m.in_use == 0 and m.peak == 4000
    b = np.zeros(2000, np.float32)
    m.acquire(b, 1)
    m.acquire(a, 1)
    with pytest.raises(dfc.DfcOutOfMemory, match="accel:0 out of memory: 12000 bytes in use"):
        m.acquire(np.zeros(1, np.float32), 1, node="x")
    m.hold(a)
    m.handoff(a)         # the hold becomes one of the next acquire's references
    m.acquire(a, 1)
    m.release(a)
    assert m.in_use == 12000
    m.release(a)
    assert m.in_use == 8000
    m.pin(b)
    m.end_run()
    assert m.in_use == 8000 and list(m.entries) == [id(b)]
    m.unpin(b)
    assert m.in_use == 0
    m.acquire(np.float32(3), 1)                 # numpy scalars and other objects are not device buffers
    assert m.in_use == 0


def chain(x):
    with dfc.device("accel:0"):
        y = x * 2.0
        z = y + 1.0
        return dfc.reduce_sum(z)


def test_accel_counts_each_tensor_until_its_last_consumer():
    g = dfc.trace(chain, V1000)
    x = np.ones(1000, np.float32)
    for threads in (0, 4):                     # the executor with every kernel inline, and with its pool
        s = dfc.Session(g, num_threads=threads)
        assert float(s.call(x)) == 3000.0
        st = s.memory_stats()["accel:0"]
        # x and y (4000 bytes each) are alive together, then y and z; never all three. The 4-byte
        # constants and the scalar result add a few bytes.
        assert 8000 <= st["peak"] < 8040, st
        assert st["in_use"] == 0
        with pytest.raises(dfc.DfcOutOfMemory, match="out of memory") as e:
            dfc.Session(g, num_threads=threads, memory_caps={"accel:0": 7000}).call(x)
        assert e.value.node in ("mul", "add")


def test_loop_memory_is_freed_every_iteration():
    def f(x, n):
        with dfc.device("accel:1"):
            return dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 0.5 + x), (0, x))[1]
    g = dfc.trace(f, V1000, I64)
    x = np.ones(1000, np.float32)
    peaks = []
    for n in (2, 40):
        s = dfc.Session(g, num_threads=0, parallel_iterations=1)
        s.call(x, np.int64(n))
        peaks.append(s.peak_bytes()["accel:1"])
    assert peaks[0] == peaks[1] < 6 * 4000


def test_peak_bytes_reported_per_device_for_a_partitioned_graph():
    def f(x):
        with dfc.device("accel:0"):
            a = x * 3.0
        with dfc.device("accel:1"):
            b = dfc.concat([a, a], axis=0)
        with dfc.device("cpu:1"):
            return dfc.reduce_sum(b)
    g = dfc.trace(f, V1000)
    s = dfc.Session(g, track_memory=True)
    assert float(s.call(np.ones(1000, np.float32))) == 6000.0
    peak = s.peak_bytes()
    assert 8000 <= peak["accel:0"] < 8100 and 12000 <= peak["accel:1"] < 12100 and peak["cpu:1"] >= 8000


def test_variables_stay_counted_between_runs():
    w = dfc.Variable(np.zeros(500, np.float32), name="w")

    def f(x):
        with dfc.device("accel:0"):
            w.assign_add(x)
            return w.read_value() * 1.0
    g = dfc.trace(f, dfc.TensorSpec([500], "float32"))
    s = dfc.Session(g, num_threads=0)
    s.call(np.ones(500, np.float32))
    out = s.call(np.ones(500, np.float32))
    assert float(out.sum()) == 1000.0
    assert s.memory_stats()["accel:0"]["in_use"] == 2000


def test_mixed_devices_match_one_device():
    def f(x, n):
        def body(i, s):
            with dfc.device("accel:0"):
                s = dfc.tanh(s * 1.5) + x
            return i + 1, s
        with dfc.device("cpu:2"):
            return dfc.reduce_sum(dfc.while_loop(lambda i, s: i < n, body, (0, x))[1] ** 2)
    g = dfc.trace(f, V1000, I64)
    x = np.linspace(-1, 1, 1000).astype(np.float32)
    one = dfc.Session(g, device_map={"accel:0": "cpu:0", "cpu:2": "cpu:0"}).call(x, np.int64(6))
    for mode in ("reference", "threads"):
        np.testing.assert_array_equal(dfc.Session(g, mode=mode).call(x, np.int64(6)), one)


@pytest.mark.host_devices("no device accounts bytes when a graph is mapped onto cpu devices")
def test_device_map_moves_a_saved_graph(tmp_path):
    g = dfc.trace(chain, V1000)
    dfc.save(g, str(tmp_path / "g.json"))
    h = dfc.load(str(tmp_path / "g.json"))
    assert {n.device for n in h.nodes.values()} >= {"accel:0"}
    s = dfc.Session(h, device_map={"accel:0": "cpu:3"})
    assert set(s.placement.values()) == {"cpu:3"}
    assert float(s.call(np.ones(1000, np.float32))) == 3000.0
    assert s.peak_bytes() == {}


@pytest.mark.host_devices("the greedy placer's choice among cpu devices (a faster default device rightly takes heavy ops)")
def test_greedy_placement_keeps_cheap_ops_with_their_inputs_and_spreads_heavy_work():
    def f(a, b):
        with dfc.device("cpu:1"):
            a2 = a @ a
        with dfc.device("cpu:2"):
            b2 = b @ b
        c1 = a2 @ a2            # unannotated heavy ops: each goes where its input already is
        c2 = b2 @ b2
        return dfc.reduce_sum(c1) + dfc.reduce_sum(c2)
    M = dfc.TensorSpec([64, 64], "float32")
    g = dfc.trace(f, M, M)
    where = dfc.Session(g).placement
    mm = sorted(n for n in g.nodes if n.startswith("matmul"))
    assert [where[n] for n in mm] == ["cpu:1", "cpu:2", "cpu:1", "cpu:2"]
    assert where["a"] == "cpu:1" and where["b"] == "cpu:2"


@pytest.mark.host_devices("the greedy placer's choice among cpu devices (a faster default device rightly takes heavy ops)")
def test_greedy_placement_spreads_independent_heavy_chains_over_the_devices_given():
    def f(a, b):
        x, y = a, b
        for _ in range(3):
            x, y = dfc.tanh(x @ x), dfc.tanh(y @ y)
        return dfc.reduce_sum(x) + dfc.reduce_sum(y)
    M = dfc.TensorSpec([64, 64], "float32")
    g = dfc.trace(f, M, M)
    s = dfc.Session(g, devices=["cpu:1"])
    mm = sorted((n for n in g.nodes if n.startswith("matmul")), key=lambda n: int(n.split("_")[-1]) if "_" in n else 0)
    chains = {s.placement[n] for n in mm[0::2]}, {s.placement[n] for n in mm[1::2]}
    assert chains == ({"cpu:0"}, {"cpu:1"})
    a = np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32) * 0.1
    np.testing.assert_array_equal(s.call(a, a * 2), dfc.Session(g).call(a, a * 2))


@pytest.mark.skipif(not gpu_available(), reason="needs cupy and a CUDA GPU")
def test_gpu_matches_cpu():     # pragma: no cover — there is no GPU on the test machine
    def f(x, n):
        with dfc.device("gpu:0"):
            return dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, dfc.tanh(s) + x), (0, x))[1]
    g = dfc.trace(f, V1000, I64)
    x = np.linspace(-1, 1, 1000).astype(np.float32)
    want = dfc.Session(g, device_map={"gpu:0": "cpu:0"}).call(x, np.int64(5))
    np.testing.assert_allclose(dfc.Session(g).call(x, np.int64(5)), want, rtol=1e-6)


def test_gpu_device_without_cupy_is_a_clear_error():
    if gpu_available():
        pytest.skip("a GPU is present")

    def f(x):
        with dfc.device("gpu:0"):
            return x + 1.0
    with pytest.raises(dfc.DfcError, match="gpu:0 does not exist.*cupy") as e:
        dfc.Session(dfc.trace(f, F32))
    assert e.value.node in ("add", "const")
