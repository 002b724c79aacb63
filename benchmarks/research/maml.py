"""MAML on sinusoid regression, float32: a 1-H-1 tanh MLP; for each task of the meta-batch, n_inner SGD
steps on its support set (n_inner is a tensor), then the query loss of the adapted weights; the
meta-loss is their mean and the meta-gradient goes through every inner step (second order).

JAX: its reverse mode refuses a while_loop, so the inner loop is lax.fori_loop with the step count a
static argument (a scan; one compile per count), the closest equivalent. numpy: the meta-loss (no
hand-written second-order adjoint; the meta-gradient is checked against JAX).
"""
import numpy as np

import dfc

SIZES = {"bench": dict(M=8, K=10, H=32, n_inner=5), "tiny": dict(M=2, K=4, H=5, n_inner=2)}
ALPHA = 0.01


def mlp(params, x):
    W1, b1, W2, b2 = params
    return dfc.matmul(dfc.tanh(dfc.matmul(x, W1) + b1), W2) + b2


def mse(params, x, y):
    return dfc.reduce_mean((mlp(params, x) - y) ** 2)


@dfc.function
def maml_step(params, x_support, y_support, x_query, y_query, n_inner):
    meta_loss = 0.0
    n_tasks = dfc.shape(x_support)[0]
    for m in range(n_tasks):
        adapted = params
        i = 0
        while i < n_inner:
            grads = dfc.gradients(mse(adapted, x_support[m], y_support[m]), adapted)
            adapted = [p - ALPHA * g for p, g in zip(adapted, grads)]
            i += 1
        meta_loss += mse(adapted, x_query[m], y_query[m])
    meta_loss = meta_loss / dfc.cast(n_tasks, "float32")
    return meta_loss, dfc.gradients(meta_loss, params)


def inputs(size="bench", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    M, K, H = cfg["M"], cfg["K"], cfg["H"]
    f = np.float32
    amp, phase = rng.uniform(0.1, 5.0, (M, 1, 1)), rng.uniform(0, np.pi, (M, 1, 1))
    xs, xq = rng.uniform(-5, 5, (M, K, 1)), rng.uniform(-5, 5, (M, K, 1))
    params = [(rng.standard_normal((1, H)) * 1.0).astype(f), np.zeros(H, f),
              (rng.standard_normal((H, 1)) / np.sqrt(H)).astype(f), np.zeros(1, f)]
    return (params, xs.astype(f), (amp * np.sin(xs + phase)).astype(f), xq.astype(f),
            (amp * np.sin(xq + phase)).astype(f), np.int64(cfg["n_inner"]))


def numpy_meta_loss(params, xs, ys, xq, yq, n_inner):
    def forward(p, x):
        a = np.tanh(x @ p[0] + p[1])
        return a, a @ p[2] + p[3]
    total = 0.0
    for m in range(len(xs)):
        p = [q.copy() for q in params]
        for _ in range(int(n_inner)):
            a, out = forward(p, xs[m])
            d = 2 * (out - ys[m]) / out.size               # d mse / d out
            dW2, db2 = a.T @ d, d.sum(0)
            da = (d @ p[2].T) * (1 - a * a)
            dW1, db1 = xs[m].T @ da, da.sum(0)
            p = [q - ALPHA * g for q, g in zip(p, (dW1, db1, dW2, db2))]
        total += np.mean((forward(p, xq[m])[1] - yq[m]) ** 2)
    return np.float32(total / len(xs))


def _jax():
    import jax
    import jax.numpy as jnp

    def mse_j(p, x, y):
        return jnp.mean((jnp.tanh(x @ p[0] + p[1]) @ p[2] + p[3] - y) ** 2)

    def meta_loss(params, xs, ys, xq, yq, n_inner):
        def task(x_s, y_s, x_q, y_q):
            def inner(_, p):
                return [q - ALPHA * g for q, g in zip(p, jax.grad(mse_j)(p, x_s, y_s))]
            return mse_j(jax.lax.fori_loop(0, n_inner, inner, params), x_q, y_q)
        return jnp.mean(jnp.stack([task(xs[m], ys[m], xq[m], yq[m]) for m in range(xs.shape[0])]))
    return jax, jax.jit(jax.value_and_grad(meta_loss), static_argnums=5)


def _torch():
    import torch

    def step(params, xs, ys, xq, yq, n_inner):
        params = [p.detach().requires_grad_(True) for p in params]

        def mse_t(p, x, y):
            return torch.mean((torch.tanh(x @ p[0] + p[1]) @ p[2] + p[3] - y) ** 2)
        total = 0.0
        for m in range(xs.shape[0]):
            p = params
            for _ in range(n_inner):
                grads = torch.autograd.grad(mse_t(p, xs[m], ys[m]), p, create_graph=True)
                p = [q - ALPHA * g for q, g in zip(p, grads)]
            total = total + mse_t(p, xq[m], yq[m])
        loss = total / xs.shape[0]
        return loss.detach().numpy(), [g.numpy() for g in torch.autograd.grad(loss, params)]
    return torch, step


def cases(size="bench"):
    from benchmarks.research.case import Case
    params, xs, ys, xq, yq, n = a = inputs(size)

    def jax_step():
        jax, f = _jax()

        def run():
            loss, grads = jax.block_until_ready(f(params, xs, ys, xq, yq, int(n)))
            return np.asarray(loss), [np.asarray(g) for g in grads]
        return run

    def torch_step():
        torch, f = _torch()
        t = [[torch.from_numpy(p) for p in params]] + [torch.from_numpy(v) for v in (xs, ys, xq, yq)] + [int(n)]
        return lambda: f(*t)

    def check():
        loss, grads = maml_step(*a)
        out = [("dfc meta-loss vs numpy", numpy_meta_loss(*a), loss)]
        try:
            out.append(("dfc meta-gradient vs JAX", jax_step()()[1], grads))
        except ImportError:
            pass
        return out

    cfg = SIZES[size]
    return [Case("maml", f"MAML sinusoid regression, {cfg['M']} tasks x {cfg['K']} shots, MLP 1-{cfg['H']}-1, "
                         f"{int(n)} inner SGD steps (a tensor), meta-gradient through them, float32",
                 dfc_call=lambda: maml_step(*a), numpy=lambda: numpy_meta_loss(*a), jax=jax_step, torch=torch_step,
                 check=check, rtol=2e-4, atol=1e-6, numpy_note="meta-loss only (no hand-written second-order adjoint)",
                 jax_note="inner steps: fori_loop with a static count (reverse mode refuses while_loop)")]
