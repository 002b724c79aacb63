"""Data-parallel training on a local cluster: 1 parameter server + 3 workers, on scikit-learn's digits.

    python samples/distributed_training.py [--steps 150] [--straggler 0.05] [--loop python|graph|both]
    python samples/distributed_training.py --task lstm      # the dynamic_rnn sample's sequence task
    python samples/distributed_training.py --recovery       # kill a worker, then the ps, mid-training

An MLP on the 8x8 digit images (1 797 images bundled with scikit-learn: no download) is trained three
ways with dfc.train.DataParallel: asynchronous (every worker applies its gradients at once),
synchronous (every update averages all three workers' gradients: one step on the concatenated batch)
and synchronous with one backup worker (each update takes the first two of three; the straggler's late
gradients are dropped). Worker 2 is slowed by an injected delay after each of its steps, as the course
note's straggler (Python loops only: an in-graph loop has no place to sleep). Each way runs as a
Python loop of steps, as the paper's in-graph training loop (one dfc.while_loop per worker), or both.
For each it prints the test accuracy, the updates per second and the steps each worker took; progress
bars show each worker's loss.

--recovery shows the course note's failure handling: worker:2's process is killed during async
training (the others go on; the chief restarts it and it rejoins), then ps:0's process is killed during
sync training (the step fails naming ps:0; the chief restarts it, it restores its newest checkpoint
shard and training goes on from there, losing the updates made since).
"""
import argparse
import os
import signal
import tempfile
import threading
import time

import numpy as np

import dfc

CLASSES, FEATURES, HIDDEN = 10, 64, 32


def load(seed=0):
    """(train x, train y, test x, test y): digits scaled to [0, 1], 80/20 split."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def mlp(dp, seed=0):
    """The MLP's parameters on the ps task(s), its loss and its test accuracy."""
    r = np.random.default_rng(seed)
    w1 = dp.variable((r.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES)).astype(np.float32), name="w1")
    b1 = dp.variable(np.zeros(HIDDEN, np.float32), name="b1")
    w2 = dp.variable((r.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN)).astype(np.float32), name="w2")
    b2 = dp.variable(np.zeros(CLASSES, np.float32), name="b2")

    def loss(x, y):
        h = dfc.tanh(dfc.matmul(x, w1.read_value()) + b1.read_value())
        logits = dfc.matmul(h, w2.read_value()) + b2.read_value()
        return -dfc.reduce_mean(dfc.reduce_sum(dfc.one_hot(y, CLASSES) * dfc.log_softmax(logits), axis=1))

    def accuracy(x, y):
        h = np.tanh(x @ w1.numpy() + b1.numpy())
        return float(np.mean(np.argmax(h @ w2.numpy() + b2.numpy(), axis=1) == y))
    return loss, accuracy, [dfc.TensorSpec([None, FEATURES], "float32"), dfc.TensorSpec([None], "int64")]


# ---------------------------------------------------------------- the LSTM sequence task (samples/dynamic_rnn.py)
D, H = 1, 8


def sequences(n, padded_len=12, max_len=9, seed=1):
    """n sequences of lengths 1..max_len padded to padded_len, batch-major ([n, time, 1]) so that
    DataParallel can cut minibatches along axis 0; target = the mean over the true length."""
    r = np.random.default_rng(seed)
    lengths = r.integers(1, max_len + 1, size=n)
    xs = r.uniform(-1, 1, size=(n, padded_len, D))
    xs[np.arange(padded_len)[None, :] >= lengths[:, None]] = 0.0
    return xs, lengths.astype(np.int64), xs[:, :, 0].sum(1) / lengths


def load_sequences():
    xs, lengths, ys = sequences(1200)
    return xs[:960], lengths[:960], ys[:960], xs[960:], lengths[960:], ys[960:]


def lstm(dp, seed=0):
    """The dynamic_rnn sample's LSTM (an in-graph time loop to the batch's true maximum length) with its
    parameters on the ps task(s); its loss and its test mean squared error (run on the cluster)."""
    r = np.random.default_rng(seed)
    wx = dp.variable(r.normal(size=(D, 4 * H)) * 0.5, name="Wx")
    wh = dp.variable(r.normal(size=(H, 4 * H)) * 0.5 / np.sqrt(H), name="Wh")
    b = dp.variable(np.concatenate([np.zeros(H), np.ones(H), np.zeros(2 * H)]), name="b")
    wo = dp.variable(r.normal(size=(H, 1)) * 0.5, name="Wo")

    @dfc.function
    def predict(xs, lengths):
        xs = dfc.transpose(xs, [1, 0, 2])                   # [time, batch, features]
        batch = dfc.shape(xs)[1]
        h = dfc.zeros([batch, H], "float64")
        c = dfc.zeros([batch, H], "float64")
        t = 0
        while t < dfc.reduce_max(lengths):
            z = xs[t] @ wx.read_value() + h @ wh.read_value() + b.read_value()
            i, f, o, g = dfc.split(z, 4, axis=1)
            c_new = dfc.sigmoid(f) * c + dfc.sigmoid(i) * dfc.tanh(g)
            h_new = dfc.sigmoid(o) * dfc.tanh(c_new)
            alive = dfc.expand_dims(t < lengths, 1)
            c = dfc.where(alive, c_new, c)
            h = dfc.where(alive, h_new, h)
            t += 1
        return (h @ wo.read_value())[:, 0]

    def loss(xs, lengths, ys):
        return dfc.reduce_mean(dfc.square(predict(xs, lengths) - ys))

    def mse(xs, lengths, ys):
        with dp.cluster:
            return float(np.mean((predict(xs, lengths) - ys) ** 2))
    specs = [dfc.TensorSpec([None, None, D], "float64"), dfc.TensorSpec([None], "int64"),
             dfc.TensorSpec([None], "float64")]
    return loss, mse, specs


TASKS = {"digits": (load, mlp, "test accuracy", dfc.train.SGD, 0.3),
         "lstm": (load_sequences, lstm, "test MSE", dfc.train.Adam, 0.02)}


def train(cluster, mode, m, steps, straggler, data, batch=64, lr=None, show=True, loop="python", task="digits",
          name=None):
    """Train `task` one way (mode, m, loop) and return the figures the sample prints."""
    _, model, metric, optimizer, default_lr = TASKS[task]
    half = len(data) // 2
    train_data, test_data = data[:half], data[half:]
    dp = dfc.train.DataParallel(cluster, optimizer(default_lr if lr is None else lr), mode=mode,
                                replicas_to_aggregate=m, name=name or f"dp_{task}_{mode}_{m}_{loop}")
    loss, evaluate, specs = model(dp)
    dp.compile(loss, specs, loop=loop, progress=show and loop == "graph")
    n = len(dp.workers)
    shards = [tuple(a[k::n] for a in train_data) for k in range(n)]
    label = f"{mode}{'' if m is None else f' (m={m} of {n})'}, {loop} loop"
    bars, on_step = None, None
    if show and loop == "python":
        from rich.progress import Progress
        bars = Progress(transient=True)
        ids = [bars.add_task(f"{label} worker:{k}", total=steps) for k in range(n)]
        bars.start()

        def on_step(k, i, value):
            bars.update(ids[k], completed=i + 1, description=f"{label} worker:{k} loss {value:.3f}")
    t0 = time.perf_counter()
    try:
        out = dp.run(shards, steps, batch_size=batch, on_step=on_step,
                     delays=[0, 0, straggler][:n] if loop == "python" and straggler else None)
    finally:
        if bars:
            bars.stop()
    seconds = time.perf_counter() - t0
    value = evaluate(*test_data)
    return {"mode": label, "metric": metric, "value": value, "updates": out["updates"],
            "updates_per_s": out["updates"] / seconds, "worker_steps": out["worker_steps"],
            "test_accuracy": value if task == "digits" else None}


def report(r):
    print(f"{r['mode']:>32}: {r['metric']} {r['value']:.3f}, {r['updates']} updates, "
          f"{r['updates_per_s']:.1f} updates/s, steps per worker {r['worker_steps']}")


def kill_when(cluster, task, ready, what):
    """Kill `task`'s process (SIGKILL) once ready() is true; returns the thread."""
    def go():
        deadline = time.time() + 120
        while not ready() and time.time() < deadline:
            time.sleep(0.01)
        pid = cluster.pid(task)
        what.append(pid)
        os.kill(pid, signal.SIGKILL)
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def recovery(cluster, data, steps):
    """Kill the last worker during async training, then ps:0 during sync training; both runs go on."""
    xtr, ytr, xte, yte = data
    n = sum(t.startswith("worker:") for t in cluster.tasks)
    last = f"worker:{n - 1}"
    shards = [(xtr[k::n], ytr[k::n]) for k in range(n)]

    dp = dfc.train.DataParallel(cluster, dfc.train.SGD(0.3), mode="async", name="dp_recovery_async")
    loss, accuracy, specs = mlp(dp)
    dp.compile(loss, specs)
    pids = []
    kill_when(cluster, last, lambda: dp.global_step.numpy() >= steps // 2, pids)
    first = dp.run(shards, steps, batch_size=64, restart_failed=True)
    print(f"async: {last} (pid {pids[0]}) killed at about update {steps // 2}: "
          f"{first['failed'].get(last, 'no failure seen')[:90]}...")
    print(f"       the others went on; restarted as pid {cluster.pid(last)}, it rejoined: steps per worker "
          f"{first['worker_steps']}, test accuracy {accuracy(xte, yte):.3f}")

    dp = dfc.train.DataParallel(cluster, dfc.train.SGD(0.3), mode="sync", replicas_to_aggregate=max(1, n - 1),
                                checkpoint_every=10, name="dp_recovery_sync")
    loss, accuracy, specs = mlp(dp)
    dp.compile(loss, specs, loop="graph")
    pids = []
    kill_when(cluster, "ps:0", lambda: dp.global_step.numpy() >= steps // 2 + 5, pids)
    out = dp.run(shards, steps, batch_size=64, restart_failed=True)
    for e in out["recovered"]:
        print(f"sync (in-graph loops): {e['task']} (pid {pids[0]}) killed: {e['error'][:80]}...")
        print(f"       restarted as pid {cluster.pid(e['task'])}; restored its newest shard (global step "
              f"{e['restored_step']}) and went on to {out['updates']} updates, test accuracy "
              f"{accuracy(xte, yte):.3f}")
    return first, out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--straggler", type=float, default=0.05, help="seconds worker:2 sleeps after each step")
    p.add_argument("--loop", choices=("python", "graph", "both"), default="both")
    p.add_argument("--task", choices=sorted(TASKS), default="digits")
    p.add_argument("--recovery", action="store_true", help="kill a worker, then the ps, during training")
    p.add_argument("--address", default=None, help="a Ray cluster to join (default: start a local one)")
    a = p.parse_args(argv)
    data = TASKS[a.task][0]()
    # each ps task writes its checkpoint shards in its checkpoint directory (on its own machine)
    c = dfc.cluster.connect(a.address, tasks={"ps": 1, "worker": 3}, log_to_driver=False,
                            checkpoint_dir=tempfile.mkdtemp(prefix="dfc-distributed-training-"))
    rows = []
    try:
        if a.recovery:
            return recovery(c, data, a.steps)
        loops = ("python", "graph") if a.loop == "both" else (a.loop,)
        for loop in loops:
            for mode, m in (("async", None), ("sync", None), ("sync", 2)):
                r = train(c, mode, m, a.steps, a.straggler, data, loop=loop, task=a.task)
                rows.append(r)
                report(r)
    finally:
        c.shutdown()
    return rows


if __name__ == "__main__":
    main()
