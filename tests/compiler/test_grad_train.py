"""Optimizers build update ops; training steps and whole training loops run in the graph."""
import importlib.util
import json
import os

import numpy as np
import pytest

import dfc
from tests import clitools

rng = np.random.default_rng(5)
HERE = os.path.dirname(os.path.abspath(__file__))
X = rng.normal(size=(16, 3))
Y = X @ np.array([1.0, -2.0, 0.5]) + 0.3


def _numpy_opt(name, steps):
    w, b = np.zeros(3), 0.0
    m = {k: 0.0 for k in ("mw", "mb", "vw", "vb")}
    for t in range(1, steps + 1):
        r = X @ w + b - Y
        gw, gb = 2 * X.T @ r / len(Y), 2 * np.mean(r)
        if name == "sgd":
            w, b = w - 0.1 * gw, b - 0.1 * gb
        elif name == "momentum":
            m["mw"], m["mb"] = 0.9 * m["mw"] + gw, 0.9 * m["mb"] + gb
            w, b = w - 0.05 * m["mw"], b - 0.05 * m["mb"]
        else:
            lr = 0.1 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
            m["mw"], m["mb"] = 0.9 * m["mw"] + 0.1 * gw, 0.9 * m["mb"] + 0.1 * gb
            m["vw"], m["vb"] = 0.999 * m["vw"] + 0.001 * gw ** 2, 0.999 * m["vb"] + 0.001 * gb ** 2
            w, b = w - lr * m["mw"] / (np.sqrt(m["vw"]) + 1e-8), b - lr * m["mb"] / (np.sqrt(m["vb"]) + 1e-8)
    return w, b


def _make(name):
    return {"sgd": lambda: dfc.train.SGD(0.1), "momentum": lambda: dfc.train.Momentum(0.05, 0.9),
            "adam": lambda: dfc.train.Adam(0.1)}[name]()


def _loss(x, y, w, b):
    return dfc.reduce_mean(dfc.square(dfc.reshape(dfc.matmul(x, dfc.reshape(w.read_value(), [3, 1])), [-1])
                                      + b.read_value() - y))


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_optimizer_step_graph_matches_numpy(name):
    w, b = dfc.Variable(np.zeros(3), name="w"), dfc.Variable(np.float64(0.0), name="b")
    opt = _make(name)

    def step(x, y):
        loss = _loss(x, y, w, b)
        opt.minimize(loss, [w, b])
        return loss
    g = dfc.trace(step, dfc.TensorSpec([None, 3], "float64"), dfc.TensorSpec([None], "float64"))
    for _ in range(5):
        g(X, Y)
    got_w, got_b = w.numpy(), b.numpy()    # the state in the Variables' container
    want_w, want_b = _numpy_opt(name, 5)
    np.testing.assert_allclose(got_w, want_w, rtol=1e-10)
    np.testing.assert_allclose(got_b, want_b, rtol=1e-10)


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_whole_training_loop_in_graph(name):
    w, b = dfc.Variable(np.zeros(3), name="w"), dfc.Variable(np.float64(0.0), name="b")
    opt = _make(name)

    def train(x, y, steps):
        def body(i, losses):
            loss = _loss(x, y, w, b)
            opt.minimize(loss, [w, b])
            return i + 1, losses.write(i, loss)
        return dfc.while_loop(lambda i, l: i < steps, body, (0, dfc.TensorArray("float64")))[1].stack()
    g = dfc.trace(train, dfc.TensorSpec([None, 3], "float64"), dfc.TensorSpec([None], "float64"),
                  dfc.TensorSpec([], "int64"))
    losses = g(X, Y, np.int64(50))
    assert losses.shape == (50,) and losses[-1] < 0.05 * losses[0]
    want = _numpy_opt(name, 50)
    r = X @ want[0] + want[1] - Y
    np.testing.assert_allclose(g(X, Y, np.int64(1))[0], np.mean(r ** 2), rtol=1e-8)


def _load_sample():
    spec = importlib.util.spec_from_file_location("lstm_train_sample", os.path.join(HERE, "data", "lstm_train.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_lstm_sample_trains_in_python_and_via_the_cli(tmp_path):
    xs, ys = rng.normal(size=(5, 3, 2)), rng.normal(size=3)
    losses = _load_sample().train(xs, ys, np.int64(50))
    assert losses.shape == (50,) and losses[-1] < 0.3 * losses[0]
    np.save(tmp_path / "xs.npy", xs)
    np.save(tmp_path / "ys.npy", ys)
    clitools.dfc_ok("compile", os.path.join(HERE, "data", "lstm_train.py"), "-o", tmp_path, cwd=tmp_path)
    out = clitools.dfc_ok("run", tmp_path / "train.json", "--input", f"xs=@{tmp_path / 'xs.npy'}",
                          "--input", f"ys=@{tmp_path / 'ys.npy'}", "--input", "steps=50", "--json", cwd=tmp_path)
    cli_losses = np.array(json.loads(out)["outputs"][0])
    np.testing.assert_allclose(cli_losses, losses, rtol=1e-9)


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_a_learning_rate_schedule_reads_the_global_step(name):
    """exponential_decay(0.1, 2, 0.5, staircase) halves the rate every 2 steps; compared with numpy."""
    w, b = dfc.Variable(np.zeros(3)), dfc.Variable(0.0)
    step = dfc.Variable(np.int64(0))
    opt = {"sgd": dfc.train.SGD, "momentum": lambda lr: dfc.train.Momentum(lr, 0.9),
           "adam": dfc.train.Adam}[name](dfc.train.exponential_decay(0.1, 2, 0.5, staircase=True))

    @dfc.function
    def train(x, y):
        opt.minimize(_loss(x, y, w, b), [w, b], global_step=step)
        step.assign_add(np.int64(1))
    wn, bn, m, v = np.zeros(3), 0.0, [0.0, 0.0], [0.0, 0.0]
    for t in range(5):
        train(X, Y)
        lr = 0.1 * 0.5 ** (t // 2)
        r = X @ wn + bn - Y
        g = [2 * X.T @ r / len(Y), 2 * np.mean(r)]
        if name == "sgd":
            d = g
        elif name == "momentum":
            m = [0.9 * m[k] + g[k] for k in range(2)]
            d = m
        else:
            m = [0.9 * m[k] + 0.1 * g[k] for k in range(2)]
            v = [0.999 * v[k] + 0.001 * g[k] ** 2 for k in range(2)]
            lr *= np.sqrt(1 - 0.999 ** (t + 1)) / (1 - 0.9 ** (t + 1))
            d = [m[k] / (np.sqrt(v[k]) + 1e-8) for k in range(2)]
        wn, bn = wn - lr * d[0], bn - lr * d[1]
    np.testing.assert_allclose(w.numpy(), wn, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), bn, rtol=1e-6)


def test_a_schedule_without_a_global_step_is_an_error_at_the_users_line():
    w = dfc.Variable(1.0)
    opt = dfc.train.SGD(dfc.train.exponential_decay(0.1, 10, 0.9))

    def step():
        opt.minimize(w.read_value() ** 2, [w])
    with pytest.raises(dfc.DfcError, match=r"test_grad_train.py:\d+: .*pass global_step="):
        dfc.trace(step)


def test_timestamp_runs_in_program_order():
    import time

    def f(x):
        t0 = dfc.timestamp()
        y = dfc.reduce_sum(x * x)
        return t0, y, dfc.timestamp()
    before = time.time()
    t0, y, t1 = dfc.Session(dfc.trace(f, dfc.TensorSpec([3], "float64"))).call(np.ones(3))
    assert before <= float(t0) <= float(t1) <= time.time() and float(y) == 3.0 and t0.dtype == np.float64
