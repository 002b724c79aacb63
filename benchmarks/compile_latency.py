"""Compile latency of dfc's compiled loops against JAX's trace + compile, in fresh processes.

For each program (a MAML-like inner loop with a tensor number of steps and its meta-gradient; the adaptive
ODE integrator's gradient from benchmarks/ode.py) it measures, each in a new Python process:

- jax:   JAX's first call of the jitted program (trace + compile + one run) and a steady call;
- cold:  dfc's first call with compile_loops=True and an empty disk cache (compile + run) — target: at most
         2x JAX's first call;
- warm:  the same in a second process with the cache the first one filled — target: under 1 s; what it
         loaded (cache hits per frame) is printed with it;
- auto:  the default mode (compile_loops="auto": the run compiled whole by XLA in a background thread),
         empty cache, called in a loop for --auto-seconds with --hogs busy processes (default: one per
         core) competing for the CPUs: how long until it ran compiled by itself, and its call times
         before, during and after the background compile;
- auto-warm: the default mode in a second process with the cache the auto run filled — target: compiled
         speed on its first call in under 1 s (the XLA executable comes from the disk cache).

    python -m benchmarks.compile_latency [--programs maml,ode] [--hogs N] [--auto-seconds 60] [--json FILE]

Every figure is wall time on this machine under its current load; the hogs are plain `while True` loops.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

PROGRAMS = ("maml", "ode")


# --- the programs ---------------------------------------------------------------------------------------

def _maml():
    import dfc

    def inner_loss(w, x, y):
        h = dfc.tanh(dfc.matmul(x, w))
        return dfc.reduce_mean((h - y) * (h - y))

    @dfc.function
    def maml(w, x, y, xq, yq, n, lr):
        fast = w
        i = 0
        while i < n:
            g = dfc.gradients(inner_loss(fast, x, y), [fast])[0]
            fast = fast - lr * g
            i = i + 1
        outer = inner_loss(fast, xq, yq)
        return outer, dfc.gradients(outer, [w])[0]
    return maml, _maml_args()


def _maml_args():
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)    # noqa: E731
    return f(32, 8), f(64, 32), f(64, 8), f(64, 32), f(64, 8), np.int64(5), np.float32(0.1)


def _maml_jax():
    import jax
    import jax.numpy as jnp

    def inner_loss(w, x, y):
        h = jnp.tanh(x @ w)
        return jnp.mean((h - y) ** 2)

    def outer(w, x, y, xq, yq, n, lr):
        # JAX cannot differentiate a while_loop in reverse: the step count is static (a new trace per n)
        fast = jax.lax.fori_loop(0, n, lambda i, f: f - lr * jax.grad(inner_loss)(f, x, y), w)
        return inner_loss(fast, xq, yq)
    f = jax.jit(jax.value_and_grad(outer), static_argnums=(5,))
    a = _maml_args()
    return lambda: jax.block_until_ready(f(*a[:5], int(a[5]), a[6]))


def _ode():
    from benchmarks import ode
    return ode.ode_gradient, ode.inputs()


def _ode_jax():
    from benchmarks import ode
    jax, _, _, jacfwd, _ = ode._jax()      # its reverse mode refuses the while_loop: forward mode
    a = ode.inputs()
    return lambda: jax.block_until_ready(jacfwd(*a))


def _dfc_program(name):
    return {"maml": _maml, "ode": _ode}[name]()


def _jax_program(name):
    return {"maml": _maml_jax, "ode": _ode_jax}[name]()


# --- what one child process measures ---------------------------------------------------------------------

def _child(name, what, seconds):
    if what == "jax":
        t = time.perf_counter()
        run = _jax_program(name)
        run()
        first = time.perf_counter() - t
        t = time.perf_counter()
        run()
        return {"first_s": first, "steady_s": time.perf_counter() - t}
    import dfc
    from dfc.runtime import compiled
    fn, args = _dfc_program(name)
    g = fn.trace(*args)
    if what in ("cold", "warm"):
        s = dfc.Session(g, compile_loops=True)
        t, c = time.perf_counter(), time.process_time()
        s.call(*args)
        first, cpu = time.perf_counter() - t, time.process_time() - c
        t = time.perf_counter()
        s.call(*args)
        return {"first_s": first, "first_cpu_s": cpu, "steady_s": time.perf_counter() - t,
                "loaded": [(st["frame"], "cache" if st["cached"] else "compiled", round(st["seconds"], 2))
                           for st in compiled.stats()]}
    s = dfc.Session(g, compile_loops="auto")    # the library default (benchmarks/__init__.py sets 0)
    if what == "auto-warm":
        t = time.perf_counter()
        s.call(*args)
        first = time.perf_counter() - t
        t = time.perf_counter()
        s.call(*args)
        return {"first_s": first, "second_s": time.perf_counter() - t, "runs": s.compiled_runs()}
    calls, t0 = [], time.perf_counter()
    compiled_at = None
    while time.perf_counter() - t0 < seconds:
        t = time.perf_counter()
        s.call(*args)
        calls.append((t - t0, time.perf_counter() - t))
        if compiled_at is None and _runs_compiled(s, args):
            compiled_at = time.perf_counter() - t0
            if len(calls) > 3 and time.perf_counter() - t0 > 2 * compiled_at:
                break
        if compiled_at is not None and time.perf_counter() - t0 > compiled_at + 3:
            break
    bg = [st for st in compiled.stats() if st.get("background")]
    bg += [{"seconds": r["compile_seconds"]} for r in s.compiled_runs() if r["compile_seconds"]]
    import resource
    from dfc.runtime.compiled import background
    background._stop_all()      # (the children's CPU time counts once they are reaped)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"compiled_at_s": compiled_at, "children_cpu_s": kids.ru_utime + kids.ru_stime, "runs": s.compiled_runs(),
            "kept": {f.name: "fused (compiled was slower)" if getattr(f, "slower_compiled", False) else
                     "compiled" if f.runs["compiled"] else "fused" for f in _frames(s)}, "calls": calls, "background_s": [st["seconds"] for st in bg],
            "errors": [getattr(f, "_job", None) and f._job.error for f in _frames(s, args)
                       if getattr(getattr(f, "_job", None), "error", None)]}


def _frames(s, args=None):
    from dfc.runtime.compiled import CompiledFrame
    out = []
    for plan in s._plans.values():         # (one plan: the one signature called)
        out += [p for p in getattr(plan, "programs", {}).values() if isinstance(p, CompiledFrame)]
        root = getattr(plan, "root_program", None)
        out += [root] if isinstance(root, CompiledFrame) else []
    return out


def _runs_compiled(s, args):
    """Whether the last call ran compiled: the whole run (by XLA, or numba), or every compiled loop frame."""
    if any(r["state"] == "compiled" for r in s.compiled_runs()):
        return True
    fs = _frames(s, args)
    root = [f for f in fs if f.name == "(root)"]
    if root and root[0].runs["compiled"]:
        return True
    loops = [f for f in fs if f.name != "(root)"]
    return bool(loops) and all(f.runs["compiled"] for f in loops)


# --- the parent: fresh processes, caches and hogs --------------------------------------------------------

def _spawn(name, what, cache, seconds=0.0):
    env = dict(os.environ, DFC_CACHE_DIR=cache)
    env.pop("DFC_COMPILE_LOOPS", None)
    out = subprocess.run([sys.executable, "-m", "benchmarks.compile_latency", "--child", name, what, str(seconds)],
                         env=env, capture_output=True, text=True, timeout=seconds + 900)
    if out.returncode != 0:
        return {"error": out.stderr[-1500:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _hogs(n):
    code = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def _phases(res):
    """Median call times before the background compile started, while it ran and after the switch to
    compiled code (the child's start is the switch minus the child's wall time), and the slowest call."""
    calls, at = res.get("calls", []), res.get("compiled_at_s")
    bg = res.get("background_s") or []
    start = at - bg[0] if at is not None and bg else None
    before = [d for t, d in calls if start is None or t + d <= start]
    during = [d for t, d in calls if start is not None and t + d > start and (at is None or t + d < at)]
    after = [d for t, d in calls if at is not None and t >= at]
    med = lambda v: float(np.median(v)) if v else None    # noqa: E731
    return {"before": (med(before[1:] or before), len(before)), "during": (med(during), len(during)),
            "after": (med(after[1:] or after), len(after)), "slowest": max((d for _, d in calls), default=None)}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--auto-seconds", type=float, default=60.0)
    ap.add_argument("--skip", default="", help="comma-separated: jax,cold,warm,auto")
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_child(a.child[0], a.child[1], float(a.child[2]))))
        return
    skip = set(filter(None, a.skip.split(",")))
    results = {}
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for name in a.programs.split(","):
        r = results[name] = {}
        with tempfile.TemporaryDirectory() as cache:
            if "jax" not in skip:
                r["jax"] = _spawn(name, "jax", cache)
                print(f"{name}: jax first call (trace + compile + run) {_s(r['jax'], 'first_s')}, "
                      f"steady {_s(r['jax'], 'steady_s', 1e3, 'ms')}")
            if "cold" not in skip:
                r["cold"] = _spawn(name, "cold", cache)
                print(f"{name}: dfc compiled first call, empty cache {_s(r['cold'], 'first_s')} "
                      f"({_s(r['cold'], 'first_cpu_s')} CPU) "
                      f"(steady {_s(r['cold'], 'steady_s', 1e3, 'ms')}) {r['cold'].get('loaded', r['cold'])}")
            if "warm" not in skip:
                r["warm"] = _spawn(name, "warm", cache)
                print(f"{name}: dfc compiled first call, second process, warm cache {_s(r['warm'], 'first_s')} "
                      f"{r['warm'].get('loaded', r['warm'])}")
        if "auto" not in skip:
            with tempfile.TemporaryDirectory() as cache:
                hogs = _hogs(a.hogs)
                try:
                    r["auto"] = _spawn(name, "auto", cache, a.auto_seconds)
                finally:
                    for h in hogs:
                        h.kill()
                        h.wait()
                r["auto-warm"] = _spawn(name, "auto-warm", cache)
            w = r["auto-warm"]
            print(f"{name}: default mode, second process, warm cache: first call {_s(w, 'first_s')}, second "
                  f"{_s(w, 'second_s', 1e3, 'ms')}; {[(x['state'], 'from disk' if x.get('from_disk') else 'compiled here') for x in w.get('runs', [])]}")
            res = r["auto"]
            ph = r["auto_phases"] = _phases(res)
            at = res.get("compiled_at_s")
            print(f"{name}: auto with {a.hogs} busy processes: "
                  + (f"compiled after {at:.1f} s" if at is not None else f"not compiled within {a.auto_seconds:.0f} s")
                  + f"; background compile {res.get('background_s')} s; median call "
                  + ", ".join(f"{_ms(ph[k][0])} {k} ({ph[k][1]} calls)" for k in ("before", "during", "after"))
                  + f"; slowest call {_ms(ph['slowest'])}; compiling children {_s(res, 'children_cpu_s')} CPU"
                  + f"; in the end {[x['state'] for x in res.get('runs', [])] or res.get('kept')}"
                  + f" {res.get('errors') or ''}" + (res.get("error", "") or ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


def _s(r, key, scale=1.0, unit="s"):
    return f"{r[key] * scale:.3g} {unit}" if key in r else f"(failed: {r.get('error', '')[-300:]})"


def _ms(x):
    return "-" if x is None else f"{x * 1e3:.1f} ms"


if __name__ == "__main__":
    main()
