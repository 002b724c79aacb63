import numpy as np
import pytest

import dfc
from dfc import nest

# (executor mode, parallel_iterations, loop fusion): reference is the definition; the others must agree.
MODES = [("reference", 1, False), ("reference", 32, False), ("threads", 1, False), ("threads", 32, False),
         ("threads", 32, True)]


def run_all_modes(graph, *args, **kwargs):
    """Run graph under every executor mode and parallel_iterations setting; all must agree exactly."""
    results = []
    for mode, pi, fuse in MODES:
        s = dfc.Session(graph, mode=mode, parallel_iterations=pi, fuse_loops=fuse)
        results.append(s.call(*args, **kwargs))
    first = nest.flatten(results[0])
    for (mode, pi, fuse), r in zip(MODES[1:], results[1:]):
        for a, b in zip(first, nest.flatten(r)):
            np.testing.assert_array_equal(a, b, err_msg=f"mode={mode} parallel_iterations={pi} fuse={fuse}")
    return results[0]


@pytest.fixture
def all_modes():
    return run_all_modes
