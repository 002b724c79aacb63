"""Memory swapping of gradient stacks (§5.3) on the memory-capped accelerator."""
import os

import numpy as np
import pytest

import dfc
from dfc.runtime.devices import AccelDevice
from dfc.runtime.kernels.state_kernels import Stack
from dfc.runtime.memory import Swapper, Swapped

B, H, T = 8, 32, 48


def lstm_graph(swap, device="accel:0"):
    """A one-layer LSTM's loss over xs and its gradients with respect to W, U and b (the swapping benchmark's
    graph, benchmarks/swapping.py), built, as that benchmark builds it, with the weights' gradients summed per
    iteration (DFC_BATCH_LOOP_GRADS=0): a swapping loop always is (dfc/compiler/autodiff/loop_matmul.py keeps
    all iterations' factors for one GEMM after the loop, which is what swapping avoids), so graphs with and
    without swap do the same arithmetic, and the runtime swap option has every saved value on stacks."""
    from benchmarks.swapping import lstm_graph as graph
    before = os.environ.get("DFC_BATCH_LOOP_GRADS")
    os.environ["DFC_BATCH_LOOP_GRADS"] = "0"
    try:
        return graph(B, H, swap, device)
    finally:
        if before is None:
            del os.environ["DFC_BATCH_LOOP_GRADS"]
        else:
            os.environ["DFC_BATCH_LOOP_GRADS"] = before


def lstm_inputs(steps):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(steps, B, H)).astype(np.float32),
            (rng.normal(size=(H, 4 * H)) * 0.2).astype(np.float32),
            (rng.normal(size=(H, 4 * H)) * 0.2).astype(np.float32), np.zeros(4 * H, np.float32))


@pytest.fixture(scope="module")
def lstm():
    args = lstm_inputs(T)
    want = dfc.Session(lstm_graph(False, "cpu:0")).call(*args)
    s = dfc.Session(lstm_graph(False), num_threads=0, parallel_iterations=4)
    np.testing.assert_array_equal(s.call(*args)[0], want[0])
    return args, want, s.peak_bytes()["accel:0"]


@pytest.mark.parametrize("threads", [0, 4])
def test_lstm_step_that_overflows_the_accelerator_completes_with_swapping(lstm, threads):
    args, want, peak = lstm
    cap = int(peak * 0.6)
    kw = dict(num_threads=threads, parallel_iterations=4, memory_caps={"accel:0": cap}, swap_threshold=0.3,
              swap_min_bytes=B * H * 4)
    with pytest.raises(dfc.DfcOutOfMemory, match="accel:0 out of memory"):
        dfc.Session(lstm_graph(False), **kw).call(*args)
    s = dfc.Session(lstm_graph(True), **kw)
    for _ in range(2):
        got = s.call(*args)
        for a, w in zip(got, want):
            np.testing.assert_array_equal(a, w)
    st = s.memory_stats()["accel:0"]
    assert st["peak"] <= cap and st["in_use"] == 0
    sw = st["swap"]
    assert sw["swapped_out"] > 0 and sw["prefetched"] + sw["swapped_in"] + sw["cancelled"] > 0


def test_runtime_option_swaps_every_stack_and_min_size_keeps_small_tensors(lstm):
    args, want, peak = lstm
    cap = int(peak * 0.6)
    kw = dict(num_threads=0, parallel_iterations=4, memory_caps={"accel:0": cap}, swap_threshold=0.3)
    s = dfc.Session(lstm_graph(False), swap_memory=True, swap_min_bytes=B * H * 4, **kw)   # loop without swap
    np.testing.assert_array_equal(s.call(*args)[1], want[1])
    with pytest.raises(dfc.DfcOutOfMemory):         # B x H tensors are "small": only B x 4H ones may go
        dfc.Session(lstm_graph(True), swap_min_bytes=B * H * 4 + 1, **kw).call(*args)


def test_a_value_is_copied_to_host_once_and_prefetched_back_in_order():
    dev = AccelDevice("accel:0", capacity=1 << 20)
    sw = Swapper(dev, threshold=0.0, min_bytes=16, prefetch=2)
    stack = Stack()
    stack.swap = True
    a, b = np.arange(100, dtype=np.float32), np.ones(100, np.float32)
    for v in (a, b, a, np.float32(7)):
        sw.push(stack, v)
    sw.wait_for_copies()
    assert sw.stats["swapped_out"] == 2 and sw.stats["reused"] == 1
    assert isinstance(stack[0], Swapped) and not isinstance(stack[3], Swapped)
    assert dev.memory.in_use == 0          # the stack's holds were dropped once the copies were made
    got = [sw.pop(stack) for _ in range(4)]
    assert float(got[0]) == 7.0 and [list(g) for g in got[1:]] == [list(a), list(b), list(a)]
    assert sw.stats["prefetched"] >= 1
    sw.end_run()
    sw.close()
