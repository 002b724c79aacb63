"""DataParallel applies every worker step exactly once, whatever dies when: a worker killed after its update
reached the ps is restarted and does not apply that step again; a killed ps comes back with Variables and
applied-step records from one snapshot."""
import os
import random
import signal
import threading
import time

import numpy as np
import pytest

import dfc
from dfc.compiler.data_parallel import STOP
from tests.clustertools import cluster
from tests.cluster.test_data_parallel import data, linear_dp, single_process_sgd
from tests.threadtools import Background, until

pytestmark = pytest.mark.xdist_group("ray")
SHARDS = [data(41, 64), data(42, 64)]


def kill_when_applied(c, dp, worker, k, killed):
    """Kill `worker` as soon as the ps has applied its k-th step (counted by its record on ps:0): the
    worker's step call is then usually still waiting for its reply, the window that duplicated updates."""
    record = dp.applied[(worker, "ps:0/cpu:0")]
    start = int(record.numpy())
    pid = c.pid(worker)

    def watch():
        deadline = time.time() + 60
        while time.time() < deadline and int(record.numpy()) - start < k:
            pass
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def ensure_alive(c, worker):
    try:
        c.pid(worker)
    except dfc.DfcError:
        c.restart(worker)


def test_the_ps_skips_a_step_id_it_applied_and_a_snapshot_is_one_state():
    """ApplyOnce itself, in one process: a step id is applied once (all updates or none), a repeated id
    changes nothing, a later id after a gap is applied (a restored ps lost steps), and a bad value applies
    nothing (checked before any is set)."""
    from dfc.compiler.tracing import current_builder
    rec = dfc.Variable(np.int64(0), name="eo_rec")
    w = dfc.Variable(np.zeros(2, np.float32), name="eo_w")
    n = dfc.Variable(np.int64(0), name="eo_n")

    def apply(sid, delta):
        return current_builder().make("ApplyOnce", [rec.handle(), sid, w.handle(), n.handle(), delta,
                                                    np.int64(1), w.handle(), rec.handle()],
                                      {"ops": ["AssignSub", "AssignAdd"], "dtypes": ["float32", "int64"]})
    g = dfc.trace(apply, dfc.TensorSpec([], "int64"), dfc.TensorSpec([None], "float32"))
    from tests.conftest import run_all_modes
    ok, snap_w, snap_rec = run_all_modes(g, np.int64(0), np.ones(2, np.float32))
    assert ok and snap_rec == 1 and list(snap_w) == [-1, -1] and n.numpy() == 1
    ok, snap_w, snap_rec = g(np.int64(0), np.ones(2, np.float32))           # the same step again
    assert not ok and snap_rec == 1 and list(w.numpy()) == [-1, -1] and n.numpy() == 1
    ok, _, snap_rec = g(np.int64(5), np.ones(2, np.float32))                # steps 1-4 lost: 5 applies
    assert ok and snap_rec == 6 and list(w.numpy()) == [-2, -2] and n.numpy() == 2
    with pytest.raises(dfc.DfcError, match="eo_w"):
        g(np.int64(6), np.ones(3, np.float32))
    assert rec.numpy() == 6 and n.numpy() == 2 and list(w.numpy()) == [-2, -2]


@pytest.mark.parametrize("loop", ["python", "graph"])
def test_a_worker_killed_right_after_its_update_reached_the_ps_does_not_apply_it_twice(loop):
    c = cluster()
    steps = 40
    dp, w, b = linear_dp(c, lr=0.02, mode="async", loop=loop, name=f"eo_{loop}")
    start = int(dp.global_step.numpy())
    killed = []
    watcher = kill_when_applied(c, dp, "worker:1", 7, killed)
    out = dp.run(SHARDS, steps=steps, batch_size=16, restart_failed=True)
    watcher.join()
    ensure_alive(c, "worker:1")
    assert killed and out["worker_steps"] == [steps, steps]
    assert out["updates"] - start == 2 * steps                    # one update per step, none twice
    assert {int(v.numpy()) for v in dp.applied.values()} == {steps}
    np.testing.assert_allclose(w.numpy(), [1.0, -2.0, 0.5, 3.0], atol=0.3)


def test_workers_killed_at_random_points_in_many_runs_apply_every_step_once():
    """Three runs, each killing a random worker at a random update; two workers alternate as victims."""
    c = cluster()
    rng = random.Random(2024)
    steps = 30
    for run in range(3):
        worker = f"worker:{run % 2}"
        dp, w, b = linear_dp(c, lr=0.02, mode="async", name=f"eo_random{run}")
        killed = []
        watcher = kill_when_applied(c, dp, worker, rng.randrange(1, steps - 5), killed)
        out = dp.run(SHARDS, steps=steps, batch_size=16, restart_failed=True)
        watcher.join()
        ensure_alive(c, worker)
        assert killed, run
        assert out["worker_steps"] == [steps, steps], run
        assert int(dp.global_step.numpy()) == 2 * steps, (run, worker)
        assert {int(v.numpy()) for v in dp.applied.values()} == {steps}, run


def test_a_killed_ps_restores_its_variables_with_the_records_of_the_same_update():
    c = cluster()
    dp, w, b = linear_dp(c, mode="async", checkpoint_every=4, name="eo_ps")
    dp.run(SHARDS, steps=10, batch_size=16)
    c.restart("ps:0")
    step = dp.restore()
    records = [int(v.numpy()) for v in dp.applied.values()]
    assert step % 4 == 0 and 0 < step <= 20
    assert sum(records) == step            # each saved update is counted in exactly one worker's record
    out = dp.run(SHARDS, steps=5, batch_size=16)       # ids go on from the restored records
    assert out["worker_steps"] == [5, 5] and out["updates"] == step + 10


def test_sync_mode_with_a_killed_worker_makes_exactly_the_asked_updates():
    c = cluster()
    dp, w, b = linear_dp(c, mode="sync", replicas_to_aggregate=1, name="eo_sync")
    start = int(dp.global_step.numpy())
    pid, killed = c.pid("worker:1"), []

    def on_step(k, i, _loss):
        if k == 1 and i == 4 and not killed:
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)
    out = dp.run(SHARDS, steps=20, batch_size=16, on_step=on_step, restart_failed=True)
    ensure_alive(c, "worker:1")
    assert killed and out["updates"] - start == 20


def test_sync_counts_a_restarted_workers_gradient_once_and_it_waits_for_the_update_it_went_to():
    """Sync with m = n = 2, the workers' steps driven one by one: worker:1 dies waiting for its token after
    its gradient reached the accumulators and runs the step again (a second gradient for the same update:
    dropped); the update is the mean of the two workers' gradients. Then the token of that update, left in
    worker:1's queue, does not release its next step before the next update. Both updates equal SGD on
    the concatenated batch."""
    c = cluster()
    dp, w, b = linear_dp(c, mode="sync", name="eo_sync_once")
    (x0, y0), (x1, y1) = [(x[:16], y[:16]) for x, y in SHARDS]
    w0_step, w1_step = dp.sessions
    sid = np.int64(0)      # step ids are for async mode

    def gradients_in():
        return int(dp.accumulators[-1].num_accumulated())    # the last one a step applies to

    t1 = Background(lambda: w1_step.call(x1, y1, sid))
    until(lambda: gradients_in() == 1)
    os.kill(c.pid("worker:1"), signal.SIGKILL)
    with pytest.raises(dfc.DfcError, match="worker:1 died"):
        t1.result()
    c.restart("worker:1")
    dp.tokens["worker:1"].enqueue(np.int64(STOP))       # lets the rerun return once its gradient is applied
    assert int(w1_step.call(x1, y1, sid)[1]) == STOP
    t0 = Background(lambda: w0_step.call(x0, y0, sid))
    until(lambda: gradients_in() == 2)
    assert int(dp.chief.call()) == 1
    assert int(t0.result()[1]) == 1
    want = single_process_sgd([(x0, y0), (x1, y1)], 1, 0.05)
    np.testing.assert_allclose(w.numpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), want[1], rtol=1e-5, atol=1e-6)

    assert int(dp.tokens["worker:1"].size()) == 1         # update 1's token: worker:1 did not wait for it
    t1 = Background(lambda: w1_step.call(x1, y1, sid))
    until(lambda: t1.done() or (gradients_in() == 1 and int(dp.tokens["worker:1"].size()) == 0))
    assert not t1.done()        # computed at step 1, it waits for update 2 (it cannot end before the chief's call)
    t0 = Background(lambda: w0_step.call(x0, y0, sid))
    until(lambda: gradients_in() == 2)
    assert int(dp.chief.call()) == 2
    assert int(t0.result()[1]) == 2 and int(t1.result()[1]) == 2
    want = single_process_sgd([(x0, y0), (x1, y1)], 2, 0.05)
    np.testing.assert_allclose(w.numpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), want[1], rtol=1e-5, atol=1e-6)


def test_sync_training_with_a_worker_killed_after_its_gradient_arrived_equals_exactly_once_sgd():
    """dp.run, sync with m = n = 2 on whole shards: every update must be the mean of the two workers'
    gradients at the same parameters, so the run equals SGD on the concatenated batch. worker:1 is killed
    while its step-4 gradient waits in the accumulators (worker:0 is held until then) and rejoins."""
    c = cluster()
    steps = 8
    dp, w, b = linear_dp(c, mode="sync", name="eo_sync_run")
    killed = []

    def on_step(k, i, _loss):
        if k == 0 and i == 3 and not killed:      # worker:0 cannot apply its step 4 before this returns
            until(lambda: int(dp.accumulators[-1].num_accumulated()) == 1)    # worker:1's step 4
            killed.append(c.pid("worker:1"))
            os.kill(killed[0], signal.SIGKILL)
    out = dp.run(SHARDS, steps=steps, on_step=on_step, restart_failed=True)
    ensure_alive(c, "worker:1")
    assert killed and "worker:1" in out["failed"] and out["updates"] == steps
    want = single_process_sgd(SHARDS, steps, 0.05)
    np.testing.assert_allclose(w.numpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), want[1], rtol=1e-5, atol=1e-6)
