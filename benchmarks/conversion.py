"""Conversion and tracing cost of dfc.function on a 200-line function.

The function is generated: 20 blocks, each a tensor `while` or `for` loop
with `if`/`elif`, `break`/`continue` and an early-return flag, ~10 lines
each. Prints the time to convert the source, to trace the graph (first call,
conversion included), and a cached call (trace reused, graph only runs).

    python benchmarks/conversion.py [--repeat N]
"""
import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BLOCKS = 20


def block(i):
    if i % 2 == 0:
        return f"""\
    j = 0
    while j < n:
        if x > {i}:
            s = s + x * {i + 1}
        elif x < -{i}:
            s = s - 1.0
        else:
            s = s + 0.5
        if s > 1000000.0:
            break
        j += 1
"""
    return f"""\
    for k in range(n):
        if k % 3 == 0:
            continue
        if s < -{i}.0 and x < 0:
            s = s * 0.5
        else:
            s = s + 0.25
        t = s * {i}
        if t > 1.0e9:
            s = t / 2
        s = s - 0.125
"""


def make_source():
    lines = ["import dfc", "", "", "def big(x, n):", "    s = x * 0"]
    for i in range(BLOCKS):
        lines.append(block(i).rstrip("\n"))
    lines.append("    return s")
    return "\n".join(lines) + "\n"


def load(source):
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "big_function.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("big_function", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.big


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="cached calls to time")
    args = parser.parse_args()
    from dfc.compiler.autograph import conversion, function
    source = make_source()
    fn = load(source)
    x, n = np.float32(1.5), np.int32(3)

    t0 = time.perf_counter()
    converted = conversion.convert_code(fn)
    t_convert = time.perf_counter() - t0

    fn2 = load(source)  # fresh code object: the first call converts again
    f = function(fn2)
    t0 = time.perf_counter()
    first = f(x, n)
    t_first = time.perf_counter() - t0

    cached = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        again = f(x, n)
        cached.append(time.perf_counter() - t0)
    assert np.allclose(first, again)
    expected = fn(float(x), int(n))
    graph = f.trace(*[__import__("dfc").TensorSpec([], d) for d in ("float32", "int32")])
    summary = graph.summary()

    print(f"source: {source.count(chr(10))} lines, {BLOCKS} loops, "
          f"{source.count('if ')} if/elif statements")
    print(f"converted source: {converted.source.count(chr(10))} lines")
    print(f"graph: {summary}")
    print(f"conversion only:                 {t_convert * 1e3:8.1f} ms")
    print(f"first call (convert+trace+run):  {t_first * 1e3:8.1f} ms")
    print(f"cached call (median of {args.repeat}):     {statistics.median(cached) * 1e3:8.1f} ms")
    print(f"result {float(np.asarray(first)):.4f} (plain Python: {expected:.4f})")


if __name__ == "__main__":
    main()
