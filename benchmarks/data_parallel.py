"""Data-parallel training (issue 12): samples/distributed_training.py's MLP on digits, 1 ps task.

    python -m benchmarks.data_parallel [--workers 1,2,4] [--updates 300] [--reps 3] [--json out.json]

Stragglers: for 1, 2 and 4 worker processes, async, sync (m = n) and sync with one backup worker
(m = n - 1), without and with one worker slowed 3x (the course note's straggler: after each step it
sleeps twice the median step time measured for that n). Each run makes `updates` parameter updates
(async: updates / n steps per worker) and reports updates/s (async: until the first worker is done, so a
straggler's tail does not count), and the seconds and updates until the
test accuracy first reaches 95% (a monitor thread reads the parameters from the ps task every 0.1 s).
Configurations run round-robin, `reps` times each; the table gives median and min-max.

Wire: bytes moved between processes per worker step, with and without Session(wire_compression=
"bfloat16"), async and sync on 2 workers, with the final test accuracy.
"""
import argparse
import importlib.util
import json
import os
import statistics
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = 0.95


def sample():
    """samples/distributed_training.py as a module (its data and model)."""
    spec = importlib.util.spec_from_file_location("distributed_training",
                                                  os.path.join(HERE, "..", "samples", "distributed_training.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def one_run(c, dt, data, workers, mode, m, delay, updates, name, batch=64, lr=0.3, compression=None):
    """Train once; returns updates/s, time and updates to TARGET accuracy, final accuracy, step times."""
    import dfc
    xtr, ytr, xte, yte = data
    n = len(workers)
    dp = dfc.train.DataParallel(c, dfc.train.SGD(lr), mode=mode, replicas_to_aggregate=m, name=name,
                                workers=workers, wire_compression=compression)
    loss, accuracy, specs = dt.mlp(dp)
    dp.compile(loss, specs)
    shards = [(xtr[k::n], ytr[k::n]) for k in range(n)]
    reached, done = {}, threading.Event()
    stamps = [[] for _ in range(n)]

    def monitor(t0):
        while not done.is_set() and not reached:
            try:
                acc, step = accuracy(xte, yte), int(dp.global_step.numpy())
            except dfc.DfcError:
                return
            if acc >= TARGET:
                reached.update(seconds=time.perf_counter() - t0, updates=step)
            done.wait(0.1)
    steps = updates if mode == "sync" else updates // n
    delays = [0.0] * n
    if delay:
        delays[-1] = delay
    t0 = time.perf_counter()
    watcher = threading.Thread(target=monitor, args=(t0,), daemon=True)
    watcher.start()
    out = dp.run(shards, steps, batch_size=batch, delays=delays,
                 on_step=lambda k, i, _loss: stamps[k].append(time.perf_counter()))
    wall = time.perf_counter() - t0
    done.set()
    watcher.join()
    step_times = [b - a for s in stamps[:n - 1 if delay else n] for a, b in zip(s, s[1:])]
    if mode == "sync":
        rate = out["updates"] / wall
    else:       # async: updates per second while every worker still runs (until the first one is done)
        end = min(s[-1] for s in stamps if s)
        rate = sum(t <= end for s in stamps for t in s) / (end - t0)
    return {"updates_per_s": rate, "worker_steps": out["worker_steps"],
            "seconds_to_95": reached.get("seconds"), "updates_to_95": reached.get("updates"),
            "accuracy": accuracy(xte, yte), "median_step_s": statistics.median(step_times) if step_times else None,
            "bytes_per_worker_step": out["bytes_between_processes"] / max(1, sum(out["worker_steps"]))}


def summary(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals),
            "missing": len(values) - len(vals)}


def stragglers(c, dt, data, counts, updates, reps):
    configs = []
    delays = {}
    for n in counts:
        workers = [f"worker:{k}" for k in range(n)]
        # the straggler sleeps twice the median step time of a plain async run with n workers: 3x slower
        cal = one_run(c, dt, data, workers, "async", None, 0.0, 20 * n, f"bdp_cal{n}")
        delays[n] = 2 * cal["median_step_s"]
        configs += [(n, "async", None, False), (n, "async", None, True), (n, "sync", n, False), (n, "sync", n, True)]
        if n > 1:
            configs.append((n, "sync", n - 1, True))
    runs = {cfg: [] for cfg in configs}
    for rep in range(reps):
        for cfg in configs:
            n, mode, m, slow = cfg
            r = one_run(c, dt, data, [f"worker:{k}" for k in range(n)], mode, m, delays[n] if slow else 0.0,
                        updates, f"bdp{n}_{mode}_{m}_{int(slow)}_{rep}")
            runs[cfg].append(r)
            print(f"  rep {rep} n={n} {mode:5} m={m} straggler={slow}: {r['updates_per_s']:.1f} updates/s, "
                  f"95% after {r['seconds_to_95']} s, accuracy {r['accuracy']:.3f}", flush=True)
    rows = []
    for cfg, rs in runs.items():
        n, mode, m, slow = cfg
        rows.append({"workers": n, "mode": mode, "m": m, "straggler": slow, "straggler_delay_s": delays[n] if slow else 0,
                     "updates_per_s": summary([r["updates_per_s"] for r in rs]),
                     "seconds_to_95": summary([r["seconds_to_95"] for r in rs]),
                     "updates_to_95": summary([r["updates_to_95"] for r in rs]),
                     "accuracy": summary([r["accuracy"] for r in rs]),
                     "worker_steps": [r["worker_steps"] for r in rs]})
    return rows


def wire(c, dt, data, updates):
    rows = []
    for mode in ("async", "sync"):
        for comp in (None, "bfloat16"):
            r = one_run(c, dt, data, ["worker:0", "worker:1"], mode, None, 0.0, updates,
                        f"bdp_wire_{mode}_{comp}", compression=comp)
            rows.append({"mode": mode, "wire_compression": comp or "none",
                         "bytes_per_worker_step": r["bytes_per_worker_step"], "accuracy": r["accuracy"]})
    return rows


def fmt(s, unit="", digits=1):
    if s is None:
        return "not reached"
    text = f"{s['median']:.{digits}f}{unit} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"
    return text + (f", not reached in {s['missing']} of {s['n'] + s['missing']}" if s["missing"] else "")


def table(rows):
    out = ["| workers | mode | straggler 3× | updates/s | s to 95% | updates to 95% | final accuracy |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        mode = r["mode"] if r["m"] is None else f"{r['mode']} m={r['m']} of {r['workers']}"
        out.append(f"| {r['workers']} | {mode} | {'yes' if r['straggler'] else 'no'} | {fmt(r['updates_per_s'])} | "
                   f"{fmt(r['seconds_to_95'], digits=2)} | {fmt(r['updates_to_95'], digits=0)} | "
                   f"{fmt(r['accuracy'], digits=3)} |")
    return "\n".join(out)


def recovered(rows):
    """Per n: the share of the throughput a straggler costs sync training that m = n - 1 wins back."""
    out = {}
    by = {(r["workers"], r["mode"], r["m"], r["straggler"]): r["updates_per_s"]["median"] for r in rows}
    for (n, mode, m, slow), v in by.items():
        if mode == "sync" and m == n - 1 and slow:
            fast, slowed = by[(n, "sync", n, False)], by[(n, "sync", n, True)]
            out[n] = (v - slowed) / (fast - slowed) if fast > slowed else None
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--updates", type=int, default=300)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    import dfc
    from benchmarks import harness
    counts = [int(x) for x in a.workers.split(",")]
    dt = sample()
    data = dt.load()
    conditions = harness.conditions()
    c = dfc.cluster.connect(tasks={"ps": 1, "worker": max(counts + [2])}, log_to_driver=False)
    try:
        rows = stragglers(c, dt, data, counts, a.updates, a.reps)
        wires = wire(c, dt, data, a.updates)
    finally:
        c.shutdown()
    conditions["load_avg_at_end"] = os.getloadavg()[0]
    print(f"\n#### Data-parallel digits MLP, 1 ps + n workers (each a process), {a.updates} updates per run, "
          f"{a.reps} runs each; {conditions['cores']} cores, load average {conditions['load_avg_at_start']:.1f} "
          f"at start, {conditions['load_avg_at_end']:.1f} at end\n")
    print(table(rows))
    for n, share in recovered(rows).items():
        print(f"\nn={n}: sync with m = n - 1 wins back "
              f"{'n/a' if share is None else f'{100 * share:.0f}%'} of the updates/s the straggler costs sync")
    print("\n| mode | wire | bytes per worker step | final accuracy |\n|---|---|---|---|")
    for r in wires:
        print(f"| {r['mode']} | {r['wire_compression']} | {r['bytes_per_worker_step']:.0f} | {r['accuracy']:.3f} |")
    result = {"conditions": conditions, "updates": a.updates, "reps": a.reps, "stragglers": rows,
              "recovered_share": recovered(rows), "wire": wires}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
