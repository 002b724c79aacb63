"""Hamiltonian Monte Carlo with a random-length leapfrog loop, float64, d=8.

Target: U(q) = 0.5 q A q + 0.25 sum(q^4) (A symmetric positive definite). Each sample draws a momentum,
runs n_leap[s] leapfrog steps (a data-dependent inner while loop; the gradient of U comes from
dfc.gradients inside it), and accepts or rejects. The random numbers (momenta, log-uniforms, leapfrog
lengths) are inputs, so every system computes the same chain and the results are compared.

    python -m benchmarks.hmc [--samples 300] [--reps 5]
"""
import argparse

import numpy as np

import dfc
from benchmarks import harness
from benchmarks.harness import System, try_system

D = 8


def potential(q, A):
    return 0.5 * dfc.reduce_sum(q * dfc.matmul(A, q)) + 0.25 * dfc.reduce_sum(q ** 4)


def grad_potential(q, A):
    return dfc.gradients(potential(q, A), q)


@dfc.function
def hmc(q0, A, momenta, log_u, n_leap, eps):
    q = q0
    samples = dfc.TensorArray("float64", size=dfc.shape(momenta)[0])
    accepted = 0
    for s in range(dfc.shape(momenta)[0]):
        p = momenta[s]
        q_new = q
        p_new = p - 0.5 * eps * grad_potential(q, A)
        l = 0
        g = dfc.zeros_like(q)
        while l < n_leap[s]:
            q_new = q_new + eps * p_new
            g = grad_potential(q_new, A)
            p_new = p_new - eps * g
            l += 1
        p_new = p_new + 0.5 * eps * g           # the last step is a half step
        h_old = potential(q, A) + 0.5 * dfc.reduce_sum(p * p)
        h_new = potential(q_new, A) + 0.5 * dfc.reduce_sum(p_new * p_new)
        if log_u[s] < h_old - h_new:
            q = q_new
            accepted += 1
        samples = samples.write(s, q)
    return samples.stack(), accepted


def inputs(n_samples, seed=0):
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((D, D))
    A = m @ m.T / D + np.eye(D)
    return (np.zeros(D), A, rng.standard_normal((n_samples, D)), np.log(rng.uniform(size=n_samples)),
            rng.integers(1, 20, size=n_samples).astype(np.int64), np.float64(0.3))


def numpy_hmc(q0, A, momenta, log_u, n_leap, eps):
    def U(q):
        return 0.5 * q @ (A @ q) + 0.25 * np.sum(q ** 4)

    def dU(q):
        return A @ q + q ** 3
    q, out, accepted = q0.copy(), np.empty_like(momenta), 0
    for s in range(len(momenta)):
        p = momenta[s]
        q_new, p_new, g = q, p - 0.5 * eps * dU(q), np.zeros_like(q)
        for _ in range(n_leap[s]):
            q_new = q_new + eps * p_new
            g = dU(q_new)
            p_new = p_new - eps * g
        p_new = p_new + 0.5 * eps * g
        if log_u[s] < (U(q) + 0.5 * p @ p) - (U(q_new) + 0.5 * p_new @ p_new):
            q, accepted = q_new, accepted + 1
        out[s] = q
    return out, np.int64(accepted)


def _jax_hmc():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def U(q, A):
        return 0.5 * q @ (A @ q) + 0.25 * jnp.sum(q ** 4)
    dU = jax.grad(U)

    def run(q0, A, momenta, log_u, n_leap, eps):
        def sample(carry, xs):
            q, accepted = carry
            p, lu, n = xs

            def leap(st):
                l, q_new, p_new, _ = st
                q_new = q_new + eps * p_new
                g = dU(q_new, A)
                return l + 1, q_new, p_new - eps * g, g
            _, q_new, p_new, g = jax.lax.while_loop(lambda st: st[0] < n, leap,
                                                    (0, q, p - 0.5 * eps * dU(q, A), jnp.zeros_like(q)))
            p_new = p_new + 0.5 * eps * g
            ok = lu < (U(q, A) + 0.5 * p @ p) - (U(q_new, A) + 0.5 * p_new @ p_new)
            q = jnp.where(ok, q_new, q)
            return (q, accepted + ok.astype(jnp.int64)), q
        (_, accepted), samples = jax.lax.scan(sample, (q0, jnp.int64(0)), (momenta, log_u, n_leap))
        return samples, accepted
    f = jax.jit(run)
    return lambda *a: [np.asarray(v) for v in jax.block_until_ready(f(*a))]


def _torch_hmc():
    import torch

    def U(q, A):
        return 0.5 * q @ (A @ q) + 0.25 * torch.sum(q ** 4)

    def dU(q, A):
        q = q.detach().requires_grad_(True)
        return torch.autograd.grad(U(q, A), q)[0]

    def run(q0, A, momenta, log_u, n_leap, eps):
        q, out, accepted = q0, [], 0
        for s in range(len(momenta)):
            p = momenta[s]
            q_new, p_new, g = q, p - 0.5 * eps * dU(q, A), torch.zeros_like(q)
            for _ in range(int(n_leap[s])):
                q_new = q_new + eps * p_new
                g = dU(q_new, A)
                p_new = p_new - eps * g
            p_new = p_new + 0.5 * eps * g
            with torch.no_grad():
                if log_u[s] < (U(q, A) + 0.5 * p @ p) - (U(q_new, A) + 0.5 * p_new @ p_new):
                    q, accepted = q_new, accepted + 1
            out.append(q)
        return [torch.stack(out).numpy(), np.int64(accepted)]
    return lambda *a: run(*[torch.tensor(v) for v in a])


def systems(a):
    out = {}
    g, note = harness.traced(hmc, *a)
    for name, s in harness.dfc_sessions(g).items():
        out[name] = System(lambda s=s: s.call(*a), note)
    out["numpy by hand (analytic gradient)"] = System(lambda: numpy_hmc(*a))
    out["JAX jit (scan + while_loop + grad)"] = try_system(lambda: (lambda f: lambda: f(*a))(_jax_hmc()))
    out["PyTorch eager (autograd.grad per step)"] = try_system(lambda: (lambda f: lambda: f(*a))(_torch_hmc()))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=30.0)
    args = ap.parse_args(argv)
    a = inputs(args.samples)
    sy = systems(a)
    res = {"rows": harness.compare(sy, args.reps, budget_s=args.budget)}
    res["max_rel_error"] = harness.check_close({k: s.result for k, s in sy.items() if s.result is not None},
                                               "numpy by hand (analytic gradient)", rtol=1e-8, atol=1e-10)
    res["conditions"] = (f"d={D}, {args.samples} samples, leapfrog lengths uniform in 1..19 "
                         f"({int(a[4].sum())} gradient evaluations), float64; "
                         f"acceptance {float(sy['numpy by hand (analytic gradient)'].result[1]) / args.samples:.2f}")
    return res


def report(res):
    return harness.table("HMC with a random-length leapfrog loop: " + res["conditions"], res["rows"])


if __name__ == "__main__":
    print(report(main()))
