"""Measure one research case in this process (benchmarks/research/__main__.py starts one fresh process per
case, with an empty DFC_CACHE_DIR): dfc's first call in the default mode and its calls over the next
`settle` seconds as a user meets them, the correctness check, then JAX's first call (trace + compile)
and the steady state of dfc, JAX, PyTorch and numpy timed round-robin (benchmarks/harness.py).
Prints one JSON line.

    python -m benchmarks.research.run NAME [--size bench|tiny] [--settle 8] [--budget 6] [--compile-loops MODE]

dfc runs in the library's default mode: the benchmarks package sets DFC_COMPILE_LOOPS=0 for its other
workloads (benchmarks/__init__.py), so this process removes it again before any Session is made
(--compile-loops auto|0|1 sets it instead).
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

from benchmarks import harness
from benchmarks.harness import System


def error_text(e):
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {first[:300]}"


def compare_results(ref, got, rtol, atol):
    """(max abs error, max relative error, agree?) over the leaves of two results."""
    a, b = harness._flat(ref), harness._flat(got)
    if len(a) != len(b):
        return None, None, False
    abs_err = rel_err = 0.0
    ok = True
    for x, y in zip(a, b):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.shape != y.shape:
            return None, None, False
        if x.size:
            d = np.abs(x - y)
            abs_err = max(abs_err, float(d.max()))
            rel_err = max(rel_err, float((d / (np.abs(x) + 1e-30)).max()))
            ok = ok and bool(np.allclose(y, x, rtol=rtol, atol=atol))
    return abs_err, rel_err, ok


def _graph_sessions():
    """The Sessions dfc made for this process's `graph(...)` calls (dfc.runtime.session.session_for)."""
    from dfc.runtime import session
    return [s for by in list(session._sessions.values()) for s in by.values()]


def frame_runs():
    """How the loop frames dfc could compile ran so far in this process: {"compiled": runs, "fused": runs},
    summed over the compiled-frame objects of every Session dfc made for `graph(...)` calls (a frame
    nested in a compiled one is counted with it; frames dfc cannot compile are not counted)."""
    counts = {"compiled": 0, "fused": 0}
    for s in _graph_sessions():
        for plan in list(s._plans.values()):
            progs = list((getattr(plan, "programs", None) or {}).values()) + [getattr(plan, "root_program", None)]
            for prog in progs:
                runs = getattr(prog, "runs", None)
                if isinstance(runs, dict):
                    for k in counts:
                        counts[k] += runs.get(k, 0)
    return counts


def xla_runs():
    """Session.compiled_runs() of every Session of this process's `graph(...)` calls: how each run compiled
    to XLA (state, reason, compile seconds, whether it came from the disk cache)."""
    return [r for s in _graph_sessions() for r in s.compiled_runs()]


def not_compiled():
    """[(frame, status, blocked_by, reason)] for each loop frame dfc does not compile (Session.compiled_frames:
    what `dfc show --fused` says), over the Sessions of this process's `graph(...)` calls."""
    out = []
    for s in _graph_sessions():
        try:
            frames = s.compiled_frames()
        except Exception as e:      # noqa: BLE001 — reported, not fatal
            out.append(("?", "explain failed", None, error_text(e)))
            continue
        for name, info in frames.items():
            if info["status"] != "compiled":
                out.append((name, info["status"], info.get("blocked_by"), (info.get("reason") or "")[:300]))
    return out


def compiles():
    """[(frame, seconds, how)] of the compiles this process used (in the background, in process, or
    loaded from the disk cache)."""
    from dfc.runtime import compiled
    return [(c["frame"], c["seconds"], "background" if c.get("background") else "cache" if c["cached"] else "here")
            for c in compiled.stats()]


def background_jobs():
    """[(frame, state, seconds, error)] of the background compiles dfc started in this process (default
    mode): state "running" (seconds so far), "compiled" or "failed" (the end of the child's stderr)."""
    from dfc.runtime.compiled import background
    out = []
    for job in list(background._jobs):
        done = job.poll()
        state = "running" if done is None else "compiled" if done else "failed"
        secs = time.perf_counter() - job.started if done is None else job.seconds
        out.append((job.frame, state, secs, (job.error or "")[-300:] or None))
    return out


def _diff(after, before):
    return {k: after[k] - before[k] for k in after}


def measure(case, settle_s, budget_s):
    out = {"name": case.name, "description": case.description, "note": case.note,
           "compile_loops": os.environ.get("DFC_COMPILE_LOOPS", "default"),
           "load_avg_at_start": os.getloadavg()[0], "dfc": {}, "checks": []}
    # dfc in the default mode, first in this fresh process: the first call traces, plans and runs.
    dfc_ok = True
    t = time.perf_counter()
    try:
        case.dfc_call()
        out["dfc"]["first_call_s"] = time.perf_counter() - t
        times, reached = [], None
        start = time.perf_counter()
        while (len(times) < 3 or time.perf_counter() - start < settle_s) and len(times) < 1000:
            t = time.perf_counter()
            case.dfc_call()
            times.append(time.perf_counter() - t)
            if reached is None and any(r["state"] == "compiled" for r in xla_runs()):
                reached = time.perf_counter() - start + out["dfc"]["first_call_s"]
        out["dfc"]["compiled_after_s"] = reached
        out["dfc"]["settle"] = {"calls": len(times), "seconds": time.perf_counter() - start,
                                "first_calls_median_ms": statistics.median(times[:5]) * 1e3,
                                "last_calls_median_ms": statistics.median(times[-5:]) * 1e3,
                                "frame_runs": frame_runs()}
    except Exception as e:      # noqa: BLE001 — a program dfc fails on is a result
        dfc_ok = False
        out["dfc"]["error"] = error_text(e)
        out["dfc"]["failed_after_s"] = time.perf_counter() - t
    try:
        for label, ref, got in case.check():
            abs_err, rel_err, ok = compare_results(ref, got, case.rtol, case.atol)
            out["checks"].append({"label": label, "max_abs_error": abs_err, "max_rel_error": rel_err, "ok": ok})
    except Exception as e:      # noqa: BLE001
        out["checks"].append({"label": "check", "error": error_text(e), "ok": False})
    systems = {}
    if dfc_ok:
        systems["dfc"] = System(case.dfc_call)
    for key, build, note in (("jax", case.jax, case.jax_note), ("torch", case.torch, case.torch_note),
                             ("numpy", case.numpy, case.numpy_note)):
        if build is None:
            out[key] = {"error": "—", "note": note}
            continue
        if key != "numpy":
            sysm = harness.try_system(build, note)
        else:
            sysm = System(build, note)
        if sysm.error is None:
            t = time.perf_counter()
            try:
                sysm.fn()
                out[key] = {"first_call_s": time.perf_counter() - t, "note": note}
            except Exception as e:      # noqa: BLE001
                sysm.error = error_text(e)
        if sysm.error is not None:
            out[key] = {"error": sysm.error, "note": note}
            continue
        systems[key] = sysm
    before = frame_runs() if dfc_ok else None
    rows = harness.compare(systems, reps=5, max_reps=25, budget_s=budget_s)
    for key, r in rows.items():
        if "error" in r:
            out[key] = dict(out.get(key, {}), error=r["error"])
            continue
        steady = {k: r[k] for k in ("median_ms", "p25_ms", "p75_ms", "min_ms", "max_ms", "n")}
        out[key] = dict(out.get(key, {}), steady=steady)
    if dfc_ok:
        out["dfc"]["frame_runs_steady"] = _diff(frame_runs(), before)
        out["dfc"]["compiles"] = compiles()
        out["dfc"]["not_compiled"] = not_compiled()
        out["dfc"]["xla_runs"] = xla_runs()
        out["dfc"]["background_jobs"] = background_jobs()
    out["load_avg_at_end"] = os.getloadavg()[0]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("--size", default="bench", choices=("bench", "tiny"))
    ap.add_argument("--settle", type=float, default=8.0, help="seconds of dfc calls after its first one")
    ap.add_argument("--budget", type=float, default=6.0, help="seconds of round-robin timing at most")
    ap.add_argument("--compile-loops", default="default", choices=("default", "auto", "0", "1"),
                    help="DFC_COMPILE_LOOPS for dfc (default: unset, the library's default)")
    a = ap.parse_args(argv)
    if a.compile_loops == "default":
        os.environ.pop("DFC_COMPILE_LOOPS", None)
    else:
        os.environ["DFC_COMPILE_LOOPS"] = a.compile_loops
    from benchmarks.research import all_cases
    case = next(c for c in all_cases(a.size) if c.name == a.name)
    print(json.dumps(measure(case, a.settle, a.budget), default=float), flush=True)


if __name__ == "__main__":
    main()
