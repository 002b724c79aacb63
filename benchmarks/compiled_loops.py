"""Compiled loop frames (Session(compile_loops=True), numba) against the fused Python path and numpy by
hand, on loops of many tiny ops, in iterations/s:

- trivial: `x = x * 0.5 + 1.0` on a float64 scalar, n times (the loop's own overhead);
- small-op: a damped fixed-point iteration on a 2-vector, `x = 0.5 * cos(x) + b` with the residual
  `max |x_new - x|` computed every step, n times (elementwise math, a transcendental, a reduction).

First-call time (trace excluded; the compile, or loading it from the disk cache) is reported per system.
Run twice to see the disk cache: the second process loads the machine code instead of compiling.

    python -m benchmarks.compiled_loops [--iterations 100000] [--reps 5]
"""
import argparse

import numpy as np

import dfc
from benchmarks import harness
from benchmarks.harness import System


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


def numpy_trivial(x, n):
    i = 0
    while i < n:
        x = x * 0.5 + 1.0
        i += 1
    return x


def numpy_small_op(x, b, n):
    i = 0
    r = np.max(np.abs(x))
    while i < n:
        x_new = 0.5 * np.cos(x) + b
        r = np.max(np.abs(x_new - x))
        x = x_new
        i += 1
    return x, r


def _systems(fn, by_hand, args):
    g, note = harness.traced(fn, *args)
    out = {name: System(lambda s=s: s.call(*args), note) for name, s in harness.dfc_sessions(g).items()}
    out["numpy by hand"] = System(lambda: by_hand(*args))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=20.0)
    args = ap.parse_args(argv)
    n = np.int64(args.iterations)
    res = {"iterations": args.iterations, "conditions": harness.conditions()}
    for name, fn, by_hand, a in [
            ("trivial", trivial, numpy_trivial, (np.float64(1.0), n)),
            ("small-op", small_op, numpy_small_op, (np.array([0.3, -0.2]), np.array([0.1, 0.4]), n))]:
        sy = _systems(fn, by_hand, a)
        res[name] = harness.compare(sy, args.reps, budget_s=args.budget)
        res[name + " max_rel_error"] = harness.check_close(
            {k: s.result for k, s in sy.items() if s.result is not None}, "numpy by hand", rtol=0)
    return res


def report(res):
    n = res["iterations"]
    out = []
    for name, title in [("trivial", "x = x * 0.5 + 1.0 (float64 scalar)"),
                        ("small-op", "x = 0.5 * cos(x) + b, residual max|x_new - x| (2-vector, float64)")]:
        rows = res[name]
        extra = "Iterations/s: " + ", ".join(f"{k}: {n / (r['median_ms'] / 1e3):,.0f}" for k, r in rows.items()
                                            if "median_ms" in r)
        out.append(harness.table(f"Compiled loops, {name}: {n:,} iterations of {title}", rows, extra=extra))
    return "\n".join(out)


if __name__ == "__main__":
    print(report(main()))
