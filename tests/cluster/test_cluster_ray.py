"""The Ray a cluster runs on: without an address dfc starts a private one (never another user's, even one
named by RAY_ADDRESS), and that Ray ends with the process that started it, even when it is killed."""
import os
import subprocess
import sys
import time

import pytest

from tests.clustertools import cluster

pytestmark = [pytest.mark.xdist_group("ray"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]

CHILD = r"""
import sys
import ray
import dfc
c = dfc.cluster.connect(tasks={"worker": 1}, log_to_driver=False)
print(ray.get_runtime_context().gcs_address, c.pid("worker:0"), flush=True)
sys.stdin.read()
"""
GONE_WITHIN = 30.0      # seconds; the processes are killed at once, this only bounds a failing test


def descendants(root):
    """Pids of the live processes below `root`."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def name(pid):
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().replace("\0", " ")[:80]
    except OSError:
        return "?"


def test_connect_without_an_address_starts_a_private_ray_that_ends_with_its_driver():
    import ray
    cluster()
    theirs = ray.get_runtime_context().gcs_address      # "another user's" cluster, named by RAY_ADDRESS
    env = dict(os.environ, RAY_ADDRESS=theirs, RAY_TQDM_PATCH_PRINT="0")
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = child.stdout.readline().split()
        if not line:
            child.kill()
            pytest.fail("the child could not connect: " + child.communicate()[1][-3000:])
        address, task = line[0], int(line[1])
        assert address != theirs, "connect() without an address joined the cluster RAY_ADDRESS names"
        started = descendants(child.pid)
        assert task in started          # its task runs on the Ray it started, below it
    finally:
        child.kill()                    # SIGKILL: no atexit, no ray.shutdown
        child.wait()
    deadline = time.monotonic() + GONE_WITHIN
    while any(map(alive, started)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [f"{pid} {name(pid)}" for pid in started if alive(pid)]
    assert not left, f"processes of the killed driver's Ray still run: {left}"
