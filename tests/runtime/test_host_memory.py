"""A Session keeps freed host memory for the next step (glibc's malloc tuned once per process)."""
import os
import platform
import subprocess
import sys

import pytest

STEPS = """
import resource, sys, numpy as np, dfc
from dfc.runtime import host_memory
g = dfc.trace(lambda x: x + 1.0, dfc.TensorSpec([], "float32"))
dfc.Session(g).call(np.float32(1))
def step():
    saved = [np.ones(1 << 18) for _ in range(40)]      # 40 blocks of 2 MiB, as a step's saved values
    del saved
step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(host_memory.keep_freed_memory())
"""

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the tuning is glibc's mallopt")


def steps(**env):
    e = {k: v for k, v in os.environ.items()
         if k not in ("DFC_MALLOC_TUNING", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")}
    r = subprocess.run([sys.executable, "-c", STEPS], capture_output=True, text=True, env=dict(e, **env),
                       timeout=120)
    assert r.returncode == 0, r.stderr
    faults, state = r.stdout.strip().splitlines()[-2:]
    return int(faults), state


@glibc
def test_a_step_that_frees_what_the_last_one_allocated_faults_no_pages_in_again():
    # 10 steps of 80 MB each: glibc's defaults give the heap's top back after each step and fault it in
    # again (204 800 pages; at least 400 faults where transparent huge pages back the heap); kept, none.
    faults, state = steps()
    assert state.startswith("glibc malloc keeps freed memory") and faults < 100
    faults, state = steps(DFC_MALLOC_TUNING="0")
    assert "DFC_MALLOC_TUNING=0" in state and faults >= 400


@glibc
def test_malloc_settings_of_the_environment_are_kept():
    faults, state = steps(MALLOC_TRIM_THRESHOLD_="1")
    assert state == "glibc malloc as the environment tunes it" and faults >= 400
    _, state = steps(GLIBC_TUNABLES="glibc.malloc.arena_max=2")
    assert state == "glibc malloc as the environment tunes it"
