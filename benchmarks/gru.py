"""GRU classifier training step on variable-length sequences (float32): B sequences of lengths in
[T/4, T] (one of length T), padded to T; the GRU runs max(lengths) steps, each sequence's state frozen
after its end (a mask); softmax cross-entropy on the final state; gradients of all six weights.

dfc: `for t in range(dfc.reduce_max(lengths))` with dfc.gradients through it; JAX: lax.scan over the
padded length with jax.value_and_grad (reverse mode through a while_loop would be refused); PyTorch:
an eager loop to max(lengths) with autograd.

    python -m benchmarks.gru [--reps 5]
"""
import argparse

import numpy as np

import dfc
from benchmarks import harness
from benchmarks.harness import System, try_system

T, B, D, H, C = 50, 16, 8, 32, 4


def gru_loss(x, lengths, labels, W, U_zr, U_h, b, W_out, b_out):
    h = dfc.zeros([B, H])
    for t in range(dfc.reduce_max(lengths)):
        gx = dfc.matmul(x[t], W) + b
        gzr = dfc.sigmoid(gx[:, :2 * H] + dfc.matmul(h, U_zr))
        z, r = gzr[:, :H], gzr[:, H:]
        candidate = dfc.tanh(gx[:, 2 * H:] + dfc.matmul(r * h, U_h))
        h_next = (1.0 - z) * h + z * candidate
        h = dfc.where(dfc.expand_dims(t < lengths, 1), h_next, h)
    logits = dfc.matmul(h, W_out) + b_out
    return -dfc.reduce_sum(dfc.one_hot(labels, C) * dfc.log_softmax(logits)) / B


@dfc.function
def gru_step(x, lengths, labels, W, U_zr, U_h, b, W_out, b_out):
    loss = gru_loss(x, lengths, labels, W, U_zr, U_h, b, W_out, b_out)
    grads = dfc.gradients(loss, [W, U_zr, U_h, b, W_out, b_out])
    return loss, grads


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    f = np.float32
    lengths = rng.integers(T // 4, T + 1, size=B).astype(np.int64)
    lengths[0] = T
    return (rng.standard_normal((T, B, D)).astype(f), lengths, rng.integers(0, C, size=B).astype(np.int64),
            (rng.standard_normal((D, 3 * H)) / np.sqrt(D)).astype(f),
            (rng.standard_normal((H, 2 * H)) / np.sqrt(H)).astype(f),
            (rng.standard_normal((H, H)) / np.sqrt(H)).astype(f), np.zeros(3 * H, f),
            (rng.standard_normal((H, C)) / np.sqrt(H)).astype(f), np.zeros(C, f))


def _jax():
    import jax
    import jax.numpy as jnp

    def loss_fn(params, x, lengths, labels):
        W, U_zr, U_h, b, W_out, b_out = params

        def step(h, xs):
            xt, t = xs
            gx = xt @ W + b
            gzr = jax.nn.sigmoid(gx[:, :2 * H] + h @ U_zr)
            z, r = gzr[:, :H], gzr[:, H:]
            candidate = jnp.tanh(gx[:, 2 * H:] + (r * h) @ U_h)
            h_next = (1.0 - z) * h + z * candidate
            return jnp.where((t < lengths)[:, None], h_next, h), None
        h, _ = jax.lax.scan(step, jnp.zeros((B, H), jnp.float32), (x, jnp.arange(x.shape[0])))
        logits = h @ W_out + b_out
        return -jnp.sum(jax.nn.one_hot(labels, C) * jax.nn.log_softmax(logits)) / B
    f = jax.jit(jax.value_and_grad(loss_fn))

    def run(x, lengths, labels, *params):
        loss, grads = jax.block_until_ready(f(params, x, lengths, labels))
        return np.asarray(loss), [np.asarray(g) for g in grads]
    return run


def _torch():
    import torch

    def run(x, lengths, labels, *params):
        x, lengths, labels = torch.from_numpy(x), torch.from_numpy(lengths), torch.from_numpy(labels)
        W, U_zr, U_h, b, W_out, b_out = ps = [torch.tensor(p, requires_grad=True) for p in params]
        h = torch.zeros(B, H)
        for t in range(int(lengths.max())):
            gx = x[t] @ W + b
            gzr = torch.sigmoid(gx[:, :2 * H] + h @ U_zr)
            z, r = gzr[:, :H], gzr[:, H:]
            candidate = torch.tanh(gx[:, 2 * H:] + (r * h) @ U_h)
            h = torch.where((t < lengths)[:, None], (1.0 - z) * h + z * candidate, h)
        logits = h @ W_out + b_out
        loss = -torch.sum(torch.nn.functional.one_hot(labels, C) * torch.log_softmax(logits, 1)) / B
        grads = torch.autograd.grad(loss, ps)
        return loss.detach().numpy(), [g.numpy() for g in grads]
    return run


def systems(a):
    g, note = harness.traced(gru_step, *a)
    out = {}
    for name, s in harness.dfc_sessions(g).items():
        out[name] = System(lambda s=s: s.call(*a), note)
    out["numpy by hand"] = System(error="— (no hand-written GRU BPTT)")
    out["JAX jit (scan + value_and_grad)"] = try_system(lambda: (lambda f: lambda: f(*a))(_jax()))
    out["PyTorch eager"] = try_system(lambda: (lambda f: lambda: f(*a))(_torch()))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=20.0)
    args = ap.parse_args(argv)
    a = inputs()
    sy = systems(a)
    res = {"rows": harness.compare(sy, args.reps, budget_s=args.budget)}
    res["max_rel_error"] = harness.check_close({k: s.result for k, s in sy.items() if s.result is not None},
                                               "dfc (fused Python)", rtol=2e-4, atol=1e-6)
    res["conditions"] = (f"T={T} B={B} D={D} H={H} classes={C}, lengths {int(a[1].min())}..{int(a[1].max())}, "
                         f"float32, forward + gradients of 6 weights")
    return res


def report(res):
    return harness.table("GRU classifier training step, variable lengths: " + res["conditions"], res["rows"])


if __name__ == "__main__":
    print(report(main()))
