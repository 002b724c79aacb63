"""What every workload benchmark shares: the conditions of a run, timing until the spread is known, the
systems it compares (dfc fused / dfc compiled / numpy / JAX / PyTorch), and the table it prints.

Timing: the systems of one workload are timed round-robin (one call of each, then again), so a burst of
load on a shared machine hits all of them alike; each system gets at least `reps` timed calls after its
warm-up, and more (up to `max_reps`, within `budget_s`) while the interquartile range is still wider
than 10% of the median. Reported: median, p25-p75 and min-max over the repeats, and the first call
(trace/compile + run) separately.
"""
import importlib
import os
import platform
import statistics
import time

import numpy as np

# PyTorch's OpenMP threads spin after each op by default, taking cores from whatever is timed next in
# the round-robin; passive waiting keeps the comparison fair (set before torch is imported).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Every system runs under the malloc settings dfc's first Session makes (dfc/runtime/host_memory.py), from
# the start of the run: numpy, PyTorch and XLA's CPU buffers come from the same glibc malloc.
from dfc.runtime.host_memory import keep_freed_memory     # noqa: E402
MALLOC = keep_freed_memory()


def versions():
    out = {"python": platform.python_version(), "numpy": np.__version__}
    for name in ("jax", "torch", "numba", "dfc"):
        try:
            out[name] = getattr(importlib.import_module(name), "__version__", "installed")
        except Exception:       # noqa: BLE001 — not installed (or broken): reported as such
            out[name] = None
    return out


def blas_threads():
    """The BLAS thread settings of this process's environment (as numpy's OpenBLAS reads them)."""
    set_ = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
            if os.environ.get(k) is not None}
    text = ", ".join(f"{k}={v}" for k, v in set_.items()) or "library default (all cores)"
    return text + f"; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}"


def blas_kernels():
    """Which kernels numpy's OpenBLAS runs ("SkylakeX", "Haswell", ...: threadpoolctl reads it from the
    loaded library) and the variables that chose them. Some of this project's machines pin older OpenBLAS
    builds to Haswell in their environment (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE); a current numpy picks its
    AVX-512 kernels when both are unset for the benchmark command (docs/benchmarks.md)."""
    try:
        from threadpoolctl import threadpool_info
        core = next((lib.get("architecture") for lib in threadpool_info() if lib.get("internal_api") == "openblas"),
                    "not OpenBLAS")
    except ImportError:
        core = "unknown (threadpoolctl not installed)"
    pinned = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    return core + (f" (pinned by {', '.join(f'{k}={v}' for k, v in pinned.items())})" if pinned else " (detected)")


def conditions():
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    return {"cores": cores, "cpu": platform.processor() or platform.machine(), "blas_threads": blas_threads(),
            "blas_kernels": blas_kernels(), "malloc": MALLOC,
            "versions": versions(), "load_avg_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def compiled_available():
    """Whether this checkout has the numba-compiled loop path (Session(compile_loops=True))."""
    import inspect
    import dfc
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return "compile_loops" in inspect.signature(dfc.Session.__init__).parameters


def stats(times):
    ts = sorted(times)
    q = statistics.quantiles(ts, n=4) if len(ts) >= 2 else [ts[0]] * 3
    return {"median_ms": statistics.median(ts) * 1e3, "p25_ms": q[0] * 1e3, "p75_ms": q[2] * 1e3,
            "min_ms": ts[0] * 1e3, "max_ms": ts[-1] * 1e3, "n": len(ts)}


def compare(systems, reps=5, max_reps=25, budget_s=30.0):
    """systems: name -> a System. Time them round-robin; name -> stats (or {"error": ...})."""
    out, live = {}, {}
    for name, sysm in systems.items():
        if sysm.error is not None:
            out[name] = {"error": sysm.error, "note": sysm.note}
            continue
        try:
            t = time.perf_counter()
            sysm.result = sysm.fn()                 # first call: trace / compile + run
            first = time.perf_counter() - t
            sysm.fn()                               # warm-up
        except Exception as e:      # noqa: BLE001 — a system that fails is reported, not fatal
            out[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}",
                         "note": sysm.note}
            continue
        live[name] = (sysm, first, [])
    start = time.perf_counter()
    rounds = 0
    while live:
        rounds += 1
        for name, (sysm, _, ts) in live.items():
            t = time.perf_counter()
            sysm.fn()
            ts.append(time.perf_counter() - t)
        if rounds < reps:
            continue
        spreads = [(stats(ts)["p75_ms"] - stats(ts)["p25_ms"]) / max(stats(ts)["median_ms"], 1e-9)
                   for _, _, ts in live.values()]
        if rounds >= max_reps or max(spreads) <= 0.10 or time.perf_counter() - start > budget_s:
            break
    for name, (sysm, first, ts) in live.items():
        out[name] = dict(stats(ts), first_call_s=first, note=sysm.note)
    return {name: out[name] for name in systems}


class System:
    """One way to run a workload: fn() runs it once and returns its result (numpy values); `error` set when
    the system cannot run it at all (not installed, or the framework refuses: the message is the row)."""

    def __init__(self, fn=None, note="", error=None):
        self.fn, self.note, self.error, self.result = fn, note, error, None


def try_system(make, note=""):
    """System from make() -> fn, turning an ImportError or a framework's refusal at build time into a row."""
    try:
        return System(make(), note)
    except ImportError as e:
        return System(note=note, error=f"not installed ({e.name})")
    except Exception as e:      # noqa: BLE001
        return System(note=note, error=f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")


def jax_fails(fn):
    """The error a JAX transformation raises when called (reverse mode through lax.while_loop), or None."""
    try:
        fn()
    except Exception as e:      # noqa: BLE001
        msg = str(e).splitlines()[0] if str(e) else ""
        return f"{type(e).__name__}: {msg[:160]}"
    return None


def traced(function, *args):
    """(graph of a dfc.function for these arguments, a note saying how long tracing took)."""
    t = time.perf_counter()
    g = function.trace(*args)
    return g, f"trace {time.perf_counter() - t:.2f} s (not in first call)"


def dfc_sessions(graph):
    """name -> Session for each dfc execution path measured: the fused Python one (compile_loops=False)
    and, when this checkout has it, the numba-compiled one (compiled on the first call, in this process).
    The library's default, "auto", runs fused and then compiled once a child process has compiled the
    frame: its steady state is the compiled row, its first calls the fused one."""
    import dfc
    out = {"dfc (fused Python)": dfc.Session(graph, compile_loops=False)}
    if compiled_available():
        out["dfc (compiled, numba)"] = dfc.Session(graph, compile_loops=True)
    return out


def forward_and_gradient(forward, gradient, a, numpy_forward):
    """(forward systems, gradient systems) of a workload with a forward and a gradient dfc.function called
    on the arguments `a`: every dfc path of each (dfc_sessions), the numpy forward, and the row saying numpy
    has no hand-written adjoint. Competitors are added by the caller."""
    g_fwd, note_fwd = traced(forward, *a)
    g_grad, note_grad = traced(gradient, *a)
    fwd = {name: System(lambda s=s: s.call(*a), note_fwd) for name, s in dfc_sessions(g_fwd).items()}
    grad = {name: System(lambda s=s: s.call(*a)[1:], note_grad) for name, s in dfc_sessions(g_grad).items()}
    fwd["numpy by hand"] = System(lambda: numpy_forward(*a))
    grad["numpy by hand"] = System(error="— (no hand-written adjoint)")
    return fwd, grad


def table(title, rows, base="dfc (fused Python)", extra=None):
    """Markdown for one workload: median [p25-p75] ms, ratio to `base`, first call."""
    b = rows.get(base, {}).get("median_ms")
    L = [f"#### {title}", "", "| system | median ms | p25–p75 ms | min–max ms | n | ÷ dfc fused | first call s | note |",
         "|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        if "error" in r:
            L.append(f"| {name} | — | | | | | | {r['error']}{'; ' + r['note'] if r.get('note') else ''} |")
            continue
        ratio = f"{r['median_ms'] / b:.3g}×" if b else "—"
        L.append(f"| {name} | {_f(r['median_ms'])} | {_f(r['p25_ms'])}–{_f(r['p75_ms'])} | "
                 f"{_f(r['min_ms'])}–{_f(r['max_ms'])} | {r['n']} | {ratio} | {r['first_call_s']:.2f} | "
                 f"{r.get('note', '')} |")
    if extra:
        L += ["", extra]
    return "\n".join(L + [""])


def _f(ms):
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"


def check_close(results, ref_name, rtol, atol=0.0):
    """Every system's result equals the reference system's within rtol; name -> max relative error."""
    ref = results[ref_name]
    out = {}
    for name, r in results.items():
        if r is None:
            continue
        errs = []
        for a, b in zip(_flat(r), _flat(ref)):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            errs.append(float(np.max(np.abs(a - b) / (np.abs(b) + atol + 1e-30))) if a.size else 0.0)
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{name} vs {ref_name}")
        out[name] = max(errs) if errs else 0.0
    return out


def _flat(x):
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flat(v)]
    if isinstance(x, dict):
        return [y for k in sorted(x) for y in _flat(x[k])]
    return [np.asarray(x)]
