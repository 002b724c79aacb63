"""Timing shared by dfc's benchmarks and the competitor scripts (numpy-free, importable anywhere)."""
import statistics
import time


def median_time(fn, reps):
    """Median wall time of fn() over `reps` runs after one warm-up run, in seconds."""
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run_task(loop, lstm):
    """Entry point of a competitor script: argv[1] is a JSON task; the result is printed as JSON."""
    import json
    import sys
    cfg = json.loads(sys.argv[1])
    if cfg["task"] == "loop":
        result = loop(cfg["n"], cfg["reps"])
    else:
        result = lstm(cfg["H"], cfg["B"], cfg["T"], cfg["reps"], cfg["grads_out"])
    print(json.dumps(result))
