"""Fixed-point solve `while not converged`: x = tanh(W x + b), d=16, float64, until the update is below
tol, then the gradient of sum(x*) with respect to W and b (272 inputs) through every iteration.

JAX's reverse mode refuses the while_loop (recorded); its gradient is jacfwd, one forward pass per input.

    python -m benchmarks.fixed_point [--reps 5]
"""
import argparse

import numpy as np

import dfc
from benchmarks import harness
from benchmarks.harness import System, try_system

D = 16


def solve(W, b, tol):
    x = dfc.zeros_like(b)
    diff = tol + 1.0
    while diff >= tol:
        x_new = dfc.tanh(dfc.matmul(W, x) + b)
        diff = dfc.reduce_max(dfc.abs(x_new - x))
        x = x_new
    return x


@dfc.function
def fixed_point(W, b, tol):
    return solve(W, b, tol)


@dfc.function
def fixed_point_gradient(W, b, tol):
    x = solve(W, b, tol)
    dW, db = dfc.gradients(dfc.reduce_sum(x), [W, b])
    return x, dW, db


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((D, D))
    W *= 0.9 / np.linalg.norm(W, 2)          # a contraction: the iteration converges
    return W, rng.standard_normal(D), np.float64(1e-10)


def numpy_solve(W, b, tol):
    x, diff, n = np.zeros_like(b), tol + 1.0, 0
    while diff >= tol:
        x_new = np.tanh(W @ x + b)
        diff = np.max(np.abs(x_new - x))
        x, n = x_new, n + 1
    return x


def iterations(W, b, tol):
    x, diff, n = np.zeros_like(b), tol + 1.0, 0
    while diff >= tol:
        x_new = np.tanh(W @ x + b)
        diff, x, n = np.max(np.abs(x_new - x)), x_new, n + 1
    return n


def _jax():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def solve_jax(W, b, tol):
        def body(s):
            x, _ = s
            x_new = jnp.tanh(W @ x + b)
            return x_new, jnp.max(jnp.abs(x_new - x))
        return jax.lax.while_loop(lambda s: s[1] >= tol, body, (jnp.zeros_like(b), tol + 1.0))[0]

    def total(W, b, tol):
        return solve_jax(W, b, tol).sum()
    return jax, jax.jit(solve_jax), jax.jit(jax.grad(total, argnums=(0, 1))), jax.jit(jax.jacfwd(total, argnums=(0, 1)))


def _torch_solve(torch, W, b, tol):
    x, diff = torch.zeros_like(b), tol + 1.0
    while diff >= tol:
        x_new = torch.tanh(W @ x + b)
        diff = torch.max(torch.abs(x_new - x))
        x = x_new
    return x


def systems(a):
    fwd, grad = harness.forward_and_gradient(fixed_point, fixed_point_gradient, a, numpy_solve)

    def jax_fwd():
        jax, f, _, _ = _jax()
        return lambda: np.asarray(jax.block_until_ready(f(*a)))

    def jax_rev():
        jax, _, g, _ = _jax()
        err = harness.jax_fails(lambda: g(*a))
        if err is not None:
            raise RuntimeError(f"reverse mode fails: {err}")
        return lambda: [np.asarray(v) for v in jax.block_until_ready(g(*a))]

    def jax_fwd_mode():
        jax, _, _, j = _jax()
        return lambda: [np.asarray(v) for v in jax.block_until_ready(j(*a))]
    fwd["JAX jit (lax.while_loop)"] = try_system(jax_fwd)
    grad["JAX jit grad (reverse)"] = try_system(jax_rev)
    grad["JAX jit jacfwd (forward mode)"] = try_system(jax_fwd_mode, f"forward mode: {D * D + D} input directions")

    def torch_fwd():
        import torch
        ta = [torch.tensor(v) for v in a]
        return lambda: _torch_solve(torch, *ta).numpy()

    def torch_grad():
        import torch

        def run():
            W = torch.tensor(a[0], requires_grad=True)
            b = torch.tensor(a[1], requires_grad=True)
            x = _torch_solve(torch, W, b, torch.tensor(a[2]))
            return [v.numpy() for v in torch.autograd.grad(x.sum(), [W, b])]
        return run
    fwd["PyTorch eager"] = try_system(torch_fwd)
    grad["PyTorch eager (autograd)"] = try_system(torch_grad)
    return fwd, grad


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=20.0)
    args = ap.parse_args(argv)
    a = inputs()
    fwd, grad = systems(a)
    res = {"forward": harness.compare(fwd, args.reps, budget_s=args.budget),
           "gradient": harness.compare(grad, args.reps, budget_s=args.budget)}
    errs = harness.check_close({k: s.result for k, s in fwd.items() if s.result is not None}, "numpy by hand",
                               rtol=1e-9, atol=1e-12)
    errs.update(harness.check_close({k: s.result for k, s in grad.items() if s.result is not None},
                                    "dfc (fused Python)", rtol=1e-7, atol=1e-10))
    res["max_rel_error"] = errs
    res["conditions"] = f"x = tanh(W x + b), d={D}, tol=1e-10, float64: {iterations(*a)} iterations"
    return res


def report(res):
    return (harness.table("Fixed-point solve `while diff >= tol`, forward: " + res["conditions"], res["forward"])
            + "\n" + harness.table("Fixed-point solve, gradient of sum(x*) wrt W and b (272 inputs)",
                                   res["gradient"]))


if __name__ == "__main__":
    print(report(main()))
