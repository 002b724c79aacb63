"""The default mode's compiled runs (compile_loops="auto", dfc/runtime/xla/auto.py): a run compiles whole to
XLA in a background thread while the fused path serves it, then runs compiled if that is faster. Every call,
before, during and after the switch, gives what the reference interpreter gives."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dfc
from tests.conftest import SAME_ON_EVERY_TEST_DEVICE
from dfc.runtime.xla import auto

pytest.importorskip("jax")
pytestmark = [pytest.mark.host_devices("XLA runs are compiled for the host CPU"),
              SAME_ON_EVERY_TEST_DEVICE]


@pytest.fixture
def eager_compile(monkeypatch):
    """Compile after the first fused run (the library waits for 0.2 s of fused runs)."""
    monkeypatch.setattr(auto, "START_SECONDS", 0.0)
    monkeypatch.setattr(auto, "START_CALLS", 1)


def _fused_seconds(monkeypatch, seconds):
    """The fused runs count as `seconds` each when the compiled runs are timed against them."""
    fused = auto.XlaRun.fused
    monkeypatch.setattr(auto.XlaRun, "fused", lambda self, s, feeds: fused(self, seconds, feeds))


def _run_of(session):
    (xr,) = session._xla_runs.values()
    return xr


@dfc.function
def power_grad(x, n):
    """d/dx of x**(2**k) for the k that makes it exceed n: a gradient through a data-dependent loop."""
    y = x
    while dfc.reduce_sum(y) < n:
        y = y * y
    return dfc.gradients(dfc.reduce_sum(y), x)


def _reference(graph, *args):
    return dfc.Session(graph, mode="reference").call(*args)


def test_the_run_switches_to_compiled_code_and_every_call_agrees(monkeypatch, eager_compile):
    _fused_seconds(monkeypatch, 10.0)
    x = np.array([1.1, 1.2, 1.3])
    g = power_grad.trace(x, np.float64(50.0))
    s = dfc.Session(g, compile_loops="auto")
    calls = [(x * (1 + k / 10), np.float64(20.0 + 7 * k)) for k in range(8)]
    for k, (xs, n) in enumerate(calls[:2]):
        np.testing.assert_array_equal(s.call(xs, n), _reference(g, xs, n))
    _run_of(s).wait()
    for xs, n in calls:
        np.testing.assert_allclose(s.call(xs, n), _reference(g, xs, n), rtol=1e-14)
    (info,) = s.compiled_runs()
    assert info["state"] == "compiled", info
    assert info["compiled_runs"] >= len(calls)
    assert info["compile_seconds"] > 0


def test_compiled_runs_slower_than_fused_ones_go_back_to_fused_for_good(monkeypatch, eager_compile):
    _fused_seconds(monkeypatch, 1e-9)
    x = np.array([1.1, 1.2])
    g = power_grad.trace(x, np.float64(50.0))
    s = dfc.Session(g, compile_loops="auto")
    s.call(x, 50.0)
    _run_of(s).wait()
    for _ in range(auto.TRIALS + 3):
        np.testing.assert_array_equal(s.call(x, 50.0), _reference(g, x, 50.0))
    (info,) = s.compiled_runs()
    assert info["state"] == "slower"
    assert info["compiled_runs"] == auto.TRIALS + 1       # the warm-up and the timed runs, then no more


def test_new_input_shapes_compile_again_in_the_background(monkeypatch, eager_compile):
    _fused_seconds(monkeypatch, 10.0)
    @dfc.function(input_signature=[dfc.TensorSpec([None, 3], "float64")])
    def squares(x):
        return dfc.reduce_sum(dfc.map_fn(lambda r: r * r, x))

    g = squares.trace(np.zeros((2, 3)))
    s = dfc.Session(g, compile_loops="auto")
    a = np.arange(6.0).reshape(2, 3)
    s.call(a)
    _run_of(s).wait()
    for _ in range(auto.TRIALS + 2):
        assert s.call(a) == pytest.approx(55.0)
    runs = _run_of(s).compiled_runs
    b = np.arange(12.0).reshape(4, 3)
    assert s.call(b) == pytest.approx(float((b * b).sum()))      # fused while the new shapes compile
    _run_of(s).wait()
    assert s.call(b) == pytest.approx(float((b * b).sum()))
    assert _run_of(s).compiled_runs == runs + 1


def test_variables_are_updated_the_same_on_either_path(monkeypatch, eager_compile):
    _fused_seconds(monkeypatch, 10.0)
    v = dfc.Variable(np.zeros(3), name="xla_auto_acc")

    @dfc.function
    def step(x, n):
        i = 0
        while i < n:
            v.assign_add(x * (i + 1))
            i += 1
        return v.read_value()

    x = np.array([1.0, 2.0, 3.0])
    g = step.trace(x, np.int64(2))
    s = dfc.Session(g, compile_loops="auto")
    total = np.zeros(3)
    for k in range(auto.TRIALS + 4):
        total = total + x * (1 + 2 + 3)
        np.testing.assert_array_equal(s.call(x, 3), total)
        if k == 0:
            _run_of(s).wait()
    assert s.compiled_runs()[0]["compiled_runs"] >= auto.TRIALS


def test_an_error_the_compiled_run_flags_is_raised_as_the_fused_path_raises_it(monkeypatch, eager_compile):
    _fused_seconds(monkeypatch, 10.0)

    @dfc.function
    def pick(x, i):
        ta = dfc.TensorArray("float64", size=3)
        k = 0
        while k < 3:
            ta = ta.write(k, x * k)
            k += 1
        return ta.read(i)

    x = np.array([1.0, 2.0])
    g = pick.trace(x, np.int64(1))
    s = dfc.Session(g, compile_loops="auto")
    s.call(x, 1)
    _run_of(s).wait()
    for _ in range(auto.TRIALS + 1):
        np.testing.assert_array_equal(s.call(x, 2), 2 * x)
    assert s.compiled_runs()[0]["state"] == "compiled"
    with pytest.raises(dfc.DfcError) as compiled:
        s.call(x, 7)
    with pytest.raises(dfc.DfcError) as fused:
        dfc.Session(g, compile_loops=False).call(x, 7)
    assert type(compiled.value) is type(fused.value) and str(compiled.value) == str(fused.value)


def test_a_run_xla_cannot_express_stays_fused_and_says_why(monkeypatch, eager_compile):
    @dfc.function
    def noisy(x):
        i = 0
        while i < 3:
            dfc.print("step", i)
            x = x * 2.0
            i += 1
        return x

    lines = []
    g = noisy.trace(np.ones(2))
    s = dfc.Session(g, compile_loops="auto", printer=lines.append)
    for _ in range(3):
        np.testing.assert_array_equal(s.call(np.ones(2)), np.full(2, 8.0))
        _run_of(s).wait()
    (info,) = s.compiled_runs()
    assert info["state"] == "refused" and "print" in info["reason"].lower(), info
    assert len(lines) == 9          # every call printed, in order
    assert _run_of(s).replanned     # its loop frames are numba's to compile now


def test_without_auto_nothing_compiles():
    x = np.array([1.1, 1.2])
    g = power_grad.trace(x, np.float64(50.0))
    for s in (dfc.Session(g, compile_loops=False), dfc.Session(g, mode="reference")):
        s.call(x, 50.0)
        assert s.compiled_runs() == []


def test_a_program_that_ends_while_xla_compiles_exits_cleanly(tmp_path):
    """A background compile still running at the end of the program is waited for: a thread inside XLA's
    compiler at interpreter shutdown aborts the process ("terminate called ...")."""
    script = tmp_path / "short.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import dfc
        from dfc.runtime.xla import auto
        auto.START_SECONDS, auto.START_CALLS = 0.0, 1

        @dfc.function
        def f(x):
            i = 0
            while i < 50:
                x = dfc.tanh(x @ x.T) @ x
                i += 1
            return x

        print(f(np.eye(8) * 0.1).sum())
    """))
    env = dict(os.environ, DFC_COMPILE_LOOPS="auto", PYTHONPATH=os.getcwd())
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "terminate" not in r.stderr


_CACHED = textwrap.dedent("""
    import json, sys
    import numpy as np
    import dfc
    from dfc.runtime.xla import auto
    auto.START_SECONDS, auto.START_CALLS = 0.0, 1
    fused = auto.XlaRun.fused
    auto.XlaRun.fused = lambda self, s, feeds: fused(self, 10.0, feeds)

    @dfc.function
    def f(x, n):
        y = x
        while dfc.reduce_sum(y) < n:
            y = y * y
        return dfc.gradients(dfc.reduce_sum(y), x)

    x = np.array([1.1, 1.2, 1.3])
    first = f(x, np.float64(50.0))
    s = dfc.runtime.session.session_for(f.trace(x, np.float64(50.0)))
    (xr,) = s._xla_runs.values()
    xr.wait()
    for _ in range(auto.TRIALS + 2):
        f(x, np.float64(50.0))
    print(json.dumps(dict(first=first.tolist(), **s.compiled_runs()[0])))
""")


def _cached_run(tmp_path, cache):
    script = tmp_path / "cached.py"
    script.write_text(_CACHED)
    env = dict(os.environ, DFC_COMPILE_LOOPS="auto", DFC_CACHE_DIR=str(cache), PYTHONPATH=os.getcwd())
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_second_process_runs_compiled_from_its_first_call_with_the_disk_cache(tmp_path):
    first = _cached_run(tmp_path, tmp_path / "cache")
    assert first["state"] == "compiled" and not first["from_disk"]
    assert len(list((tmp_path / "cache" / "xla").glob("*.pkl"))) == 1
    second = _cached_run(tmp_path, tmp_path / "cache")
    assert second["from_disk"] and second["state"] == "compiled"
    assert second["fused_ms"] is None             # not one fused run: compiled from the first call
    assert second["first"] == first["first"]


def test_a_cache_directory_others_can_write_is_not_used(tmp_path):
    cache = tmp_path / "shared"
    cache.mkdir(mode=0o777)
    os.chmod(cache, 0o777)
    out = _cached_run(tmp_path, cache)
    assert out["state"] == "compiled" and not out["from_disk"]
    assert not (cache / "xla").exists()


def test_a_shape_computed_from_an_integer_input_compiles_once_per_value(monkeypatch, eager_compile):
    """dfc.fill([n], ...) with n a graph input: XLA needs n when compiling, so the executable takes n's
    value as a constant (as jax.jit's static arguments) and each new value compiles again."""
    _fused_seconds(monkeypatch, 10.0)

    @dfc.function
    def ramp(x, n):
        acc = dfc.fill([n], 0.0)
        i = 0
        while i < 4:
            acc = acc + x * i
            i += 1
        return acc

    g = ramp.trace(np.float64(1.0), np.int64(3))
    s = dfc.Session(g, compile_loops="auto")
    s.call(np.float64(1.0), np.int64(3))
    _run_of(s).wait()
    for k in range(auto.TRIALS + 2):
        np.testing.assert_array_equal(s.call(np.float64(k), np.int64(3)), np.full(3, 6.0 * k))
    assert s.compiled_runs()[0]["state"] == "compiled"
    assert _run_of(s).program.static_feeds
    np.testing.assert_array_equal(s.call(np.float64(2.0), np.int64(5)), np.full(5, 12.0))   # fused meanwhile
    _run_of(s).wait()
    runs = _run_of(s).compiled_runs
    np.testing.assert_array_equal(s.call(np.float64(2.0), np.int64(5)), np.full(5, 12.0))
    assert _run_of(s).compiled_runs == runs + 1


def test_a_run_whose_stacked_length_changes_every_call_goes_back_to_fused(monkeypatch, eager_compile):
    """A TensorArray stacked to a data-dependent length: XLA's shapes are static, so each new length means
    a compile; after a few the run stays fused (every answer right all along)."""
    _fused_seconds(monkeypatch, 10.0)

    @dfc.function
    def until(x):
        ta = dfc.TensorArray("float64", size=0, dynamic_size=True)
        i = 0
        while x > 1.0:
            ta = ta.write(i, x)
            x = x / 2.0
            i += 1
        return ta.stack()

    g = until.trace(np.float64(5.0))
    s = dfc.Session(g, compile_loops="auto")
    s.call(np.float64(5.0))
    _run_of(s).wait()
    for k in range(8):
        x = 2.0 ** (k % 5 + 1) + 0.5
        np.testing.assert_array_equal(s.call(np.float64(x)), _reference(g, np.float64(x)))
    (info,) = s.compiled_runs()
    assert info["state"] == "refused" and "compiled again" in info["reason"], info


def test_a_run_made_once_starts_no_compile(monkeypatch):
    """A script that calls a function once (or `dfc run`) must not wait at exit for a compile it never
    uses: the compile starts on the second fused run at the earliest."""
    monkeypatch.setattr(auto, "START_SECONDS", 0.0)
    x = np.array([1.1, 1.2])
    g = power_grad.trace(x, np.float64(50.0))
    s = dfc.Session(g, compile_loops="auto")
    s.call(x, np.float64(50.0))
    assert _run_of(s).state == "fused" and _run_of(s)._thread is None
    s.call(x, np.float64(50.0))
    assert _run_of(s)._thread is not None
    _run_of(s).wait()
