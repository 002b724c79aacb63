"""The design question of dfc's compiled path, measured: the XLA prototype (dfc/runtime/xla/, a whole run
through jax.jit) against dfc's numba path (Session(compile_loops=True)), its fused Python path
(compile_loops=False) and the same program written in JAX directly, on three programs with gradients
through data-dependent while loops:

- fixed point: `while diff >= tol`, d=16, float64, gradient wrt W and b (JAX: jacfwd; reverse is refused);
- ODE: adaptive Heun-Euler with accept/reject (a cond inside the loop), float64, gradient wrt y0 and mu
  (JAX: jacfwd);
- GRU: variable-length GRU classifier training step, float32, `range(reduce_max(lengths))`
  (JAX: lax.scan over the padded length + value_and_grad).

Each system runs alone in a fresh process (`--child PROGRAM SYSTEM`): its first call (compile + run; numba
with an empty cache directory, plus one process with the cache the last one filled), then up to `--reps`
timed calls after a warm-up. `--procs` processes per system, the systems interleaved. Alone, because in
one process the systems' thread pools (XLA's, OpenBLAS's) disturb the one timed next. The dfc first calls
exclude tracing the dfc.function to a graph (its own column); JAX's include its tracing. CPU time
(time.process_time: every thread of the process) is given beside wall time: on a loaded machine it says
what each call costs, where the wall time also says how long it waited for a core. Both XLA rows run with
synchronous CPU dispatch (the prototype's setting).

    python -m benchmarks.xla_vs_numba [--reps 20] [--procs 3] [--programs fixed_point,ode,gru]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import harness

SYSTEMS = ("dfc fused", "dfc numba", "dfc XLA prototype", "JAX by hand")


def _program(name):
    """(inputs, dfc.function, hand-written JAX factory -> fn(*inputs) -> numpy results, results of interest)."""
    if name == "fixed_point":
        from benchmarks import fixed_point as m

        def jax_hand():
            jax, _, _, jac = m._jax()
            return lambda *a: [np.asarray(v) for v in jax.block_until_ready(jac(*a))]
        return m.inputs(), m.fixed_point_gradient, jax_hand, lambda r: list(r[1:])
    if name == "ode":
        from benchmarks import ode as m

        def jax_hand():
            jax, _, _, jac, _ = m._jax()
            return lambda *a: [np.asarray(v) for v in jax.block_until_ready(jac(*a))]
        return m.inputs(), m.ode_gradient, jax_hand, lambda r: list(r[1:])
    if name == "gru":
        from benchmarks import gru as m

        return m.inputs(), m.gru_step, m._jax, _flat
    raise SystemExit(f"unknown program {name!r} (fixed_point, ode, gru)")


def _flat(r):
    if isinstance(r, (list, tuple)):
        return [y for v in r for y in _flat(v)]
    return [np.asarray(r)]


def _make(system, name):
    """(fn() -> results of interest, seconds spent tracing the dfc.function)."""
    a, function, jax_hand, pick = _program(name)
    if system == "JAX by hand":
        f = jax_hand()
        return (lambda: _flat(f(*a))), 0.0
    t = time.perf_counter()
    g = function.trace(*a)
    trace_s = time.perf_counter() - t
    import dfc
    if system == "dfc fused":
        s = dfc.Session(g, compile_loops=False)
        return (lambda: _flat(pick(s.call(*a)))), trace_s
    if system == "dfc numba":
        s = dfc.Session(g, compile_loops=True)
        return (lambda: _flat(pick(s.call(*a)))), trace_s
    if system == "dfc XLA prototype":
        from dfc.runtime.xla import to_jax
        prog = to_jax(g)
        return (lambda: _flat(pick(prog(*a)))), trace_s
    raise SystemExit(f"unknown system {system!r}")


def measure(system, name, reps, budget):
    """Child process: the first call of `system` on `name` (compile), then up to `reps` timed calls after a
    warm-up (within `budget` seconds), and the results, as JSON."""
    if system == "JAX by hand":      # the prototype's setting (dfc/runtime/xla/__init__.py), for parity
        import jax
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    fn, trace_s = _make(system, name)
    t = time.perf_counter()
    result = fn()
    first = time.perf_counter() - t
    times, cpu = [], []
    if reps:
        fn()
        start = time.perf_counter()
        while len(times) < reps and (len(times) < 3 or time.perf_counter() - start < budget):
            t, c = time.perf_counter(), time.process_time()
            fn()
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    return {"first_s": first, "trace_s": trace_s, "times": times, "cpu": cpu,
            "result": [np.asarray(r).tolist() for r in result]}


def _child(system, name, env, reps, budget):
    out = subprocess.run([sys.executable, "-m", "benchmarks.xla_vs_numba", "--child", name, system,
                          "--reps", str(reps), "--budget", str(budget)],
                         capture_output=True, text=True, env=env, timeout=1200)
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_program(name, procs, reps, budget):
    """system -> first calls and steady-state times over `procs` fresh processes per system (the systems
    interleaved, so a burst of load on the shared machine hits them alike); each process measures one
    system alone. numba gets an empty cache directory in each (a cold compile) and one more process with the
    cache the last one filled (warm)."""
    runs = {s: [] for s in SYSTEMS}
    warm = {}
    for k in range(procs):
        for system in SYSTEMS:
            if runs[system] is None:
                continue
            env = dict(os.environ)
            env.pop("NUMBA_CACHE_DIR", None)
            with tempfile.TemporaryDirectory() as cache:
                env["DFC_CACHE_DIR"] = cache
                r = _child(system, name, env, reps, budget)
                if "error" in r:
                    runs[system] = r
                    continue
                runs[system].append(r)
                if system == "dfc numba" and k == procs - 1:
                    warm[system] = _child(system, name, env, 0, 0)
    out = {}
    ref = runs["dfc fused"][0]["result"] if isinstance(runs["dfc fused"], list) else None
    for system, rs in runs.items():
        if isinstance(rs, dict):
            out[system] = rs
            continue
        fs = [r["first_s"] for r in rs]
        row = dict(harness.stats([t for r in rs for t in r["times"]]), first_median_s=statistics.median(fs),
                   first_min_s=min(fs), first_max_s=max(fs), procs=len(rs),
                   trace_s=statistics.median(r["trace_s"] for r in rs))
        row["proc_medians_ms"] = [statistics.median(r["times"]) * 1e3 for r in rs]
        row["cpu_median_ms"] = statistics.median(c for r in rs for c in r["cpu"]) * 1e3
        if system in warm and "error" not in warm[system]:
            row["warm_cache_s"] = warm[system]["first_s"]
        if ref is not None:
            row["max_rel_err"] = max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))
                                                  / (np.abs(np.asarray(y)) + 1e-6)))
                                     for x, y in zip(rs[0]["result"], ref))
        out[system] = row
    return out


def table(name, rows):
    base = rows.get("dfc numba", {}).get("median_ms")
    jx = rows.get("JAX by hand", {}).get("median_ms")
    L = [f"#### {name}", "",
         "| system | steady median ms | p25–p75 ms | min–max ms | n | per-process medians ms | CPU median ms "
         "| ÷ numba | ÷ JAX | first call s: median (min–max) | dfc trace s | max rel. err vs fused |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for system in SYSTEMS:
        r = rows.get(system, {})
        if "error" in r:
            L.append(f"| {system} | — | | | | | | | | | | {r['error']} |")
            continue
        ratio = (lambda b: f"{r['median_ms'] / b:.3g}×" if b else "—")
        fc = f"{r['first_median_s']:.2f} ({r['first_min_s']:.2f}–{r['first_max_s']:.2f})"
        if "warm_cache_s" in r:
            fc += f"; warm cache {r['warm_cache_s']:.2f}"
        L.append(f"| {system} | {r['median_ms']:.3g} | {r['p25_ms']:.3g}–{r['p75_ms']:.3g} | "
                 f"{r['min_ms']:.3g}–{r['max_ms']:.3g} | {r['n']} ({r['procs']} proc.) | "
                 f"{', '.join(f'{m:.3g}' for m in r['proc_medians_ms'])} | {r['cpu_median_ms']:.3g} | "
                 f"{ratio(base)} | {ratio(jx)} | {fc} | "
                 f"{r['trace_s']:.2f} | {r.get('max_rel_err', float('nan')):.1e} |")
    return "\n".join(L + [""])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=2, metavar=("PROGRAM", "SYSTEM"))
    ap.add_argument("--reps", type=int, default=20, help="timed calls per process")
    ap.add_argument("--procs", type=int, default=3, help="fresh processes per system and program")
    ap.add_argument("--budget", type=float, default=10.0, help="seconds of timed calls per process (at least 3)")
    ap.add_argument("--programs", default="fixed_point,ode,gru")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child[1], args.child[0], args.reps, args.budget)))
        return
    print(f"conditions: {json.dumps(harness.conditions())}\n")
    for name in args.programs.split(","):
        load0 = os.getloadavg()[0]
        rows = run_program(name, args.procs, args.reps, args.budget)
        print(table(f"{name}: load average {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end", rows), flush=True)


if __name__ == "__main__":
    main()
