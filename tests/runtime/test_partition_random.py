"""Every control-flow program of the core suites, with its nodes placed at random over three devices
(several placements per program, beyond the one of the conftest matrix), gives exactly the results of
the reference interpreter (inline and pooled executors)."""
import inspect
import pathlib
import sys
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

import dfc
from dfc import nest
from tests.conftest import placed_randomly
from tests.runtime import test_control_flow, test_state, test_random_programs as trp

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "compiler"))
import _gradcheck
from tests.compiler import test_grad_control_flow as grad_programs

def runner(seed):
    """A stand-in for run_all_modes: one device is the definition, random placements must agree."""
    def run(graph, *args, **kwargs):
        want = dfc.Session(graph, mode="reference").call(*args, **kwargs)
        for k, (threads, pi) in enumerate([(0, 32), (4, 4)]):
            g = placed_randomly(graph, seed * 7 + k)
            s = dfc.Session(g, mode="threads", num_threads=threads, parallel_iterations=pi)
            got = s.call(*args, **kwargs)
            for a, b in zip(nest.flatten(want), nest.flatten(got)):
                np.testing.assert_array_equal(a, b, err_msg=f"threads={threads} seed={seed}")
        return want
    return run


PROGRAMS = {f"{mod.__name__.rsplit('.', 1)[1]}.{name}": (mod, fn)
            for mod in (test_control_flow, test_state) for name, fn in sorted(vars(mod).items())
            if name.startswith("test_") and callable(fn) and "run_all_modes(" in inspect.getsource(fn)}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 31))
def test_program_on_three_devices(name, seed):
    mod, fn = PROGRAMS[name]
    with mock.patch.object(mod, "run_all_modes", runner(seed)):
        fn()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=trp.stmts(3), init=st.tuples(*[st.integers(-20, 20)] * 3), seed=st.integers(0, 2 ** 31))
def test_random_program_on_three_devices(prog, init, seed):
    want = trp.run_py(prog, dict(zip(trp.VARS, init)))

    def f(a, b, c):
        return trp.run_dfc(prog, {"a": a, "b": b, "c": c})

    spec = dfc.TensorSpec([], "int64")
    g = dfc.trace(f, spec, spec, spec)
    got = runner(seed)(g, *[np.int64(v) for v in init])
    assert {k: int(v) for k, v in got.items()} == want


def placed_session(seed):
    """A stand-in for Session in the gradient tests: its first call also runs a random placement."""
    class PlacedSession(dfc.Session):
        def __init__(self, graph, **kw):
            super().__init__(graph, **kw)
            self.placed = dfc.Session(placed_randomly(graph, seed), **kw)

        def call(self, *args):
            want = super().call(*args)
            if self.placed is not None:
                got, self.placed = self.placed.call(*args), None
                for a, b in zip(nest.flatten(want), nest.flatten(got)):
                    np.testing.assert_array_equal(a, b, err_msg=f"seed={seed}")
            return want
    return PlacedSession


def _expand(fn):
    marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
    if not marks:
        return [()]
    names, values = marks[0].args[:2]
    return [(v,) if "," not in names else tuple(v) for v in values]


GRAD_PROGRAMS = {name: fn for name, fn in sorted(vars(grad_programs).items())
                 if name.startswith("test_") and callable(fn)}


@pytest.mark.parametrize("name", sorted(GRAD_PROGRAMS))
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 31))
def test_gradient_program_on_three_devices(name, seed):
    fn = GRAD_PROGRAMS[name]
    with mock.patch.object(_gradcheck, "Session", placed_session(seed)):
        for args in _expand(fn):
            fn(*args)
