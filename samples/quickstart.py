"""Quickstart: plain Python control flow on tensors becomes in-graph control flow.

    python samples/quickstart.py                     # runs it through dfc and checks against Python
    dfc compile samples/quickstart.py -o out         # -> out/collatz.json
    dfc run out/collatz.json --input n=27 --json     # the same graph, run by the runtime alone
"""
import numpy as np

import dfc


@dfc.function(input_signature=[dfc.TensorSpec([], "int64")])
def collatz(n):
    """Collatz steps from n down to 1, and the largest value seen on the way."""
    steps = 0
    peak = n
    while n != 1:               # n is a tensor: an in-graph while_loop
        if n % 2 == 0:          # an in-graph cond
            n = n // 2
        else:
            n = 3 * n + 1
        peak = dfc.maximum(peak, n)
        steps += 1
    return steps, peak


def collatz_python(n):
    steps, peak = 0, n
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        peak = max(peak, n)
        steps += 1
    return steps, peak


def main():
    for n in (6, 27, 97):
        steps, peak = collatz(np.int64(n))
        assert (int(steps), int(peak)) == collatz_python(n)
        print(f"collatz({n}): {int(steps)} steps, peak {int(peak)}")
    g = collatz.trace(dfc.TensorSpec([], "int64"))
    print(f"one graph of {g.num_nodes()} nodes ({g.summary()['loops']} loop, {g.summary()['conds']} cond); "
          f"its converted source:\n{collatz.code}")


if __name__ == "__main__":
    main()
