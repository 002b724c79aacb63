"""Stream ordering of GPU transfers (§5.3), checked by the strict double's streams and events."""
import threading

import numpy as np
import pytest

import dfc
from dfc.runtime import strict
from dfc.runtime.devices import DeviceSet, Sent
from dfc.runtime.strict import StreamOrderError, xp


def in_thread(fn):
    """fn() on another thread (whose current stream is the null stream, as in cupy); its result or error."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:   # noqa: BLE001
            out["error"] = e
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_copy_on_another_stream_needs_an_event_wait():
    a_stream, b_stream = xp.cuda.Stream(non_blocking=True), xp.cuda.Stream(non_blocking=True)
    with a_stream:
        v = xp.asarray(np.arange(4.0)) * 2.0
    with pytest.raises(StreamOrderError):
        v.get(stream=b_stream)
    with pytest.raises(StreamOrderError):
        with b_stream:
            v + 1.0                          # a kernel on b reading a's result
    b_stream.wait_event(a_stream.record())
    assert v.get(stream=b_stream).tolist() == [0.0, 2.0, 4.0, 6.0]
    with a_stream:
        w = v + 1.0
    with pytest.raises(StreamOrderError):    # the event was recorded before w was produced
        w.get(stream=b_stream)
    a_stream.synchronize()
    assert w.get(stream=b_stream).tolist() == [1.0, 3.0, 5.0, 7.0]


def test_events_carry_what_their_stream_waited_for():
    s1, s2, s3 = (xp.cuda.Stream(non_blocking=True) for _ in range(3))
    with s1:
        v = xp.ones(3)
    s2.wait_event(s1.record())
    with s2:
        w = v * 2
    s3.wait_event(s2.record())          # s3 is ordered after s2, and so after s1
    assert v.get(stream=s3).tolist() == [1.0] * 3 and w.get(stream=s3).tolist() == [2.0] * 3


def strict0():
    return DeviceSet().get("strict:0")


def test_final_fetch_and_swap_copy_wait_for_the_producer():
    dev = strict0()
    with dev.run_context():
        v = xp.asarray(np.arange(3.0)) + 1.0         # queued on the compute stream
    with pytest.raises(StreamOrderError):
        in_thread(lambda: v.get())                   # a plain copy from the caller's thread races
    assert in_thread(lambda: dev.fetch([v]))[0].tolist() == [1.0, 2.0, 3.0]
    with dev.run_context():
        w = v * 2.0
    with pytest.raises(StreamOrderError):
        in_thread(lambda: dev.copy_to_host(w))       # the swap-out stream must wait for the producer
    with dev.run_context():
        ev = dev.record_event()
    assert in_thread(lambda: dev.copy_to_host(w, ev)).tolist() == [2.0, 4.0, 6.0]
    back = in_thread(lambda: dev.copy_from_host(np.ones(3)))    # prefetch: the compute stream waits for it
    with dev.run_context():
        assert (back + w).get().tolist() == [3.0, 5.0, 7.0]
    assert dev.swap_out_stream is not dev.d2h_stream and dev.swap_in_stream is not dev.h2d_stream


def test_sends_carry_an_event_and_receivers_wait_on_it():
    ds = DeviceSet()
    src, peer, cpu = ds.get("strict:0"), ds.get("strict:1"), ds.get("cpu:0")
    with src.run_context():
        v = xp.asarray(np.arange(4.0)) * 3.0
        sent = src.outgoing(v)
    assert isinstance(sent, Sent) and sent.value is v
    strict.reset_stats()
    got = in_thread(lambda: cpu.to_device(sent))             # GPU -> CPU Recv
    assert isinstance(got, np.ndarray) and got.tolist() == [0.0, 3.0, 6.0, 9.0]
    with peer.run_context():
        on_peer = in_thread(lambda: peer.to_device(sent))    # GPU -> GPU: a peer copy
    assert on_peer.device.id == 1 and strict.stats[1]["peer"] == 1
    with peer.run_context():
        assert (on_peer + 1.0).get().tolist() == [1.0, 4.0, 7.0, 10.0]
    with src.run_context():
        w = v[::2] * 1.0                                     # a fresh value nobody waited for
    with pytest.raises(StreamOrderError):
        in_thread(lambda: peer.to_device(w))                 # a Send without its event: the copy races


def partitioned_graph():
    def f(x, n):
        with dfc.device("strict:0"):
            y = x * 2.0

        def body(i, s):
            with dfc.device("strict:1"):
                t = s + y[::2]
            with dfc.device("cpu:0"):
                u = t * 0.5
            return i + 1, u
        with dfc.device("cpu:0"):
            out = dfc.while_loop(lambda i, s: i < n, body, (0, dfc.zeros([2], "float32")))[1]
        return out, y
    return dfc.trace(f, dfc.TensorSpec([4], "float32"), dfc.TensorSpec([], "int32"))


def test_partitions_on_two_gpus_and_the_host_agree_with_numpy():
    g = partitioned_graph()
    x = np.arange(4, dtype=np.float32)
    want = dfc.Session(g, mode="reference").call(x, np.int32(6))
    strict.reset_stats()
    got = dfc.Session(g).call(x, np.int32(6))
    for a, w in zip(got, want):
        np.testing.assert_array_equal(a, w)
    assert strict.stats[1]["peer"] >= 1 and strict.stats[1]["d2h"] >= 6


def test_without_events_a_partitioned_run_fails_in_the_double(monkeypatch):
    """The double really catches a missing event: Sends that carry bare device values make the receiving
    devices' copies race with the producer."""
    from dfc.runtime.devices import GPUDevice

    def f(x):
        with dfc.device("strict:0"):
            y = x * 2.0
        with dfc.device("cpu:0"):
            z = y + 1.0
        with dfc.device("strict:0"):        # strict:0 waits for z: its stream is not synchronized before
            return z * 3.0                  # cpu:0 copies y
    g = dfc.trace(f, dfc.TensorSpec([4], "float32"))
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(dfc.Session(g).call(x), (x * 2 + 1) * 3)
    monkeypatch.setattr(GPUDevice, "outgoing", lambda self, v: v)
    with pytest.raises((StreamOrderError, dfc.DfcError), match="produced on another stream"):
        dfc.Session(g).call(x)


def test_swapping_on_a_strict_device_copies_out_and_prefetches_in_order():
    """Gradient stacks swapped to host on the swap-out stream and prefetched on the swap-in stream: every
    copy is ordered after its producer (the double raises otherwise) and the gradients are numpy's."""
    def f(x, w):
        def body(i, h):
            return i + 1, dfc.tanh(h @ w + x)
        h = dfc.while_loop(lambda i, h: i < 12, body, (0, x), swap_memory=True)[1]
        return dfc.gradients(dfc.reduce_sum(h * h), [w])[0]
    g = dfc.trace(f, dfc.TensorSpec([16, 64], "float32"), dfc.TensorSpec([64, 64], "float32"))
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(16, 64)).astype(np.float32), (rng.normal(size=(64, 64)) * 0.1).astype(np.float32)
    want = dfc.Session(g, default_device="cpu:0").call(x, w)
    for fuse in (False, True):
        s = dfc.Session(g, default_device="strict:0", swap_threshold=0.0, swap_min_bytes=1024, fuse_loops=fuse)
        np.testing.assert_array_equal(s.call(x, w), want)
        sw = s.memory_stats()["strict:0"]["swap"]
        # entries were queued for copy-out; one popped before its copy started is cancelled, not copied
        assert sw["swapped_out"] + sw["cancelled"] > 0, (fuse, sw)
        assert sw["prefetched"] + sw["swapped_in"] + sw["cancelled"] > 0, (fuse, sw)
