"""dfc.summary: TensorBoard event files written from inside graphs, read back by TensorBoard's own reader."""
import numpy as np
import pytest

import dfc
from dfc.runtime.kernels import summary_kernels
from tests import clitools

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

I32 = dfc.TensorSpec([], "int32")
W0 = np.array([0.5, -1.0, 2.0, 0.25], np.float32)


def train_loop(n):
    """Gradient descent on sum(w^2) for n steps; loss, the mean and a histogram of w each step."""
    def body(i, w):
        loss = dfc.reduce_sum(w * w)
        dfc.summary.scalar("loss", loss, i)
        dfc.summary.scalar("w_mean", dfc.reduce_mean(w), i)
        dfc.summary.histogram("w", w, i)
        return i + 1, w - 0.1 * (2.0 * w)
    return dfc.while_loop(lambda i, w: i < n, body, (0, dfc.constant(W0)))[1]


def numpy_loop(n):
    w, out = W0.copy(), []
    for i in range(n):
        out.append((i, float(np.sum(w * w)), float(np.mean(w)), w.copy()))
        w = (w - np.float32(0.1) * (np.float32(2.0) * w)).astype(np.float32)
    return w, out


def read(logdir):
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def check_events(logdir, n):
    acc = read(logdir)
    tags = acc.Tags()
    assert sorted(tags["scalars"]) == ["loss", "w_mean"] and tags["histograms"] == ["w"]
    _, want = numpy_loop(n)
    loss, mean, hist = acc.Scalars("loss"), acc.Scalars("w_mean"), acc.Histograms("w")
    assert [e.step for e in loss] == [e.step for e in mean] == [h.step for h in hist] == list(range(n))
    for (i, l, m, w), el, em, h in zip(want, loss, mean, hist):
        assert el.value == pytest.approx(l, rel=1e-6) and em.value == pytest.approx(m, rel=1e-6, abs=1e-7)
        hv = h.histogram_value
        assert hv.num == len(w) and hv.min == pytest.approx(w.min()) and hv.max == pytest.approx(w.max())
        assert hv.sum == pytest.approx(w.sum(), rel=1e-6) and sum(hv.bucket) == len(w)


@pytest.mark.parametrize("kw", [dict(mode="reference"), dict(num_threads=0, fuse_loops=False),
                                dict(num_threads=2, fuse_loops=False), dict(fuse_loops=True)],
                         ids=["reference", "inline", "pool", "fused"])
def test_in_graph_loop_writes_scalars_and_histograms_tensorboard_reads(tmp_path, kw):
    g = dfc.trace(train_loop, I32)
    s = dfc.Session(g, summary_dir=str(tmp_path / "logs"), **kw)
    np.testing.assert_allclose(s.call(np.int32(6)), numpy_loop(6)[0], rtol=1e-6)
    check_events(tmp_path / "logs", 6)


def test_create_file_writer_as_default_as_in_tf_summary(tmp_path):
    @dfc.function(input_signature=[I32])
    def train(n):
        return train_loop(n)
    writer = dfc.summary.create_file_writer(str(tmp_path / "run1"))
    assert dfc.summary.create_file_writer(str(tmp_path / "run1")) is writer     # one writer per directory
    train(np.int32(2))                                   # no writer: nothing is written anywhere
    assert not (tmp_path / "run1").exists()
    with writer.as_default():
        assert dfc.summary.default_writer() is writer
        train(np.int32(4))
    assert dfc.summary.default_writer() is None
    check_events(tmp_path / "run1", 4)


def test_summary_ops_return_whether_a_writer_took_the_value(tmp_path):
    def f(x, step):
        return dfc.summary.scalar("x", x, step), dfc.summary.histogram("h", dfc.stack([x, x * 2.0]), step)
    g = dfc.trace(f, dfc.TensorSpec([], "float32"), I32)
    assert dfc.Session(g).call(np.float32(1), np.int32(0)) == (False, False)
    s = dfc.Session(g, summary_dir=str(tmp_path))
    assert s.call(np.float32(1.5), np.int32(3)) == (True, True)
    assert s.call(np.float32(2.5), np.int32(4)) == (True, True)
    acc = read(tmp_path)
    assert [(e.step, e.value) for e in acc.Scalars("x")] == [(3, 1.5), (4, 2.5)]
    assert [h.histogram_value.sum for h in acc.Histograms("h")] == [4.5, 7.5]


def test_session_summary_dir_wins_over_the_default_writer(tmp_path):
    g = dfc.trace(lambda x, s: dfc.summary.scalar("x", x, s), dfc.TensorSpec([], "float32"), I32)
    with dfc.summary.create_file_writer(str(tmp_path / "default")).as_default():
        dfc.Session(g, summary_dir=str(tmp_path / "mine")).call(np.float32(1), np.int32(1))
        dfc.Session(g).call(np.float32(2), np.int32(2))
    assert [e.value for e in read(tmp_path / "mine").Scalars("x")] == [1.0]
    assert [e.value for e in read(tmp_path / "default").Scalars("x")] == [2.0]


def test_dfc_run_of_a_loaded_graph_writes_to_dfc_summary_dir(tmp_path):
    gpath = tmp_path / "train.json"
    dfc.save(dfc.trace(train_loop, I32), str(gpath))
    r = clitools.dfc("run", gpath, "-i", "n=5", "--json", env={summary_kernels.ENV: str(tmp_path / "tb")},
                     timeout=120)
    assert r.returncode == 0, r.stderr
    check_events(tmp_path / "tb", 5)


def test_bad_steps_and_values_are_dfc_errors(tmp_path):
    with pytest.raises(dfc.DfcTypeError, match="step must be an integer"):
        dfc.trace(lambda x: dfc.summary.scalar("x", x, 1.5), dfc.TensorSpec([], "float32"))
    with pytest.raises(dfc.DfcTypeError, match="must be a scalar"):
        dfc.trace(lambda x: dfc.summary.scalar("x", x, 0), dfc.TensorSpec([3], "float32"))
    g = dfc.trace(lambda x: dfc.summary.histogram("h", x, 0), dfc.TensorSpec([None], "float32"))
    s = dfc.Session(g, summary_dir=str(tmp_path))
    with pytest.raises(dfc.DfcRuntimeError, match=r"summaryhistogram.*not finite"):
        s.call(np.array([1.0, np.nan], np.float32))
    with pytest.raises(dfc.DfcRuntimeError, match="no values"):
        s.call(np.zeros(0, np.float32))
    with pytest.raises(dfc.DfcError, match="must be a path"):
        dfc.summary.create_file_writer(None)


def test_linear_model_sample_writes_its_error_curve(tmp_path):
    r = clitools.python(f"{clitools.ROOT}/samples/linear_model.py", "--steps", "30", "--logdir", tmp_path / "logs",
                        cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""                                   # not a terminal: no progress bar
    acc = read(tmp_path / "logs")
    assert acc.Tags()["scalars"] == ["error"]
    got = [(e.step, e.value) for e in acc.Scalars("error")]
    from tests.samples.test_sample_programs import load
    m = load("linear_model")
    want = m.train_numpy(*m.make_data(), 30)[0]
    assert [s for s, _ in got] == list(range(30))
    np.testing.assert_allclose([v for _, v in got], want, rtol=1e-6)     # float32 in the event file


def test_eager_summaries_write_to_the_default_writer(tmp_path):
    with dfc.summary.create_file_writer(str(tmp_path / "eager")).as_default():
        assert dfc.summary.scalar("x", np.float32(0.25), 7) == True          # noqa: E712 (a numpy bool)
        assert dfc.summary.histogram("h", np.float32([1, 2, 3]), np.int64(7)) == True   # noqa: E712
    assert dfc.summary.scalar("x", np.float32(1.0), 8) == False              # noqa: E712 (no writer)
    acc = read(tmp_path / "eager")                   # flushed at once: no run end to wait for
    assert [(e.step, e.value) for e in acc.Scalars("x")] == [(7, 0.25)]
    assert acc.Histograms("h")[0].histogram_value.sum == 6.0
    dfc.config.run_functions_eagerly(True)
    try:
        @dfc.function
        def f(x):
            for i in range(3):
                dfc.summary.scalar("y", x * i, i)
            return x
        with dfc.summary.create_file_writer(str(tmp_path / "fn")).as_default():
            f(np.float32(2.0))
    finally:
        dfc.config.run_functions_eagerly(False)
    assert [(e.step, e.value) for e in read(tmp_path / "fn").Scalars("y")] == [(0, 0.0), (1, 2.0), (2, 4.0)]
