"""The seven samples really work: known answers against numpy/Python references, losses that fall, and the
same graphs through `dfc compile` + `dfc run`.

Each test imports its sample afresh (new Variables, so training starts from the initial values) and keeps
the sizes small; the CLI tests compare the compiled graph's outputs with the same function run in-process.
"""
import importlib.util
import json
import os

import numpy as np
import pytest

from tests import clitools
from tests.clitools import ROOT


def load(name):
    """A fresh import of samples/NAME.py."""
    spec = importlib.util.spec_from_file_location(f"sample_{name}", os.path.join(ROOT, "samples", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_sample(name, out_dir, env=None):
    clitools.dfc_ok("compile", f"samples/{name}.py", "-o", str(out_dir), env=env)


def run_graph(path, env=None, options=(), **inputs):
    """`dfc run path --input k=v ... --json`; numpy values go through .npy files. Returns the outputs list."""
    args = ["run", str(path), "--json", *options]
    for k, v in inputs.items():
        if isinstance(v, np.ndarray):
            f = os.path.join(os.path.dirname(str(path)), f"{k}.npy")
            np.save(f, v)
            v = "@" + f
        args += ["--input", f"{k}={v}"]
    return json.loads(clitools.dfc_ok(*args, env=env))["outputs"]


# ---------------------------------------------------------------- 1. dynamic_rnn


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def lstm_numpy(m, xs, lengths):
    """Each sequence run alone for exactly its own length (no masking), with the initial weights."""
    wx, wh, b, wo = (v.initial_value for v in m.PARAMS)
    out = []
    for j, n in enumerate(lengths):
        h = c = np.zeros(m.H)
        for t in range(n):
            i, f, o, g = np.split(xs[t, j] @ wx + h @ wh + b, 4)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
        out.append((h @ wo)[0])
    return np.array(out)


def test_dynamic_rnn_runs_to_the_true_length_and_trains():
    m = load("dynamic_rnn")
    xs, lengths, ys = m.make_batch(batch=8, padded_len=10, max_len=7)
    pred, steps = m.predict(xs, lengths)
    assert int(steps) == 7 < xs.shape[0]                      # the loop stops at the batch's true max length
    np.testing.assert_allclose(pred, lstm_numpy(m, xs, lengths), rtol=1e-10, atol=1e-12)
    losses = m.train(xs, lengths, ys, np.int64(40))
    assert losses.shape == (40,) and losses[-1] < 0.1 * losses[0]


def test_dynamic_rnn_compiled(tmp_path):
    m = load("dynamic_rnn")
    xs, lengths, ys = m.make_batch(batch=4, padded_len=6, max_len=5)
    compile_sample("dynamic_rnn", tmp_path)
    pred, steps = run_graph(tmp_path / "predict.json", xs=xs, lengths=json.dumps(lengths.tolist()))
    assert steps == 5
    np.testing.assert_allclose(pred, lstm_numpy(m, xs, lengths), rtol=1e-10, atol=1e-12)
    losses, = run_graph(tmp_path / "train.json", xs=xs, lengths=lengths, ys=ys, steps=8)
    np.testing.assert_allclose(losses, m.train(xs, lengths, ys, np.int64(8)), rtol=1e-9)


# ---------------------------------------------------------------- 2. act


def test_act_matches_numpy_and_trains_through_nested_loops():
    m = load("act")
    xs, ys = m.make_batch(batch=8, time=3)
    y, cost = m.predict(xs)
    y_ref, cost_ref = m.act_numpy(xs, [v.initial_value for v in m.PARAMS])
    np.testing.assert_allclose(y, y_ref, rtol=1e-10, atol=1e-12)
    assert float(cost) == pytest.approx(cost_ref, rel=1e-12)
    assert 1 < cost_ref < m.MAX_PONDER + 1                    # the inner loop really varies
    losses, costs = m.train(xs, ys, np.int64(25))
    assert losses[-1] < 0.3 * losses[0]
    assert costs[-1] < costs[0]                               # and it learned to ponder less


def test_act_compiled(tmp_path):
    m = load("act")
    xs, ys = m.make_batch(batch=4, time=3, seed=5)
    compile_sample("act", tmp_path)
    y, cost = run_graph(tmp_path / "predict.json", xs=xs)
    y_ref, cost_ref = m.act_numpy(xs, [v.initial_value for v in m.PARAMS])
    np.testing.assert_allclose(y, y_ref, rtol=1e-10, atol=1e-12)
    assert cost == pytest.approx(cost_ref, rel=1e-12)
    losses, _ = run_graph(tmp_path / "train.json", xs=xs, ys=ys, steps=5)
    np.testing.assert_allclose(losses, m.train(xs, ys, np.int64(5))[0], rtol=1e-9)


# ---------------------------------------------------------------- 3. scan


def test_scan_and_its_gradient_match_numpy():
    m = load("scan")
    r = np.random.default_rng(3)
    xs = r.normal(size=9)
    np.testing.assert_allclose(m.prefix_sum(xs), np.cumsum(xs), rtol=1e-12)
    np.testing.assert_array_equal(m.running_max(xs), np.maximum.accumulate(xs))
    x2, w2 = r.normal(size=(5, 2)), r.normal(size=(5, 2))
    loss, g = m.prefix_sum_grad(x2, w2)
    assert float(loss) == pytest.approx(np.sum(w2 * np.cumsum(x2, axis=0)))
    np.testing.assert_allclose(g, np.cumsum(w2[::-1], axis=0)[::-1], rtol=1e-12)
    ys, d_decay, d_xs = m.ema_grad(xs, np.float64(0.6))
    np.testing.assert_allclose(ys, m.ema_numpy(xs, 0.6), rtol=1e-12)
    np.testing.assert_allclose(d_decay, m.numeric_grad(lambda d: np.sum(m.ema_numpy(xs, d) ** 2), 0.6), rtol=1e-6)
    np.testing.assert_allclose(d_xs, m.numeric_grad(lambda x: np.sum(m.ema_numpy(x, 0.6) ** 2), xs),
                               rtol=1e-5, atol=1e-8)


def test_scan_compiled(tmp_path):
    compile_sample("scan", tmp_path)
    assert run_graph(tmp_path / "prefix_sum.json", xs="[1,2,3,4]") == [[1.0, 3.0, 6.0, 10.0]]
    assert run_graph(tmp_path / "running_max.json", xs="[1,3,2,5]") == [[1.0, 3.0, 3.0, 5.0]]
    w2 = np.arange(6.0).reshape(3, 2)
    loss, g = run_graph(tmp_path / "prefix_sum_grad.json", xs=np.ones((3, 2)), ws=w2)
    assert loss == np.sum(w2 * np.cumsum(np.ones((3, 2)), axis=0))
    np.testing.assert_allclose(g, np.cumsum(w2[::-1], axis=0)[::-1])


# ---------------------------------------------------------------- 4. beam_search


SOURCES = ([3, 1, 4], [2, 5], [5, 5, 2, 3], [1])


def test_greedy_and_beam_decoding_match_numpy_and_stop_early():
    m = load("beam_search")
    for source in SOURCES:
        src = np.array(source, np.int64)
        assert m.greedy_decode(src).tolist() == m.greedy_numpy(src)
        beams, scores, steps = m.beam_decode(src)
        want_beams, want_scores = m.beam_numpy(src)
        assert beams.tolist() == want_beams
        np.testing.assert_allclose(scores, want_scores, rtol=1e-12)
        assert int(steps) < m.MAX_LEN and beams.shape == (m.BEAM, int(steps))
        assert all(m.EOS in b for b in beams.tolist())           # stopped because every beam ended
        assert list(scores) == sorted(scores, reverse=True)


def test_beam_search_compiled(tmp_path):
    m = load("beam_search")
    compile_sample("beam_search", tmp_path)
    src = [5, 5, 2, 3]
    greedy, = run_graph(tmp_path / "greedy_decode.json", source=json.dumps(src))
    assert greedy == m.greedy_numpy(np.array(src))
    beams, scores, steps = run_graph(tmp_path / "beam_decode.json", source=json.dumps(src))
    want_beams, want_scores = m.beam_numpy(np.array(src))
    assert beams == want_beams and steps == len(want_beams[0])
    np.testing.assert_allclose(scores, want_scores, rtol=1e-12)


# ---------------------------------------------------------------- 5. moe


def test_moe_routes_per_example_on_devices_and_trains():
    m = load("moe")
    xs, ys = m.make_batch(batch=16)
    pred, choice = m.predict(xs)
    ref, ref_choice = m.moe_numpy(xs, m.Wg.initial_value, [[v.initial_value for v in e] for e in m.EXPERT_PARAMS])
    np.testing.assert_allclose(pred, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(choice, ref_choice)
    assert len(set(choice.tolist())) >= 2                      # the conds really route
    graph = m.train.trace(*m.train.input_signature)
    assert {n.device for n in graph.nodes.values() if n.op == "MatMul"} >= set(m.DEVICES)
    losses, usage = m.train(xs, ys, np.int64(15))
    assert losses[-1] < 0.6 * losses[0] and usage.sum() == 16


def test_moe_compiled(tmp_path):
    m = load("moe")
    xs, ys = m.make_batch(batch=6, seed=4)
    compile_sample("moe", tmp_path)
    pred, choice = run_graph(tmp_path / "predict.json", xs=xs)
    ref, ref_choice = m.moe_numpy(xs, m.Wg.initial_value, [[v.initial_value for v in e] for e in m.EXPERT_PARAMS])
    np.testing.assert_allclose(pred, ref, rtol=1e-10, atol=1e-12)
    assert choice == ref_choice.tolist()
    losses, _ = run_graph(tmp_path / "train.json", xs=xs, ys=ys, steps=3)
    np.testing.assert_allclose(losses, m.train(xs, ys, np.int64(3))[0], rtol=1e-9)


# ---------------------------------------------------------------- 6. dqn


def check_learned(m, lengths, q):
    lengths, q = np.asarray(lengths), np.asarray(q)
    assert np.abs(q - m.optimal_q())[:m.N - 1].max() < 0.05    # Q-values reach Q* (value iteration)
    assert int(m.greedy_episode(q)) == m.N - 1                 # the greedy policy walks straight to the goal
    assert lengths[-5:].mean() < 0.5 * lengths[:5].mean()      # episodes got shorter


def test_dqn_learns_the_corridor():
    m = load("dqn")
    assert int(m.greedy_episode(m.W.initial_value)) == m.MAX_EPISODE   # before: never reaches the goal
    lengths, q = m.train(np.int64(20))
    assert len(lengths) == 0 or lengths.min() >= m.N - 1
    np.testing.assert_allclose(q, m.W.initial_value)           # fewer than MIN_EXPERIENCE steps: no update yet
    lengths2, q = m.train(np.int64(580))                       # the buffer and the environment persist
    check_learned(m, lengths2, q)


def test_dqn_compiled(tmp_path):
    m = load("dqn")
    compile_sample("dqn", tmp_path)
    lengths, q = run_graph(tmp_path / "train.json", steps=600)
    check_learned(m, lengths, q)
    steps, = run_graph(tmp_path / "greedy_episode.json", q_table=np.array(q))
    assert steps == m.N - 1


# ---------------------------------------------------------------- 7. linear_model


def test_linear_model_trains_in_one_loop_and_restores_its_checkpoint(tmp_path):
    m = load("linear_model")
    m.CHECKPOINT = str(tmp_path / "ckpt.npz")                  # read when the graphs are traced
    xs, ys = m.make_data(n=32)
    errors, w, b = m.train(xs, ys, np.int64(60))
    want_errors, want_w, want_b = m.train_numpy(xs, ys, 60)
    np.testing.assert_allclose(errors, want_errors, rtol=1e-10)
    np.testing.assert_allclose(w, want_w, rtol=1e-10)
    assert float(b) == pytest.approx(want_b, rel=1e-10)
    assert errors[-1] < 0.01 * errors[0]
    assert m.train.trace(*m.train.input_signature).summary()["loops"] == 1
    w_saved, b_saved, e_saved = m.restore_and_evaluate(xs, ys)
    _, want_w20, want_b20 = m.train_numpy(xs, ys, m.SAVE_AT)
    np.testing.assert_allclose(w_saved, want_w20, rtol=1e-10)
    assert float(b_saved) == pytest.approx(want_b20, rel=1e-10)
    assert float(e_saved) == pytest.approx(errors[m.SAVE_AT], rel=1e-10)


def test_linear_model_compiled(tmp_path):
    m = load("linear_model")
    env = {"LINEAR_MODEL_CHECKPOINT": "ckpt.npz"}        # relative to the checkpoint directory
    compile_sample("linear_model", tmp_path, env=env)
    xs, ys = m.make_data(n=16, seed=2)
    options = ("--checkpoint-dir", str(tmp_path))
    errors, w, b = run_graph(tmp_path / "train.json", env=env, options=options, xs=xs, ys=ys, steps=40)
    want_errors, want_w, want_b = m.train_numpy(xs, ys, 40)
    np.testing.assert_allclose(errors, want_errors, rtol=1e-10)
    np.testing.assert_allclose(w, want_w, rtol=1e-10)
    assert b == pytest.approx(want_b, rel=1e-10)
    assert (tmp_path / "ckpt.npz").exists()
    w_saved, _, e_saved = run_graph(tmp_path / "restore_and_evaluate.json", env=env, options=options, xs=xs, ys=ys)
    np.testing.assert_allclose(w_saved, m.train_numpy(xs, ys, m.SAVE_AT)[1], rtol=1e-10)
    assert e_saved == pytest.approx(errors[m.SAVE_AT], rel=1e-10)


# ---------------------------------------------------------------- the scripts themselves


@pytest.mark.parametrize("name,expect", [("scan", "== numpy.cumsum"), ("beam_search", "same as numpy")])
def test_quick_samples_run_as_scripts(name, expect):
    r = clitools.python(f"samples/{name}.py")
    assert r.returncode == 0, r.stderr
    assert expect in r.stdout
