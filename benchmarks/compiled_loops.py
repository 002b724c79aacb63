"""Compiled loop frames (Session(compile_loops=True), numba) against the fused Python path, on every
benchmark workload, forward and gradient programs, with JAX / PyTorch / numpy rows from each workload's
own module (`--competitors`):

- which loop frames of each program compile (Session.compiled_frames(); the node that blocks the others),
  and how its frames actually ran (compiled, or fused: values the compiled code cannot take, replays);
- the time per call (round-robin, until the spread is known: benchmarks/harness.py), and the first call
  (numba's compile, or its load from the disk cache) with the compile seconds per frame;
- micro-workloads: the trivial `x = x * 0.5 + 1.0` loop and a small-op fixed-point step.

Run twice to see the disk cache: the second process loads the machine code instead of compiling.
DFC_COMPILED_FUSION=0 compiles op by op (no elementwise groups: dfc/runtime/compiled/fusion.py), the
baseline for what grouping gains.

    python -m benchmarks.compiled_loops [--reps 5] [--only ode,hmc,...] [--competitors] [--quick]
"""
import argparse
import json
import os

import numpy as np

import dfc
from benchmarks import harness
from benchmarks.harness import System

FUSED, COMPILED = "dfc (fused Python)", "dfc (compiled, numba)"


@dfc.function
def trivial(x, n):
    i = 0
    while i < n:
        x = x * 0.5 + 1.0
        i += 1
    return x


@dfc.function
def small_op(x, b, n):
    i = 0
    r = dfc.reduce_max(dfc.abs(x))
    while i < n:
        x_new = 0.5 * dfc.cos(x) + b
        r = dfc.reduce_max(dfc.abs(x_new - x))
        x = x_new
        i += 1
    return x, r


def _dfc_only(graph, call):
    return {name: System(lambda s=s: call(s), "") for name, s in harness.dfc_sessions(graph).items()}


def workloads(quick):
    """name -> (graph, systems thunk) for every workload; graphs traced here, systems built lazily."""
    from benchmarks import fixed_point, gru, hmc, lstm, lstm_problem, ode, trivial_loop
    out = {}
    a = ode.inputs(2.0 if quick else 10.0)
    fwd, grad = (lambda a=a: ode.systems(a)), None
    out["ode forward"] = (ode.ode_forward.trace(*a), lambda fwd=fwd: fwd()[0], a)
    out["ode gradient"] = (ode.ode_gradient.trace(*a), lambda a=a: ode.systems(a)[1], a)
    a = hmc.inputs(60 if quick else 300)
    out["hmc"] = (hmc.hmc.trace(*a), lambda a=a: hmc.systems(a), a)
    a = gru.inputs()
    out["gru step"] = (gru.gru_step.trace(*a), lambda a=a: gru.systems(a), a)
    a = fixed_point.inputs()
    out["fixed-point forward"] = (fixed_point.fixed_point.trace(*a), lambda a=a: fixed_point.systems(a)[0], a)
    out["fixed-point gradient"] = (fixed_point.fixed_point_gradient.trace(*a),
                                   lambda a=a: fixed_point.systems(a)[1], a)
    n = 20_000 if quick else 100_000
    out["trivial (lcg)"] = (trivial_loop.lcg.trace(np.int64(1), np.int64(n)),
                            lambda n=n: trivial_loop.systems(n), (np.int64(1), np.int64(n)))
    cfg = lstm_problem.SIZES["small"]
    a = lstm_problem.make_inputs(cfg["H"], cfg["B"], cfg["T"])
    g = lstm.build(cfg["H"], cfg["B"], cfg["T"])
    out["lstm small step"] = (g, lambda g=g, a=a: dict(
        _dfc_only(g, lambda s: s.call(*a)), **{"numpy by hand (BPTT)": System(
            lambda: lstm_problem.numpy_loss_and_grads(*a))}), a)
    a = (np.float64(1.0), np.int64(n))
    out["micro: x = x*0.5+1"] = (trivial.trace(*a), lambda a=a: dict(
        _dfc_only(trivial.trace(*a), lambda s: s.call(*a)), **{"numpy by hand": System(lambda: _np_trivial(*a))}), a)
    a = (np.array([0.3, -0.2]), np.array([0.1, 0.4]), np.int64(n))
    out["micro: small-op step"] = (small_op.trace(*a), lambda a=a: dict(
        _dfc_only(small_op.trace(*a), lambda s: s.call(*a)), **{"numpy by hand": System(lambda: _np_small(*a))}), a)
    return out


def _np_trivial(x, n):
    for _ in range(int(n)):
        x = x * 0.5 + 1.0
    return x


def _np_small(x, b, n):
    r = np.max(np.abs(x))
    for _ in range(int(n)):
        x_new = 0.5 * np.cos(x) + b
        r = np.max(np.abs(x_new - x))
        x = x_new
    return x, r


def frames(graph):
    """frame name -> "compiled" | "fused (blocked by NODE (OP): reason)" | "not fused: reason"."""
    out = {}
    for name, v in dfc.Session(graph, compile_loops=True).compiled_frames().items():
        if v.get("nested"):
            out[name] = v["status"] + " (nested)"
        elif v["status"] == "fused":
            b = v["blocked_by"]
            op = graph.nodes[b].op if b in graph.nodes else "?"
            out[name] = f"fused (blocked by {b} ({op}): {v['reason']})"
        else:
            out[name] = v["status"] + (f": {v['reason']}" if v["reason"] else "")
    return out


def _ran(session):
    """How the compiled session's frames ran: frame -> {"compiled": n, "fused": n}."""
    from dfc.runtime.compiled import CompiledFrame
    out = {}
    for plan in session._plans.values():
        for prog in getattr(plan, "programs", {}).values():
            if isinstance(prog, CompiledFrame) and any(prog.runs.values()):     # (nested frames run inside)
                out[prog.name] = dict(prog.runs)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=20.0)
    ap.add_argument("--only", default="", help="comma-separated substrings of workload names")
    ap.add_argument("--competitors", action="store_true", help="also numpy / JAX / PyTorch rows")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    from dfc.runtime import compiled
    res = {"conditions": harness.conditions(), "workloads": {}}
    for name, (graph, make, _) in workloads(args.quick).items():
        if args.only and not any(k in name for k in args.only.split(",")):
            continue
        load0 = os.getloadavg()[0]
        systems = make()
        if not args.competitors and not name.startswith("micro"):
            systems = {k: v for k, v in systems.items() if k in (FUSED, COMPILED)}
        n_stats = len(compiled.stats())
        rows = harness.compare(systems, args.reps, budget_s=args.budget)
        session = getattr(systems.get(COMPILED), "fn", None)
        s = session.__defaults__[0] if session is not None and session.__defaults__ else None
        res["workloads"][name] = {
            "frames": frames(graph), "rows": rows,
            "ran": _ran(s) if isinstance(s, dfc.Session) else {},
            "compile_s": [(st["frame"], round(st["seconds"], 2), st["cached"]) for st in compiled.stats()[n_stats:]],
            "load_avg": [round(load0, 2), round(os.getloadavg()[0], 2)],
            "max_rel_error": _check(systems)}
        print(report_one(name, res["workloads"][name]), flush=True)
    path = os.path.join(os.path.dirname(__file__), "results", "compiled_loops.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1, default=str)
    return res


def _check(systems):
    """The compiled path gives the fused path's result exactly (max relative difference, 0.0 expected)."""
    a, b = systems.get(FUSED), systems.get(COMPILED)
    if a is None or b is None or a.result is None or b.result is None:
        return None
    return harness.check_close({FUSED: a.result, COMPILED: b.result}, FUSED, rtol=0)[COMPILED]


def report_one(name, r):
    head = ", ".join(f"{k}: {v}" for k, v in r["frames"].items())
    comp = ", ".join(f"{f} {s:.2f} s{' (disk cache)' if c else ''}" for f, s, c in r["compile_s"]) or "none"
    ran = ", ".join(f"{f} {v['compiled']}× compiled / {v['fused']}× fused" for f, v in r["ran"].items())
    extra = (f"Frames: {head}. Ran: {ran or '—'}. First-call compile: {comp}. Load average "
             f"{r['load_avg'][0]} → {r['load_avg'][1]}. Compiled vs fused max rel. difference: {r['max_rel_error']}")
    return harness.table(f"Compiled loops: {name}", r["rows"], extra=extra)


def report(res):
    return "\n".join(report_one(k, v) for k, v in res["workloads"].items())


if __name__ == "__main__":
    main()
