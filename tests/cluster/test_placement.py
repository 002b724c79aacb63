"""Placement's cost model knows that crossing tasks (processes, machines) costs much more than crossing
devices of one process (no Ray needed: placement runs in the chief)."""
import numpy as np

import dfc
from dfc.runtime.devices import DeviceSet
from dfc.runtime.partition import place

M = dfc.TensorSpec([64, 64], "float32")


def two_matmuls(a, b):
    return dfc.matmul(a, a), dfc.matmul(b, b)


def test_independent_work_spreads_over_devices_of_one_process():
    g = dfc.trace(two_matmuls, M, M)
    where = place(g, DeviceSet(), extra_devices=("cpu:1",))
    mm = sorted(n for n in g.nodes if g.nodes[n].op == "MatMul")
    assert {where[n] for n in mm} == {"cpu:0", "cpu:1"}


def test_small_work_does_not_cross_to_another_task():
    g = dfc.trace(two_matmuls, M, M)
    where = place(g, DeviceSet(), extra_devices=("worker:0/cpu:0",))
    assert all(where[n] == "cpu:0" for n in g.nodes if g.nodes[n].op == "MatMul")


def test_large_work_is_worth_another_task():
    big = dfc.TensorSpec([512, 512], "float32")
    g = dfc.trace(two_matmuls, big, big)
    where = place(g, DeviceSet(), extra_devices=("worker:0/cpu:0",))
    assert {where[n] for n in g.nodes if g.nodes[n].op == "MatMul"} == {"cpu:0", "worker:0/cpu:0"}
    # and it computes the same on a copy mapped back to one process
    s = dfc.Session(g, device_map={"worker:0/cpu:0": "cpu:1"})
    a = np.eye(512, dtype=np.float32)
    np.testing.assert_array_equal(s.call(a, 2 * a)[1], 4 * a)
