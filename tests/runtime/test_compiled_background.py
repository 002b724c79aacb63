"""compile_loops="auto" (the default): a frame that has run long enough fused is compiled by a child process
(dfc/runtime/compiled/background.py) while the fused path keeps running it; the machine code then comes from
the disk cache, gives the reference interpreter's bits, and serves later Sessions at once. A child that
fails leaves the frame fused."""
import time

import numpy as np
import pytest

import dfc
from tests.compiledtools import _no_compile_budget, frames_alone  # noqa: F401 (fixtures)
from tests.runtime.test_compiled import _signature

# these test loop frames compiled one by one (test_compiled_root.py: the whole run, which supersedes them)
pytestmark = [pytest.mark.usefixtures("frames_alone"),
              pytest.mark.host_devices("numba-compiled loop frames are CPU machine code")]
pytest.importorskip("numba")


def _graph(scale):
    return dfc.trace(lambda x, n: dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * scale + x), (0, x)),
                     dfc.TensorSpec([3], "float32"), dfc.TensorSpec([], "int64"))


def _frame(s, g):
    return next(iter(s.plan(*_signature(g)).programs.values()))


def _long_enough(f):
    from dfc.runtime import compiled
    f.fused_seconds = compiled.AUTO_SECONDS          # as if its fused runs had taken that long


def test_default_policy_is_auto(monkeypatch):
    monkeypatch.delenv("DFC_COMPILE_LOOPS", raising=False)
    assert dfc.Session(_graph(0.5)).compile_loops == "auto"
    monkeypatch.setenv("DFC_COMPILE_LOOPS", "0")
    assert dfc.Session(_graph(0.5)).compile_loops is False


def test_a_child_process_compiles_while_the_frame_runs_fused(monkeypatch, tmp_path):
    from dfc.runtime import compiled
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path))
    g = _graph(0.25)
    x = np.ones(3, np.float32)
    want = dfc.Session(g, mode="reference").call(x, np.int64(10))
    s = dfc.Session(g, compile_loops="auto", num_threads=0)
    s.call(x, np.int64(10))
    f = _frame(s, g)
    assert isinstance(f, compiled.CompiledFrame) and f._job is None and f.runs == {"compiled": 0, "fused": 1}
    _long_enough(f)
    np.testing.assert_array_equal(s.call(x, np.int64(10))[1], want[1])     # starts the child, runs fused
    assert f._job is not None and not f._compiled_once
    deadline = time.monotonic() + 240
    while f._job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert f._job.poll() is True, f._job.error
    got = s.call(x, np.int64(10))
    assert f._compiled_once and f.runs["compiled"] == 1
    np.testing.assert_array_equal(got[1], want[1])
    mine = [st for st in compiled.stats() if st["key"] == f.key]
    assert [st.get("background", False) for st in mine] == [True, False] and mine[1]["cached"] is True
    assert mine[0]["seconds"] > 0
    # A later Session finds the machine code on disk and runs compiled from its first call.
    s2 = dfc.Session(g, compile_loops="auto", num_threads=0)
    np.testing.assert_array_equal(s2.call(x, np.int64(7))[1], dfc.Session(g, mode="reference").call(x, np.int64(7))[1])
    assert _frame(s2, g).runs == {"compiled": 1, "fused": 0}


def test_a_child_that_fails_leaves_the_frame_fused(monkeypatch, tmp_path):
    from dfc.runtime.compiled import background
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path))
    real = background.start
    monkeypatch.setattr(background, "start", lambda path, types, frame: real(path, ("not a numba type",), frame))
    g = _graph(0.75)
    x = np.full(3, 2.0, np.float32)
    s = dfc.Session(g, compile_loops="auto", num_threads=0)
    s.call(x, np.int64(4))
    f = _frame(s, g)
    _long_enough(f)
    s.call(x, np.int64(4))
    deadline = time.monotonic() + 120
    while f._job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert f._job.poll() is False and f._job.error
    want = dfc.Session(g, mode="reference").call(x, np.int64(4))
    for _ in range(2):
        np.testing.assert_array_equal(s.call(x, np.int64(4))[1], want[1])
    assert not f._compiled_once and f.runs["compiled"] == 0
