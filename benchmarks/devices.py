"""Distributed while-loops over logical CPU devices (the paper's Figures 11 and 12, in shape).

1. Iterations/s of a loop with a trivial body split over 1, 2, 4, 8 cpu devices: each device
   updates its own state (Figure 10(a)), or, with --barrier, every device's update waits for all
   devices' previous values (Figure 10(b)). The predicate runs on cpu:0 and every other device
   runs a control-loop state machine driven by it.
2. A pipelined body (Figure 10(c)): device k computes h_k = tanh(h_k @ W + h_{k-1}) every
   iteration; iterations/s as parallel_iterations goes 1..32. With more iterations in flight,
   device 1 works on iteration i+1 while device 2 is still on iteration i.

    python -m benchmarks.devices [--iterations 2000] [--size 384] [--json out.json]

OpenBLAS is limited to one thread per matmul (set before numpy loads) so that each logical device
is one core's worth of work, as a GPU would be; the machine's core count bounds the speed-up.
"""
import argparse
import json
import os

if __name__ == "__main__":     # run alone: single-threaded BLAS (too late once numpy is loaded, so not on import)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

import dfc
from benchmarks.bench_util import median_time


def trivial_loop(num_devices, barrier):
    """State k lives on cpu:k (its loop Merge/Switch follow its initial value there); the predicate
    is on cpu:0. With a barrier every device adds the sum of all states of the previous iteration."""
    def f(n):
        def body(i, *xs):
            total = None
            if barrier:
                with dfc.device("cpu:0"):
                    total = xs[0]
                    for x in xs[1:]:
                        total = total + x
            outs = []
            for k, x in enumerate(xs):
                with dfc.device(f"cpu:{k}"):
                    outs.append(x + 1.0 if total is None else x + 1.0 + total * 0.0)
            return (i + 1,) + tuple(outs)
        init = []
        for k in range(num_devices):
            with dfc.device(f"cpu:{k}"):
                init.append(dfc.constant(np.float32(0)))
        with dfc.device("cpu:0"):
            i0 = dfc.constant(np.int64(0))
        xs = dfc.while_loop(lambda i, *xs: i < n, body, [i0] + init)[1:]
        with dfc.device("cpu:0"):
            return sum(xs[1:], xs[0]) / float(num_devices)
    return dfc.trace(f, dfc.TensorSpec([], "int64"))


def pipeline_loop(num_devices, size):
    def f(w, n):
        def body(i, *hs):
            outs, prev = [], None
            for k, h in enumerate(hs):
                with dfc.device(f"cpu:{k}"):
                    z = h @ w
                    prev = dfc.tanh(z if prev is None else z + prev)
                    outs.append(prev)
            with dfc.device("cpu:0"):
                return (i + 1,) + tuple(outs)
        with dfc.device("cpu:0"):
            h0 = dfc.zeros([size, size], "float32") + 0.01
            return dfc.while_loop(lambda i, *hs: i < n, body, (dfc.constant(np.int64(0)),) + (h0,) * num_devices)[1:]
    return dfc.trace(f, dfc.TensorSpec([size, size], "float32"), dfc.TensorSpec([], "int64"))


def bench_trivial(iterations, reps, mode):
    rows = []
    for barrier in (False, True):
        for k in (1, 2, 4, 8):
            s = dfc.Session(trivial_loop(k, barrier), mode=mode)
            n = np.int64(iterations)
            assert float(s.call(n)) == iterations
            t = median_time(lambda s=s, n=n: s.call(n), reps)
            rows.append({"devices": k, "barrier": barrier, "iterations_per_s": iterations / t})
    return rows


def bench_pipeline(iterations, reps, size, num_devices, mode):
    g = pipeline_loop(num_devices, size)
    w = (np.random.default_rng(0).normal(size=(size, size)) / np.sqrt(size)).astype(np.float32)
    n = np.int64(iterations)
    rows, want = [], None
    for pi in (1, 2, 4, 8, 16, 32):
        s = dfc.Session(g, mode=mode, parallel_iterations=pi)
        got = s.call(w, n)
        if want is None:
            want = got
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        t = median_time(lambda s=s: s.call(w, n), reps)
        rows.append({"parallel_iterations": pi, "iterations_per_s": iterations / t})
    one = dfc.Session(g, mode=mode, device_map={f"cpu:{k}": "cpu:0" for k in range(num_devices)},
                      parallel_iterations=32)
    t = median_time(lambda: one.call(w, n), reps)
    rows.append({"parallel_iterations": 32, "one_device": True, "iterations_per_s": iterations / t})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--pipeline-iterations", type=int, default=200)
    ap.add_argument("--size", type=int, default=384)
    ap.add_argument("--devices", type=int, default=4, help="devices in the pipeline")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mode", default="threads")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    res = {"cpus": os.cpu_count(), "mode": args.mode,
           "trivial_body": bench_trivial(args.iterations, args.reps, args.mode),
           "pipeline": bench_pipeline(args.pipeline_iterations, args.reps, args.size, args.devices, args.mode)}
    print(f"Figure 11 shape: trivial body, {args.iterations} iterations, mode={args.mode}")
    print("  devices  independent it/s  barrier it/s")
    for k in (1, 2, 4, 8):
        a = next(r for r in res["trivial_body"] if r["devices"] == k and not r["barrier"])
        b = next(r for r in res["trivial_body"] if r["devices"] == k and r["barrier"])
        print(f"  {k:7d}  {a['iterations_per_s']:16.0f}  {b['iterations_per_s']:12.0f}")
    print(f"Figure 12 shape: {args.devices}-device pipeline of {args.size}x{args.size} matmuls, "
          f"{args.pipeline_iterations} iterations")
    print("  parallel_iterations  it/s")
    for r in res["pipeline"]:
        label = f"{r['parallel_iterations']}" + (" (1 device)" if r.get("one_device") else "")
        print(f"  {label:>19}  {r['iterations_per_s']:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
