"""benchmarks/gpu.py runs where GPU time is scarce, so its parts are tried here first, tiny, on the strict
cupy double: the LSTM step's gradients against float64 numpy, and the timeline summary of a swapping step
(its swap copies overlap the kernels)."""
import json

import numpy as np
import pytest


def test_the_lstm_part_checks_gradients_on_the_strict_double():
    pytest.importorskip("jax")
    from benchmarks import gpu
    res = gpu.bench_lstm("strict:0", reps=1, T=4, sizes=[(8, 2)])
    (row,) = res["rows"]
    assert row["gradients checked against"] == "numpy float64"
    assert row["dfc max_rel_error"] < 1e-5 and row["dfc (no elementwise fusion) max_rel_error"] < 1e-5
    assert row["dfc"]["median_ms"] > 0 and row["jax jit+scan"]["median_ms"] > 0


def test_the_timeline_part_summarizes_swap_copies_beside_kernels(tmp_path):
    from benchmarks import gpu
    res = gpu.bench_timeline("strict:0", str(tmp_path), T=30, H=32, B=32, capacity_mb=0.6)
    t = res["dfc_trace"]
    assert t["spans"]["swap out"] > 0 and res["memory"]["swap"]["swapped_out"] > 0
    assert 0 < t["swap_overlapping_compute_ms"] <= t["swap_ms"] <= t["run_ms"]
    assert json.load(open(tmp_path / "swap_trace.json"))["traceEvents"]


def test_interval_overlap():
    from benchmarks.gpu import _overlap, _union
    a = _union([(0, 2), (1, 3), (5, 6)])
    assert a == [[0, 3], [5, 6]]
    assert _overlap(a, _union([(2, 5.5)])) == pytest.approx(1.5)
    assert np.isclose(_overlap(a, []), 0.0)
