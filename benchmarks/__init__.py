"""dfc's benchmarks (`python -m benchmarks`; see docs/benchmarks.md).

Every Session here names its execution path. Sessions that do not (the cluster, device and swapping
workloads) run fused: the default below keeps the library's compile_loops="auto" from compiling frames in
child processes in the middle of a timed sweep; the compiled path has its own rows where it is measured.
"""
import os

os.environ.setdefault("DFC_COMPILE_LOOPS", "0")
