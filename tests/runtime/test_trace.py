"""Timelines: Session(trace=...) and `dfc run --trace` write Chrome trace-event files (dfc/runtime/trace.py)."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

import dfc
from dfc.cli import main
from dfc.runtime.devices import default_device
from dfc.runtime.executor import KernelContext, Plan, Run
from dfc.runtime.trace import Trace
from tests import clitools
from tests.runtime.test_partition import loop_pred_on_a_body_on_b
from tests.runtime.test_swap import B, H, T, lstm_graph, lstm_inputs

F32, I32 = dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "int32")
N = 5


def loop(x, n):
    """s = x; n times: s = tanh(s) * 2 (the Mul of iteration k needs the one of iteration k - 1)."""
    return dfc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, dfc.tanh(s) * 2.0),
                          (0, dfc.fill([128, 128], x)))[1]


def loop_graph():
    return dfc.trace(loop, F32, I32)


def want(x, n):
    s = np.full((128, 128), x, np.float32)
    for _ in range(n):
        s = (np.tanh(s) * np.float32(2)).astype(np.float32)
    return s


def load(path):
    data = json.loads(path.read_text())
    assert set(data) >= {"traceEvents"}
    return data["traceEvents"]


def names(events):
    """pid -> process name, (pid, tid) -> lane name."""
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    return procs, lanes


def spans(events, cat=None):
    return [e for e in events if e["ph"] == "X" and (cat is None or e["cat"] == cat)]


def inside(inner, outer):
    return outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3


def check_lanes_nest(events):
    """On every lane, spans are disjoint or nested (what trace viewers need to draw them)."""
    by_lane = {}
    for e in spans(events):
        by_lane.setdefault((e["pid"], e["tid"]), []).append(e)
    for lane, evs in by_lane.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
                stack.pop()
            assert not stack or inside(e, stack[-1]), (lane, e, stack[-1])
            stack.append(e)


def check_run(events, n_runs=1):
    """Every kernel span lies inside one run span of the session lane; returns the run spans."""
    procs, lanes = names(events)
    runs = [e for e in spans(events, "run") if procs[e["pid"]] == "session" and lanes[(e["pid"], e["tid"])] == "runs"]
    assert [r["name"] for r in sorted(runs, key=lambda r: r["ts"])] == [f"run {k + 1}" for k in range(n_runs)]
    for k in spans(events, "kernel") + spans(events, "frame"):
        assert sum(inside(k, r) for r in runs) == 1, k
    check_lanes_nest(events)
    return runs


PATHS = {"inline": dict(num_threads=0, fuse_loops=False), "pool": dict(num_threads=2, fuse_loops=False),
         "fused": dict(num_threads=0, fuse_loops=True)}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_kernel_spans_name_node_op_frame_and_iteration_in_order(tmp_path, path):
    out = tmp_path / "run.json"
    s = dfc.Session(loop_graph(), trace=str(out), **PATHS[path])
    np.testing.assert_array_equal(s.call(np.float32(0.3), np.int32(N)), want(0.3, N))
    events = load(out)
    [run] = check_run(events)
    procs, lanes = names(events)
    kernels = spans(events, "kernel")
    assert {procs[k["pid"]] for k in kernels} == {default_device()}      # strict:0 under DFC_TEST_DEVICE=strict
    muls = sorted((k for k in kernels if k["args"]["op"] == "Mul"), key=lambda k: k["args"]["iteration"])
    assert [m["args"]["iteration"] for m in muls] == list(range(N))
    assert {m["args"]["frame"] for m in muls} == {"while"}
    assert all(m["name"] == m["args"]["node"] for m in muls)
    for a, b in zip(muls, muls[1:]):        # iteration k + 1's Mul needs iteration k's: strictly after it
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3
    fill = [k for k in kernels if k["args"]["op"] == "Fill"]
    assert len(fill) == 1 and "frame" not in fill[0]["args"] and fill[0]["ts"] + fill[0]["dur"] <= muls[0]["ts"]
    if path == "fused":
        [frame] = spans(events, "frame")
        assert frame["name"] == "frame while" and lanes[(frame["pid"], frame["tid"])] == "scheduler"
        assert all(inside(m, frame) for m in muls)
    else:
        assert not spans(events, "frame")
    # 128 x 128 elementwise kernels are heavy: on a cpu device they run on pool threads, in their own lanes (a
    # GPU device queues its kernels in order from the scheduler: it has no pool)
    if path == "pool" and default_device().startswith("cpu:"):
        assert any(lanes[(m["pid"], m["tid"])].startswith("pool dfc-kernel") for m in muls)
    else:
        assert {lanes[(k["pid"], k["tid"])] for k in kernels} == {"scheduler"}


def test_nested_loop_spans_name_both_frames(tmp_path):
    def f(n):
        def outer(i, acc):
            inner = dfc.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a + 1.0), (0, acc))[1]
            return i + 1, inner
        return dfc.while_loop(lambda i, acc: i < n, outer, (0, dfc.constant(np.float32(0))))[1]
    out = tmp_path / "nested.json"
    s = dfc.Session(dfc.trace(f, I32), trace=str(out), num_threads=0, fuse_loops=False)
    assert s.call(np.int32(4)) == 0 + 1 + 2 + 3
    events = load(out)
    check_run(events)
    inner = [k for k in spans(events, "kernel") if "frames" in k["args"]]
    seen = {}
    for k in inner:         # "while[2]/while_1[1]": outer iteration 2, inner iteration 1
        (outer_f, oi), (inner_f, ii) = [(p[:p.index("[")], int(p[p.index("[") + 1:-1]))
                                        for p in k["args"]["frames"].split("/")]
        assert (inner_f, ii) == (k["args"]["frame"], k["args"]["iteration"]) and outer_f != inner_f
        seen.setdefault(oi, set()).add(ii)
    # outer iteration i runs the inner body i times (iterations 0 .. i-1); its predicate runs once more
    assert {i: sorted(v) for i, v in seen.items()} == {i: list(range(i + 1)) for i in range(4)}


def test_each_run_is_a_span_and_the_file_holds_every_run(tmp_path):
    out = tmp_path / "runs.json"
    s = dfc.Session(loop_graph(), trace=str(out), num_threads=0)
    for n in (2, 3):
        s.call(np.float32(1.0), np.int32(n))
    events = load(out)
    runs = check_run(events, n_runs=2)
    r1, r2 = sorted(runs, key=lambda r: r["ts"])
    assert r1["ts"] + r1["dur"] <= r2["ts"]
    muls = [k for k in spans(events, "kernel") if k["args"]["op"] == "Mul"]
    assert sum(inside(m, r1) for m in muls) == 2 and sum(inside(m, r2) for m in muls) == 3


def test_send_and_recv_have_their_own_lanes_on_a_two_device_run(tmp_path):
    out = tmp_path / "two.json"
    g = dfc.trace(loop_pred_on_a_body_on_b, F32, dfc.TensorSpec([], "int64"))
    s = dfc.Session(g, trace=str(out))
    x, n = np.float32(0.5), 4
    ref = 0.0
    for _ in range(n):
        ref = np.float32(ref * x + 1.0)
    assert s.call(x, np.int64(n)) == ref
    events = load(out)
    check_run(events)
    procs, lanes = names(events)
    assert {"cpu:0", "cpu:1", "session"} <= set(procs.values())
    sends, recvs = spans(events, "send"), spans(events, "recv")
    assert {lanes[(e["pid"], e["tid"])] for e in sends} == {"send"}
    assert {lanes[(e["pid"], e["tid"])].split(" ")[0] for e in recvs} == {"recv"}
    assert {procs[e["pid"]] for e in sends} == {procs[e["pid"]] for e in recvs} == {"cpu:0", "cpu:1"}
    # every value received was sent first: the Send of (tensor, iteration) starts before its Recv ends
    sent = {(e["args"]["tensor"], e["args"].get("iteration")): e for e in sends}
    for r in recvs:
        key = (r["args"]["tensor"], r["args"].get("iteration"))
        assert key in sent, key
        assert sent[key]["ts"] <= r["ts"] + r["dur"] + 1e-3
        assert r["args"]["recv_device"] == procs[r["pid"]] and sent[key]["args"]["send_device"] == procs[sent[key]["pid"]]
    loop_recvs = [r for r in recvs if r["args"].get("frame")]
    assert {r["args"]["iteration"] for r in loop_recvs} >= set(range(n))


def test_swap_copies_have_their_own_lanes_on_an_accelerator(tmp_path):
    args = lstm_inputs(T)      # as tests/runtime/test_swap.py: 60% of the peak fits only with swapping
    probe = dfc.Session(lstm_graph(False), num_threads=0, parallel_iterations=4)
    want_out = probe.call(*args)
    peak = probe.peak_bytes()["accel:0"]
    out = tmp_path / "swap.json"
    s = dfc.Session(lstm_graph(True), num_threads=0, parallel_iterations=4, memory_caps={"accel:0": int(peak * 0.6)},
                    swap_threshold=0.3, swap_min_bytes=B * H * 4, trace=str(out))
    for a, b in zip(s.call(*args), want_out):
        np.testing.assert_array_equal(a, b)
    stats = s.memory_stats()["accel:0"]["swap"]
    events = load(out)
    [run] = check_run(events)
    procs, lanes = names(events)
    swaps = spans(events, "swap")
    by_lane = {}
    for e in swaps:
        assert procs[e["pid"]] == "accel:0" and inside(e, run) and e["args"]["bytes"] >= B * H * 4
        by_lane.setdefault(lanes[(e["pid"], e["tid"])], []).append(e)
    assert len(by_lane["swap out"]) == stats["swapped_out"] > 0
    assert len(by_lane.get("prefetch", [])) == stats["prefetched"]
    assert len(by_lane.get("swap in", [])) == stats["swapped_in"]
    assert stats["prefetched"] + stats["swapped_in"] > 0
    first_out = min(e["ts"] for e in by_lane["swap out"])
    back = by_lane.get("prefetch", []) + by_lane.get("swap in", [])
    assert first_out < min(e["ts"] for e in back)       # a tensor comes back only after it went out
    assert {procs[k["pid"]] for k in spans(events, "kernel")} == {"accel:0"}


def test_no_trace_leaves_the_kernels_unwrapped():
    g = loop_graph()
    plan = Plan(g, [g.signature["outputs"]["ref"]], {i["node"] for i in g.signature["inputs"]}, ())
    run = Run(plan, {}, KernelContext())
    assert all(a is b for a, b in zip(run.kern, plan.kern))
    ctx = KernelContext()
    ctx.trace = Trace()
    traced = Run(plan, {}, ctx)
    assert any(a is not b for a, b in zip(traced.kern, plan.kern) if b is not None)


def test_task_prefix_names_device_lanes():
    t = Trace(task="worker:1")
    t.span("cpu:0", "scheduler", "k", 0.0, 1.0, "kernel")
    t.span("ps:0/cpu:0", "scheduler", "k", 1.0, 2.0, "kernel")
    t.span(None, "runs", "run 1", 0.0, 2.0, "run")
    procs, _ = names(t.events())
    assert sorted(procs.values()) == ["ps:0/cpu:0", "session", "worker:1/cpu:0"]


def test_overlapping_recvs_go_to_separate_lanes():
    t = Trace()
    t.packed_span("cpu:1", "recv", "a", 0.0, 5.0, "recv")
    t.packed_span("cpu:1", "recv", "b", 1.0, 6.0, "recv")     # overlaps a: second lane
    t.packed_span("cpu:1", "recv", "c", 5.5, 7.0, "recv")     # after a ended: first lane again
    _, lanes = names(t.events())
    got = {e["name"]: lanes[(e["pid"], e["tid"])] for e in spans(t.events())}
    assert got == {"a": "recv", "b": "recv 2", "c": "recv"}
    check_lanes_nest(t.events())


def test_reference_mode_records_run_spans(tmp_path):
    out = tmp_path / "ref.json"
    dfc.Session(loop_graph(), mode="reference", trace=str(out)).call(np.float32(1.0), np.int32(2))
    events = load(out)
    check_run(events)
    assert not spans(events, "kernel")


def test_trace_path_in_a_missing_directory_is_a_dfc_error(tmp_path):
    with pytest.raises(dfc.DfcError, match="does not exist"):
        dfc.Session(loop_graph(), trace=str(tmp_path / "no" / "run.json"))
    with pytest.raises(dfc.DfcError, match="file path"):
        dfc.Session(loop_graph(), trace=3)


def test_dfc_run_trace_option_writes_the_timeline(tmp_path):
    gpath, out = tmp_path / "loop.json", tmp_path / "out.json"
    dfc.save(loop_graph(), str(gpath))
    r = clitools.dfc("run", gpath, "-i", "x=0.3", "-i", f"n={N}", "--json", "--trace", out, timeout=120)
    assert r.returncode == 0, r.stderr
    got = np.array(json.loads(r.stdout)["outputs"][0], np.float32)
    np.testing.assert_allclose(got, want(0.3, N), rtol=1e-6)
    events = load(out)
    check_run(events)
    assert len([k for k in spans(events, "kernel") if k["args"]["op"] == "Mul"]) == N
    r = CliRunner().invoke(main, ["run", str(gpath), "-i", "x=1", "-i", "n=1", "--trace", str(tmp_path / "x" / "t.json")])
    assert r.exit_code == 1 and "does not exist" in r.output
