"""Run every benchmark, write benchmarks/results/*.json and benchmarks/results/table.md.

    python -m benchmarks [--quick] [--skip-competitors] [--only loop,lstm,unroll,pi,devices,swap]

Competitors (tensorflow-cpu, jax, torch) are installed into benchmarks/.venv-competitors by this
command, never as dfc dependencies; one that cannot be installed is reported as such. Every
comparison is made in the same run, as medians of >= 5 repetitions after warm-up, and reported as
ratios.
"""
import argparse
import json
import os
import platform
import statistics
import time
import tracemalloc

import numpy as np

from benchmarks import competitors, devices, loop_overhead, parallel_iterations, swapping
from benchmarks import lstm as dfc_lstm
from benchmarks.lstm_problem import SIZES, make_inputs, numpy_loss_and_grads, max_rel_error

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def machine():
    return {"machine": platform.machine(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "date": time.strftime("%Y-%m-%d")}


def bench_loop(reps, avail):
    r = loop_overhead.main(["--iterations", "100000", "--reps", str(reps)])
    rows = {"dfc in-graph (fused, threads)": r["threads"]["iterations_per_s"],
            "dfc in-graph (executor node by node, unfused)": r["executor"]["iterations_per_s"],
            "dfc in-graph (reference interpreter)": r["reference"]["iterations_per_s"],
            "dfc out-of-graph (Python loop, 1-step graph)": r["out_of_graph"]["iterations_per_s"]}
    for name in ("tensorflow", "jax", "torch"):
        if not avail.get(name):
            rows[f"{name}: not installed"] = None
            continue
        c = competitors.run(name, {"task": "loop", "n": 100000, "reps": reps})
        label = {"tensorflow": "TensorFlow tf.function + while_loop", "jax": "JAX jit + lax.while_loop",
                 "torch": "PyTorch eager (Python loop on a tensor)"}[name]
        rows[label] = c.get("iterations_per_s", c.get("error"))
        if "out_of_graph_iterations_per_s" in c:
            rows["TensorFlow out-of-graph (Python loop calling tf.function)"] = c["out_of_graph_iterations_per_s"]
    return rows


def bench_lstm(size, reps, avail):
    cfg = SIZES[size]
    x, W, b = make_inputs(**cfg)
    d = dfc_lstm.run(size, reps)
    dW, db = d.pop("grads")
    _, ref_dW, ref_db = numpy_loss_and_grads(x, W, b)
    rows = {"numpy (hand-written BPTT)": {"ms_per_step": d["numpy_ms_per_step"], "max_rel_error": 0.0},
            "dfc (while_loop + dfc.gradients)": {"ms_per_step": d["ms_per_step"],
                                                 "max_rel_error": d["max_rel_error_vs_numpy"]}}
    for name in ("tensorflow", "jax", "torch"):
        label = {"tensorflow": "TensorFlow (tf.function + while_loop)", "jax": "JAX (jit + scan + grad)",
                 "torch": "PyTorch eager"}[name]
        if not avail.get(name):
            rows[label] = {"error": "not installed"}
            continue
        out = os.path.join(RESULTS, f"grads_{name}_{size}.npz")
        c = competitors.run(name, dict(cfg, task="lstm", reps=reps, grads_out=out))
        if "ms_per_step" in c:
            with np.load(out) as z:
                c["max_rel_error"] = max(max_rel_error(z["dW"], ref_dW), max_rel_error(z["db"], ref_db))
            os.remove(out)
        rows[label] = c
    return rows


def bench_unroll(reps):
    cfg = dict(H=64, B=16, T=50)
    x, W, b = make_inputs(**cfg)
    rows = {}
    for unrolled in (False, True):
        t0 = time.perf_counter()
        g = dfc_lstm.build(cfg["H"], cfg["B"], cfg["T"], unrolled)
        build_s = time.perf_counter() - t0
        import dfc
        s = dfc.Session(g, mode="threads")
        s.call(x, W, b)
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            s.call(x, W, b)
            ts.append(time.perf_counter() - t)
        tracemalloc.start()
        s.call(x, W, b)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rows["static unrolling (Python loop)" if unrolled else "dynamic while_loop"] = {
            "ms_per_step": statistics.median(ts) * 1e3, "peak_mb": peak / 2 ** 20, "nodes": g.num_nodes(),
            "build_s": build_s}
    return rows


def fmt(v, unit=""):
    if v is None:
        return "not installed"
    if isinstance(v, str):
        return v
    return f"{v:,.0f}{unit}" if v >= 100 else f"{v:.3g}{unit}"


def table(res):
    L = [f"Machine: {res['machine']['cpus']} cores {res['machine']['processor']}, Python "
         f"{res['machine']['python']}, numpy {res['machine']['numpy']}, {res['machine']['date']}; "
         f"competitors: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in res["competitors"].items()), ""]
    if "loop" in res:
        base = res["loop"]["dfc in-graph (fused, threads)"]
        L += ["### Loop overhead (while loop, body `i = i + 1`, 100 000 iterations)", "",
              "| system | iterations/s | dfc fused ÷ system |", "|---|---|---|"]
        for k, v in res["loop"].items():
            ratio = f"{base / v:.2f}×" if isinstance(v, (int, float)) and v else "—"
            L.append(f"| {k} | {fmt(v)} | {ratio} |")
        L.append("")
    for size in ("small", "large"):
        key = f"lstm_{size}"
        if key not in res:
            continue
        cfg = SIZES[size]
        base = res[key]["numpy (hand-written BPTT)"]["ms_per_step"]
        L += [f"### LSTM training step, {size}: H={cfg['H']} B={cfg['B']} T={cfg['T']}, float32 "
              f"(forward + gradients of all weights)", "",
              "| system | ms/step | µs/iteration | ÷ numpy | max rel. error of grads vs numpy |",
              "|---|---|---|---|---|"]
        for k, v in res[key].items():
            if "ms_per_step" not in v:
                L.append(f"| {k} | {v.get('error')} | | | |")
                continue
            ms = v["ms_per_step"]
            L.append(f"| {k} | {ms:.1f} | {ms * 1e3 / cfg['T']:.0f} | {ms / base:.2f}× | "
                     f"{v.get('max_rel_error', 0):.1e} |")
        L.append("")
    if "unroll" in res:
        L += ["### Dynamic loop vs static unrolling in dfc (LSTM H=64 B=16 T=50, training step)", "",
              "| graph | nodes | build s | ms/step | peak MiB (tracemalloc) |", "|---|---|---|---|---|"]
        for k, v in res["unroll"].items():
            L.append(f"| {k} | {v['nodes']} | {v['build_s']:.2f} | {v['ms_per_step']:.1f} | {v['peak_mb']:.1f} |")
        L.append("")
    if "pi" in res:
        L += ["### parallel_iterations sweep (independent matmul chains per iteration, general executor)", "",
              "| parallel_iterations | iterations/s | ÷ pi=1 |", "|---|---|---|"]
        base = res["pi"]["1"]
        for k, v in res["pi"].items():
            L.append(f"| {k} | {v:.0f} | {v / base:.2f}× |")
        L.append("")
    if "devices" in res:
        L += ["### Loop with a trivial body split over cpu devices (Figure 11 shape, 2 000 iterations)", "",
              "| devices | independent it/s | with barrier it/s |", "|---|---|---|"]
        for k in (1, 2, 4, 8):
            a = [r for r in res["devices"]["trivial_body"] if r["devices"] == k]
            ind = next(r for r in a if not r["barrier"])["iterations_per_s"]
            bar = next(r for r in a if r["barrier"])["iterations_per_s"]
            L.append(f"| {k} | {ind:,.0f} | {bar:,.0f} |")
        L += ["", "Pipeline across devices (Figure 12 shape): "
              + ", ".join(f"pi={r['parallel_iterations']}{' (1 device)' if r.get('one_device') else ''}: "
                          f"{r['iterations_per_s']:.0f} it/s" for r in res["devices"]["pipeline"]), ""]
    if "swap" in res:
        sw = res["swap"]
        L += [f"### Memory swapping on accel:0 (paper's Table 1 shape): LSTM B={sw['batch']} H={sw['hidden']}, "
              f"capacity {sw['capacity_bytes'] / 2 ** 20:.0f} MiB", "",
              "| T | no swap: ms/iteration | swap: ms/iteration (peak MiB) |", "|---|---|---|"]
        for r in sw["rows"]:
            def cell(v, peak=False):
                if v == "OOM":
                    return "out of memory"
                return f"{v['ms_per_iteration']:.2f}" + (f" ({v['peak_bytes'] / 2 ** 20:.1f})" if peak else "")
            L.append(f"| {r['length']} | {cell(r['no_swap'])} | {cell(r['swap'], True)} |")
        ov = sw.get("median_overhead_where_both_fit")
        L += ["", f"Longest sequence: {sw['longest']['no_swap']} without swapping, {sw['longest']['swap']} with "
              f"swapping" + (f"; swapping costs {ov * 100:+.1f}% per iteration where both fit." if ov is not None
                             else "."), ""]
    return "\n".join(L)


def save(res):
    with open(os.path.join(RESULTS, "latest.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    with open(os.path.join(RESULTS, "table.md"), "w") as f:
        f.write(table(res) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes only, 5 repetitions")
    ap.add_argument("--skip-competitors", action="store_true")
    ap.add_argument("--only", default="loop,lstm,unroll,pi,devices,swap")
    a = ap.parse_args(argv)
    only = set(a.only.split(","))
    os.makedirs(RESULTS, exist_ok=True)
    avail = {} if a.skip_competitors else competitors.ensure()
    res = {"machine": machine(), "competitors": avail}
    reps = 5
    sections = [("loop", lambda: bench_loop(reps, avail)),
                ("lstm_small", lambda: bench_lstm("small", reps, avail)),
                ("lstm_large", lambda: None if a.quick else bench_lstm("large", reps, avail)),
                ("unroll", lambda: bench_unroll(reps)),
                ("pi", lambda: {str(k): v for k, v in parallel_iterations.sweep().items()}),
                ("devices", lambda: devices.main(["--pipeline-iterations", "60"])),
                ("swap", lambda: swapping.main([]))]
    for key, fn in sections:
        if key.split("_")[0] not in only:
            continue
        value = fn()
        if value is not None:
            res[key] = value
            save(res)           # keep what is done if a later section fails
    print(table(res))

if __name__ == "__main__":
    main()
