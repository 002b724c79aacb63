"""The one execution-path matrix: every way dfc can run a graph, checked against the reference interpreter.

A new execution path (a cluster, compiled loops, a GPU) joins by adding one entry to PATHS; every
control-flow, random-program, autograph-differential and gradient test then checks it.
"""
import os
import random
import zlib

import numpy as np
import pytest

import dfc
from dfc import nest
from dfc.ir.graph import Graph, Node

DEVICES = ("cpu:0", "cpu:1", "cpu:2")
# DFC_TEST_DEVICE=strict (the strict cupy double, dfc/runtime/strict.py) or gpu (needs cupy and a GPU): every
# Session places its programs on device 0 of that kind, and the random partition mixes it with the host.
TEST_DEVICE = os.environ.get("DFC_TEST_DEVICE", "cpu")
collect_ignore = []
if TEST_DEVICE != "cpu":
    from dfc.runtime import devices as _devices
    _devices.set_default_device(f"{TEST_DEVICE}:0")
    DEVICES = (f"{TEST_DEVICE}:0", f"{TEST_DEVICE}:1" if TEST_DEVICE == "strict" else "cpu:1", "cpu:0")
    # Not the cluster suites: their programs run on the cpu devices of Ray task processes, placed explicitly
    # (tests/clustertools.py), which the test device set here does not reach; under it they would only
    # rerun the same cpu programs at minutes of Ray start-up. (A device value crossing processes must
    # travel as host data: the strict double's events refuse pickling, as cupy's do.)
    collect_ignore.append("cluster")

if TEST_DEVICE == "gpu":
    # A real GPU's kernels round differently from numpy's (cuBLAS matmuls and cuSOLVER, reductions in
    # another order, CUDA's own exp/tanh/log, FMA contraction in fused elementwise kernels), so on one an
    # exact comparison of floats is made within the rounding of a few operations: relative to the larger
    # of the value and the array's largest magnitude, 1e-4 for float16/float32 and 1e-10 for float64.
    # Integers, bools, shapes and dtypes stay exact: a control-flow error still fails. (The strict
    # double computes with numpy, so under DFC_TEST_DEVICE=strict every comparison stays exact.)
    _exact = np.testing.assert_array_equal

    def _within_rounding(actual, desired, err_msg="", verbose=True, **kw):
        a, d = np.asarray(_host(actual)), np.asarray(_host(desired))
        if a.dtype.kind != "f" and d.dtype.kind != "f":
            return _exact(actual, desired, err_msg=err_msg, verbose=verbose, **kw)
        assert a.shape == d.shape or d.shape == () or a.shape == (), (err_msg, a.shape, d.shape)
        rtol = 1e-10 if np.float64 in (a.dtype, d.dtype) and np.float32 not in (a.dtype, d.dtype) else 1e-4
        finite = np.isfinite(d)
        scale = float(np.max(np.abs(d[finite]))) if finite.any() else 0.0
        np.testing.assert_allclose(a, d, rtol=rtol, atol=rtol * scale, equal_nan=True, err_msg=err_msg,
                                   verbose=verbose)

    np.testing.assert_array_equal = _within_rounding


# Under DFC_TEST_DEVICE a test marked `host_devices(reason)` runs with the default device left at cpu:0: its
# subject is a property of dfc's CPU devices themselves (numba-compiled loop frames, iterations overlapping
# on the CPU thread pool, the greedy placer's choice among cpu devices, the relative speed of two cpu
# partitions), which a GPU does not have by design. The reason is required and shows in the marker.
# Everything a user could place on a GPU (kernels, control flow, gradients, queues, memory limits, samples)
# runs on the test device; a failure there is a dfc bug to fix, not a test to mark.
def pytest_configure(config):
    config.addinivalue_line("markers", "host_devices(reason): the test's subject is specific to dfc's CPU "
                                       "devices; under DFC_TEST_DEVICE it keeps cpu:0 as the default device")


# Tests of XLA-compiled runs: XLA runs on the host CPU only and never touches dfc's devices, so under
# DFC_TEST_DEVICE (the strict double, a GPU) they would repeat the CPU run exactly; they run once.
SAME_ON_EVERY_TEST_DEVICE = pytest.mark.skipif(TEST_DEVICE != "cpu", reason="XLA runs on the host CPU whatever "
                                               "the test device: the CPU run of the suite covers it")


@pytest.fixture(autouse=True)
def _host_devices_marker(request):
    mark = request.node.get_closest_marker("host_devices")
    if mark is None:
        yield
        return
    if not (mark.args or mark.kwargs.get("reason")):
        raise pytest.UsageError(f"{request.node.nodeid}: host_devices needs a reason")
    if TEST_DEVICE == "cpu":
        yield
        return
    _devices.set_default_device("cpu:0")
    try:
        yield
    finally:
        _devices.set_default_device(f"{TEST_DEVICE}:0")


def _host(v):
    """A Variable's value as a numpy array (on a strict or gpu test device it lives in device memory)."""
    return v.get() if hasattr(v, "get") and not isinstance(v, np.ndarray) else v


def placed_randomly(graph, seed):
    """A copy of graph with every node on a random one of DEVICES (partitioned with Send/Recv when run)."""
    rng = random.Random(seed)
    g = Graph(graph.signature.get("name"))
    for n in graph.nodes.values():
        d = rng.choice(DEVICES)
        if TEST_DEVICE != "cpu" and n.op in _devices.HOST_ONLY_OPS:
            d = "cpu:0"
        g.add_node(Node(n.name, n.op, list(n.inputs), dict(n.attrs), d, n.loc))
    g.signature = graph.signature
    return g


def _placed(graph):
    s = dfc.Session(placed_randomly(graph, zlib.crc32(" ".join(graph.nodes).encode())), mode="threads")
    for part in s.partitions().values():
        part.verify()                   # partitioning keeps every per-device graph well formed
    return s


# numba compiles a loop frame in ~0.3-2 s of CPU: each test process compiles new frames for at most this
# many seconds (frames in the disk cache, ~/.cache/dfc or $DFC_CACHE_DIR, load without counting; past the
# budget the "compiled" path runs them fused), so the suite stays within minutes on 2 cores and runs more
# of its loops compiled each time the cache has grown.
os.environ.setdefault("DFC_COMPILE_BUDGET", "60")
# Sessions that do not choose compile_loops run fused here, not "auto" (the library's default, which starts
# child processes compiling in the background: tests/runtime/test_compiled_background.py tests it), so the
# suite's CPU use does not depend on which loops happen to run long; the "compiled" path below compiles.
os.environ.setdefault("DFC_COMPILE_LOOPS", "0")

# name -> graph -> Session. The first is the definition; all others must agree with it exactly.
PATHS = {
    "reference interpreter": lambda g: dfc.Session(g, mode="reference"),
    "executor pi=1 inline": lambda g: dfc.Session(g, mode="threads", parallel_iterations=1, fuse_loops=False,
                                                  num_threads=0),
    "executor pi=32 pool": lambda g: dfc.Session(g, mode="threads", parallel_iterations=32, fuse_loops=False),
    "executor fused": lambda g: dfc.Session(g, mode="threads", parallel_iterations=32, fuse_loops=True),
    # fused frames as numba machine code (dfc/runtime/compiled/); num_threads=0: no frame left unfused to
    # overlap its iterations, so every fusable frame is compiled (within DFC_COMPILE_BUDGET, set below)
    "compiled": lambda g: dfc.Session(g, mode="threads", fuse_loops=True, compile_loops=True, num_threads=0),
    "random 3-device partition": _placed,
}
# DFC_TEST_CLUSTER=1: every graph also runs with its nodes placed at random over three processes of a local
# Ray cluster (tests/clustertools.py; slow: seconds of Ray start-up, ~0.1 s a call). Without it, the cluster
# suites (tests/cluster/) run the core programs that way. Variables placed on a task live in that task's
# process, so this path's Variable states are not compared with the chief's container.
ELSEWHERE = set()
if os.environ.get("DFC_TEST_CLUSTER") == "1":
    def _on_cluster(graph):
        from tests.clustertools import cluster, placed_on_tasks
        return dfc.Session(placed_on_tasks(graph, zlib.crc32(" ".join(graph.nodes).encode())), cluster=cluster())
    PATHS["3-task cluster"] = _on_cluster
    ELSEWHERE.add("3-task cluster")


def run_all_modes(graph, *args, **kwargs):
    """Run graph on every execution path; all must agree exactly with the reference interpreter, in their
    results and in the Variables they leave behind (each path starts from the same state)."""
    store = dfc.containers.get()
    before = store.snapshot()
    results, states = [], []
    for make in PATHS.values():
        store.restore(before)
        results.append(make(graph).call(*args, **kwargs))
        states.append(store.snapshot())
    first = nest.flatten(results[0])
    for where, r, state in zip(list(PATHS)[1:], results[1:], states[1:]):
        got = nest.flatten(r)
        assert len(got) == len(first), where
        for a, b in zip(first, got):
            if a is None or b is None:
                assert a is None and b is None, (where, a, b)
                continue
            assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, a.shape, b.dtype, b.shape)
            np.testing.assert_array_equal(a, b, err_msg=where)
        if where in ELSEWHERE:
            continue
        assert state.keys() == states[0].keys(), where
        for name, value in state.items():
            np.testing.assert_array_equal(_host(states[0][name]), _host(value), err_msg=f"variable {name}, {where}")
    return results[0]


@pytest.fixture
def all_modes():
    return run_all_modes
