"""Loops across processes (Ray actors on this machine): the shape of Figures 11 and 12 across tasks.

    python -m benchmarks.cluster [--reps 5] [--quick]

1. Figure 11 across processes: iterations/s of a while loop with a trivial body whose state lives on
   1, 2 or 4 tasks. "independent": the counter and predicate are on worker:0 and every other task
   keeps its own accumulator (each task runs its own control-loop state machine, driven by the
   predicate it receives: no data flows back until the loop ends). "barrier": every iteration the
   counter's update needs every task's value (one round trip through all tasks per iteration).
   Beside it, the same loops on devices of one process (cpu:N).
2. Figure 12 across processes: a loop whose body is a chain of matmuls split over 2 tasks;
   iterations/s for parallel_iterations 1..32 (pipelining across processes).
3. The MoE sample's training step (samples/moe.py) with its four experts on four tasks vs on four
   devices of one process: time per step and bytes moved between processes (plain and bfloat16).
4. Transfer: time to move an array between two tasks inline on the cluster's ZeroMQ sockets vs through
   Ray's object store, by size (the threshold Session(object_store_bytes=) uses).

Each figure is the median of --reps runs (after a warm-up run), with the spread (min-max).
"""
import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

import dfc


def _loop_graph(n_tasks, barrier, on_tasks):
    dev = (lambda k: f"worker:{k}/cpu:0") if on_tasks else (lambda k: f"cpu:{k}")

    def f(n):
        def cond(i, *accs):
            with dfc.device(dev(0)):
                return i < n

        def body(i, *accs):
            new = []
            for k, a in enumerate(accs):
                with dfc.device(dev(k)):
                    new.append(a + 1.0)
            with dfc.device(dev(0)):
                step = 1
                if barrier:
                    for a in new[1:]:
                        step = step + dfc.cast(a * 0.0, "int32")
                return (i + step, *new)
        # each task's accumulator (and its loop machinery) stays on its task; worker:0 also has the counter
        return dfc.while_loop(cond, body, (0,) + tuple(0.0 for _ in range(n_tasks)))
    return dfc.trace(f, dfc.TensorSpec([], "int32"))


def _rate(session, n, reps):
    session.call(np.int32(min(n, 50)))           # warm-up: graphs sent, plans built
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        session.call(np.int32(n))
        rates.append(n / (time.perf_counter() - t0))
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}


def figure11(cluster, reps, iters):
    rows = []
    for n_tasks in (1, 2, 4):
        for barrier in ((False,) if n_tasks == 1 else (False, True)):
            row = {"tasks": n_tasks, "barrier": barrier}
            g = _loop_graph(n_tasks, barrier, True)
            row["cluster_it_per_s"] = _rate(dfc.Session(g, cluster=cluster), iters, reps)
            g1 = _loop_graph(n_tasks, barrier, False)
            row["one_process_devices_it_per_s"] = _rate(dfc.Session(g1), iters, reps)
            rows.append(row)
            print(json.dumps(row))
    return rows


def figure12(cluster, reps, iters, size=256, depth=4):
    def f(x, n):
        def body(i, acc):
            h = x + dfc.cast(i, "float32")
            for k in range(depth):
                with dfc.device(f"worker:{k * 2 // depth}/cpu:0"):
                    h = dfc.tanh(dfc.matmul(h, x))
            with dfc.device("worker:1/cpu:0"):
                acc = acc + dfc.reduce_sum(h)
            return i + 1, acc
        with dfc.device("worker:0/cpu:0"):
            return dfc.while_loop(lambda i, acc: i < n, body, (0, 0.0), parallel_iterations=PI[0])[1]
    x = (np.random.default_rng(0).standard_normal((size, size)) / size).astype(np.float32)
    rows = []
    for pi in (1, 2, 4, 8, 32):
        PI[0] = pi
        g = dfc.trace(f, dfc.TensorSpec([size, size], "float32"), dfc.TensorSpec([], "int32"))
        s = dfc.Session(g, cluster=cluster)
        s.call(x, np.int32(2))
        rates = []
        for _ in range(reps):
            t0 = time.perf_counter()
            s.call(x, np.int32(iters))
            rates.append(iters / (time.perf_counter() - t0))
        row = {"parallel_iterations": pi, "it_per_s": {"median": statistics.median(rates), "min": min(rates),
                                                       "max": max(rates)}}
        rows.append(row)
        print(json.dumps(row))
    return rows


PI = [1]


def transfer(cluster, reps):
    """Seconds to send one float32 array worker:0 -> worker:1 and back, inline vs object store."""
    rows = []
    for nbytes in (1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 8 << 20):
        n = nbytes // 4

        def f(x):
            with dfc.device("worker:0/cpu:0"):
                y = x * 2.0
            with dfc.device("worker:1/cpu:0"):
                z = y + 1.0
            with dfc.device("worker:0/cpu:0"):
                return dfc.reduce_sum(z)
        g = dfc.trace(f, dfc.TensorSpec([n], "float32"))
        x = np.ones(n, np.float32)
        row = {"bytes": nbytes}
        for how, threshold in (("inline", None), ("object_store", 0)):
            s = dfc.Session(g, cluster=cluster, object_store_bytes=threshold)
            s.call(x)
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                s.call(x)
                ts.append(time.perf_counter() - t0)
            row[how + "_ms"] = {"median": 1e3 * statistics.median(ts), "min": 1e3 * min(ts), "max": 1e3 * max(ts)}
        rows.append(row)
        print(json.dumps(row))
    return rows


def moe(cluster, reps, steps):
    """samples/moe.py's in-graph training loop, experts on cpu:1..4 of one process vs on worker:0..3."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "moe_sample", os.path.join(os.path.dirname(__file__), "..", "samples", "moe.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    g = m.train.trace(*m.train.input_signature)
    xs, ys = m.make_batch(64)
    dmap = {f"cpu:{k + 1}": f"worker:{k}/cpu:0" for k in range(m.EXPERTS)}
    rows = []
    for name, make in (("one process (cpu:0..4)", lambda: dfc.Session(g)),
                       ("experts on 4 tasks", lambda: dfc.Session(g, cluster=cluster, device_map=dmap)),
                       ("experts on 4 tasks, bfloat16 wire", lambda: dfc.Session(
                           g, cluster=cluster, device_map=dmap, wire_compression="bfloat16"))):
        s = make()
        s.call(xs, ys, np.int64(1))
        b0 = s.wire_stats()["bytes_sent"] if s.cluster is not None else 0
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            s.call(xs, ys, np.int64(steps))
            ts.append((time.perf_counter() - t0) / steps)
        moved = (s.wire_stats()["bytes_sent"] - b0) / (reps * steps) if s.cluster is not None else 0
        row = {"where": name, "ms_per_step": {"median": 1e3 * statistics.median(ts), "min": 1e3 * min(ts),
                                              "max": 1e3 * max(ts)},
               "bytes_between_processes_per_step": moved}
        rows.append(row)
        print(json.dumps(row))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default="fig11,fig12,transfer,moe")
    a = p.parse_args(argv)
    iters = 500 if a.quick else 3000
    c = dfc.cluster.connect(tasks={"worker": 4}, log_to_driver=False)
    out = {"conditions": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "numpy": np.__version__, "ray": __import__("ray").__version__,
                          "tasks": "4 Ray actors on this machine (one process each) + the chief",
                          "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")}}
    try:
        if "fig11" in a.only:
            out["figure11"] = figure11(c, a.reps, iters)
        if "fig12" in a.only:
            out["figure12"] = figure12(c, a.reps, 30 if a.quick else 100)
        if "moe" in a.only:
            out["moe"] = moe(c, a.reps, 5 if a.quick else 20)
        if "transfer" in a.only:
            out["transfer"] = transfer(c, a.reps)
    finally:
        c.shutdown()
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "cluster.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
