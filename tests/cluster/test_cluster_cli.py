"""dfc run --cluster: a saved graph's partitions run in task processes started for the run (here on the
test process's running Ray, joined by address; `--cluster local` starts one as the test process's
cluster() does)."""
import json
import subprocess
import sys

import numpy as np
import pytest

import dfc
from tests.clustertools import cluster, ray_available

pytestmark = [pytest.mark.xdist_group("ray"),
              pytest.mark.skipif(not ray_available(), reason="ray is not installed")]


def spread(n):
    def body(i, s):
        with dfc.device("worker:1/cpu:0"):
            s = s + 2.0
        return i + 1, s
    return dfc.while_loop(lambda i, s: i < n, body, (0, 0.0))[1]


def mapped(x):
    with dfc.device("cpu:1"):
        return x * 3.0


def dfc_run(*args):
    return subprocess.run([sys.executable, "-m", "dfc.cli", "run", *map(str, args)], capture_output=True,
                          text=True, timeout=240)


def test_dfc_run_joins_a_running_ray_cluster(tmp_path):
    import ray
    cluster()                       # the test process's local Ray; `dfc run --cluster ADDRESS` joins it
    address = ray.get_runtime_context().gcs_address
    dfc.save(dfc.trace(spread, dfc.TensorSpec([], "int32")), tmp_path / "spread.json")
    dfc.save(dfc.trace(mapped, dfc.TensorSpec([], "float32")), tmp_path / "mapped.json")
    r = dfc_run(tmp_path / "spread.json", "--input", "n=5", "--json", "--cluster", address, "--tasks", "worker=2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"outputs": [10.0]}
    # no --tasks: the tasks the graph's devices name (after --device-map) are started
    r = dfc_run(tmp_path / "mapped.json", "--input", "x=2", "--json", "--cluster", address,
                "--device-map", "cpu:1=ps:0/cpu:0")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"outputs": [6.0]}


def test_task_devices_without_cluster_and_tasks_without_cluster_are_clear_errors(tmp_path):
    dfc.save(dfc.trace(spread, dfc.TensorSpec([], "int32")), tmp_path / "spread.json")
    r = dfc_run(tmp_path / "spread.json", "--input", "n=5")
    assert r.returncode == 1 and "worker:1" in r.stderr and "--cluster" in r.stderr and "Traceback" not in r.stderr
    r = dfc_run(tmp_path / "spread.json", "--input", "n=5", "--tasks", "worker=2")
    assert r.returncode == 2 and "--tasks needs --cluster" in r.stderr
    np.testing.assert_array_equal(dfc.Session(dfc.load(tmp_path / "spread.json"),
                                              device_map={"worker:1/cpu:0": "cpu:1"}).call(np.int32(3)), 6.0)
