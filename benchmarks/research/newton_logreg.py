"""Hyperparameter gradient through a Newton solver, float64: L2-regularized logistic regression solved by
Newton's method with a backtracking (Armijo) line search — an outer `while` until the gradient norm
falls below tol (a `break`), an inner `while` halving the step until the Armijo condition holds — then
the validation log-loss of the solution and its gradient with respect to log(lambda) and the training
data, by reverse mode through every Newton step and line search (unrolled).

JAX: its reverse mode refuses a while_loop, so both loops are lax.fori_loop with static bounds
(max_iter Newton steps, MAX_HALVINGS halvings) and masks, the closest equivalent; it computes every
bounded step. numpy: the same solver and the gradient by the implicit function theorem at the solution
(-gV^T H^-1 dg/dtheta), which the unrolled gradient equals once Newton has converged.
"""
import numpy as np

import dfc

SIZES = {"bench": dict(n=400, d=16, n_val=200), "tiny": dict(n=24, d=3, n_val=10)}
ARMIJO = 1e-4
MAX_HALVINGS = 30


def softplus(z):
    return dfc.maximum(z, 0.0) + dfc.log1p(dfc.exp(-dfc.abs(z)))


def objective(w, X, y, lam):
    z = X @ w
    return dfc.reduce_mean(softplus(z) - y * z) + 0.5 * lam * dfc.reduce_sum(w * w)


def newton(w, X, y, lam, tol, max_iter):
    n = dfc.cast(dfc.shape(X)[0], "float64")
    d = dfc.shape(X)[1]
    iters = 0
    halvings = 0
    while iters < max_iter:
        p = dfc.sigmoid(X @ w)
        g = dfc.matmul(dfc.transpose(X), p - y) / n + lam * w
        if dfc.linalg.norm(g) < tol:
            break
        H = dfc.matmul(dfc.transpose(X), X * (p * (1.0 - p))[:, None]) / n + lam * dfc.eye(d, dtype="float64")
        step = dfc.linalg.solve(H, g)
        f0 = objective(w, X, y, lam)
        slope = dfc.reduce_sum(g * step)
        t = 1.0
        k = 0
        while objective(w - t * step, X, y, lam) > f0 - ARMIJO * t * slope and k < MAX_HALVINGS:
            t = t * 0.5
            k += 1
        w = w - t * step
        halvings += k
        iters += 1
    return w, iters, halvings


@dfc.function
def newton_hypergrad(w0, X, y, X_val, y_val, log_lam, tol, max_iter):
    w, iters, halvings = newton(w0, X, y, dfc.exp(log_lam), tol, max_iter)
    val_loss = objective(w, X_val, y_val, 0.0)
    d_log_lam, d_X = dfc.gradients(val_loss, [log_lam, X])
    return val_loss, w, iters, halvings, d_log_lam, d_X


def inputs(size="bench", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    n, d, nv = cfg["n"], cfg["d"], cfg["n_val"]
    w_true = rng.standard_normal(d) * 3.0

    def data(m):
        X = rng.standard_normal((m, d))
        return X, (rng.uniform(size=m) < 1 / (1 + np.exp(-X @ w_true))).astype(np.float64)
    X, y = data(n)
    Xv, yv = data(nv)
    w0 = rng.standard_normal(d) * 2.0                   # a warm start far enough out that steps get halved
    return w0, X, y, Xv, yv, np.float64(np.log(1e-3)), np.float64(1e-9), np.int64(50)


def _np_softplus(z):
    return np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))


def _np_obj(w, X, y, lam):
    z = X @ w
    return np.mean(_np_softplus(z) - y * z) + 0.5 * lam * np.sum(w * w)


def numpy_newton(w, X, y, lam, tol, max_iter):
    n, d = X.shape
    iters, halvings = 0, 0
    while iters < max_iter:
        p = 1 / (1 + np.exp(-(X @ w)))
        g = X.T @ (p - y) / n + lam * w
        if np.linalg.norm(g) < tol:
            break
        H = X.T @ (X * (p * (1 - p))[:, None]) / n + lam * np.eye(d)
        step = np.linalg.solve(H, g)
        f0, slope, t, k = _np_obj(w, X, y, lam), g @ step, 1.0, 0
        while _np_obj(w - t * step, X, y, lam) > f0 - ARMIJO * t * slope and k < MAX_HALVINGS:
            t, k = t * 0.5, k + 1
        w, halvings, iters = w - t * step, halvings + k, iters + 1
    return w, iters, halvings


def numpy_hypergrad(w0, X, y, Xv, yv, log_lam, tol, max_iter):
    lam = np.exp(log_lam)
    w, iters, halvings = numpy_newton(w0, X, y, lam, tol, max_iter)
    n = X.shape[0]
    p = 1 / (1 + np.exp(-(X @ w)))
    H = X.T @ (X * (p * (1 - p))[:, None]) / n + lam * np.eye(len(w))
    gv = Xv.T @ (1 / (1 + np.exp(-(Xv @ w))) - yv) / len(yv)
    v = np.linalg.solve(H, gv)                          # H is symmetric: v = H^-1 gV
    d_log_lam = -lam * (v @ w)
    d_X = -(np.outer(p - y, v) + np.outer((X @ v) * p * (1 - p), w)) / n
    return np.float64(_np_obj(w, Xv, yv, 0.0)), w, np.int64(iters), np.int64(halvings), np.float64(d_log_lam), d_X


def _jax(max_iter):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def obj(w, X, y, lam):
        z = X @ w
        return jnp.mean(jax.nn.softplus(z) - y * z) + 0.5 * lam * jnp.sum(w * w)

    def hyper(log_lam, X, w0, y, Xv, yv, tol):
        lam = jnp.exp(log_lam)
        n, d = X.shape

        def outer(_, carry):
            w, done, iters, halvings = carry
            p = jax.nn.sigmoid(X @ w)
            g = X.T @ (p - y) / n + lam * w
            done = done | (jnp.linalg.norm(g) < tol)
            H = X.T @ (X * (p * (1 - p))[:, None]) / n + lam * jnp.eye(d)
            step = jnp.linalg.solve(H, g)
            f0, slope = obj(w, X, y, lam), g @ step

            def inner(_, c):
                t, searching, k = c
                searching = searching & (obj(w - t * step, X, y, lam) > f0 - ARMIJO * t * slope)
                return jnp.where(searching, t * 0.5, t), searching, k + searching.astype(jnp.int64)
            t, _, k = jax.lax.fori_loop(0, MAX_HALVINGS, inner, (jnp.float64(1.0), ~done, jnp.int64(0)))
            return jnp.where(done, w, w - t * step), done, iters + (~done).astype(jnp.int64), halvings + k
        init = (w0, jnp.bool_(False), jnp.int64(0), jnp.int64(0))
        w, _, iters, halvings = jax.lax.fori_loop(0, max_iter, outer, init)
        return obj(w, Xv, yv, 0.0), (w, iters, halvings)

    f = jax.jit(jax.value_and_grad(hyper, argnums=(0, 1), has_aux=True))

    def run(w0, X, y, Xv, yv, log_lam, tol, _max_iter):
        (val, (w, iters, halvings)), (dl, dX) = jax.block_until_ready(f(log_lam, X, w0, y, Xv, yv, tol))
        return tuple(np.asarray(v) for v in (val, w, iters, halvings, dl, dX))
    return run


def _torch():
    import torch

    def obj(w, X, y, lam):
        z = X @ w
        return torch.mean(torch.nn.functional.softplus(z) - y * z) + 0.5 * lam * torch.sum(w * w)

    def run(w0, X, y, Xv, yv, log_lam, tol, max_iter):
        X = torch.from_numpy(X).requires_grad_(True)
        log_lam = torch.tensor(float(log_lam), dtype=torch.float64, requires_grad=True)
        y, Xv, yv = torch.from_numpy(y), torch.from_numpy(Xv), torch.from_numpy(yv)
        lam = torch.exp(log_lam)
        n, d = X.shape
        w, iters, halvings = torch.from_numpy(w0), 0, 0
        while iters < max_iter:
            p = torch.sigmoid(X @ w)
            g = X.T @ (p - y) / n + lam * w
            if torch.linalg.norm(g) < tol:
                break
            H = X.T @ (X * (p * (1 - p))[:, None]) / n + lam * torch.eye(d, dtype=torch.float64)
            step = torch.linalg.solve(H, g)
            f0, slope, t, k = obj(w, X, y, lam), g @ step, 1.0, 0
            while obj(w - t * step, X, y, lam) > f0 - ARMIJO * t * slope and k < MAX_HALVINGS:
                t, k = t * 0.5, k + 1
            w, halvings, iters = w - t * step, halvings + k, iters + 1
        val = obj(w, Xv, yv, 0.0)
        dl, dX = torch.autograd.grad(val, [log_lam, X])
        return (val.detach().numpy(), w.detach().numpy(), np.int64(iters), np.int64(halvings), dl.numpy(),
                dX.numpy())
    return run


def cases(size="bench"):
    from benchmarks.research.case import Case
    a = inputs(size)
    max_iter = int(a[7])

    def check():
        got = newton_hypergrad(*a)
        out = [("dfc vs numpy (solution; gradient by the implicit function theorem)", numpy_hypergrad(*a), got)]
        try:
            out.append(("dfc vs JAX (unrolled reverse mode)", _jax(max_iter)(*a), got))
        except ImportError:
            pass
        return out

    cfg = SIZES[size]
    return [Case("newton_logreg", f"Newton + backtracking line search on L2 logistic regression (n={cfg['n']}, "
                                  f"d={cfg['d']}) from a warm start until |grad| < 1e-9, gradient of the validation "
                                  f"loss (n={cfg['n_val']}) wrt log(lambda) and the training data, float64",
                 dfc_call=lambda: newton_hypergrad(*a), numpy=lambda: numpy_hypergrad(*a),
                 jax=lambda: (lambda f: lambda: f(*a))(_jax(max_iter)),
                 torch=lambda: (lambda f: lambda: f(*a))(_torch()),
                 check=check, rtol=1e-6, atol=1e-9,
                 numpy_note="gradient by the implicit function theorem at the solution",
                 jax_note=f"fori_loop over all {max_iter} Newton steps x {MAX_HALVINGS} halvings with masks "
                          "(reverse mode refuses while_loop)")]
