"""Model parallelism (Figure 15): a stacked LSTM with one layer per task, pipelined by parallel iterations.

    python -m benchmarks.model_parallel [--layers 2] [--hidden 512] [--batch 64] [--steps 20] [--reps 5]
                                        [--no-cluster] [--out benchmarks/results/model_parallel.md]

The sample samples/model_parallel_lstm.py's training step (forward loop + gradient loop, weights in,
loss and gradients out) and inference, each placed four ways:

* one device: every layer on cpu:0 of this process (the reference; the fused single-device path);
* L devices: layer k on cpu:k of this process (threads), parallel_iterations 32 and 1;
* L tasks: layer k on Ray task worker:k (its own process), parallel_iterations 32 and 1.

Every placement's values must be bit-identical to one device (checked each run). Reported: the median
time per call over --reps calls after a warm-up call, its spread, and the speed-up of pipelining
(parallel_iterations 32 over 1) and of the tasks over one device.
"""
import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import numpy as np

import dfc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples"))
import model_parallel_lstm as sample  # noqa: E402


def _flat(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _times(session, args, reps):
    want = session.call(*args)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        session.call(*args)
        ts.append(time.perf_counter() - t0)
    return want, ts


def run(layers, hidden, batch, steps, reps, cluster=True):
    graphs = dict(zip(("train", "inference"), sample.build(layers, H=hidden, B=batch)))
    args = sample.inputs(layers, H=hidden, B=batch, T=steps)
    devices = {f"worker:{k}/cpu:0": f"cpu:{k}" for k in range(layers)}
    placements = [("one device", dict(device_map=sample.one_process(layers))),
                  ("L devices", dict(device_map=devices)),
                  ("L devices, parallel_iterations=1", dict(device_map=devices, parallel_iterations=1))]
    c = None
    if cluster:
        c = dfc.cluster.connect(tasks={"worker": layers}, log_to_driver=False)
        placements += [("L tasks", dict(cluster=c)), ("L tasks, parallel_iterations=1",
                                                      dict(cluster=c, parallel_iterations=1))]
    rows = []
    try:
        for what, g in graphs.items():
            ref = None
            for name, kw in placements:
                got, ts = _times(dfc.Session(g, **kw), args, reps)
                ref = got if ref is None else ref
                same = all(np.array_equal(x, y) for x, y in zip(_flat(got), _flat(ref)))
                rows.append({"graph": what, "placement": name.replace("L ", f"{layers} "), "ms": statistics.median(ts) * 1e3,
                             "min": min(ts) * 1e3, "max": max(ts) * 1e3, "identical": same})
                print(f"{what:9s} {rows[-1]['placement']:38s} {rows[-1]['ms']:9.1f} ms "
                      f"({rows[-1]['min']:.1f}-{rows[-1]['max']:.1f}) identical={same}", flush=True)
    finally:
        if c is not None:
            c.shutdown()
    return rows


def report(rows, a):
    ms = {(r["graph"], r["placement"]): r["ms"] for r in rows}
    L = a.layers
    lines = [f"# Model parallelism (Figure 15): {L}-layer LSTM, one layer per device or task", "",
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
             f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; H={a.hidden}, B={a.batch}, "
             f"T={a.steps}, float32; median of {a.reps} calls after a warm-up call (min-max).", "",
             f"Command: `python -m benchmarks.model_parallel --layers {L} --hidden {a.hidden} --batch {a.batch} "
             f"--steps {a.steps} --reps {a.reps}`", "",
             "| graph | placement | ms per call | min-max | bit-identical to one device |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['placement']} | {r['ms']:.1f} | {r['min']:.1f}-{r['max']:.1f} | "
                     f"{'yes' if r['identical'] else 'NO'} |")
    lines += ["", "| graph | pipelining on devices (pi 32 vs 1) | pipelining on tasks (pi 32 vs 1) | "
                  "tasks vs one device |", "|---|---|---|---|"]
    for g in ("train", "inference"):
        def ratio(a_, b_):
            x, y = ms.get((g, a_)), ms.get((g, b_))
            return f"{y / x:.2f}x" if x and y else "-"
        lines.append(f"| {g} | {ratio(f'{L} devices', f'{L} devices, parallel_iterations=1')} | "
                     f"{ratio(f'{L} tasks', f'{L} tasks, parallel_iterations=1')} | {ratio(f'{L} tasks', 'one device')} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--no-cluster", dest="cluster", action="store_false")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    rows = run(a.layers, a.hidden, a.batch, a.steps, a.reps, a.cluster)
    text = report(rows, a)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
