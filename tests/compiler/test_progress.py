"""dfc.progress: progress bars (rich) driven by an op inside the graph."""
import json

import numpy as np
import pytest

import dfc
from dfc.runtime.kernels import progress_kernels
from tests import clitools

I32 = dfc.TensorSpec([], "int32")


def training(n):
    """n steps of w -= 0.1 * 2w; the bar "train" shows the step and the loss after each one."""
    def body(i, w):
        w = w - 0.2 * w
        dfc.progress(i + 1, n, name="train", loss=dfc.reduce_sum(w * w))
        return i + 1, w
    return dfc.while_loop(lambda i, w: i < n, body, (0, dfc.constant(np.float32([1.0, 2.0]))))[1]


def final_loss(n):
    w = np.float32([1.0, 2.0])
    for _ in range(n):
        w = (w - np.float32(0.2) * w).astype(np.float32)
    return float(np.sum(w * w))


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv(progress_kernels.ENV, raising=False)


@pytest.mark.parametrize("kw", [dict(mode="reference"), dict(fuse_loops=False), dict(fuse_loops=True)],
                         ids=["reference", "executor", "fused"])
def test_forced_bars_show_the_final_state_on_a_non_terminal(capfd, kw):
    s = dfc.Session(dfc.trace(training, I32), progress=True, **kw)
    w = s.call(np.int32(12))
    out, err = capfd.readouterr()
    assert out == ""                                      # bars go to stderr; stdout stays clean
    [line] = [ln.rstrip() for ln in err.splitlines() if ln.strip()]
    assert line.startswith("train ") and " 12/12 " in line
    assert line.endswith(f"loss={final_loss(12):.4g}")
    np.testing.assert_allclose(w, np.float32([1.0, 2.0]) * np.float32(0.8) ** 12, rtol=1e-5)


def test_no_output_when_stderr_is_not_a_terminal_unless_forced(capfd, monkeypatch):
    g = dfc.trace(training, I32)
    dfc.Session(g).call(np.int32(3))                      # default: stderr is not a terminal here
    monkeypatch.setenv(progress_kernels.ENV, "1")
    dfc.Session(g, progress=False).call(np.int32(3))      # an explicit False wins over the environment
    assert capfd.readouterr() == ("", "")
    dfc.Session(g).call(np.int32(3))                      # DFC_PROGRESS=1 forces the default on
    assert " 3/3 " in capfd.readouterr().err


def test_updates_reach_rich_throttled_and_the_last_one_always(monkeypatch):
    d = progress_kernels.ProgressDisplay()
    shown, show = [], d._show

    def spy(bar, now):
        shown.append(bar.step)
        show(bar, now)
    monkeypatch.setattr(d, "_show", spy)
    monkeypatch.setattr(progress_kernels, "MIN_INTERVAL", 3600.0)
    for step in range(1, 1001):
        d.update("bar", step, 1000, {"loss": 1.0 / step})
    assert shown == [1, 1000]                             # the first update, then only the final one
    for step in range(1, 10):
        d.update("other", step, 100, {})
    d.end_run()                                           # a run's end shows what the throttle held back
    assert shown == [1, 1000, 1, 9]
    assert list(d._bars) == ["other"]                     # the finished bar is dropped, the unfinished kept
    d.update("other", 2, 100, {})                         # a step below the last one starts the bar again
    assert d._bars["other"].step == 2
    d.end_run()


def test_several_bars_and_metrics_in_the_given_order(capfd):
    def f(n):
        def outer(i, acc):
            def inner(j, a):
                dfc.progress(j + 1, 3, name="inner", acc=a)
                return j + 1, a + 1.0
            acc = dfc.while_loop(lambda j, a: j < 3, inner, (0, acc))[1]
            dfc.progress(i + 1, n, name="outer", step=i, acc=acc)
            return i + 1, acc
        return dfc.while_loop(lambda i, a: i < n, outer, (0, dfc.constant(np.float32(0))))[1]
    assert dfc.Session(dfc.trace(f, I32), progress=True).call(np.int32(2)) == 6.0
    lines = [ln.rstrip() for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 2
    inner = next(ln for ln in lines if ln.startswith("inner"))
    outer = next(ln for ln in lines if ln.startswith("outer"))
    assert " 3/3 " in inner and inner.endswith("acc=5")
    assert " 2/2 " in outer and outer.endswith("step=1 acc=6")


def test_dfc_run_progress_of_a_loaded_graph(tmp_path):
    gpath = tmp_path / "train.json"
    dfc.save(dfc.trace(training, I32), str(gpath))
    r = clitools.dfc("run", gpath, "-i", "n=7", "--json", "--progress", timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["outputs"][0]               # stdout is still just the JSON
    np.testing.assert_allclose(out, np.float32([1.0, 2.0]) * np.float32(0.8) ** 7, rtol=1e-5)
    assert "train" in r.stderr and " 7/7 " in r.stderr and f"loss={final_loss(7):.4g}" in r.stderr
    r = clitools.dfc("run", gpath, "-i", "n=7", "--json", timeout=120)
    assert r.returncode == 0 and r.stderr == ""            # not a terminal: no bars unless asked


def test_progress_arguments_are_checked_at_the_users_line():
    with pytest.raises(dfc.DfcTypeError, match="metric 'loss' must be a scalar") as e:
        dfc.trace(lambda x: dfc.progress(1, 10, loss=x), dfc.TensorSpec([3], "float32"))
    assert "test_progress.py" in str(e.value)
    with pytest.raises(dfc.DfcTypeError, match="step must be a number"):
        dfc.trace(lambda x: dfc.progress(x, 10), dfc.TensorSpec([], "bool"))


def test_eager_progress_draws_when_forced_and_stops_when_full(capfd, monkeypatch):
    for step in range(1, 4):
        dfc.progress(step, 3, name="eager", loss=np.float32(step))      # not a terminal: nothing
    assert capfd.readouterr() == ("", "")
    monkeypatch.setenv(progress_kernels.ENV, "1")
    for step in range(1, 4):
        dfc.progress(step, 3, name="eager", loss=np.float32(step))
    [line] = [ln.rstrip() for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert line.startswith("eager ") and " 3/3 " in line and line.endswith("loss=3")
    assert not progress_kernels.display()._live           # a full bar stops the display
