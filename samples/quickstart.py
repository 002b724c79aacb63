"""Quickstart: build a graph with in-graph loops and conditionals, save it, run it.

    python samples/quickstart.py            # traces, saves out/collatz.json, runs it
    dfc run out/collatz.json --input n=27   # the same graph from the command line
"""
import os
import sys

import numpy as np

import dfc


def collatz_steps(n):
    """Number of Collatz steps from n down to 1, and the largest value seen."""
    def body(n, steps, peak):
        n = dfc.cond(n % 2 == 0, lambda: n // 2, lambda: 3 * n + 1)
        return n, steps + 1, dfc.maximum(peak, n)
    _, steps, peak = dfc.while_loop(lambda n, steps, peak: n != 1, body, (n, 0, n))
    return steps, peak


def main(out_dir="out"):
    g = dfc.trace(collatz_steps, dfc.TensorSpec([], "int64"))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "collatz.json")
    dfc.save(g, path)
    h = dfc.load(path)
    for n in (6, 27, 97):
        steps, peak = h(np.int64(n))
        print(f"collatz({n}): {int(steps)} steps, peak {int(peak)}")
    print(f"saved {path} ({g.num_nodes()} nodes); try: dfc run {path} --input n=27 --json")


if __name__ == "__main__":
    main(*sys.argv[1:])
