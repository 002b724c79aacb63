"""dfc.train.DataParallel on the test cluster (worker:0, worker:1, ps:0): sync with m = n is exactly a
step on the concatenated batch, async trains, and m < n keeps going at the fast workers' pace."""
import numpy as np
import pytest

import dfc
from tests.clustertools import cluster

pytestmark = pytest.mark.xdist_group("ray")
X = dfc.TensorSpec([None, 4], "float32")
Y = dfc.TensorSpec([None], "float32")


def data(seed, rows=32):
    r = np.random.default_rng(seed)
    x = r.standard_normal((rows, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32) + 0.25).astype(np.float32)
    return x, y


def linear_model(dp):
    w = dp.variable(np.zeros(4, np.float32), name="w")
    b = dp.variable(np.float32(0), name="b")

    def loss(x, y):
        return dfc.reduce_mean(dfc.square(dfc.reduce_sum(x * w.read_value(), axis=1) + b.read_value() - y))
    return w, b, loss


def linear_dp(c, lr=0.05, loop="python", **kw):
    """A DataParallel(**kw) of linear_model on cluster c, compiled; (dp, w, b)."""
    dp = dfc.train.DataParallel(c, dfc.train.SGD(lr), **kw)
    w, b, loss = linear_model(dp)
    dp.compile(loss, [X, Y], loop=loop)
    return dp, w, b


def kill_at(pid, worker, step):
    """An on_step callback that SIGKILLs process pid after worker index `worker` finished step `step`."""
    import os
    import signal

    def on_step(k, i, _loss):
        if k == worker and i == step:
            os.kill(pid, signal.SIGKILL)
    return on_step

def test_sync_with_all_workers_equals_sgd_on_the_concatenated_batch():
    c = cluster()
    dp, w, b = linear_dp(c, mode="sync")
    shards = [data(1), data(2)]
    out = dp.run(shards, steps=5)
    assert out["updates"] == 5
    # the same 5 steps in one process on the concatenated batch
    x = np.concatenate([shards[0][0], shards[1][0]])
    y = np.concatenate([shards[0][1], shards[1][1]])
    w1, b1 = dfc.Variable(np.zeros(4, np.float32)), dfc.Variable(np.float32(0))
    opt = dfc.train.SGD(0.05)

    @dfc.function
    def step(x, y):
        loss = dfc.reduce_mean(dfc.square(dfc.reduce_sum(x * w1.read_value(), axis=1) + b1.read_value() - y))
        opt.minimize(loss, [w1, b1])
        return loss
    for _ in range(5):
        step(x, y)
    np.testing.assert_allclose(w.numpy(), w1.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), b1.numpy(), rtol=1e-5, atol=1e-6)


def test_async_workers_train_the_shared_parameters_without_waiting():
    c = cluster()
    dp, w, b = linear_dp(c, mode="async")
    out = dp.run([data(3, 64), data(4, 64)], steps=60, batch_size=16)
    assert out["worker_steps"] == [60, 60] and out["updates"] == 120
    np.testing.assert_allclose(w.numpy(), [1.0, -2.0, 0.5, 3.0], atol=0.05)
    assert abs(float(b.numpy()) - 0.25) < 0.05


def test_sync_with_a_backup_worker_goes_at_the_fast_workers_pace():
    c = cluster()
    dp, w, b = linear_dp(c, mode="sync", replicas_to_aggregate=1)
    out = dp.run([data(5), data(6)], steps=12, delays=[0.0, 0.5])    # worker:1 is a straggler
    assert out["updates"] == 12
    assert out["worker_steps"][1] < out["worker_steps"][0]              # the update never waited for it
    with pytest.raises(dfc.DfcError, match="replicas_to_aggregate"):
        dfc.train.DataParallel(c, dfc.train.SGD(0.1), mode="sync", replicas_to_aggregate=3)


def load_sample():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).parents[2] / "samples" / "distributed_training.py"
    spec = importlib.util.spec_from_file_location("distributed_training", path)
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    return sample


def test_async_training_on_digits_reaches_90_percent_and_the_sample_runs_all_three_modes():
    pytest.importorskip("sklearn")
    sample = load_sample()
    data = sample.load()
    c = cluster()
    r = sample.train(c, "async", None, steps=80, straggler=0.0, data=data, show=False)
    assert r["test_accuracy"] >= 0.90 and r["worker_steps"] == [80, 80]
    r = sample.train(c, "sync", None, steps=10, straggler=0.0, data=data, show=False, loop="graph")
    assert r["updates"] == 10 and r["test_accuracy"] > 0.5 and r["worker_steps"] == [10, 10]


def test_the_lstm_sequence_task_trains_data_parallel_in_both_loop_styles():
    sample = load_sample()
    data = sample.load_sequences()
    baseline = float(np.mean(data[5] ** 2))          # the test MSE of predicting 0
    c = cluster()
    for mode, loop in (("async", "graph"), ("sync", "python")):
        r = sample.train(c, mode, None, steps=30, straggler=0.0, data=data, show=False, loop=loop, task="lstm",
                         name=f"dplstm{mode}")
        assert r["value"] < 0.5 * baseline, (mode, loop, r["value"], baseline)


def test_the_recovery_sample_survives_a_killed_worker_and_a_killed_ps():
    pytest.importorskip("sklearn")
    sample = load_sample()
    c = cluster()
    first, second = sample.recovery(c, sample.load(), 40)
    assert "worker:1" in first["failed"] and first["worker_steps"] == [40, 40]
    assert [e["task"] for e in second["recovered"]] == ["ps:0"] and second["updates"] >= 40


def test_a_killed_worker_does_not_stop_async_training_and_rejoins_after_a_restart():
    c = cluster()
    dp, w, b = linear_dp(c, mode="async")
    pid = c.pid("worker:1")

    out = dp.run([data(7, 64), data(8, 64)], steps=30, batch_size=16, on_step=kill_at(pid, 1, 4),
                 restart_failed=True)
    assert "worker:1" in out["failed"] and "died" in out["failed"]["worker:1"]
    assert out["worker_steps"] == [30, 30] and c.pid("worker:1") != pid          # it rejoined and finished
    np.testing.assert_allclose(w.numpy(), [1.0, -2.0, 0.5, 3.0], atol=0.2)


def test_ps_shards_are_saved_without_coordination_and_restored_after_a_ps_restart():
    c = cluster()
    dp, w, b = linear_dp(c, mode="sync", checkpoint_every=2, name="dpck")
    dp.run([data(9), data(10)], steps=4)          # shards saved at updates 2 and 4
    w4, b4 = w.numpy(), b.numpy()
    assert dp.global_step.numpy() == 4
    c.restart("ps:0")                              # a fresh process: initial values
    assert dp.global_step.numpy() == 0 and not w.numpy().any()
    assert dp.restore() == 4
    np.testing.assert_array_equal(w.numpy(), w4)
    np.testing.assert_array_equal(b.numpy(), b4)


def test_bfloat16_wire_halves_the_bytes_a_training_step_moves():
    c = cluster()
    moved = {}
    for comp in (None, "bfloat16"):
        dp, w, b = linear_dp(c, mode="async", wire_compression=comp, name=f"dpwire{comp}")
        out = dp.run([data(11), data(12)], steps=3)
        moved[comp] = out["bytes_between_processes"]
    assert moved[None] > 0 and moved["bfloat16"] <= 0.6 * moved[None]


def single_process_sgd(shards, steps, lr):
    """The same `steps` steps in one process on the concatenated batch (what sync with m = n must equal)."""
    x = np.concatenate([s[0] for s in shards])
    y = np.concatenate([s[1] for s in shards])
    w1, b1 = dfc.Variable(np.zeros(4, np.float32)), dfc.Variable(np.float32(0))
    gs = dfc.Variable(np.int64(0))
    opt = dfc.train.SGD(lr)

    @dfc.function
    def step(x, y):
        loss = dfc.reduce_mean(dfc.square(dfc.reduce_sum(x * w1.read_value(), axis=1) + b1.read_value() - y))
        opt.minimize(loss, [w1, b1], global_step=gs)
        gs.assign_add(np.int64(1))
        return loss
    for _ in range(steps):
        step(x, y)
    return w1.numpy(), b1.numpy()


def test_in_graph_sync_loop_with_a_schedule_equals_sgd_on_the_concatenated_batch():
    c = cluster()
    lr = dfc.train.exponential_decay(0.08, 2, 0.5, staircase=True)     # reads dp.global_step
    dp, w, b = linear_dp(c, lr=lr, loop="graph", mode="sync", name="dpgraphsync")
    shards = [data(21), data(22)]
    out = dp.run(shards, steps=5)
    assert out["updates"] == 5 and all(s >= 5 for s in out["worker_steps"])
    w1, b1 = single_process_sgd(shards, 5, dfc.train.exponential_decay(0.08, 2, 0.5, staircase=True))
    np.testing.assert_allclose(w.numpy(), w1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), b1, rtol=1e-5, atol=1e-6)
    out = dp.run(shards, steps=3)                  # a second run goes on from the global step
    assert out["updates"] == 8


def test_in_graph_async_loop_trains_and_slices_minibatches_in_the_graph():
    c = cluster()
    dp, w, b = linear_dp(c, loop="graph", mode="async", name="dpgraphasync")
    out = dp.run([data(23, 64), data(24, 64)], steps=60, batch_size=16)
    assert out["worker_steps"] == [60, 60] and out["updates"] == 120
    assert out["losses"][0][-1] < 0.05 * out["losses"][0][0]
    np.testing.assert_allclose(w.numpy(), [1.0, -2.0, 0.5, 3.0], atol=0.05)
    with pytest.raises(dfc.DfcError, match="loop='python'"):
        dp.run([data(23, 64), data(24, 64)], steps=2, delays=[0, 0.1])


def test_a_killed_ps_stops_the_run_naming_it_or_is_restored_from_its_newest_shard():
    import os
    import signal
    c = cluster()
    dp, w, b = linear_dp(c, mode="sync", checkpoint_every=3, name="dppskill")
    shards = [data(25, 64), data(26, 64)]
    killed = []

    def kill_ps_at(step):
        def on_step(k, i, _loss):
            if k == 0 and i == step and not killed:
                killed.append(c.pid("ps:0"))
                os.kill(killed[-1], signal.SIGKILL)
        return on_step
    with pytest.raises(dfc.DfcError, match="ps:0"):
        dp.run(shards, steps=40, batch_size=16, on_step=kill_ps_at(7))
    c.restart("ps:0")
    assert dp.restore() in (3, 6)                  # the newest shard before the kill
    killed.clear()
    before = dp.global_step.numpy()
    out = dp.run(shards, steps=30, batch_size=16, on_step=kill_ps_at(10), restart_failed=True)
    assert [e["task"] for e in out["recovered"]] == ["ps:0"] and c.pid("ps:0") != killed[0]
    restored = out["recovered"][0]["restored_step"]
    assert restored % 3 == 0 and before < restored <= before + 12
    assert out["updates"] == before + 30           # lost updates were made again: the target is reached
    np.testing.assert_allclose(w.numpy(), [1.0, -2.0, 0.5, 3.0], atol=0.1)


@pytest.mark.parametrize("secs", [0.3, 30.0])
def test_ps_tasks_save_every_t_seconds_on_their_own_clock(secs):
    """The first update saves (no save yet); later ones only once `secs` passed on the ps task's clock. The
    run lasts >= 0.55 s (12 steps 0.05 s apart), so with 0.3 s a later update saved again, and with 30 s none
    did after the start: the restored shard is from one of the first updates (each of the two asynchronous
    workers' first updates can find no save recorded yet, and a step's reads of the counter and of the last
    save time are not one atomic read). No timing assertion: a slow run only saves more often."""
    import time
    c = cluster()
    dp, w, b = linear_dp(c, mode="async", checkpoint_secs=secs, name=f"dpsecs{int(secs * 10)}")
    t0 = time.time()
    dp.run([data(27), data(28)], steps=12, delays=[0.05, 0.05])
    saved = dp._ps_clock["ps:0"][1].numpy()          # when ps:0 last saved (its own timestamp)
    assert t0 <= saved <= time.time()
    c.restart("ps:0")
    step = dp.restore()
    assert (3 < step <= 24) if secs < 1 else 1 <= step <= 3


def test_a_worker_killed_inside_its_in_graph_loop_rejoins_where_it_was():
    import os
    import signal
    import threading
    import time
    c = cluster()
    dp, w, b = linear_dp(c, lr=0.02, loop="graph", mode="async", name="dpgraphkill")
    pid, counter = c.pid("worker:1"), dp.worker_steps["worker:1"]
    start = int(counter.numpy())

    def kill_after_some_steps():
        deadline = time.time() + 60
        while int(counter.numpy()) - start < 5 and time.time() < deadline:
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
    killer = threading.Thread(target=kill_after_some_steps, daemon=True)
    killer.start()
    out = dp.run([data(29, 64), data(30, 64)], steps=150, batch_size=16, restart_failed=True)
    killer.join()
    assert "worker:1" in out["failed"] and c.pid("worker:1") != pid
    assert out["worker_steps"] == [150, 150] and int(counter.numpy()) - start == 150
    lost = np.isnan(out["losses"][1]).sum()
    assert 5 <= lost < 150 and not np.isnan(out["losses"][0]).any()
    np.testing.assert_allclose(w.numpy(), [1.0, -2.0, 0.5, 3.0], atol=0.1)


def test_sync_with_a_backup_worker_goes_on_when_a_worker_dies_and_m_of_n_cannot_be_met_is_an_error(caplog):
    import time
    c = cluster()
    dp, w, b = linear_dp(c, mode="sync", replicas_to_aggregate=1, name="dpsyncdie")
    pid = c.pid("worker:1")
    with caplog.at_level("WARNING", logger="dfc.train"):
        out = dp.run([data(31, 64), data(32, 64)], steps=30, batch_size=16, on_step=kill_at(pid, 1, 3))
    assert out["updates"] == 30 and "worker:1" in out["failed"]
    assert any("worker:1 died" in r.getMessage() for r in caplog.records)
    # m = n = 2 with worker:1 dead: no update can be made; a DfcError, not a hang
    c.restart("worker:1")
    dp, w, b = linear_dp(c, mode="sync", name="dpsyncdie2")
    pid = c.pid("worker:1")
    t0 = time.time()
    with pytest.raises(dfc.DfcError, match="worker:1"):
        dp.run([data(31, 64), data(32, 64)], steps=30, batch_size=16, on_step=kill_at(pid, 1, 3))
    assert time.time() - t0 < 60
    c.restart("worker:1")


def test_the_data_parallel_benchmark_runs_each_kind_of_row():
    pytest.importorskip("sklearn")
    from benchmarks import data_parallel as bench
    c = cluster()
    dt = bench.sample()
    data = dt.load()
    for mode, m, delay in (("async", None, 0.01), ("sync", 1, 0.01)):
        r = bench.one_run(c, dt, data, ["worker:0", "worker:1"], mode, m, delay, 20, f"bdptest{mode}")
        assert r["updates_per_s"] > 0 and r["median_step_s"] > 0 and 0.5 < r["accuracy"] <= 1
        assert r["bytes_per_worker_step"] > 0 and len(r["worker_steps"]) == 2
    rows = [{"workers": 2, "mode": "sync", "m": 2, "straggler": False, "updates_per_s": {"median": 20.0}},
            {"workers": 2, "mode": "sync", "m": 2, "straggler": True, "updates_per_s": {"median": 10.0}},
            {"workers": 2, "mode": "sync", "m": 1, "straggler": True, "updates_per_s": {"median": 15.0}}]
    assert bench.recovered(rows) == {2: 0.5}
