"""compile_loops="auto" (the default): a frame that has run long enough fused is compiled by a child process
(dfc/runtime/compiled/background.py) while the fused path keeps running it; the machine code then comes from
the disk cache, gives the reference interpreter's bits, and serves later Sessions at once. A child that
fails leaves the frame fused."""
import os
import time

import numpy as np
import pytest

import dfc
from tests.compiledtools import _no_compile_budget, frames_alone, without_jax  # noqa: F401 (fixtures)
from tests.runtime.test_compiled import _signature

# these test loop frames compiled one by one (test_compiled_root.py: the whole run, which supersedes them)
pytestmark = [pytest.mark.usefixtures("frames_alone", "without_jax"),
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
    # The program just goes on calling; the Session switches to the compiled code by itself. The child
    # runs at the program's own priority (at nice 10 it starved on a busy machine and never finished).
    pid, mine = f._job._proc.pid, os.getpriority(os.PRIO_PROCESS, 0)
    seen, deadline = set(), time.monotonic() + 240     # (a bound against a hang, not a timing)
    while not f.runs["compiled"] and time.monotonic() < deadline:
        if f._job.poll() is None:
            try:
                seen.add(os.getpriority(os.PRIO_PROCESS, pid))
            except OSError:         # it exited between poll and getpriority
                pass
        np.testing.assert_array_equal(s.call(x, np.int64(10))[1], want[1])
        time.sleep(0.02)
    assert f._job.poll() is True, f._job.error
    assert f._compiled_once and f.runs["compiled"] == 1
    assert seen == {mine}, f"the compiling child ran at priority {seen}, the program at {mine}"
    mine = [st for st in compiled.stats() if st["key"] == f.key]
    assert [st.get("background", False) for st in mine] == [True, False] and mine[1]["cached"] is True
    assert mine[0]["seconds"] > 0
    # A later Session finds the machine code on disk and runs compiled from its first call.
    s2 = dfc.Session(g, compile_loops="auto", num_threads=0)
    np.testing.assert_array_equal(s2.call(x, np.int64(7))[1], dfc.Session(g, mode="reference").call(x, np.int64(7))[1])
    assert _frame(s2, g).runs == {"compiled": 1, "fused": 0}


class _Compiling:
    """A background Job that is still compiling (background.Job's interface)."""
    error, seconds = None, None

    def poll(self):
        return None


def test_fused_runs_while_a_child_compiles_skip_the_compiled_codes_arguments(monkeypatch, tmp_path):
    """Converting a frame's values into the compiled code's arguments (stacks and TensorArrays into typed
    Lists) costs as much as a fused run of a gradient frame: it made the fused calls twice as slow all
    the while the child compiled. Until the child is done, the frame runs fused and converts nothing."""
    from dfc.runtime import compiled
    from dfc.runtime.compiled import background
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(background, "start", lambda path, types, frame: _Compiling())
    conversions = []
    real_arg = compiled._arg
    monkeypatch.setattr(compiled, "_arg", lambda *a: conversions.append(a) or real_arg(*a))
    g = _graph(0.5)
    x = np.full(3, 0.5, np.float32)
    want = dfc.Session(g, mode="reference").call(x, np.int64(5))
    s = dfc.Session(g, compile_loops="auto", num_threads=0)
    s.call(x, np.int64(5))
    f = _frame(s, g)
    _long_enough(f)
    s.call(x, np.int64(5))                  # starts the (stand-in) child: converts once, for its types
    assert isinstance(f._job, _Compiling)
    conversions.clear()
    for _ in range(3):
        np.testing.assert_array_equal(s.call(x, np.int64(5))[1], want[1])
    assert conversions == [] and f.runs == {"compiled": 0, "fused": 5}


class _Compiled:
    """A background Job that has finished (its frame then compiles in this process, for the test)."""
    error, seconds = None, 0.0

    def poll(self):
        return True


@pytest.mark.parametrize("fused_seconds, keeps_compiled", [(1e-9, False), (10.0, True)])
def test_auto_keeps_the_compiled_code_only_if_it_runs_faster_than_fused(monkeypatch, tmp_path, fused_seconds,
                                                                         keeps_compiled):
    """The default mode times its first compiled runs against the fused runs before them: compiled code that
    is slower (values crossing in and out at a cost) must not make the program slower than the fused path."""
    from dfc.runtime import compiled
    from dfc.runtime.compiled import background
    monkeypatch.setenv("DFC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(background, "start", lambda path, types, frame: _Compiled())
    g = _graph(0.5)
    x = np.full(3, 0.25, np.float32)
    want = dfc.Session(g, mode="reference").call(x, np.int64(6))
    s = dfc.Session(g, compile_loops="auto", num_threads=0)
    s.call(x, np.int64(6))
    f = _frame(s, g)
    _long_enough(f)
    f._fused_times[:] = [fused_seconds] * 5     # as if its fused runs had taken this long each
    for _ in range(compiled.TRIAL_RUNS + 3):
        np.testing.assert_array_equal(s.call(x, np.int64(6))[1], want[1])
    assert f._decided and f.slower_compiled is not keeps_compiled
    before = dict(f.runs)
    for _ in range(2):
        np.testing.assert_array_equal(s.call(x, np.int64(6))[1], want[1])
    ran = "compiled" if keeps_compiled else "fused"
    assert f.runs[ran] == before[ran] + 2, (before, f.runs)


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



# A new process running a gradient loop compiled (loop frames one by one: the gradient frame takes the forward
# loop's stack in and out), printing what numba compiled during its first call and where the frames came from.
_GRADIENT_RUN = """
import json
import numpy as np
from numba.core import event
import dfc
from dfc.runtime import compiled

def step(x, w, n):
    def body(i, h, acc):
        h = dfc.tanh(h * w + 0.5)
        return i + 1, h, acc + dfc.reduce_sum(h * h)
    _, h, acc = dfc.while_loop(lambda i, h, acc: i < n, body, (0, x, dfc.constant(np.float64(0))))
    return acc, dfc.gradients(acc, [w])[0]

g = dfc.trace(step, dfc.TensorSpec([4], "float64"), dfc.TensorSpec([4], "float64"), dfc.TensorSpec([], "int64"))
s = dfc.Session(g, compile_loops=True, num_threads=0)
rec = event.RecordingListener()
with event.install_listener("numba:compile", rec):
    out = s.call(np.linspace(0, 1, 4), np.full(4, 0.7), np.int64(6))
print(json.dumps({"compiled": sorted({d["dispatcher"].py_func.__qualname__ for _, e in rec.buffer if e.is_start
                                      for d in [e.data]}),
                  "frames": sorted((st["frame"], st["cached"]) for st in compiled.stats()),
                  "out": [np.asarray(v).tolist() for v in out]}))
"""


def test_a_second_process_runs_a_gradient_loop_from_the_disk_cache_without_compiling(tmp_path):
    """The second process loads both frames' machine code and compiles nothing at all on its first call:
    not the frames, and not what carries the gradient stack in and out (a typed List's own methods, which
    numba does not cache, were compiled again in every process)."""
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ, DFC_CACHE_DIR=str(tmp_path), DFC_COMPILE_ROOT="0", DFC_COMPILE_LOOPS="1")
    env.pop("DFC_COMPILE_BUDGET", None)
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", _GRADIENT_RUN], env=env, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert [f for f, _ in first["frames"]] == ["while", "while_grad"], first
    assert second["frames"] == [("while", True), ("while_grad", True)] or \
        second["frames"] == [["while", True], ["while_grad", True]], second
    assert second["compiled"] == [], second
    np.testing.assert_array_equal(second["out"][1], first["out"][1])
