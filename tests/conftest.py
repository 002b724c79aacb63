import numpy as np
import pytest

import dfc
from dfc import nest

# (executor mode, parallel_iterations, loop fusion): reference is the definition; the others must agree.
MODES = [("reference", 1, False), ("reference", 32, False), ("threads", 1, False), ("threads", 32, False),
         ("threads", 32, True)]


def run_all_modes(graph, *args, **kwargs):
    """Run graph under every executor mode and parallel_iterations setting; all must agree exactly, in
    their results and in the Variables they leave behind (each mode starts from the same state)."""
    store = dfc.containers.get()
    before = store.snapshot()
    results, states = [], []
    for mode, pi, fuse in MODES:
        store.restore(before)
        s = dfc.Session(graph, mode=mode, parallel_iterations=pi, fuse_loops=fuse)
        results.append(s.call(*args, **kwargs))
        states.append(store.snapshot())
    first = nest.flatten(results[0])
    for (mode, pi, fuse), r, state in zip(MODES[1:], results[1:], states[1:]):
        where = f"mode={mode} parallel_iterations={pi} fuse={fuse}"
        for a, b in zip(first, nest.flatten(r)):
            np.testing.assert_array_equal(a, b, err_msg=where)
        assert state.keys() == states[0].keys(), where
        for name, value in state.items():
            np.testing.assert_array_equal(states[0][name], value, err_msg=f"variable {name}, {where}")
    return results[0]


@pytest.fixture
def all_modes():
    return run_all_modes
