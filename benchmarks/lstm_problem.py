"""The LSTM training-step problem every system solves in the LSTM benchmark.

x: [T, B, H] inputs; weights W: [2H, 4H], b: [4H]; per step
    z = concat(x_t, h) @ W + b;  i, f, o = sigmoid(z parts); g = tanh(z part)
    c = f * c + i * g;  h = o * tanh(c)
loss = sum over t of sum(h_t) + sum(h_T ** 2); gradients of loss w.r.t. W and b.
Only numpy here, so competitor scripts can import it in their own environments.
"""
import numpy as np

SIZES = {"small": dict(H=64, B=16, T=100), "large": dict(H=512, B=64, T=100)}


def make_inputs(H, B, T, seed=0, dtype=np.float32):
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1, 1, (T, B, H)).astype(dtype)
    W = (rng.standard_normal((2 * H, 4 * H)) / np.sqrt(2 * H)).astype(dtype)
    b = np.zeros(4 * H, dtype)
    return x, W, b


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def numpy_loss_and_grads(x, W, b):
    """Hand-written forward + backprop through time."""
    T, B, H = x.shape
    h = np.zeros((B, H), x.dtype)
    c = np.zeros((B, H), x.dtype)
    cache = []
    loss = x.dtype.type(0)
    for t in range(T):
        xh = np.concatenate([x[t], h], axis=1)
        z = xh @ W + b
        i, f, o = _sigmoid(z[:, :H]), _sigmoid(z[:, H:2 * H]), _sigmoid(z[:, 2 * H:3 * H])
        g = np.tanh(z[:, 3 * H:])
        c_prev = c
        c = f * c + i * g
        tc = np.tanh(c)
        h = o * tc
        loss += h.sum()
        cache.append((xh, i, f, o, g, c_prev, tc))
    loss += (h * h).sum()
    dW, db = np.zeros_like(W), np.zeros_like(b)
    dh = 1.0 + 2.0 * h
    dc = np.zeros_like(c)
    for t in reversed(range(T)):
        xh, i, f, o, g, c_prev, tc = cache[t]
        do = dh * tc
        dc = dc + dh * o * (1 - tc * tc)
        di, df, dg = dc * g, dc * c_prev, dc * i
        dc = dc * f
        dz = np.concatenate([di * i * (1 - i), df * f * (1 - f), do * o * (1 - o), dg * (1 - g * g)], axis=1)
        dW += xh.T @ dz
        db += dz.sum(0)
        dh = (dz @ W.T)[:, H:]
        if t:
            dh = dh + 1.0
    return loss, dW, db


def max_rel_error(a, b):
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-12))
