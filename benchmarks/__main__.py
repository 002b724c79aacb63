"""Run every benchmark, write benchmarks/results/latest.json and benchmarks/results/table.md.

    pip install -e '.[bench]'          # jax and torch (CPU) for the comparisons
    python -m benchmarks [--quick] [--only research,trivial,ode,hmc,gru,fixed,lstm,unroll,pi,loop,devices,swap]
                         [--install-competitors]     # TensorFlow too, in benchmarks/.venv-competitors

Each workload is written the natural way in each system and run in the same process, timed
round-robin until the spread is known (benchmarks/harness.py); the table gives median, p25-p75 and
min-max over the repeats, and the conditions (cores, BLAS threads, versions, load) it ran under.
A system that is missing or refuses a workload (JAX's reverse mode through while_loop) is a row
saying so. The `research` section (benchmarks/research/) runs each research program in a fresh
process, dfc in its default mode, and gives compile time and steady state against JAX, PyTorch and
numpy with ratios.
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
from benchmarks import fixed_point, gru, harness, hmc, ode, trivial_loop
from benchmarks.research.__main__ import main as research_main, report as research_report
from benchmarks import lstm as dfc_lstm
from benchmarks.lstm_problem import SIZES, make_inputs, numpy_loss_and_grads, max_rel_error

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def machine():
    return {"machine": platform.machine(), "processor": platform.processor() or platform.machine(),
            "cpus": len(os.sched_getaffinity(0)), "python": platform.python_version(), "numpy": np.__version__,
            "date": time.strftime("%Y-%m-%d"), "conditions": harness.conditions()}


def bench_loop(reps, avail):
    """dfc's own execution paths on `i = i + 1` (the comparison with other systems is the trivial-loop
    workload, whose body no compiler can fold)."""
    r = loop_overhead.main(["--iterations", "100000", "--reps", str(reps)])
    rows = {"dfc in-graph (fused, threads)": r["threads"]["iterations_per_s"],
            "dfc in-graph (executor node by node, unfused)": r["executor"]["iterations_per_s"],
            "dfc in-graph (reference interpreter)": r["reference"]["iterations_per_s"],
            "dfc out-of-graph (Python loop, 1-step graph)": r["out_of_graph"]["iterations_per_s"]}
    for name in ():
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


def bench_lstm(size, reps, avail, rounds=3):
    """The LSTM comparison in `rounds` rounds, each timing every system once in turn (dfc and numpy here,
    the competitors in subprocesses), so a burst of load on the machine lands on all of them alike: per
    system the median of its round medians, and their range ("rounds_ms")."""
    per_round = [bench_lstm_round(size, reps, avail) for _ in range(rounds)]
    rows = {}
    for name in per_round[0]:           # every round has a row for every system
        runs = [r[name] for r in per_round]
        failed = [run for run in runs if "ms_per_step" not in run]
        if failed:                      # missing, or failed in some round: say why
            rows[name] = failed[0]
            continue
        ms = sorted(run["ms_per_step"] for run in runs)
        rows[name] = {"ms_per_step": statistics.median(ms), "rounds_ms": ms,
                      "max_rel_error": max(run.get("max_rel_error", 0.0) for run in runs)}
    return rows


def bench_lstm_round(size, reps, avail):
    cfg = SIZES[size]
    x, W, b = make_inputs(**cfg)
    d = dfc_lstm.run(size, reps)
    dW, db = d.pop("grads")
    _, ref_dW, ref_db = numpy_loss_and_grads(x, W, b)
    rows = {"numpy (hand-written BPTT)": {"ms_per_step": d["numpy_ms_per_step"], "max_rel_error": 0.0},
            "dfc (while_loop + dfc.gradients)": {"ms_per_step": d["ms_per_step"], "p25_ms": d["p25_ms"],
                                                 "p75_ms": d["p75_ms"], "max_rel_error": d["max_rel_error_vs_numpy"]}}
    if harness.compiled_available():
        c = dfc_lstm.run(size, reps, compile_loops=True)
        rows["dfc compiled (numba)"] = {"ms_per_step": c["ms_per_step"], "p25_ms": c["p25_ms"],
                                        "p75_ms": c["p75_ms"], "max_rel_error": c["max_rel_error_vs_numpy"]}
    else:
        rows["dfc compiled (numba)"] = {"error": "not in this checkout"}
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
    """Figure 14: the dynamic loop and the static unrolling on the same execution path (the executor node
    by node with its pool: an unrolled graph has no loop to fuse), plus the dynamic loop fused."""
    cfg = dict(H=64, B=16, T=50)
    x, W, b = make_inputs(**cfg)
    rows = {}
    for unrolled, fuse in ((False, False), (True, False), (False, True)):
        t0 = time.perf_counter()
        g = dfc_lstm.build(cfg["H"], cfg["B"], cfg["T"], unrolled)
        build_s = time.perf_counter() - t0
        import dfc
        s = dfc.Session(g, mode="threads", fuse_loops=fuse, compile_loops=False)
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
        q = statistics.quantiles(ts, n=4)
        name = ("static unrolling (Python loop)" if unrolled else "dynamic while_loop") + \
            (", fused (default path)" if fuse else ", executor node by node")
        rows[name] = {"ms_per_step": statistics.median(ts) * 1e3, "p25_ms": q[0] * 1e3, "p75_ms": q[2] * 1e3,
                      "peak_mb": peak / 2 ** 20, "nodes": g.num_nodes(), "build_s": build_s}
    return rows


def fmt(v, unit=""):
    if v is None:
        return "not installed"
    if isinstance(v, str):
        return v
    return f"{v:,.0f}{unit}" if v >= 100 else f"{v:.3g}{unit}"


WORKLOADS = (("trivial", trivial_loop), ("ode", ode), ("hmc", hmc), ("gru", gru), ("fixed", fixed_point))


def table(res):
    c = res["machine"]["conditions"]
    L = [f"Machine: {res['machine']['cpus']} cores {res['machine']['processor']}, {res['machine']['date']}; "
         f"BLAS threads: {c['blas_threads']}; numpy's OpenBLAS kernels: {c.get('blas_kernels', 'not recorded')}; "
         f"{c.get('malloc', 'malloc not recorded')}; "
         f"versions: "
         + ", ".join(f"{k} {v or 'not installed'}" for k, v in c["versions"].items())
         + f"; LSTM competitors: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in res["competitors"].items())
         + f". 1-minute load average at start {c['load_avg_at_start']:.1f}"
         + (f", at end {res['load_avg_at_end']:.1f}" if "load_avg_at_end" in res else "")
         + " (the machine is shared: other processes take cores).", ""]
    for r in res.get("reruns", ()):
        L += [f"Sections {r['sections']} rerun at {r['conditions']['date']} (`--merge`), load "
              f"{r['conditions']['load_avg_at_start']:.1f} at their start.", ""]
    if "research" in res:
        L.append(research_report(res["research"]))
    for key, mod in WORKLOADS:
        if key in res:
            L.append(mod.report(res[key]))
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
              "| system | ms/step: median of the rounds' medians (their range) | µs/iteration | ÷ numpy | "
              "max rel. error of grads vs numpy |",
              "|---|---|---|---|---|"]
        for k, v in res[key].items():
            if "ms_per_step" not in v:
                L.append(f"| {k} | {v.get('error')} | | | |")
                continue
            ms = v["ms_per_step"]
            spread = (f" ({v['rounds_ms'][0]:.1f}–{v['rounds_ms'][-1]:.1f}, {len(v['rounds_ms'])} rounds)"
                      if "rounds_ms" in v else f" ({v['p25_ms']:.1f}–{v['p75_ms']:.1f})" if "p25_ms" in v else "")
            L.append(f"| {k} | {ms:.1f}{spread} | {ms * 1e3 / cfg['T']:.0f} | {ms / base:.2f}× | "
                     f"{v.get('max_rel_error', 0):.1e} |")
        L.append("")
    if "unroll" in res:
        L += ["### Dynamic loop vs static unrolling in dfc (Figure 14 shape; LSTM H=64 B=16 T=50, training step)", "",
              "| graph, execution path | nodes | build s | ms/step median (p25–p75) | peak MiB (tracemalloc) |",
              "|---|---|---|---|---|"]
        for k, v in res["unroll"].items():
            L.append(f"| {k} | {v['nodes']} | {v['build_s']:.2f} | {v['ms_per_step']:.1f} ({v['p25_ms']:.1f}–"
                     f"{v['p75_ms']:.1f}) | {v['peak_mb']:.1f} |")
        L.append("")
    if "pi" in res:
        L.append(parallel_iterations.report(res["pi"]))
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
              f"capacity {sw['capacity_bytes'] / 2 ** 20:.0f} MiB, {sw['reps']} runs per cell", "",
              "| T | no swap: ms/iteration median (p25–p75) | swap: ms/iteration median (p25–p75), peak MiB | "
              "swap ÷ no swap − 1 |", "|---|---|---|---|"]
        for r in sw["rows"]:
            def cell(v, peak=False):
                if v == "OOM":
                    return "out of memory"
                return (f"{v['ms_per_iteration']:.2f} ({v['p25']:.2f}–{v['p75']:.2f})"
                        + (f", {v['peak_bytes'] / 2 ** 20:.1f}" if peak else ""))
            ov = f"{r['overhead'] * 100:+.0f}%" if "overhead" in r else "—"
            L.append(f"| {r['length']} | {cell(r['no_swap'])} | {cell(r['swap'], True)} | {ov} |")
        ov, rng = sw.get("median_overhead_where_both_fit"), sw.get("overhead_range_where_both_fit")
        L += ["", f"Longest sequence: {sw['longest']['no_swap']} without swapping, {sw['longest']['swap']} with "
              f"swapping" + (f"; where both fit (T = {', '.join(map(str, sw['lengths_where_both_fit']))}) swapping "
                             f"costs {ov * 100:+.0f}% per iteration (median over lengths; range {rng[0] * 100:+.0f}% "
                             f"to {rng[1] * 100:+.0f}%)." if ov is not None else "."), ""]
    return "\n".join(L)


def save(res):
    with open(os.path.join(RESULTS, "latest.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    with open(os.path.join(RESULTS, "table.md"), "w") as f:
        f.write(table(res) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes only, fewer repetitions")
    ap.add_argument("--install-competitors", action="store_true",
                    help="install tensorflow-cpu, jax and torch into benchmarks/.venv-competitors for the LSTM rows")
    ap.add_argument("--only", default="research,trivial,ode,hmc,gru,fixed,lstm,unroll,pi,loop,devices,swap")
    ap.add_argument("--merge", action="store_true", help="update these sections of results/latest.json, keep the rest")
    ap.add_argument("--swap-lengths", default="10,15,20,25,30,40,50,100,200,300",
                    help="sequence lengths of the swapping section")
    ap.add_argument("--swap-capacity-mb", default="8", help="accel:0's capacity in the swapping section")
    a = ap.parse_args(argv)
    only = set(a.only.split(","))
    kernels = harness.blas_kernels()
    print(f"numpy's OpenBLAS runs its {kernels} kernels", flush=True)
    if "pinned" in kernels:
        print("  (a current numpy picks its own when both variables are unset for this command: "
              "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks)", flush=True)
    os.makedirs(RESULTS, exist_ok=True)
    avail = competitors.ensure(install=a.install_competitors)
    res = {"machine": machine(), "competitors": avail}
    if a.merge and os.path.exists(os.path.join(RESULTS, "latest.json")):
        with open(os.path.join(RESULTS, "latest.json")) as f:
            old = json.load(f)
        res = dict(old, **{k: v for k, v in res.items() if k != "machine"})
        res["reruns"] = old.get("reruns", []) + [{"sections": a.only, "conditions": machine()["conditions"]}]
    reps = 5
    wl = ["--reps", str(reps)] + (["--budget", "5"] if a.quick else [])
    sections = [("research", lambda: research_main(["--settle", "4" if a.quick else "8", "--budget",
                                                    "3" if a.quick else "6"])),
                ("trivial", lambda: trivial_loop.main(wl + (["--iterations", "20000"] if a.quick else []))),
                ("ode", lambda: ode.main(wl)),
                ("hmc", lambda: hmc.main(wl + (["--samples", "60"] if a.quick else []))),
                ("gru", lambda: gru.main(wl)),
                ("fixed", lambda: fixed_point.main(wl)),
                ("lstm_small", lambda: bench_lstm("small", reps, avail)),
                ("lstm_large", lambda: None if a.quick else bench_lstm("large", reps, avail)),
                ("unroll", lambda: bench_unroll(reps)),
                ("pi", lambda: parallel_iterations.run_subprocess(**({"size": 384, "n_iter": 8, "rounds": 3}
                                                                      if a.quick else {}))),
                ("loop", lambda: bench_loop(reps, avail)),
                ("devices", lambda: devices.main(["--pipeline-iterations", "60"])),
                ("swap", lambda: swapping.main(["--capacity-mb", a.swap_capacity_mb, "--reps", "3" if a.quick else "5",
                                                "--lengths", a.swap_lengths]))]
    for key, fn in sections:
        if key.split("_")[0] not in only:
            continue
        print(f"== {key}", flush=True)
        value = fn()
        if value is not None:
            res[key] = value
            res["load_avg_at_end"] = os.getloadavg()[0]
            save(res)           # keep what is done if a later section fails
    print(table(res))


if __name__ == "__main__":
    main()
