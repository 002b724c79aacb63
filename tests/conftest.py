import numpy as np
import pytest

import dfc
from dfc import nest

MODES = [("reference", 1), ("reference", 32), ("threads", 1), ("threads", 32)]


def run_all_modes(graph, *args, **kwargs):
    """Run graph under every executor mode and parallel_iterations setting; all must agree exactly."""
    results = []
    for mode, pi in MODES:
        s = dfc.Session(graph, mode=mode, parallel_iterations=pi)
        results.append(s.call(*args, **kwargs))
    first = nest.flatten(results[0])
    for (mode, pi), r in zip(MODES[1:], results[1:]):
        for a, b in zip(first, nest.flatten(r)):
            np.testing.assert_array_equal(a, b, err_msg=f"mode={mode} parallel_iterations={pi}")
    return results[0]


@pytest.fixture
def all_modes():
    return run_all_modes
