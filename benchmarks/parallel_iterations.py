"""parallel_iterations sweep (§6.1, Figure 12 shape) on dfc's default execution path.

Each iteration does independent heavy work (a chain of 3 matmul+tanh on its own scaled copy of `a`),
summed into an accumulator. With parallel_iterations=1 the loop runs fused, iterations back to back;
with more, the frame runs on the general path and overlaps iterations on the kernel pool
(dfc/runtime/overlap.py). BLAS is single-threaded (OPENBLAS_NUM_THREADS=1, set before numpy loads:
this module re-runs itself in a subprocess), so any speed-up comes from overlapping iterations.
The sweep is interleaved (one call per setting per round) and reports median and spread per setting.

    python -m benchmarks.parallel_iterations [--size 768] [--iterations 16] [--rounds 7] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BLAS_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def build(n_iter, size):
    import numpy as np
    import dfc

    def f(a):
        def body(i, acc):
            m = a * dfc.cast(i + 1, "float32")
            for _ in range(3):
                m = dfc.tanh(m @ a)
            return i + 1, acc + dfc.reduce_sum(m)
        return dfc.while_loop(lambda i, acc: i < n_iter, body, (0, dfc.constant(np.float32(0))))[1]
    return dfc.trace(f, dfc.TensorSpec([size, size], "float32"))


def sweep(pis=(1, 2, 4, 8, 32), n_iter=16, size=768, rounds=7):
    """In this process (BLAS threads as the environment says): pi -> iteration rates over the rounds."""
    import numpy as np
    import dfc
    g = build(n_iter, size)
    a = (np.random.default_rng(0).standard_normal((size, size)) / size).astype(np.float32)
    sessions = {pi: dfc.Session(g, parallel_iterations=pi) for pi in pis}
    ref = None
    for pi, s in sessions.items():
        v = s.call(a)
        ref = v if ref is None else ref
        np.testing.assert_array_equal(v, ref)      # overlapping iterations changes no value
    rates, cpu = {pi: [] for pi in pis}, {pi: [] for pi in pis}
    for _ in range(rounds):
        for pi, s in sessions.items():
            t, c = time.perf_counter(), time.process_time()
            s.call(a)
            wall = time.perf_counter() - t
            rates[pi].append(n_iter / wall)
            cpu[pi].append((time.process_time() - c) / wall)     # cores this process kept busy
    fused = {pi: bool(next(iter(s._plans.values())).programs) for pi, s in sessions.items()}
    return {"rates": rates, "cpu": cpu, "fused": fused, "pool_threads": next(iter(sessions.values()))._num_threads,
            "load_avg": os.getloadavg()}


def summarize(raw):
    rates = {int(k): v for k, v in raw["rates"].items()}
    base = statistics.median(rates[1])
    out = {}
    for pi, r in rates.items():
        r = sorted(r)
        q = statistics.quantiles(r, n=4)
        out[pi] = {"median_it_s": statistics.median(r), "p25": q[0], "p75": q[2], "min": r[0], "max": r[-1],
                   "n": len(r), "speedup": statistics.median(r) / base, "fused": raw["fused"][str(pi)],
                   "busy_cores": statistics.median(raw["cpu"][str(pi)])}
    return out


def run_subprocess(size=768, n_iter=16, rounds=7, timeout=1200):
    """The sweep with single-threaded BLAS, in a fresh interpreter; returns the summarized rows."""
    env = dict(os.environ, **BLAS_ENV)
    r = subprocess.run([sys.executable, "-m", "benchmarks.parallel_iterations", "--inline", "--size", str(size),
                        "--iterations", str(n_iter), "--rounds", str(rounds)], capture_output=True, text=True,
                       env=env, timeout=timeout, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if r.returncode:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    raw = json.loads(r.stdout.strip().splitlines()[-1])
    return {"rows": summarize(raw), "size": size, "iterations": n_iter, "pool_threads": raw["pool_threads"],
            "blas_threads": BLAS_ENV, "load_avg_1min_after": raw["load_avg"][0], "cores": len(os.sched_getaffinity(0))}


def report(res):
    if "error" in res:
        return f"#### parallel_iterations sweep\n\nfailed: {res['error']}\n"
    L = [f"#### parallel_iterations sweep (Figure 12 shape): {res['iterations']} iterations, each 3× matmul+tanh "
         f"of {res['size']}×{res['size']} float32, single-threaded BLAS, kernel pool of {res['pool_threads']} threads",
         f"on {res['cores']} cores; 1-minute load average after the sweep: {res['load_avg_1min_after']:.1f} (other "
         f"processes on the machine take cores from the overlap)",
         "", "| parallel_iterations | path | median it/s | p25–p75 | min–max | n | ÷ pi=1 | busy cores (CPU s / wall s) |",
         "|---|---|---|---|---|---|---|---|"]
    for pi, r in sorted(res["rows"].items(), key=lambda kv: int(kv[0])):
        L.append(f"| {pi} | {'fused' if r['fused'] else 'general (overlapping)'} | {r['median_it_s']:.2f} | "
                 f"{r['p25']:.2f}–{r['p75']:.2f} | {r['min']:.2f}–{r['max']:.2f} | {r['n']} | {r['speedup']:.2f}× | "
                 f"{r['busy_cores']:.2f} |")
    return "\n".join(L + [""])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=768)
    ap.add_argument("--iterations", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--inline", action="store_true", help="run here, with this process's BLAS threads")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.inline:
        print(json.dumps(sweep(n_iter=a.iterations, size=a.size, rounds=a.rounds)))
        return None
    res = run_subprocess(a.size, a.iterations, a.rounds)
    print(report(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
