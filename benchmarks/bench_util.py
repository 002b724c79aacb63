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
