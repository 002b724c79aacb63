"""Data-parallel training on a local cluster: 1 parameter server + 3 workers, on scikit-learn's digits.

    python samples/distributed_training.py [--steps 150] [--straggler 0.05]

A softmax classifier of the 8x8 digit images (1 797 images bundled with scikit-learn: no download)
is trained three ways with dfc.train.DataParallel: asynchronous (every worker applies its
gradients at once), synchronous (every update averages all three workers' gradients: one step on
the concatenated batch) and synchronous with one backup worker (each update takes the first two of
three; the straggler's late gradients are dropped). Worker 2 is slowed by an injected delay
after each of its steps, as the course note's straggler. For each mode it prints the test accuracy,
the updates per second and how many steps each worker took; `dfc.progress` draws a bar per worker.
"""
import argparse
import time

import numpy as np

import dfc

CLASSES, FEATURES = 10, 64


def load(seed=0):
    """(train x, train y, test x, test y): digits scaled to [0, 1], 80/20 split."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def model(dp):
    """The classifier's parameters on the ps task, and its loss."""
    w = dp.variable(np.zeros((FEATURES, CLASSES), np.float32), name="w")
    b = dp.variable(np.zeros(CLASSES, np.float32), name="b")

    def loss(x, y):
        logits = dfc.matmul(x, w.read_value()) + b.read_value()
        return -dfc.reduce_mean(dfc.reduce_sum(dfc.one_hot(y, CLASSES) * dfc.log_softmax(logits), axis=1))
    return w, b, loss


def accuracy(w, b, x, y):
    return float(np.mean(np.argmax(x @ w.numpy() + b.numpy(), axis=1) == y))


def train(cluster, mode, m, steps, straggler, data, batch=64, lr=0.5, show=True):
    xtr, ytr, xte, yte = data
    dp = dfc.train.DataParallel(cluster, dfc.train.SGD(lr), mode=mode, replicas_to_aggregate=m)
    w, b, loss = model(dp)
    dp.compile(loss, [dfc.TensorSpec([None, FEATURES], "float32"), dfc.TensorSpec([None], "int64")])
    n = len(dp.workers)
    shards = [(xtr[k::n], ytr[k::n]) for k in range(n)]
    bars = None
    if show:
        from rich.progress import Progress
        bars = Progress(transient=True)
        tasks = [bars.add_task(f"{mode} worker:{k}", total=steps) for k in range(n)]
        bars.start()
    t0 = time.perf_counter()
    try:
        out = dp.run(shards, steps, batch_size=batch, delays=[0, 0, straggler][:n],
                     on_step=(lambda k, i, l: bars.update(tasks[k], completed=i + 1, description=f"{mode} "
                              f"worker:{k} loss {l:.3f}")) if bars else None)
    finally:
        if bars:
            bars.stop()
    seconds = time.perf_counter() - t0
    return {"mode": mode if m is None else f"{mode} (m={m} of {n})", "test_accuracy": accuracy(w, b, xte, yte),
            "updates": out["updates"], "updates_per_s": out["updates"] / seconds, "worker_steps": out["worker_steps"]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--straggler", type=float, default=0.05, help="seconds worker:2 sleeps after each step")
    p.add_argument("--address", default=None, help="a Ray cluster to join (default: start a local one)")
    a = p.parse_args(argv)
    data = load()
    c = dfc.cluster.connect(a.address, tasks={"ps": 1, "worker": 3}, log_to_driver=False)
    rows = []
    try:
        for mode, m in (("async", None), ("sync", None), ("sync", 2)):
            r = train(c, mode, m, a.steps, a.straggler, data)
            rows.append(r)
            print(f"{r['mode']:>16}: test accuracy {r['test_accuracy']:.3f}, {r['updates']} updates, "
                  f"{r['updates_per_s']:.1f} updates/s, steps per worker {r['worker_steps']}")
    finally:
        c.shutdown()
    return rows


if __name__ == "__main__":
    main()
