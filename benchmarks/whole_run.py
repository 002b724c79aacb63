"""A/B: the whole run compiled as one numba function (dfc/runtime/compiled/root.py) against its loop frames
compiled one by one under the root frame's generated Python (DFC_COMPILE_ROOT=0), in one process, calls
interleaved so load hits both alike. Both compile on their first call (not timed).

    python -m benchmarks.whole_run [--calls 30]
"""
import argparse
import time

import numpy as np

import dfc
from benchmarks import fixed_point, gru, harness, hmc, ode

WORKLOADS = {
    "GRU training step": (gru.gru_step, gru.inputs),
    "ODE forward": (ode.ode_forward, ode.inputs),
    "ODE gradient": (ode.ode_gradient, ode.inputs),
    "fixed point forward": (fixed_point.fixed_point, fixed_point.inputs),
    "fixed point gradient": (fixed_point.fixed_point_gradient, fixed_point.inputs),
    "HMC": (hmc.hmc, lambda: hmc.inputs(300)),
}


def time_interleaved(fns, calls):
    """Per function, the seconds of each of `calls` calls, the functions called in turn."""
    out = [[] for _ in fns]
    for _ in range(calls):
        for k, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args(argv)
    from dfc.runtime.compiled import root
    rows = []
    for name, (fn, make) in WORKLOADS.items():
        a = make()
        g, _ = harness.traced(fn, *a)
        frames, whole = [], []
        for enabled, bucket in ((False, frames), (True, whole)):
            saved, root.ENABLED = root.ENABLED, enabled
            try:
                s = dfc.Session(g, compile_loops=True)
                s.call(*a)                       # plans (reading root.ENABLED) and compiles
            finally:
                root.ENABLED = saved
            bucket.append(s)
        t = time_interleaved([lambda s=frames[0]: s.call(*a), lambda s=whole[0]: s.call(*a)], args.calls)
        rows.append((name, t[0], t[1], whole[0].compiled_run()["status"]))
    print(harness.conditions())
    print("| workload | frames one by one: median ms (p25–p75) | whole run: median ms (p25–p75) | ratio | whole run |")
    print("|---|---|---|---|---|")
    for name, a, b, status in rows:
        print(f"| {name} | {np.median(a) * 1e3:.3g} ({np.percentile(a, 25) * 1e3:.3g}–{np.percentile(a, 75) * 1e3:.3g}) "
              f"| {np.median(b) * 1e3:.3g} ({np.percentile(b, 25) * 1e3:.3g}–{np.percentile(b, 75) * 1e3:.3g}) "
              f"| {np.median(b) / np.median(a):.2f} | {status} |")


if __name__ == "__main__":
    main()
