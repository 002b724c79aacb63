"""dfc side of the LSTM training-step benchmark (forward while_loop + gradients through it).

    python -m benchmarks.lstm [--size small|large] [--reps 5] [--unrolled]
"""
import argparse
import statistics
import time

import numpy as np

import dfc
from benchmarks.bench_util import median_time
from benchmarks.lstm_problem import SIZES, make_inputs, numpy_loss_and_grads, max_rel_error


def lstm_loss(x, W, b, H, unrolled=False):
    T, B = x.shape[0], x.shape[1]

    def cell(xt, h, c):
        z = dfc.matmul(dfc.concat([xt, h], 1), W) + b
        zi, zf, zo, zg = dfc.split(z, 4, axis=1)
        i, f, o, g = dfc.sigmoid(zi), dfc.sigmoid(zf), dfc.sigmoid(zo), dfc.tanh(zg)
        c = f * c + i * g
        return o * dfc.tanh(c), c

    h = c = dfc.zeros([B, H])
    if unrolled:
        acc = dfc.constant(np.float32(0))
        for t in range(T):
            h, c = cell(x[t], h, c)
            acc = acc + dfc.reduce_sum(h)
    else:
        def body(t, h, c, acc):
            h, c = cell(x[t], h, c)
            return t + 1, h, c, acc + dfc.reduce_sum(h)
        _, h, c, acc = dfc.while_loop(lambda t, h, c, acc: t < T, body, (0, h, c, dfc.constant(np.float32(0))))
    return acc + dfc.reduce_sum(h * h)


def build(H, B, T, unrolled=False):
    def step(x, W, b):
        loss = lstm_loss(x, W, b, H, unrolled)
        dW, db = dfc.gradients(loss, [W, b])
        return loss, dW, db
    f32 = "float32"
    return dfc.trace(step, dfc.TensorSpec([T, B, H], f32), dfc.TensorSpec([2 * H, 4 * H], f32),
                     dfc.TensorSpec([4 * H], f32))


def median_ms(fn, reps):
    return median_time(fn, reps) * 1e3


def run(size="small", reps=5, unrolled=False, mode="threads", **session_kw):
    cfg = SIZES[size]
    H, B, T = cfg["H"], cfg["B"], cfg["T"]
    x, W, b = make_inputs(H, B, T)
    g = build(H, B, T, unrolled)
    session_kw.setdefault("compile_loops", False)       # the fused row; compile_loops=True for the compiled one
    s = dfc.Session(g, mode=mode, **session_kw)
    loss, dW, db = s.call(x, W, b)
    ref_loss, ref_dW, ref_db = numpy_loss_and_grads(x, W, b)
    err = max(max_rel_error(dW, ref_dW), max_rel_error(db, ref_db))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        s.call(x, W, b)
        times.append((time.perf_counter() - t) * 1e3)
    q = statistics.quantiles(times, n=4) if reps > 1 else [times[0]] * 3
    return {"ms_per_step": statistics.median(times), "p25_ms": q[0], "p75_ms": q[2], "max_rel_error_vs_numpy": err,
            "numpy_ms_per_step": median_ms(lambda: numpy_loss_and_grads(x, W, b), reps), "nodes": g.num_nodes(),
            "grads": (dW, db)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--unrolled", action="store_true")
    ap.add_argument("--mode", default="threads")
    ap.add_argument("--compiled", action="store_true", help="the compiled path (compile_loops=True)")
    a = ap.parse_args()
    r = run(a.size, a.reps, a.unrolled, a.mode, compile_loops=a.compiled)
    r.pop("grads")
    print(r)
