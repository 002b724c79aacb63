"""Model parallelism across processes: the stacked-LSTM sample with layer k on Ray task worker:k, its
training step (forward and gradient loops pipelined by parallel iterations) and inference bit-identical to
one process; every gradient op of a layer runs on that layer's task."""
import numpy as np
import pytest

import dfc
from dfc.runtime.partition import place
from dfc.runtime.devices import DeviceSet
from tests.clustertools import cluster
from tests.samples.test_sample_programs import load

pytestmark = pytest.mark.xdist_group("ray")


def test_layers_on_tasks_are_bit_identical_to_one_process():
    c = cluster()
    m = load("model_parallel_lstm")
    train, predict = m.build(2, H=64, B=16)
    args = m.inputs(2, H=64, B=16, T=5)
    for g in (train, predict):
        got = dfc.Session(g, cluster=c).call(*args)
        want = dfc.Session(g, device_map=m.one_process(2)).call(*args)
        for a, b in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
            np.testing.assert_array_equal(a, b)
    where = place(train, DeviceSet(), extra_devices=("worker:0/cpu:0", "worker:1/cpu:0"))
    matmuls = sorted(where[n] for n in train.nodes if train.nodes[n].op == "MatMul")
    # each layer's forward matmul and its gradient's matmuls (inside and after the gradient loop) on its task
    assert set(matmuls) == {"worker:0/cpu:0", "worker:1/cpu:0"}
    assert matmuls.count("worker:0/cpu:0") == matmuls.count("worker:1/cpu:0") >= 3
