"""Adaptive-step ODE integration: Heun–Euler (order 2 with an order-1 error estimate) with accept/reject,
on Van der Pol (2 states, parameter mu), float64. Forward (the final state) and the gradient of the
final state's sum with respect to the initial state and mu, through every step, accepted or not.

The dfc version is the program a researcher writes (`while t < t_end:`, `if err <= tol:`); JAX needs
lax.while_loop + jnp.where, and its reverse mode refuses the loop (recorded), so its gradient is
jacfwd; PyTorch runs it eagerly with autograd; numpy by hand is the forward only.

    python -m benchmarks.ode [--reps 5] [--t-end 10]
"""
import argparse

import numpy as np

import dfc
from benchmarks import harness
from benchmarks.harness import System, try_system


def vdp(y, mu):
    return dfc.stack([y[1], mu * (1.0 - y[0] * y[0]) * y[1] - y[0]])


def integrate(y0, mu, t_end, tol):
    t = 0.0
    h = 0.01
    y = y0
    while t < t_end:
        h = dfc.minimum(h, t_end - t)
        k1 = vdp(y, mu)
        k2 = vdp(y + h * k1, mu)
        err = dfc.reduce_max(dfc.abs(0.5 * h * (k2 - k1)))
        if err <= tol:
            t = t + h
            y = y + 0.5 * h * (k1 + k2)
        h = h * dfc.clip(0.9 * dfc.sqrt(tol / (err + 1e-16)), 0.2, 5.0)
    return y


@dfc.function
def ode_forward(y0, mu, t_end, tol):
    return integrate(y0, mu, t_end, tol)


@dfc.function
def ode_gradient(y0, mu, t_end, tol):
    y = integrate(y0, mu, t_end, tol)
    dy0, dmu = dfc.gradients(dfc.reduce_sum(y), [y0, mu])
    return y, dy0, dmu


def inputs(t_end=10.0):
    return np.array([2.0, 0.0]), np.float64(1.0), np.float64(t_end), np.float64(1e-4)


def numpy_forward(y0, mu, t_end, tol):
    def f(y):
        return np.array([y[1], mu * (1.0 - y[0] * y[0]) * y[1] - y[0]])
    t, h, y = 0.0, 0.01, y0.copy()
    while t < t_end:
        h = min(h, t_end - t)
        k1 = f(y)
        k2 = f(y + h * k1)
        err = np.max(np.abs(0.5 * h * (k2 - k1)))
        if err <= tol:
            t = t + h
            y = y + 0.5 * h * (k1 + k2)
        h = h * min(max(0.9 * np.sqrt(tol / (err + 1e-16)), 0.2), 5.0)
    return y


def steps_taken(y0, mu, t_end, tol):
    """(accepted, rejected) steps of the integration (for the table's conditions)."""
    def f(y):
        return np.array([y[1], mu * (1.0 - y[0] * y[0]) * y[1] - y[0]])
    t, h, y, acc, rej = 0.0, 0.01, y0.copy(), 0, 0
    while t < t_end:
        h = min(h, t_end - t)
        k1, k2 = f(y), f(y + h * f(y))
        err = np.max(np.abs(0.5 * h * (k2 - k1)))
        if err <= tol:
            t, y, acc = t + h, y + 0.5 * h * (k1 + k2), acc + 1
        else:
            rej += 1
        h = h * min(max(0.9 * np.sqrt(tol / (err + 1e-16)), 0.2), 5.0)
    return acc, rej


def _jax():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def integrate_jax(y0, mu, t_end, tol):
        def f(y):
            return jnp.stack([y[1], mu * (1.0 - y[0] * y[0]) * y[1] - y[0]])

        def body(s):
            t, h, y = s
            h = jnp.minimum(h, t_end - t)
            k1 = f(y)
            k2 = f(y + h * k1)
            err = jnp.max(jnp.abs(0.5 * h * (k2 - k1)))
            ok = err <= tol
            t = jnp.where(ok, t + h, t)
            y = jnp.where(ok, y + 0.5 * h * (k1 + k2), y)
            return t, h * jnp.clip(0.9 * jnp.sqrt(tol / (err + 1e-16)), 0.2, 5.0), y
        return jax.lax.while_loop(lambda s: s[0] < t_end, body, (jnp.float64(0.0), jnp.float64(0.01), y0))[2]

    def total(y0, mu, t_end, tol):
        return integrate_jax(y0, mu, t_end, tol).sum()
    return jax, jax.jit(integrate_jax), jax.jit(jax.grad(total, argnums=(0, 1))), \
        jax.jit(jax.jacfwd(total, argnums=(0, 1))), integrate_jax


def _torch():
    import torch

    def integrate_torch(y0, mu, t_end, tol):
        def f(y):
            return torch.stack([y[1], mu * (1.0 - y[0] * y[0]) * y[1] - y[0]])
        t = torch.tensor(0.0, dtype=torch.float64)
        h = torch.tensor(0.01, dtype=torch.float64)
        y = y0
        while t < t_end:
            h = torch.minimum(h, t_end - t)
            k1 = f(y)
            k2 = f(y + h * k1)
            err = torch.max(torch.abs(0.5 * h * (k2 - k1)))
            if err <= tol:
                t = t + h
                y = y + 0.5 * h * (k1 + k2)
            h = h * torch.clamp(0.9 * torch.sqrt(tol / (err + 1e-16)), 0.2, 5.0)
        return y
    return torch, integrate_torch


def systems(a):
    """(forward systems, gradient systems): name -> System."""
    y0, mu, t_end, tol = a
    fwd, grad = harness.forward_and_gradient(ode_forward, ode_gradient, a, numpy_forward)

    def jax_fwd():
        jax, f, _, _, _ = _jax()
        return lambda: np.asarray(jax.block_until_ready(f(*a)))

    def jax_rev():
        jax, _, g, _, _ = _jax()
        err = harness.jax_fails(lambda: g(*a))
        if err is not None:
            raise RuntimeError(f"reverse mode fails: {err}")
        return lambda: [np.asarray(v) for v in jax.block_until_ready(g(*a))]

    def jax_fwd_mode():
        jax, _, _, j, _ = _jax()
        return lambda: [np.asarray(v) for v in jax.block_until_ready(j(*a))]
    fwd["JAX jit (lax.while_loop)"] = try_system(jax_fwd)
    grad["JAX jit grad (reverse)"] = try_system(jax_rev)
    grad["JAX jit jacfwd (forward mode)"] = try_system(jax_fwd_mode, "forward mode: one pass per input")

    def torch_fwd():
        torch, f = _torch()
        ta = [torch.tensor(v) for v in a]
        return lambda: f(*ta).numpy()

    def torch_grad():
        torch, f = _torch()

        def run():
            y0t = torch.tensor(y0, requires_grad=True)
            mut = torch.tensor(mu, requires_grad=True)
            y = f(y0t, mut, torch.tensor(t_end), torch.tensor(tol))
            dy0, dmu = torch.autograd.grad(y.sum(), [y0t, mut])
            return [dy0.numpy(), dmu.numpy()]
        return run
    fwd["PyTorch eager"] = try_system(torch_fwd)
    grad["PyTorch eager (autograd)"] = try_system(torch_grad)
    return fwd, grad


def check(fwd, grad):
    """dfc's results equal numpy's / JAX's / PyTorch's (each system's first-call result)."""
    errs = harness.check_close({k: s.result for k, s in fwd.items() if s.result is not None},
                               "numpy by hand", rtol=1e-9, atol=1e-12)
    errs.update(harness.check_close({k: s.result for k, s in grad.items() if s.result is not None},
                                    "dfc (fused Python)", rtol=1e-7, atol=1e-10))
    return errs


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--t-end", type=float, default=10.0)
    ap.add_argument("--budget", type=float, default=30.0)
    args = ap.parse_args(argv)
    a = inputs(args.t_end)
    fwd, grad = systems(a)
    res = {"forward": harness.compare(fwd, args.reps, budget_s=args.budget),
           "gradient": harness.compare(grad, args.reps, budget_s=args.budget)}
    res["max_rel_error"] = check(fwd, grad)
    acc, rej = steps_taken(*a)
    res["conditions"] = f"Van der Pol mu=1, t_end={args.t_end:g}, tol=1e-4, float64: {acc} accepted + {rej} rejected steps"
    return res


def report(res):
    return (harness.table("Adaptive-step ODE (Heun–Euler, accept/reject), forward: " + res["conditions"],
                          res["forward"]) + "\n" +
            harness.table("Adaptive-step ODE, gradient of sum(final state) wrt (initial state, mu)",
                          res["gradient"]))


if __name__ == "__main__":
    print(report(main()))
