"""A neural ODE, float64: dy/dt = tanh(y W1 + b1) W2 + b2 for a batch of initial states, integrated to t_end
by Dormand-Prince RK45 with step-size control (`while t < t_end`; a step is accepted when the scaled
RMS error estimate is <= 1, an `if`; the step size follows err^-1/5 either way), then the mean squared
error to targets and its gradient with respect to the four weights by reverse mode through every step,
accepted or rejected (the discretization's exact derivative, not the adjoint ODE).

JAX: its reverse mode refuses a while_loop, so the integrator is a lax.fori_loop over MAX_STEPS attempts
with a mask once t reaches t_end (and the usual double `where` so the masked steps' zero-size steps give
no NaN gradients). numpy: the loss (no hand-written adjoint; gradients checked against JAX).
"""
import numpy as np

import dfc

SIZES = {"bench": dict(B=16, D=4, H=32, t_end=6.0), "tiny": dict(B=2, D=2, H=3, t_end=1.0)}
RTOL, ATOL, H0 = 1e-6, 1e-8, 0.5
MAX_STEPS = 200                                  # JAX's static bound on step attempts
C = [0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0]
A = [[], [1 / 5], [3 / 40, 9 / 40], [44 / 45, -56 / 15, 32 / 9],
     [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
     [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656]]
B5 = [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0]
B4 = [5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40]
E = [b5 - b4 for b5, b4 in zip(B5, B4)]


def field(y, W1, b1, W2, b2):
    return dfc.tanh(y @ W1 + b1) @ W2 + b2


def dopri_step(y, h, params):
    ks = []
    for a in A:
        dy = 0.0
        for a_j, k in zip(a, ks):
            dy = dy + a_j * k
        ks.append(field(y + h * dy, *params))
    y5 = y
    for b, k in zip(B5, ks):
        y5 = y5 + h * b * k
    ks.append(field(y5, *params))
    err = 0.0
    for e, k in zip(E, ks):
        err = err + h * e * k
    scale = ATOL + RTOL * dfc.maximum(dfc.abs(y), dfc.abs(y5))
    return y5, dfc.sqrt(dfc.reduce_mean((err / scale) ** 2))


@dfc.function
def neural_ode_step(y0, target, t_end, W1, b1, W2, b2):
    params = [W1, b1, W2, b2]
    y = y0
    t = 0.0
    h = H0
    accepted = 0
    rejected = 0
    while t < t_end:
        h = dfc.minimum(h, t_end - t)
        y_new, err = dopri_step(y, h, params)
        if err <= 1.0:
            t = t + h
            y = y_new
            accepted += 1
        else:
            rejected += 1
        h = h * dfc.clip(0.9 * (err + 1e-10) ** -0.2, 0.2, 5.0)
    loss = dfc.reduce_mean((y - target) ** 2)
    return loss, accepted, rejected, dfc.gradients(loss, params)


def inputs(size="bench", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    B, D, H = cfg["B"], cfg["D"], cfg["H"]
    params = [rng.standard_normal((D, H)) * 2 / np.sqrt(D), rng.standard_normal(H) * 0.1,
              rng.standard_normal((H, D)) * 2 / np.sqrt(H), rng.standard_normal(D) * 0.1]
    return (rng.standard_normal((B, D)), rng.standard_normal((B, D)), np.float64(cfg["t_end"]), *params)


def _np_field(y, W1, b1, W2, b2):
    return np.tanh(y @ W1 + b1) @ W2 + b2


def numpy_loss(y0, target, t_end, W1, b1, W2, b2):
    p = (W1, b1, W2, b2)
    y, t, h, accepted, rejected = y0, 0.0, H0, 0, 0
    while t < t_end:
        h = min(h, t_end - t)
        ks = []
        for a in A:
            ks.append(_np_field(y + h * sum((a_j * k for a_j, k in zip(a, ks)), 0.0), *p))
        y5 = y + h * sum(b * k for b, k in zip(B5, ks))
        ks.append(_np_field(y5, *p))
        err_vec = h * sum(e * k for e, k in zip(E, ks))
        err = np.sqrt(np.mean((err_vec / (ATOL + RTOL * np.maximum(np.abs(y), np.abs(y5)))) ** 2))
        if err <= 1.0:
            t, y, accepted = t + h, y5, accepted + 1
        else:
            rejected += 1
        h = h * np.clip(0.9 * (err + 1e-10) ** -0.2, 0.2, 5.0)
    return np.mean((y - target) ** 2), np.int64(accepted), np.int64(rejected)


def _jax():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def f(y, p):
        return jnp.tanh(y @ p[0] + p[1]) @ p[2] + p[3]

    def loss(params, y0, target, t_end):
        def attempt(_, carry):
            y, t, h, accepted, rejected = carry
            active = t < t_end
            h = jnp.where(active, jnp.minimum(h, t_end - t), 1.0)    # masked attempts: a harmless step size
            ks = []
            for a in A:
                ks.append(f(y + h * sum((a_j * k for a_j, k in zip(a, ks)), 0.0), params))
            y5 = y + h * sum(b * k for b, k in zip(B5, ks))
            ks.append(f(y5, params))
            err_vec = h * sum(e * k for e, k in zip(E, ks))
            err = jnp.sqrt(jnp.mean((err_vec / (ATOL + RTOL * jnp.maximum(jnp.abs(y), jnp.abs(y5)))) ** 2))
            ok = active & (err <= 1.0)
            h_next = h * jnp.clip(0.9 * (err + 1e-10) ** -0.2, 0.2, 5.0)
            return (jnp.where(ok, y5, y), jnp.where(ok, t + h, t), jnp.where(active, h_next, h),
                    accepted + ok, rejected + (active & ~ok))
        init = (y0, jnp.float64(0.0), jnp.float64(H0), jnp.int64(0), jnp.int64(0))
        y, _, _, accepted, rejected = jax.lax.fori_loop(0, MAX_STEPS, attempt, init)
        return jnp.mean((y - target) ** 2), (accepted, rejected)
    g = jax.jit(jax.value_and_grad(loss, has_aux=True))

    def run(y0, target, t_end, *params):
        (l, (acc, rej)), grads = jax.block_until_ready(g(list(params), y0, target, t_end))
        return np.asarray(l), np.asarray(acc), np.asarray(rej), [np.asarray(v) for v in grads]
    return run


def _torch():
    import torch

    def run(y0, target, t_end, *params):
        ps = [torch.from_numpy(p).requires_grad_(True) for p in params]
        W1, b1, W2, b2 = ps
        y, target = torch.from_numpy(y0), torch.from_numpy(target)
        t, h = torch.zeros((), dtype=torch.float64), torch.tensor(H0, dtype=torch.float64)
        accepted = rejected = 0
        while t < t_end:
            h = torch.minimum(h, t_end - t)
            ks = []
            for a in A:
                ks.append(torch.tanh((y + h * sum((a_j * k for a_j, k in zip(a, ks)), 0.0)) @ W1 + b1) @ W2 + b2)
            y5 = y + h * sum(b * k for b, k in zip(B5, ks))
            ks.append(torch.tanh(y5 @ W1 + b1) @ W2 + b2)
            err_vec = h * sum(e * k for e, k in zip(E, ks))
            err = torch.sqrt(torch.mean((err_vec / (ATOL + RTOL * torch.maximum(y.abs(), y5.abs()))) ** 2))
            if err <= 1.0:
                t, y, accepted = t + h, y5, accepted + 1
            else:
                rejected += 1
            h = h * torch.clamp(0.9 * (err + 1e-10) ** -0.2, 0.2, 5.0)
        loss = torch.mean((y - target) ** 2)
        return (loss.detach().numpy(), np.int64(accepted), np.int64(rejected),
                [g.numpy() for g in torch.autograd.grad(loss, ps)])
    return run


def cases(size="bench"):
    from benchmarks.research.case import Case
    a = inputs(size)

    def check():
        loss, accepted, rejected, grads = neural_ode_step(*a)
        out = [("dfc loss and step counts vs numpy", numpy_loss(*a), (loss, accepted, rejected))]
        try:
            out.append(("dfc vs JAX (loss, step counts, gradients)", _jax()(*a), (loss, accepted, rejected, grads)))
        except ImportError:
            pass
        return out

    cfg = SIZES[size]
    return [Case("neural_ode", f"neural ODE (MLP {cfg['D']}-{cfg['H']}-{cfg['D']}, batch {cfg['B']}) by Dormand-Prince "
                               f"RK45 with step-size control to t={cfg['t_end']:g} (rtol {RTOL:g}), MSE loss and "
                               "its gradient wrt the weights through every step, float64",
                 dfc_call=lambda: neural_ode_step(*a), numpy=lambda: numpy_loss(*a),
                 jax=lambda: (lambda f: lambda: f(*a))(_jax()), torch=lambda: (lambda f: lambda: f(*a))(_torch()),
                 check=check, rtol=1e-7, atol=1e-10, numpy_note="loss only (no hand-written adjoint)",
                 jax_note=f"fori_loop over {MAX_STEPS} step attempts with a mask (reverse mode refuses while_loop)")]
