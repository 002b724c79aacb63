"""A memory limit holds for graphs of constants: constant folding never builds a large value (it used to run
Fill, Pad, Range, OneHot, ... before the limit was checked, then drop the result), and every op whose output
can outgrow its inputs (Einsum, Pad, index arrays, MatMul, Concat, ...) is checked against the limit before
it allocates. Each graph below would allocate hundreds of MB (or, for the last ones, more memory than exists);
under a 64 MB limit every path raises DfcOutOfMemory naming the node while numpy's allocations (traced by
tracemalloc, which numpy reports its arrays to) stay far below the size asked for."""
import tracemalloc

import numpy as np
import pytest

import dfc

LIMIT = 64 * 10 ** 6
PATHS = {"default (folded, fused)": {}, "unfused": {"fuse_loops": False}, "reference": {"mode": "reference"}}


def _outer(n):
    a = dfc.constant(np.arange(n, dtype=np.float64))
    return a, dfc.constant(np.ones(n))


def _concat():
    c = dfc.constant(np.ones(1 << 16))      # 512 KB, folded or not; 1 000 of it is 524 MB
    return dfc.concat([c] * 1000, 0)


GRAPHS = {   # name -> (function building the constant graph, the op that must be refused)
    "fill": (lambda: dfc.fill([30000, 1000], np.float64(1.0)), "Fill"),
    "pad": (lambda: dfc.pad(dfc.constant(np.ones((3, 3))), [[10000, 10000], [2000, 2000]]), "Pad"),
    "range": (lambda: dfc.range(0, 40_000_000, dtype="int64"), "Range"),
    "one_hot": (lambda: dfc.one_hot(dfc.constant(np.arange(1 << 16) % 7), 700, dtype="float64"), "OneHot"),
    "einsum": (lambda: dfc.einsum("i,j->ij", *_outer(8000)), "Einsum"),
    "einsum of 10**12 elements": (lambda: dfc.einsum("i,j->ij", *_outer(10 ** 6)), "Einsum"),
    "matmul": (lambda: dfc.matmul(dfc.reshape(_outer(8000)[0], [8000, 1]),
                                  dfc.reshape(_outer(8000)[1], [1, 8000])), "MatMul"),
    "index arrays": (lambda: dfc.take_along_axis(dfc.constant(np.ones((1, 8000))),
                                                  dfc.constant(np.zeros((8000, 1), np.int64)), 0), "TakeAlongAxis"),
    "getitem": (lambda: dfc.constant(np.ones((100, 100)))[dfc.constant(np.arange(8000).reshape(8000, 1) % 100),
                                                          dfc.constant(np.arange(8000).reshape(1, 8000) % 100)],
                "GetItem"),
    "concat": (_concat, "Concat"),
    "fill of 10**12 elements": (lambda: dfc.fill([10 ** 6, 10 ** 6], np.float64(1.0)), "Fill"),
}


def _graph(build):
    return dfc.trace(lambda x: dfc.reduce_sum(build()) + x, dfc.TensorSpec([], "float64"))


@pytest.mark.parametrize("kw", list(PATHS.values()), ids=list(PATHS))
@pytest.mark.parametrize("name", list(GRAPHS))
def test_a_graph_of_constants_is_refused_before_it_allocates(name, kw):
    build, op = GRAPHS[name]
    g = _graph(build)
    refused = [n.name for n in g.nodes.values() if n.op == op]
    assert len(refused) == 1
    tracemalloc.start()
    try:
        with pytest.raises(dfc.DfcOutOfMemory) as info:
            dfc.Session(g, memory_limit=LIMIT, **kw).call(np.float64(0.0))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = info.value
    assert err.node == refused[0], str(err)
    assert f"{op} needs" in str(err) and f"past the memory limit of {LIMIT} bytes" in str(err), str(err)
    assert peak < LIMIT, f"{peak} bytes allocated before the refusal"


def test_folding_still_folds_small_constants_under_a_limit():
    from dfc.runtime import folding
    g = _graph(lambda: dfc.fill([100, 10], np.float64(2.0)) * dfc.constant(np.float64(3.0)))
    s = dfc.Session(g, memory_limit=LIMIT)
    assert float(s.call(np.float64(1.0))) == 6001.0
    out, n = folding.fold(g, keep={"x"}, memory_limit=s.memory_limit)
    assert n >= 2 and "Fill" not in {m.op for m in out.nodes.values()}


def test_folding_leaves_a_large_value_to_the_run_without_allocating_it():
    from dfc.runtime import folding
    g = _graph(lambda: dfc.pad(dfc.constant(np.ones((3, 3))), [[10000, 10000], [2000, 2000]]))
    tracemalloc.start()
    try:
        out, n = folding.fold(g)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "Pad" in {m.op for m in out.nodes.values()}
    assert peak < folding.MAX_BYTES * 4, peak


def test_folding_runs_its_kernels_under_the_sessions_limit():
    """A value folding may keep (80 KB) but the limit (50 KB) cannot hold is refused before folding allocates
    it (the run then refuses it too): the limit never counted an array."""
    from dfc.runtime import folding
    from dfc.runtime.limits import MemoryLimit
    g = _graph(lambda: dfc.fill([100, 100], np.float64(1.0)))
    out, _ = folding.fold(g, keep={"x"}, memory_limit=MemoryLimit("50KB"))
    assert "Fill" in {m.op for m in out.nodes.values()}
    s = dfc.Session(g, memory_limit="50KB")
    with pytest.raises(dfc.DfcOutOfMemory) as info:
        s.call(np.float64(0.0))
    assert "Fill needs 80000 bytes" in str(info.value)
    assert s.memory_limit.peak == 0
