"""Placement from measured costs (whitepaper §3.2.1): a trace of an earlier run tells the placer what each
node cost, where the fixed cost model guesses. Indexing counts as cheap in the model (it follows its input),
so a chain of column gathers beside a matmul lands on the matmul's device and waits for it; measured, the
gathers are real work and the placer runs them on the idle device. Results stay the same; the time saved
is in benchmarks/placement_costs.py."""
import numpy as np
import pytest

import dfc
from dfc.runtime.trace import node_costs

N = 384
# the placer's choice between two CPU devices of one process is the subject (the strict double's default
# device would take every node)
pytestmark = pytest.mark.host_devices("placement among cpu:0 and cpu:1 is the subject")


def work(a, perm):
    m = dfc.matmul(a, a)                       # heavy in the cost model
    e = a
    for _ in range(8):                          # cheap in the model (indexing), a full copy in fact
        e = e[:, perm]
    return dfc.reduce_sum(m), dfc.reduce_sum(e * a)


def graph():
    return dfc.trace(work, dfc.TensorSpec([N, N], "float64"), dfc.TensorSpec([N], "int64"))


def inputs():
    rng = np.random.default_rng(0)
    return rng.normal(size=(N, N)), rng.permutation(N)


def gather_devices(session, g):
    return {session.placement[n] for n in g.nodes if g.nodes[n].op == "GetItem"}


def test_measured_costs_move_work_the_model_thinks_cheap(tmp_path):
    g, args = graph(), inputs()
    static = dfc.Session(g, devices=("cpu:1",))
    matmul = [n for n in g.nodes if g.nodes[n].op == "MatMul"][0]
    assert gather_devices(static, g) == {static.placement[matmul]}     # the model: gathers wait for the matmul
    trace = str(tmp_path / "run.json")
    dfc.Session(g, trace=trace).call(*args)
    costs = node_costs(trace)
    assert "GetItem" in {g.nodes[n].op for n in costs}
    measured = dfc.Session(g, devices=("cpu:1",), placement_costs=trace)
    assert len(gather_devices(measured, g)) == 1 and \
        gather_devices(measured, g) != {measured.placement[matmul]}   # measured: they run beside it
    got, want = measured.call(*args), static.call(*args)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_costs_may_be_given_as_a_dict_and_a_bad_trace_is_a_clear_error(tmp_path):
    g = graph()
    heavy = {n: 1.0 for n in g.nodes if g.nodes[n].op == "GetItem"}
    s = dfc.Session(g, devices=("cpu:1",), placement_costs=heavy)
    assert "cpu:1" in gather_devices(s, g) | {s.placement[n] for n in g.nodes if g.nodes[n].op == "MatMul"}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    try:
        dfc.Session(g, devices=("cpu:1",), placement_costs=str(bad))
    except dfc.DfcError as e:
        assert "placement_costs" in str(e) and "bad.json" in str(e)
    else:
        raise AssertionError("a malformed trace was accepted")
