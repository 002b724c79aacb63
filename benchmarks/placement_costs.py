"""Placement from measured costs (whitepaper §3.2.1): the graph of tests/runtime/test_placement_costs.py
(a matmul beside a chain of column gathers, two CPU devices of one process), placed by the fixed cost model
and by the costs a traced run measured; time per call of each placement, and of one device.

    python -m benchmarks.placement_costs [--n 1024] [--reps 9]
"""
import argparse
import os
import statistics
import tempfile
import time

import numpy as np

import dfc
from dfc.runtime.trace import node_costs


def work(a, perm):
    m = dfc.matmul(a, a)
    e = a
    for _ in range(8):
        e = e[:, perm]
    return dfc.reduce_sum(m), dfc.reduce_sum(e * a)


def _ms(session, args, reps):
    session.call(*args)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        session.call(*args)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts), min(ts), max(ts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--reps", type=int, default=9)
    a = p.parse_args(argv)
    g = dfc.trace(work, dfc.TensorSpec([a.n, a.n], "float64"), dfc.TensorSpec([a.n], "int64"))
    rng = np.random.default_rng(0)
    args = rng.normal(size=(a.n, a.n)), rng.permutation(a.n)
    trace = os.path.join(tempfile.mkdtemp(), "run.json")
    dfc.Session(g, trace=trace).call(*args)
    costs = node_costs(trace)
    rows = [("one device", dfc.Session(g)),
            ("2 devices, cost model", dfc.Session(g, devices=("cpu:1",))),
            ("2 devices, measured costs", dfc.Session(g, devices=("cpu:1",), placement_costs=costs))]
    print(f"n={a.n}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; median (min-max) of {a.reps} calls")
    base = None
    for name, s in rows:
        med, lo, hi = _ms(s, args, a.reps)
        base = base or med
        where = sorted({s.placement[n] for n in g.nodes if g.nodes[n].op == "GetItem"}) if s.placement else ["cpu:0"]
        print(f"{name:28s} {med:8.1f} ms ({lo:.1f}-{hi:.1f})  {base / med:.2f}x one device; gathers on {where}")


if __name__ == "__main__":
    main()
