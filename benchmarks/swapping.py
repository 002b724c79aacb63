"""Memory swapping on the memory-capped accelerator (the paper's Table 1, in shape).

An LSTM training step (forward loop, gradient loop, gradients of W, U, b) runs on `accel:0` (or, with
--device gpu:0, a real GPU whose pool dfc caps) with a fixed capacity, for growing sequence lengths, with swapping off and on. Reported: training time
per loop iteration (ms), OOM where the step does not fit, peak accelerator bytes, and the longest
sequence each setting reaches. Every completed run's gradients are checked against cpu:0.
Both graphs sum the weights' gradients per iteration (DFC_BATCH_LOOP_GRADS=0): a swapping loop always
does, and the one-GEMM-after-the-loop rewrite (dfc/compiler/autodiff/loop_matmul.py) keeps every
iteration's factors on the device, so with it the no-swap column would measure a different program.

    python -m benchmarks.swapping [--capacity-mb 8] [--lengths 25,50,...] [--device gpu:0] [--json out.json]
"""
import argparse
import json
import os
import statistics
import time


import numpy as np

import dfc


def lstm_graph(batch, hidden, swap, device):
    H = hidden

    def f(xs, W, U, b):
        with dfc.device(device):
            n = dfc.shape(xs)[0]

            def body(t, h, c, loss):
                z = xs[t] @ W + h @ U + b
                i, fg, o = dfc.sigmoid(z[:, :H]), dfc.sigmoid(z[:, H:2 * H]), dfc.sigmoid(z[:, 2 * H:3 * H])
                c = fg * c + i * dfc.tanh(z[:, 3 * H:])
                h = o * dfc.tanh(c)
                return t + 1, h, c, loss + dfc.reduce_sum(h * h)
            zeros = dfc.zeros([batch, H], "float32")
            loss = dfc.while_loop(lambda t, h, c, l: t < n, body,
                                  (0, zeros, zeros, dfc.constant(np.float32(0))), swap_memory=swap)[3]
            return (loss,) + tuple(dfc.gradients(loss, [W, U, b]))
    specs = [dfc.TensorSpec([None, batch, H], "float32"), dfc.TensorSpec([H, 4 * H], "float32"),
             dfc.TensorSpec([H, 4 * H], "float32"), dfc.TensorSpec([4 * H], "float32")]
    return dfc.trace(f, *specs)


def inputs(steps, batch, hidden):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(steps, batch, hidden)).astype(np.float32),
            (rng.normal(size=(hidden, 4 * hidden)) * 0.1).astype(np.float32),
            (rng.normal(size=(hidden, 4 * hidden)) * 0.1).astype(np.float32),
            np.zeros(4 * hidden, np.float32))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--capacity-mb", type=float, default=8.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lengths", default="25,50,75,100,150,200,300,400")
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--parallel-iterations", type=int, default=8)
    ap.add_argument("--mode", default="threads")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="accel:0", help="accel:0 (a memory-capped numpy device), gpu:0, strict:0")
    ap.add_argument("--rtol", type=float, default=1e-5, help="gradients against cpu:0 (a GPU reduces in "
                    "another order: 1e-3 there)")
    ap.add_argument("--check-up-to", type=int, default=None, help="check against cpu:0 only up to this length "
                    "(longer: the swapping run is checked against the one without where both fit)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    cap = int(args.capacity_mb * (1 << 20))
    os.environ["DFC_BATCH_LOOP_GRADS"] = "0"
    dev = args.device
    graphs = {swap: lstm_graph(args.batch, args.hidden, swap, dev) for swap in (False, True)}
    cpu = dfc.Session(lstm_graph(args.batch, args.hidden, False, "cpu:0"), mode=args.mode)
    rows = []
    for T in [int(x) for x in args.lengths.split(",")]:
        a = inputs(T, args.batch, args.hidden)
        want = cpu.call(*a) if args.check_up_to is None or T <= args.check_up_to else None
        row = {"length": T}
        for swap in (False, True):
            s = dfc.Session(graphs[swap], mode=args.mode, parallel_iterations=args.parallel_iterations,
                            memory_caps={dev: cap}, swap_threshold=args.threshold)
            key = "swap" if swap else "no_swap"
            try:
                got = s.call(*a)
                if want is None and not swap:
                    want = got          # the swapping run must give the same bits as the one without
                for g, w in zip(got, want or ()):
                    np.testing.assert_allclose(g, w, rtol=args.rtol, atol=args.rtol)
                ts = []
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    s.call(*a)
                    ts.append((time.perf_counter() - t0) / T * 1e3)
                st = s.memory_stats()[dev]
                q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0]] * 3
                row[key] = {"ms_per_iteration": statistics.median(ts), "p25": q[0], "p75": q[2],
                            "peak_bytes": st["peak"], "swapped_out": st["swap"]["swapped_out"]}
            except dfc.DfcOutOfMemory:
                row[key] = "OOM"
        rows.append(row)
        print(_fmt(row), flush=True)
        if row["no_swap"] == "OOM" and row["swap"] == "OOM":
            break
    longest = {k: max([r["length"] for r in rows if r[k] != "OOM"], default=0) for k in ("no_swap", "swap")}
    both = [r for r in rows if r["no_swap"] != "OOM" and r["swap"] != "OOM"]
    overhead = [r["swap"]["ms_per_iteration"] / r["no_swap"]["ms_per_iteration"] - 1 for r in both]
    for r in both:
        r["overhead"] = r["swap"]["ms_per_iteration"] / r["no_swap"]["ms_per_iteration"] - 1
    res = {"device": dev, "capacity_bytes": cap, "batch": args.batch, "hidden": args.hidden, "mode": args.mode,
           "threshold": args.threshold, "rows": rows, "longest": longest,
           "median_overhead_where_both_fit": float(np.median(overhead)) if overhead else None,
           "overhead_range_where_both_fit": [float(min(overhead)), float(max(overhead))] if overhead else None,
           "lengths_where_both_fit": [r["length"] for r in both], "reps": args.reps}
    print(f"capacity {args.capacity_mb} MiB: longest sequence without swapping {longest['no_swap']}, "
          f"with swapping {longest['swap']}"
          + (f"; swapping costs {res['median_overhead_where_both_fit'] * 100:+.1f}% per iteration where both fit"
             if overhead else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


def _fmt(row):
    def cell(v):
        return f"{'OOM':>22}" if v == "OOM" else f"{v['ms_per_iteration']:8.2f} ms ({v['peak_bytes'] / 2**20:5.2f} MiB)"
    return f"T={row['length']:5d}  no swap: {cell(row['no_swap'])}  swap: {cell(row['swap'])}"


if __name__ == "__main__":
    main()
