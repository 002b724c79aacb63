"""parallel_iterations sweep (§6.1, Figure 12 shape): a loop whose iterations are independent
heavy work (a matmul chain per iteration), run by the general tagged-frame executor in threads
mode (loop fusion off, so iterations really overlap on the kernel pool).

    python -m benchmarks.parallel_iterations
"""
import statistics
import time

import numpy as np

import dfc


def build(n_iter, size):
    def f(a):
        def body(i, acc):
            m = a * dfc.cast(i + 1, "float32")
            for _ in range(3):
                m = dfc.tanh(m @ a)
            return i + 1, acc + dfc.reduce_sum(m)
        return dfc.while_loop(lambda i, acc: i < n_iter, body, (0, dfc.constant(np.float32(0))))[1]
    return dfc.trace(f, dfc.TensorSpec([size, size], "float32"))


def sweep(pis=(1, 2, 4, 8, 16, 32), n_iter=64, size=192, reps=3):
    g = build(n_iter, size)
    a = (np.random.default_rng(0).standard_normal((size, size)) / size).astype(np.float32)
    out = {}
    ref = None
    for pi in pis:
        s = dfc.Session(g, mode="threads", parallel_iterations=pi, fuse_loops=False)
        v = s.call(a)
        ref = v if ref is None else ref
        np.testing.assert_allclose(v, ref, rtol=1e-5)
        s.call(a)
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            s.call(a)
            ts.append(time.perf_counter() - t)
        out[pi] = n_iter / statistics.median(ts)
    return out


if __name__ == "__main__":
    for pi, rate in sweep().items():
        print(f"parallel_iterations={pi:>2}: {rate:8.1f} iterations/s")
