"""k-means (Lloyd's algorithm) on 2-D points, float64, forward only: assign each point to its nearest
center, move each center to the mean of its points (an empty cluster keeps its center), and repeat
while any assignment changed (a `while` on a tensor condition, capped at max_iter). Returns the
centers, the assignments, the number of iterations and the inertia.

JAX: lax.while_loop (forward only, so JAX runs the same loop). The data are Gaussian blobs with
overlapping tails, so Lloyd takes a data-dependent number of iterations.
"""
import numpy as np

import dfc

SIZES = {"bench": dict(N=2000, K=8), "tiny": dict(N=60, K=3)}


def sq_distances(x, centers):
    return dfc.reduce_sum((x[:, None, :] - centers[None, :, :]) ** 2, axis=2)


@dfc.function
def kmeans(x, centers, max_iter):
    K = centers.shape[0]        # dfc.one_hot needs a Python int depth: dfc.shape(centers)[0] is refused
    assign = dfc.argmin(sq_distances(x, centers), axis=1)
    iters = 0
    changed = True
    while changed and iters < max_iter:
        onehot = dfc.one_hot(assign, K, dtype="float64")
        counts = dfc.reduce_sum(onehot, axis=0)
        sums = dfc.matmul(dfc.transpose(onehot), x)
        centers = dfc.where(counts[:, None] > 0, sums / dfc.maximum(counts, 1.0)[:, None], centers)
        new_assign = dfc.argmin(sq_distances(x, centers), axis=1)
        changed = dfc.reduce_any(new_assign != assign)
        assign = new_assign
        iters += 1
    inertia = dfc.reduce_sum(dfc.reduce_min(sq_distances(x, centers), axis=1))
    return centers, assign, iters, inertia


def inputs(size="bench", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    N, K = cfg["N"], cfg["K"]
    means = rng.uniform(-6, 6, (K, 2))
    x = means[rng.integers(0, K, N)] + rng.standard_normal((N, 2)) * 1.5
    return x, x[rng.choice(N, K, replace=False)].copy(), np.int64(100)


def numpy_kmeans(x, centers, max_iter):
    K = len(centers)
    d = ((x[:, None, :] - centers[None]) ** 2).sum(2)
    assign, iters, changed = d.argmin(1), 0, True
    while changed and iters < max_iter:
        onehot = np.eye(K)[assign]
        counts = onehot.sum(0)
        centers = np.where(counts[:, None] > 0, onehot.T @ x / np.maximum(counts, 1.0)[:, None], centers)
        new = ((x[:, None, :] - centers[None]) ** 2).sum(2).argmin(1)
        changed, assign, iters = bool(np.any(new != assign)), new, iters + 1
    inertia = ((x[:, None, :] - centers[None]) ** 2).sum(2).min(1).sum()
    return centers, assign, np.int64(iters), inertia


def _jax():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def dist(x, c):
        return jnp.sum((x[:, None, :] - c[None]) ** 2, axis=2)

    def run(x, centers, max_iter):
        K = centers.shape[0]

        def body(s):
            centers, assign, iters, _ = s
            onehot = jax.nn.one_hot(assign, K, dtype=x.dtype)
            counts = onehot.sum(0)
            centers = jnp.where(counts[:, None] > 0, onehot.T @ x / jnp.maximum(counts, 1.0)[:, None], centers)
            new = jnp.argmin(dist(x, centers), axis=1)
            return centers, new, iters + 1, jnp.any(new != assign)
        init = (centers, jnp.argmin(dist(x, centers), axis=1), jnp.int64(0), jnp.bool_(True))
        centers, assign, iters, _ = jax.lax.while_loop(lambda s: s[3] & (s[2] < max_iter), body, init)
        return centers, assign, iters, jnp.sum(jnp.min(dist(x, centers), axis=1))
    f = jax.jit(run)
    return lambda *a: tuple(np.asarray(v) for v in jax.block_until_ready(f(*a)))


def _torch():
    import torch

    def run(x, centers, max_iter):
        x, centers = torch.from_numpy(x), torch.from_numpy(centers)
        K = centers.shape[0]
        assign = ((x[:, None] - centers[None]) ** 2).sum(2).argmin(1)
        iters, changed = 0, True
        while changed and iters < max_iter:
            onehot = torch.nn.functional.one_hot(assign, K).to(x.dtype)
            counts = onehot.sum(0)
            centers = torch.where(counts[:, None] > 0, onehot.T @ x / counts.clamp(min=1.0)[:, None], centers)
            new = ((x[:, None] - centers[None]) ** 2).sum(2).argmin(1)
            changed, assign, iters = bool((new != assign).any()), new, iters + 1
        inertia = ((x[:, None] - centers[None]) ** 2).sum(2).min(1).values.sum()
        return centers.numpy(), assign.numpy(), np.int64(iters), inertia.numpy()
    return run


def cases(size="bench"):
    from benchmarks.research.case import Case
    a = inputs(size)

    def check():
        got = kmeans(*a)
        out = [("dfc vs numpy", numpy_kmeans(*a), got)]
        try:
            out.append(("dfc vs JAX", _jax()(*a), got))
        except ImportError:
            pass
        return out

    cfg = SIZES[size]
    return [Case("kmeans", f"k-means (Lloyd) on {cfg['N']} 2-D points, K={cfg['K']}, until no assignment changes, "
                           "float64, forward",
                 dfc_call=lambda: kmeans(*a), numpy=lambda: numpy_kmeans(*a),
                 jax=lambda: (lambda f: lambda: f(*a))(_jax()), torch=lambda: (lambda f: lambda: f(*a))(_torch()),
                 check=check, rtol=1e-10, atol=1e-10, jax_note="lax.while_loop (forward only)",
                 note="K is centers.shape[0]: the natural `K = dfc.shape(centers)[0]` is refused by dfc.one_hot "
                      "(DfcTypeError: symbolic tensor getitem:0 cannot be used as a Python integer while tracing), "
                      "although the shape is known while tracing")]
