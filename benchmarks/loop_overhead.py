"""Loop overhead: a while loop with a trivial body (i = i + 1), N iterations.

Reports iterations/s and µs per executed node for the reference interpreter, the
executor node by node (unfused, inline) and the default executor (fused loops), and
for an out-of-graph loop (Python calling a one-step graph).
    python -m benchmarks.loop_overhead [--iterations 100000] [--json out.json]
"""
import argparse
import json
import numpy as np

import dfc
from benchmarks.bench_util import median_time


def build():
    return dfc.trace(lambda n: dfc.while_loop(lambda i: i < n, lambda i: i + 1, dfc.constant(np.int64(0))),
                     dfc.TensorSpec([], "int64"))


def nodes_per_iteration(g):
    # Merge, Less, LoopCond, Switch, Identity, Const(1), Add, NextIteration (+ the constant Enter
    # is delivered once per iteration without running a kernel).
    return sum(1 for n in g.nodes.values() if n.op not in ("Placeholder", "Const", "Enter", "Exit")) + 1




def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    g = build()
    n = np.int64(args.iterations)
    per_iter = nodes_per_iteration(g)
    results = {"iterations": args.iterations, "nodes_per_iteration": per_iter}
    sessions = {"reference": dict(mode="reference"), "executor": dict(fuse_loops=False, num_threads=0),
                "threads": dict()}
    for mode, kw in sessions.items():
        s = dfc.Session(g, **kw)
        assert int(s.call(n)) == args.iterations
        t = median_time(lambda: s.call(n), args.reps)
        results[mode] = {"iterations_per_s": args.iterations / t, "us_per_node": t / (args.iterations * per_iter) * 1e6,
                         "seconds": t}
    step = dfc.trace(lambda i: i + 1, dfc.TensorSpec([], "int64"))
    s = dfc.Session(step)
    k = min(args.iterations, 5000)

    def out_of_graph():
        i = np.int64(0)
        while i < k:
            i = s.call(i)
    t = median_time(out_of_graph, args.reps)
    results["out_of_graph"] = {"iterations_per_s": k / t}
    results["in_graph_over_out_of_graph"] = results["threads"]["iterations_per_s"] / (k / t)
    for key in ("reference", "executor", "threads", "out_of_graph"):
        r = results[key]
        extra = f", {r['us_per_node']:.2f} µs/node" if "us_per_node" in r else ""
        print(f"{key:>13}: {r['iterations_per_s']:>10,.0f} iterations/s{extra}")
    print(f"in-graph / out-of-graph: {results['in_graph_over_out_of_graph']:.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
