"""An embedding model trained data-parallel, its tables split over two parameter-server tasks.

    python samples/embedding_model.py [--steps 100] [--users 100] [--items 80] [--dense]

Matrix factorization on synthetic ratings: rating(u, i) = <user_u, item_i> + noise for hidden rank-8
factors. The model's user and item embedding tables (dim 8) are dfc sharded Variables, each split into
two shards, one on ps:0 and one on ps:1 (dp.sharded_variable); two workers train asynchronously with
dfc.train.DataParallel and Adagrad. A step looks up only its batch's rows (dfc.embedding_lookup routes
each id to its shard's task) and its gradient for each shard is rows at local indices, applied on that
shard's task: only those rows cross between processes, never a table. --dense applies the same
gradients as dense tables instead (the same parameters, many more bytes: benchmarks/sparse_updates.py
measures both). Prints the mean squared error on held-out ratings before and after, and the bytes
moved between processes per worker step.
"""
import argparse
import time

import numpy as np

import dfc

RANK, DIM = 8, 8


def ratings(n, users, items, seed=0):
    """n (user, item, rating) triples of a hidden rank-RANK model, with a little noise."""
    r = np.random.default_rng(seed)
    pu = r.normal(size=(users, RANK)) / RANK ** 0.25
    qi = r.normal(size=(items, RANK)) / RANK ** 0.25
    u, i = r.integers(0, users, n), r.integers(0, items, n)
    y = np.einsum("nk,nk->n", pu[u], qi[i]) + 0.1 * r.normal(size=n)
    return u.astype(np.int64), i.astype(np.int64), y.astype(np.float32)


def model(dp, users, items, seed=1, sharded=True):
    """The two tables on dp's ps tasks (sharded=False: each a single Variable on one ps task, looked up on
    the worker, so every step reads whole tables), the loss and the error of the current parameters."""
    r = np.random.default_rng(seed)
    table = dp.sharded_variable if sharded else dp.variable
    user_emb = table((0.5 * r.normal(size=(users, DIM))).astype(np.float32), name="user_emb")
    item_emb = table((0.5 * r.normal(size=(items, DIM))).astype(np.float32), name="item_emb")

    def loss(u, i, y):
        pred = dfc.reduce_sum(dfc.embedding_lookup(user_emb, u) * dfc.embedding_lookup(item_emb, i), axis=1)
        return dfc.reduce_mean(dfc.square(pred - y))

    def mse(u, i, y):
        return float(np.mean((np.einsum("nk,nk->n", user_emb.numpy()[u], item_emb.numpy()[i]) - y) ** 2))
    specs = [dfc.TensorSpec([None], "int64"), dfc.TensorSpec([None], "int64"), dfc.TensorSpec([None], "float32")]
    return loss, mse, specs


def train(c, steps=100, users=100, items=80, batch=128, sparse=True, lr=0.5, name="emb", sharded=True):
    """Async DataParallel on cluster c's workers; returns {"before", "after", "losses", "bytes_per_step",
    "seconds_per_step" (wall time of the run over the workers' steps), "table_bytes"}."""
    opt = dfc.train.Adagrad(lr, initial_accumulator_value=0.01)
    opt.sparse_updates = sparse          # False: the same update, applied as dense tables
    dp = dfc.train.DataParallel(c, opt, mode="async", name=name)
    loss, mse, specs = model(dp, users, items, sharded=sharded)
    u, i, y = ratings(40 * batch * len(dp.workers), users, items)
    cut = len(y) * 9 // 10
    shards = [tuple(a[k:cut:len(dp.workers)] for a in (u, i, y)) for k in range(len(dp.workers))]
    dp.compile(loss, specs)
    before = mse(u[cut:], i[cut:], y[cut:])
    t0 = time.perf_counter()
    out = dp.run(shards, steps=steps, batch_size=batch)
    seconds = time.perf_counter() - t0
    worker_steps = sum(out["worker_steps"])
    return {"before": before, "after": mse(u[cut:], i[cut:], y[cut:]), "losses": out["losses"],
            "bytes_per_step": out["bytes_between_processes"] / max(worker_steps, 1),
            "seconds_per_step": seconds / max(worker_steps, 1),
            "table_bytes": 4 * DIM * (users + items)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--users", type=int, default=100)
    p.add_argument("--items", type=int, default=80)
    p.add_argument("--dense", action="store_true", help="apply the gradients as dense tables")
    p.add_argument("--address", default=None, help="a Ray cluster to join (default: start a local one)")
    a = p.parse_args(argv)
    c = dfc.cluster.connect(a.address, tasks={"ps": 2, "worker": 2}, log_to_driver=False)
    try:
        r = train(c, a.steps, a.users, a.items, sparse=not a.dense)
    finally:
        c.shutdown()
    first = [float(np.mean(w[:5])) for w in r["losses"]]
    last = [float(np.mean(w[-5:])) for w in r["losses"]]
    print(f"held-out MSE {r['before']:.4f} -> {r['after']:.4f}; workers' training loss (mean of 5 steps) "
          f"{', '.join(f'{x:.3f}' for x in first)} -> {', '.join(f'{x:.3f}' for x in last)}")
    print(f"{'dense' if a.dense else 'sparse'} updates: {r['bytes_per_step'] / 1e3:.1f} kB between processes "
          f"per worker step (the two tables: {r['table_bytes'] / 1e3:.0f} kB)")
    return r


if __name__ == "__main__":
    main()
