"""Peak memory and time per step of the LSTM training step under each gradient memory policy.

The LSTM of benchmarks/lstm.py (benchmarks/lstm_problem.py: forward while_loop, gradients of W and b)
runs on `accel:0`, the memory-capped numpy device that accounts every byte it holds (so the peak is
exact and swapping has a host to go to), for growing sequence lengths, with the gradient built under
each policy of dfc.gradient_memory:

    stack      every saved value on a stack (dfc's default)
    swap       every stack may be swapped to host (swap_threshold 0: each value of >= 4 KiB is)
    recompute  only the loop's variables saved; the gradient loop recomputes the cell
    budget     budget = half the capacity, planned for the run's length: stacks what fits,
               recomputes cheap values, swaps matmul outputs past it

Reported per length and policy: median ms per training step (forward + gradient), peak accelerator
bytes, values pushed per iteration, and OOM where the step does not fit the capacity. Every run's
gradients are checked against the numpy backprop of lstm_problem.py. Both gradients sum W's gradient per
iteration (DFC_BATCH_LOOP_GRADS=0): the one-GEMM-after-the-loop rewrite keeps each iteration's factors
in a TensorArray, outside what a policy chooses.

    python -m benchmarks.memory_policy [--capacity-mb 16] [--lengths 50,100,...] [--json out.json]
"""
import argparse
import json
import os
import statistics
import time


import dfc
from benchmarks.lstm import lstm_loss
from benchmarks.lstm_problem import make_inputs, max_rel_error, numpy_loss_and_grads

POLICIES = ("stack", "swap", "recompute", "budget")
DEVICE = "accel:0"


def build(H, B, T, policy, capacity):
    kw = dict(budget=capacity // 2, iterations=T) if policy == "budget" else {}

    def step(x, W, b):
        with dfc.device(DEVICE):
            loss = lstm_loss(x, W, b, H)
            with dfc.gradient_memory(policy, **kw):
                dW, db = dfc.gradients(loss, [W, b])
        return loss, dW, db
    f32 = "float32"
    return dfc.trace(step, dfc.TensorSpec([T, B, H], f32), dfc.TensorSpec([2 * H, 4 * H], f32),
                     dfc.TensorSpec([4 * H], f32))


def measure(H, B, T, policy, capacity, reps):
    g = build(H, B, T, policy, capacity)
    pushes = sum(n.op == "StackPush" for n in g.nodes.values())
    x, W, b = make_inputs(H, B, T)
    s = dfc.Session(g, memory_caps={DEVICE: capacity}, swap_threshold=0.0 if policy == "swap" else 0.5)
    try:
        loss, dW, db = s.call(x, W, b)
    except dfc.DfcOutOfMemory:
        return {"result": "OOM", "pushes_per_iteration": pushes}
    _, ref_dW, ref_db = numpy_loss_and_grads(x, W, b)
    err = max(max_rel_error(dW, ref_dW), max_rel_error(db, ref_db))
    if err > 1e-3:
        raise AssertionError(f"{policy} T={T}: gradients differ from numpy's by {err:.2g}")
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        s.call(x, W, b)
        times.append((time.perf_counter() - t0) * 1e3)
    st = s.memory_stats()[DEVICE]
    return {"result": "ok", "ms_per_step": statistics.median(times), "ms_min": min(times), "ms_max": max(times),
            "peak_bytes": st["peak"], "pushes_per_iteration": pushes, "max_rel_error_vs_numpy": err,
            "swapped_out": st.get("swap", {}).get("swapped_out", 0)}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--capacity-mb", type=float, default=16.0)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lengths", default="50,100,200,400,800")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    old = os.environ.get("DFC_BATCH_LOOP_GRADS")
    os.environ["DFC_BATCH_LOOP_GRADS"] = "0"
    try:
        return _run(args)
    finally:
        if old is None:
            del os.environ["DFC_BATCH_LOOP_GRADS"]
        else:
            os.environ["DFC_BATCH_LOOP_GRADS"] = old


def _run(args):
    cap = int(args.capacity_mb * (1 << 20))
    policies = args.policies.split(",")
    rows = []
    for T in [int(v) for v in args.lengths.split(",")]:
        row = {"length": T}
        for p in policies:
            row[p] = measure(args.hidden, args.batch, T, p, cap, args.reps)
        rows.append(row)
        print(_fmt(row, policies), flush=True)
    longest = {p: max([r["length"] for r in rows if r[p]["result"] == "ok"], default=0) for p in policies}
    res = {"device": DEVICE, "capacity_bytes": cap, "hidden": args.hidden, "batch": args.batch, "reps": args.reps,
           "rows": rows, "longest_that_fits": longest}
    print("longest sequence that fits: " + ", ".join(f"{p} {n}" for p, n in longest.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


def _fmt(row, policies):
    def cell(v):
        if v["result"] == "OOM":
            return f"{'OOM':>22}"
        return f"{v['ms_per_step']:8.1f} ms {v['peak_bytes'] / 2 ** 20:6.2f} MiB"
    return f"T={row['length']:5d} " + " ".join(f"{p}: {cell(row[p])}" for p in policies)


if __name__ == "__main__":
    main()
