"""Sparse vs dense updates of sharded embedding tables: bytes between processes per training step.

    python -m benchmarks.sparse_updates [--sizes 100,2000,20000] [--steps 20] [--md FILE.md]

samples/embedding_model.py's matrix factorization (user and item tables of dim 8, each split over ps:0
and ps:1; 2 workers, async DataParallel, Adagrad, batch 128) for users = N and items = N / 2, three ways
(WAYS): each table one Variable looked up on the worker (every step reads whole tables) with dense
updates; sharded with the lookups on the shards' tasks and dense updates (`opt.sparse_updates = False`:
the placer keeps the dense gradient and update beside the shard, so only rows cross, but each step
does O(table) work on the ps); sharded with sparse row updates. Reports the bytes moved between
processes per worker step (DataParallel.run's bytes_between_processes: every Send to another process,
values as shipped), wall time per step and the held-out error after training.
"""
import argparse
import datetime
import importlib.util
import os
import platform

HERE = os.path.dirname(os.path.abspath(__file__))
# (name, tables sharded over the ps tasks and looked up there, sparse row updates)
WAYS = (("one table per ps task, gathered on the worker, dense updates", False, False),
        ("sharded, lookups on the shards, dense updates", True, False),
        ("sharded, lookups on the shards, sparse updates", True, True))


def sample():
    spec = importlib.util.spec_from_file_location("embedding_model",
                                                  os.path.join(HERE, "..", "samples", "embedding_model.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(sizes, steps):
    import dfc
    m = sample()
    c = dfc.cluster.connect(tasks={"ps": 2, "worker": 2}, log_to_driver=False)
    rows = []
    try:
        for n in sizes:
            for way, sharded, sparse in WAYS:
                r = m.train(c, steps=steps, users=n, items=max(n // 2, 1), sparse=sparse, sharded=sharded,
                            name=f"bench_{n}_{len(rows)}")
                rows.append({"users": n, "items": max(n // 2, 1), "way": way, "table_kB": r["table_bytes"] / 1e3,
                             "kB_per_step": r["bytes_per_step"] / 1e3, "ms_per_step": 1e3 * r["seconds_per_step"],
                             "before": r["before"], "after": r["after"]})
                print(f"users={n} {way}: {rows[-1]['kB_per_step']:.1f} kB/step, {rows[-1]['ms_per_step']:.1f} ms/step "
                      f"(tables {rows[-1]['table_kB']:.0f} kB), MSE {r['before']:.3f} -> {r['after']:.3f}", flush=True)
    finally:
        c.shutdown()
    return rows


def report(rows, a):
    lines = ["# Sparse vs dense updates of sharded embedding tables", "",
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
             f"{os.cpu_count()} cores; local Ray cluster of 2 ps + 2 worker tasks; {a.steps} steps per worker.", "",
             f"Command: `python -m benchmarks.sparse_updates --sizes {a.sizes} --steps {a.steps}`", "",
             "| users / items | tables (kB) | way | kB between processes per step | ms per step (wall / steps) | "
             "held-out MSE |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['users']} / {r['items']} | {r['table_kB']:.0f} | {r['way']} | {r['kB_per_step']:.1f} | "
                     f"{r['ms_per_step']:.1f} | {r['before']:.3f} -> {r['after']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,2000,20000")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--md", default=None, help="write the table here (markdown)")
    a = p.parse_args(argv)
    rows = measure([int(s) for s in a.sizes.split(",")], a.steps)
    text = report(rows, a)
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
    return rows


if __name__ == "__main__":
    main()
