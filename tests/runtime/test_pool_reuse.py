"""cupy's memory pool gives a freed block to the next allocation on the stream that allocated it, whatever
other streams still have queued: the strict double refuses the orders that race on a real GPU, and the
GPU device's copies onto the device (inputs, Recvs, swap-ins) take their blocks so that none does."""
import gc

import numpy as np
import pytest

import dfc
from dfc.runtime import devices, strict

xp = strict.xp


def _streams():
    with xp.cuda.Device(0):
        return xp.cuda.Stream(non_blocking=True), xp.cuda.Stream(non_blocking=True)


def _freed_while_compute_reads():
    """(copy, compute, b): an array made on the copy stream, read by a kernel queued on compute (b), then
    freed, so its block is back in the copy stream's pool while that kernel may not have run."""
    copy, compute = _streams()
    with xp.cuda.Device(0):
        with copy:
            a = xp.asarray(np.arange(4.0))
        compute.wait_event(copy.record())
        with compute:
            b = a * 2.0               # queued on compute: reads a's block
    del a
    gc.collect()
    return copy, compute, b


def test_a_block_freed_while_another_stream_may_read_it_is_not_reused_silently():
    copy, compute, b = _freed_while_compute_reads()
    with xp.cuda.Device(0), copy, pytest.raises(strict.StreamOrderError, match="freed while another stream"):
        xp.asarray(np.zeros(4))       # the next copy may get that block before compute read it


def test_the_same_order_is_safe_once_the_allocating_stream_waits_for_the_reader():
    copy, compute, b = _freed_while_compute_reads()
    with xp.cuda.Device(0):
        copy.wait_event(compute.record())
        with copy:
            xp.asarray(np.zeros(4))
    assert b.get(stream=compute).tolist() == [0.0, 2.0, 4.0, 6.0]


def test_a_copy_into_a_block_another_stream_allocated_waits_for_that_streams_work():
    copy, compute = _streams()
    with xp.cuda.Device(0):
        with compute:
            busy = xp.ones(4) * 2.0     # work queued on compute before the allocation (its block's earlier users)
            out = xp.empty(4)
        with pytest.raises(strict.StreamOrderError, match="without waiting"):
            out.set(np.ones(4), stream=copy)
        copy.wait_event(compute.record())
        out.set(np.ones(4), stream=copy)          # ordered after that work: fine
    del busy


def test_inputs_received_values_and_swap_ins_reach_the_gpu_without_a_reuse_race():
    dev = devices.StrictDevice("strict:0")
    with dev.run_context():
        outs = []
        for i in range(20):          # each copy's block is freed once its reader is queued, as in a loop
            v = dev.to_device(np.full(8, float(i)))
            w = dev.copy_from_host(np.full(8, float(i)))
            outs.append((v + w).sum())
            del v, w
            gc.collect()
    assert [float(o.get(stream=dev.compute_stream)) for o in outs] == [16.0 * i for i in range(20)]


def test_a_loop_fed_from_the_host_every_iteration_gives_the_cpu_result():
    def f(x, n):
        def body(i, acc):
            with dfc.device("cpu:0"):
                step = dfc.cast(i, "float32") * 0.5
            with dfc.device("strict:0"):
                return i + 1, acc * 0.5 + step + x
        return dfc.while_loop(lambda i, acc: i < n, body, (0, dfc.zeros([3])))[1]
    g = dfc.trace(f, dfc.TensorSpec([3], "float32"), dfc.TensorSpec([], "int64"))
    x = np.array([1.0, 2.0, 3.0], np.float32)
    got = dfc.Session(g, default_device="strict:0").call(x, np.int64(50))
    acc = np.zeros(3, np.float32)
    for i in range(50):
        acc = acc * np.float32(0.5) + np.float32(i * 0.5) + x
    np.testing.assert_allclose(got, acc, rtol=1e-6)
