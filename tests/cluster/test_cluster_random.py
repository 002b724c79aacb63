"""The control-flow, state and gradient programs of the core suites, and random programs, with their nodes
placed at random over devices of three processes (the chief, worker:0 with two devices, ps:0) give exactly
the results of the reference interpreter. (With DFC_TEST_CLUSTER=1 the conftest matrix also runs every
run_all_modes test on the cluster.)"""
import pathlib
import sys
import zlib
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import dfc
from dfc import nest
from tests.clustertools import cluster, placed_on_tasks
from tests.runtime import test_random_programs as trp
from tests.runtime.test_partition_random import PROGRAMS, _expand     # the same programs and argument sets

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "compiler"))
import _gradcheck  # noqa: E402
from tests.compiler import test_grad_control_flow as grad_programs  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")


def on_cluster(graph, *args, seed=None, **kwargs):
    """Reference result; the same graph placed over the cluster's tasks must equal it exactly."""
    want = dfc.Session(graph, mode="reference").call(*args, **kwargs)
    seed = zlib.crc32(" ".join(graph.nodes).encode()) if seed is None else seed
    got = dfc.Session(placed_on_tasks(graph, seed), cluster=cluster()).call(*args, **kwargs)
    for a, b in zip(nest.flatten(want), nest.flatten(got)):
        np.testing.assert_array_equal(a, b, err_msg=f"seed={seed}")
    return want


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_on_three_tasks(name):
    mod, fn = PROGRAMS[name]
    with mock.patch.object(mod, "run_all_modes", on_cluster):
        fn()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=trp.stmts(3), init=st.tuples(*[st.integers(-20, 20)] * 3), seed=st.integers(0, 2 ** 31))
def test_random_program_on_three_tasks(prog, init, seed):
    want = trp.run_py(prog, dict(zip(trp.VARS, init)))

    def f(a, b, c):
        return trp.run_dfc(prog, {"a": a, "b": b, "c": c})

    spec = dfc.TensorSpec([], "int64")
    g = dfc.trace(f, spec, spec, spec)
    got = on_cluster(g, *[np.int64(v) for v in init], seed=seed)
    assert {k: int(v) for k, v in got.items()} == want


class ClusterSession(dfc.Session):
    """A stand-in for Session in the gradient tests: its first call also runs on the cluster."""

    def __init__(self, graph, **kw):
        super().__init__(graph, **kw)
        self.placed = dfc.Session(placed_on_tasks(graph, zlib.crc32(" ".join(graph.nodes).encode())),
                                  cluster=cluster())

    def call(self, *args):
        want = super().call(*args)
        if self.placed is not None:
            got, self.placed = self.placed.call(*args), None
            for a, b in zip(nest.flatten(want), nest.flatten(got)):
                np.testing.assert_array_equal(a, b)
        return want




@pytest.mark.parametrize("name", sorted(n for n in vars(grad_programs) if n.startswith("test_"))[:6])
def test_gradient_program_on_three_tasks(name):
    fn = getattr(grad_programs, name)
    with mock.patch.object(_gradcheck, "Session", ClusterSession):
        for args in _expand(fn):
            fn(*args)
