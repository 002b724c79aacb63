"""One local Ray cluster per test process, started on first use (Ray start-up costs seconds).

Tasks: worker:0, worker:1, ps:0 (three actors, each its own process) besides the chief (the test
process). Tests that need a fresh task call `cluster().restart(name)`.
"""
import atexit
import os
import random
import tempfile
import threading

import pytest

_lock = threading.Lock()
_cluster = []
_failed = []        # why Ray could not start in this process (then every cluster test is skipped)
TASKS = {"worker": 2, "ps": 1}
# The devices a random placement draws from: the chief and two tasks, one of them with two devices.
CLUSTER_DEVICES = ("cpu:0", "worker:0/cpu:0", "worker:0/cpu:1", "ps:0/cpu:0")


def ray_available():
    try:
        import ray  # noqa: F401
        return True
    except ImportError:
        return False


def cluster():
    """The test process's cluster (a local Ray with TASKS), made once."""
    if not ray_available():
        pytest.skip("ray is not installed (pip install 'dfc[cluster]')")
    with _lock:
        if _failed:
            pytest.skip(_failed[0])
        if not _cluster:
            import dfc
            import ray
            os.environ.setdefault("RAY_DEDUP_LOGS", "0")
            os.environ.setdefault("RAY_TQDM_PATCH_PRINT", "0")     # keep builtins.print Python's own
            for attempt in range(2):    # Ray's own start-up gives up after 30 s on an overloaded machine
                try:
                    c = dfc.cluster.connect(tasks=TASKS, num_cpus=4, log_to_driver=False,
                                            checkpoint_dir=tempfile.mkdtemp(prefix="dfc-cluster-ckpt-"))
                    break
                except dfc.DfcError as e:
                    ray.shutdown()
                    if attempt == 1:    # Ray itself cannot start here: not a dfc failure, so skip, loudly
                        _failed.append(f"a local Ray could not start on this machine: {e}")
                        pytest.skip(_failed[0])
            _cluster.append(c)
            atexit.register(c.shutdown)
        return _cluster[0]


def placed_on_tasks(graph, seed):
    """A copy of graph with every node on a random one of CLUSTER_DEVICES."""
    from dfc.ir.graph import Graph, Node
    rng = random.Random(seed)
    g = Graph(graph.signature.get("name"))
    for n in graph.nodes.values():
        g.add_node(Node(n.name, n.op, list(n.inputs), dict(n.attrs), rng.choice(CLUSTER_DEVICES), n.loc))
    g.signature = graph.signature
    return g
