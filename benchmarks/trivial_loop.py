"""The trivial loop, with a body XLA cannot fold into a closed form: a linear congruential generator,
`x = (x * 1103515245 + 12345) % 2**31`, n times (int64). `i = i + 1` alone lets a compiler replace the
loop by its result; this one must run every iteration.

    python -m benchmarks.trivial_loop [--iterations 100000] [--reps 5]
"""
import argparse

import numpy as np

import dfc
from benchmarks import harness
from benchmarks.harness import System, try_system

A, C, M = 1103515245, 12345, 2 ** 31


@dfc.function
def lcg(x, n):
    i = 0
    while i < n:
        x = (x * A + C) % M
        i += 1
    return x


def numpy_lcg(x, n):
    i = np.int64(0)
    while i < n:
        x = (x * A + C) % M
        i += 1
    return x


def python_lcg(x, n):
    x = int(x)
    for _ in range(int(n)):
        x = (x * A + C) % M
    return np.int64(x)


def _jax():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def run(x, n):
        return jax.lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, (s[1] * A + C) % M),
                                  (jnp.int64(0), x))[1]
    f = jax.jit(run)
    return lambda x, n: np.asarray(jax.block_until_ready(f(x, n)))


def _torch():
    import torch

    def run(x, n):
        i = torch.tensor(0)
        while i < n:
            x = (x * A + C) % M
            i += 1
        return x.numpy()
    return lambda x, n: run(torch.tensor(x), torch.tensor(n))


def systems(n):
    a = (np.int64(1), np.int64(n))
    g, note = harness.traced(lcg, *a)
    out = {}
    for name, s in harness.dfc_sessions(g).items():
        out[name] = System(lambda s=s: s.call(*a), note)
    out["numpy scalars by hand"] = System(lambda: numpy_lcg(*a))
    out["plain Python ints"] = System(lambda: python_lcg(*a))
    out["JAX jit (lax.while_loop)"] = try_system(lambda: (lambda f: lambda: f(*a))(_jax()))
    out["PyTorch eager"] = try_system(lambda: (lambda f: lambda: f(*a))(_torch()))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=30.0)
    args = ap.parse_args(argv)
    sy = systems(args.iterations)
    res = {"rows": harness.compare(sy, args.reps, budget_s=args.budget), "iterations": args.iterations}
    res["max_rel_error"] = harness.check_close({k: s.result for k, s in sy.items() if s.result is not None},
                                               "plain Python ints", rtol=0)
    return res


def report(res):
    n = res["iterations"]
    rows = res["rows"]
    extra = "Iterations/s: " + ", ".join(f"{k}: {n / (r['median_ms'] / 1e3):,.0f}" for k, r in rows.items()
                                        if "median_ms" in r)
    return harness.table(f"Trivial loop, {n:,} iterations of x = (x * 1103515245 + 12345) % 2**31 (int64)", rows,
                         extra=extra)


if __name__ == "__main__":
    print(report(main()))
